# call s26d (carry build-gpu, .whl, .triton-carry as call s24b says): bench/e2e.py's production rows against
# fla, whole route, this tree's kernels.  On an H200: B2 (the official ratio; fla's H200 autotune saved,
# about 300 s: commit it under lab/triton-autotune/).  On an H100 (autotune carried): packed, then B2.
set -u
. lab/calls/common.sh
if grep -q H200 $O/gpu.txt; then ROWS=b2_t8192_h32 bash lab/calls/2026-12-06-s24b.sh
else ROWS="packed_t32768_hv32 b2_t8192_h32" bash lab/calls/2026-12-06-s24b.sh; fi
