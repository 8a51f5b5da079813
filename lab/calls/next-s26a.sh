# call s26a (carry build-gpu as s25a's header says, and build-X: main's kernel_src with
# lab/experiments/wy-hdh-overlap/hdh-overlap.diff applied, as build-X/k:
#   mkdir -p build-X && cp -r kernel_src build-X/k && (cd build-X/k && patch -p2 < ../../lab/experiments/wy-hdh-overlap/hdh-overlap.diff)
# ): the bare whole call, main (M) against the overlap (X), B2 and the packed row, two rounds; then test_gpu
# chunk_bwd_whole and wy_intra with X's kernels.
set -u
. lab/calls/common.sh
export WB_CACHE=/tmp/cw WB_LIMIT=100
ROWS=b2_t8192_h32,packed32768
for r in 1 2; do
  { gc_whole_bare M_$r $R/kernel_src build/libkdart.so $ROWS
    gc_whole_bare X_$r $R/build-X/k build/libkdart.so $ROWS; } | gc_prof | cut -c1-300 | tee -a $O/ab.txt
done; el
KDART_KERNEL_DIR=$R/build-X/k gc_tests_quick chunk_bwd_whole,wy_intra 200
el; gc_pack
