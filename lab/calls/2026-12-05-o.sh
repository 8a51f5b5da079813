set -u
rm -rf build && mv build-cta1 build
. lab/calls/common.sh
gc_ab_trees
gc_tests_quick wy_cta1 120
for t in main cta1; do gc_whole_bare $t /tmp/$t/k /tmp/$t/libkdart.so b2_t8192_h32,packed32768; done | tee $O/ab.txt; el
