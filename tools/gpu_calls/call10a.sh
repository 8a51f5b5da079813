#!/usr/bin/env bash
# tools/gpu_calls/call10a.sh (written in session 9 for the next GPU session; OUT set; carry build, .whl,
# .triton-carry): issue 15's performance rows against fla, with the new cases served (KDART_EXPERIMENTAL=1).
# fla's Triton configs for the new head dims are compiled first in parallel (tools/triton_warm.py), so
# that fla's own autotuning in the measuring runs only benchmarks.  Then the side-by-side rows (the
# K = 128 reference row 5 and the head-dim rows 11-13), the varlen rows 0 (K = 128 documents) and 5
# (K = V = 256 documents), and `kdart bench` for the standard table (no regression against s9a).
set -u
O=$OUT; t0=$(date +%s)
export KDART_EXPERIMENTAL=1
WARM_SBS=5,11,12,13 WARM_VARLEN=0,5 WARM_JOBS=10 WARM_TIMEOUT=300 GPU_CHECK_PARTS=warm tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
GPU_CHECK_PARTS=sbs SBS_ARGS="--rows 5,11,12,13" SBS_TIMEOUT=150 SBS_BUDGET=120 tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
GPU_CHECK_PARTS=varlen VARLEN_ARGS="--rows 0,5" VARLEN_TIMEOUT=120 VARLEN_BUDGET=100 tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
GPU_CHECK_PARTS=bench tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
tail -n 12 $O/side_by_side.txt; grep "^|" $O/varlen.txt; tail -n 4 $O/bench.txt
(cd $O && tar czf 0logs.tgz --exclude=0logs.tgz .)
