#!/usr/bin/env bash
# lab/calls/2026-12-03-d.sh (OUT set; carry build-gpu as build, devcache prewarmed --all for sm_90a, and .whl):
# wy_dqkg's first run on the H200: its GPU tests (every specialization, the production cases) against the
# float64 reference, then side by side with fla's chunk_kda_bwd_wy_dqkg_fused on five rows (fla autotuned).
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
gc_fla_site
KDART_GPU_TESTS=wy_every_spec,wy_production CK_FORK=no timeout 240 build/tests/test_gpu > $O/test_gpu_wy.txt 2>&1
echo "test_gpu rc=$?" >> $O/test_gpu_wy.txt; el
grep -E "^wy |Checks|Failure|rc=|:E:|:F:" $O/test_gpu_wy.txt | cut -c1-300 | tail -40
gc_pack
PYTHONPATH=/tmp/site:$R/python KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 timeout 420 \
  python3 bench/side_by_side.py --stage wy --no-ceiling --iters 20 \
  --rows b2_t8192_h32,prod8192,b1_t32768_h32_packed,b2_t8192_h16_k256,b2_t8192_h16_d100 > $O/sbs_wy.txt 2>&1
echo "sbs rc=$?" >> $O/sbs_wy.txt; el
grep -vE "^\s*$" $O/sbs_wy.txt | tail -22
gc_pack
# the whole backward in the production configuration with kdart.fla serving wy_dqkg too
PYTHONPATH=/tmp/site KDART_LIBRARY=build/libkdart.so PYTHONUNBUFFERED=1 timeout $(( 570 - ($(date +%s) - t0) )) \
  python3 bench/e2e.py --shapes b2_t8192_h32 --configs prod --profile --iters 6 --no-overhead > $O/e2e_d.txt 2>&1
echo "e2e rc=$?"; el; tail -40 $O/e2e_d.txt
gc_pack
