# call s25b (after s25a on the warm machine, whose build/ stays; on a fresh one carry build-gpu as s25a does,
# and .whl): 1. the K = V = 256 packed row (packed16384_k256) with the last step's part in the fused launch
# (KDART_FUSE_POST=2, default: its 132,480-byte sm_90a kernel, past the instruction cache), the gate part
# alone there (1: the same kernel, its qk code not run) and all of it in bwd_post (0), then 2 again;
# 2. on an H200 only, call s24b: bench/e2e.py's production B2 row against fla (the official ratio; fla's
# autotune saved for later calls, about 300 s).
set -u
. lab/calls/common.sh
export WB_CACHE=/tmp/cw WB_LIMIT=120
for v in 2_1 1_1 0_1 2_2; do
  KDART_FUSE_POST=${v%_*} gc_whole_bare P$v $R/kernel_src build/libkdart.so packed16384_k256
done | gc_prof | cut -c1-300 | tee -a $O/ab.txt; el
gc_pack
grep -q H200 $O/gpu.txt && ROWS=b2_t8192_h32 bash lab/calls/2026-12-06-s24b.sh
