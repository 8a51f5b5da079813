# call s28c (carry build-gpu, .whl, .whl-cudnn): the official H200 rows with main's kernels, fla's H200
# autotuning saved (commit the archives under lab/triton-autotune/): bench/e2e.py's production row at B2
# T8192 H32 (whole route, profiled), then cuDNN frontend's configuration at B2 if 200 s are left.  At most
# eight files come back from a call: this one leaves seven.
set -u
. lab/calls/common.sh
gc_peers_setup
LIMIT=${CALL_END:-585} E2E_SAVE=1 gpu_e2e_rows b2_t8192_h32; gc_pack
left=$(( ${CALL_END:-585} - ($(date +%s) - t0) ))
if [ $left -gt 200 ]; then
  gc_e2e_cudnn whole $left
fi
gc_pack
