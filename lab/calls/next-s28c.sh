# call s28c (carry build-gpu, .whl, .whl-cudnn, .triton-carry): the official H200 rows with main's kernels,
# fla's H200 autotuning saved (commit the archives under lab/triton-autotune/): bench/e2e.py's production
# row at B2 T8192 H32 (whole route, profiled), then cuDNN frontend's configuration at B2 if 200 s are left.
# On an H100 (B2 measured there this session) the production row is prod8192 instead (its H100 autotune
# saved: lab/triton-autotune/h100/).  At most eight files come back from a call: this one leaves seven.
set -u
. lab/calls/common.sh
gc_peers_setup
ROW=b2_t8192_h32; grep -q H100 $O/gpu.txt && ROW=prod8192
LIMIT=${CALL_END:-585} E2E_SAVE=1 gpu_e2e_rows $ROW; gc_pack
left=$(( ${CALL_END:-585} - ($(date +%s) - t0) ))
if [ $left -gt 200 ]; then
  gc_e2e_cudnn whole $left
fi
gc_pack
