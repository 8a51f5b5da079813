# call s27b (carry build-gpu: main's build; build-S: kernel_src with lab/experiments/dhu-split-margin's diff,
# as build-S/k:  mkdir -p build-S && cp -r kernel_src build-S/k && (cd build-S/k && patch -p2 <
# ../../lab/experiments/dhu-split-margin/split-margin.diff) ): the bare whole call, main (M) against the
# split margin (S), two rounds, on a fixed-length control, two equal documents, seq8 and one long document;
# then test_gpu's V-split and whole lists with S's kernels.
set -u
. lab/calls/common.sh
export WB_CACHE=/tmp/cw WB_LIMIT=100
ROWS=b2_t8192_h32,packed2x8192,packed_seq8,packed32768_long
for r in 1 2; do
  { gc_whole_bare M_$r $R/kernel_src build/libkdart.so $ROWS
    gc_whole_bare S_$r $R/build-S/k build/libkdart.so $ROWS; } | gc_prof | cut -c1-300 | tee -a $O/ab.txt
done; el
KDART_KERNEL_DIR=$R/build-S/k gc_tests_quick dhu_varlen_v_split,dhu_varlen_head_pairs,chunk_bwd_whole,dav_fused 200
el; gc_pack
