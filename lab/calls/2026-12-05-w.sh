# eighteenth session, call w: the epilogue as independent chains; fused and unfused (same binary) and main,
# bare whole call, B2 and packed; chunk_bwd_whole on the GPU.  Carry build-cta1, build-gpu.
set -u
rm -rf build && mv build-cta1 build
. lab/calls/common.sh
gc_ab_trees 2>/dev/null
gc_tests_quick chunk_bwd_whole 120
for r in 1 2; do
  gc_whole_bare main /tmp/main/k /tmp/main/libkdart.so b2_t8192_h32,packed32768
  KDART_FUSE_POST=0 gc_whole_bare unfused /tmp/cta1/k /tmp/cta1/libkdart.so b2_t8192_h32,packed32768
  gc_whole_bare fused /tmp/cta1/k /tmp/cta1/libkdart.so b2_t8192_h32,packed32768
done | sed 's/(kdart_[a-z_]*//' | cut -c1-200 | tee $O/ab.txt; el
