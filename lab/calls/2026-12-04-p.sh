#!/usr/bin/env bash
# lab/calls/2026-12-04-p.sh (OUT set; carry build-gpu as build, .whl, .whl-cudnn): after wy_dqkg took
# bwd_intra's terms into its launch (chunk_kda_bwd, the whole route): bench/e2e.py with the production
# flags at B2 T8192 H32, both routes, profiled (fla warms its Triton autotuning first, in the same process),
# then, as long as the call lasts, cuDNN's configuration with cuDNN frontend beside (its two rows).
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
gc_fla_site
python3 -m pip install -q --no-index --no-deps --target /tmp/cudnn-site .whl-cudnn/*.whl 2>&1 | tail -2
export KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 PYTHONUNBUFFERED=1
PYTHONPATH=/tmp/site timeout ${P_PROD:-330} python3 bench/e2e.py --shapes ${P_SHAPES:-b2_t8192_h32} --configs prod \
  --profile --iters 8 --route both > $O/e2e_prod.txt 2>&1
echo "e2e prod rc=$?"; el; grep -vE "Warning|_warn_once|Python call|overhead" $O/e2e_prod.txt | tail -60
gc_pack
PYTHONPATH=/tmp/site:/tmp/cudnn-site timeout $(( ${P_END:-570} - ($(date +%s) - t0) )) python3 bench/e2e.py \
  --shapes b2_t8192_h32,packed_t32768_hv32 --configs cudnn --iters 8 --route both --no-overhead > $O/e2e_cudnn.txt 2>&1
echo "e2e cudnn rc=$?"; el; grep -vE "Warning|_warn_once" $O/e2e_cudnn.txt | tail -40
gc_pack
