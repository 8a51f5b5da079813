# eighteenth session, call s: where the post epilogue's time goes (bare whole call, B2): the branch with
# KDART_FUSE_POST=0 (the body alone, bwd_post its own launch), and KDART_POST_PROBE 7 (every part skipped),
# 1 (no dq, dk), 2 (no dg), 4 (no partial sums).  Carry build-cta1, build-gpu.
# (KDART_POST_PROBE existed on the branch for calls s and t only: removed after them)
set -u
rm -rf build && mv build-cta1 build
. lab/calls/common.sh
gc_ab_trees
for r in 1 2; do
  gc_whole_bare main /tmp/main/k /tmp/main/libkdart.so b2_t8192_h32
  KDART_FUSE_POST=0 gc_whole_bare unfused /tmp/cta1/k /tmp/cta1/libkdart.so b2_t8192_h32
  for pr in 0 7 1 2 4; do KDART_POST_PROBE=$pr gc_whole_bare probe$pr /tmp/cta1/k /tmp/cta1/libkdart.so b2_t8192_h32; done
done | grep profile | sed 's/(kdart_[a-z_]*//' | cut -c1-200 | tee $O/ab.txt; el
