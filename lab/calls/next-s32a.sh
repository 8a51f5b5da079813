# call s32a (carry build-gpu, .whl, .whl-cudnn, .triton-carry): main with fwd_h's v scaled once a CTA.
# On an H200: the official rows (next-s28c.sh: B2 production, fla's H200 autotune saved; cuDNN's
# configuration if 200 s are left before CALL_END).  On an H100 (its autotune carried, so no tuning):
# bench/e2e.py's production rows at B2 and packed32768, then cuDNN's configuration, for the README's
# H100 side-by-side table.
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  CALL_END=${CALL_END:-480} exec bash lab/calls/next-s28c.sh
fi
. lab/calls/common.sh
gc_peers_setup
LIMIT=${CALL_END:-480} gpu_e2e_rows b2_t8192_h32 packed_t32768_hv32; gc_pack
left=$(( ${CALL_END:-480} - ($(date +%s) - t0) ))
[ $left -gt 120 ] && gc_e2e_cudnn whole $left
gc_pack
