# eighteenth session, call q: the branch's varlen TMA timed (main against cta1, bare whole call, B2 and packed),
# after its GPU tests (wy_cta1, wy_intra, chunk_bwd_whole).  Carry build-cta1, build-gpu.
set -u
rm -rf build && mv build-cta1 build
. lab/calls/common.sh
gc_ab_trees
gc_tests_quick wy_cta1,wy_intra,chunk_bwd_whole 240
for r in 1 2; do for t in main cta1; do gc_whole_bare $t /tmp/$t/k /tmp/$t/libkdart.so b2_t8192_h32,packed32768; done; done | tee $O/ab.txt; el
