# call s26c (carry build-gpu: the build of the working tree with the varlen TMA (host: maps for every native
# sm_90a call); build-M: main's kernel_src as build-M/k (git archive HEAD kernel_src); build-X: main's with
# experiments/wy-hdh-overlap as build-X/k; build-VX: the working tree's with it): the bare whole call, main's
# kernels (M), the varlen TMA (V: kernel_src), the overlap (X) and both (VX), B2 and the packed row, two
# rounds; then test_gpu's wy and whole lists with V's kernels (the packed chunks' tiles by TMA).
set -u
. lab/calls/common.sh
export WB_CACHE=/tmp/cw WB_LIMIT=80
ROWS=b2_t8192_h32,packed32768
for r in 1 2; do
  for v in M:build-M/k V:kernel_src X:build-X/k VX:build-VX/k; do
    gc_whole_bare ${v%%:*}_$r $R/${v#*:} build/libkdart.so $ROWS
  done | gc_prof | cut -c1-300 | tee -a $O/ab.txt
done; el
gc_tests_quick chunk_bwd_whole,wy_production,wy_intra,varlen_garbage_writes_nothing,dav_fused ${TLIM:-200}
el; gc_pack
