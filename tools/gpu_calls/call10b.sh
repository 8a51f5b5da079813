#!/usr/bin/env bash
# tools/gpu_calls/call10b.sh (branch dhu-adapt, written in session 9; OUT set; carry build, .whl,
# .triton-carry): bwd_dhu's V split (kdart::dhu::varlen64), never run yet.  Its GPU tests (the new
# dhu_varlen_v_split and the varlen tests that reach it with kdart's V tile), memcheck and racecheck on
# them, then the varlen table (issue 14's rows; seq8's bwd_dhu is the row it is for) and kdart bench
# (the standard table has no packed rows: it must not move).
set -u
O=$OUT; t0=$(date +%s); R=$PWD
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 KDART_CACHE_DIR=$R/build/devcache KDART_KERNEL_DIR=$R/kernel_src
T=dhu_varlen_v_split,dhu_varlen_lists,varlen_thousand_sequences,varlen_garbage_writes_nothing,dhu_head_dims
KDART_GPU_TESTS=$T CK_FORK=no timeout 200 build/tests/test_gpu > $O/test_gpu.txt 2>&1; echo "test_gpu rc=$?"
for tool in memcheck racecheck; do
  KDART_GPU_TESTS=dhu_varlen_v_split,varlen_garbage_writes_nothing CK_FORK=no timeout 150 \
    compute-sanitizer --tool $tool build/tests/test_gpu > $O/$tool.txt 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $O/$tool.txt)"
done
echo "t=$(( $(date +%s) - t0 ))"
GPU_CHECK_PARTS=varlen VARLEN_ARGS="--rows 0,1,2,3,4" VARLEN_TIMEOUT=150 VARLEN_BUDGET=120 tools/gpu_check.sh build $O
grep "^|" $O/varlen.txt; echo "t=$(( $(date +%s) - t0 ))"
GPU_CHECK_PARTS=bench tools/gpu_check.sh build $O; tail -n 24 $O/bench.txt
(cd $O && tar czf 0logs.tgz --exclude=0logs.tgz .)
