# eighteenth session, call r: the branch with bwd_post's work in the one-CTA epilogue: GPU tests and the
# sanitizers on the whole call, then main against the branch (bare whole call, B2 and packed, two rounds).
# Carry build-cta1, build-gpu.
set -u
rm -rf build && mv build-cta1 build
. lab/calls/common.sh
gc_ab_trees
gc_tests_san chunk_bwd_whole,wy_cta1,wy_intra chunk_bwd_whole 300
for r in 1 2; do for t in main cta1; do gc_whole_bare $t /tmp/$t/k /tmp/$t/libkdart.so b2_t8192_h32,packed32768; done; done | tee $O/ab.txt; el
