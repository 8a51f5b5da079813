#!/usr/bin/env bash
# lab/calls/call2.sh (right after call1.sh, while the machine is warm: its Triton cache is there)
# call 2: the measurements against fla (real autotuning, compile cache warm from call 1)
set -u
O=$OUT; t0=$(date +%s)
GPU_CHECK_PARTS=e2e E2E_TIMEOUT=330 tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"; cat $O/e2e.txt
GPU_CHECK_PARTS=varlen VARLEN_TIMEOUT=230 VARLEN_BUDGET=200 VARLEN_ARGS="--rows 0,1,2,3,4" tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
tail -n 30 $O/varlen.txt
# at most 8 files come back from $OUT, the first 8 by name: this bundle of all of them sorts first
(cd $O && tar czf 0logs.tgz --exclude=0logs.tgz .)
