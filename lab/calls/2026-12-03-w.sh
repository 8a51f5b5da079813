#!/usr/bin/env bash
# lab/calls/2026-12-03-w.sh (OUT set; carry build-gpu as build, .whl; devcache prewarmed at ae34fe3): the
# side_by_side rows of wy_dqkg the adopted kernel has not run yet against fla (7 packed documents,
# K = V = 256, D = 100; fla's Triton warm-up first), then the dAv rows with it (B2 T8192 H32, prod8192).
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
gc_fla_site
ROWS=b1_t32768_h32_packed,b2_t8192_h16_k256,b2_t8192_h16_d100
gc_warm WARM_SBS=$ROWS WARM_SBS_ARGS="--stage wy" WARM_JOBS=6 WARM_TIMEOUT=200
wait; el; tail -2 $O/warm_rc.txt
export PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 PYTHONUNBUFFERED=1
timeout 200 python3 bench/side_by_side.py --stage wy --rows $ROWS > $O/sbs_wy.txt 2>&1
echo "sbs wy rc=$?"; grep -E "^\| |kdart .* ms" $O/sbs_wy.txt; el
timeout 150 python3 bench/side_by_side.py --stage dav --no-ceiling --rows b2_t8192_h32,prod8192 > $O/sbs_dav.txt 2>&1
echo "sbs dav rc=$?"; grep -E "^\| |bwd_dhu .* ms|kdart .* ms" $O/sbs_dav.txt; el
gc_pack
