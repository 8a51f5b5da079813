set -u
rm -rf build && mv build-cta1 build
. lab/calls/common.sh
gc_ab_trees
gc_tests_quick wy_cta1,chunk_bwd_whole 150
{ gc_whole_bare main /tmp/main/k /tmp/main/libkdart.so b2_t8192_h32,packed32768
  gc_whole_bare diag $R/build/probes/diag/k $R/build/libkdart.so b2_t8192_h32,packed32768
  gc_whole_bare cta1 /tmp/cta1/k /tmp/cta1/libkdart.so b2_t8192_h32,packed32768; } | tee $O/ab.txt; el
