# eighteenth session, call t: more probes of the fused post (bare whole call, B2): 7 (the epilogue's parts
# skipped) with 8 (no raw-gate copy), 16 (no small copies at the start), 32 (intra terms as unfused), 64 (no
# wait), and all.  Carry build-cta1, build-gpu.
# (KDART_POST_PROBE existed on the branch for calls s and t only: removed after them)
set -u
rm -rf build && mv build-cta1 build
. lab/calls/common.sh
gc_ab_trees 2>/dev/null
for r in 1 2; do
  KDART_FUSE_POST=0 gc_whole_bare unfused /tmp/cta1/k /tmp/cta1/libkdart.so b2_t8192_h32
  for pr in ${PROBES:-7 15 23 39 71 127}; do KDART_POST_PROBE=$pr gc_whole_bare probe$pr /tmp/cta1/k /tmp/cta1/libkdart.so b2_t8192_h32; done
done | grep profile | sed 's/(kdart_[a-z_]*//' | cut -c1-110 | tee $O/ab.txt; el
