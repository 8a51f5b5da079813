# nineteenth session, call y: the last step in wy_dqkg's launch (branch exp/gate-d): KDART_FUSE_POST=1 its
# gate and beta part, 2 (the default) dq and dk too.  chunk_bwd_whole (fused against KDART_FUSE_POST=0) on
# the GPU, then two rounds of the bare whole call alternating main, the branch at 0, 1 and 2, B2 and packed;
# the sanitizers run in call z.  Carry build-gd (the branch's build), build-gpu (main's,
# with main's kernels).
set -u
rm -rf build && mv build-gd build
. lab/calls/common.sh
gc_ab_trees gd 2>/dev/null
gc_tests_quick chunk_bwd_whole 200; el
for r in 1 2; do
  gc_whole_bare main /tmp/main/k /tmp/main/libkdart.so b2_t8192_h32,packed32768
  KDART_FUSE_POST=0 gc_whole_bare unfused /tmp/gd/k /tmp/gd/libkdart.so b2_t8192_h32,packed32768
  KDART_FUSE_POST=1 gc_whole_bare gate /tmp/gd/k /tmp/gd/libkdart.so b2_t8192_h32,packed32768
  gc_whole_bare fused /tmp/gd/k /tmp/gd/libkdart.so b2_t8192_h32,packed32768
done | sed 's/(kdart_[a-z_]*//' | cut -c1-220 | tee $O/ab.txt; el
