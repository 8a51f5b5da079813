#!/usr/bin/env bash
# tools/gpu_calls/call11b.sh (session 11's second call; OUT set; carry build, .whl, .triton-carry): bwd_dhu's
# masked path with fixed-column unrolled granule copies and stores (call11a: it issued 5.4x the native
# instructions), kdart.fla serving masked bwd_dhu again.  Side by side: test_gpu in three processes, fla's
# recipes, the Triton warm-up of side_by_side rows 5, 12, 13 and varlen row 5, the torch tests (Python
# path); then the sanitizers on small shapes beside the selftest; then alone: kdart bench of the masked
# shapes (every granule width, odd, K tile 256), side_by_side rows 5, 12, 13, varlen row 5.
set -u
. tools/gpu_calls/common.sh
gc_fla_site
gc_test_gpu 280
gc_fla_recipes
(mkdir -p $O/warm && WARM_SBS=5,12,13 WARM_VARLEN=5 WARM_JOBS=4 WARM_VARLEN_JOBS=1 WARM_TIMEOUT=200 GPU_CHECK_PARTS=warm tools/gpu_check.sh build $O/warm > $O/warm_rc.txt 2>&1) &
KDART_TORCH_EXT=0 GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch_pypath PYTEST_TIMEOUT=150 PYTEST_ARGS="python/tests --ignore=python/tests/test_fla_gpu.py $DS" tools/gpu_check.sh build $O; el
wait $pids; tail -qn 2 $O/test_gpu?.txt; el
gc_selftest
for tool in memcheck racecheck; do
  (KDART_GPU_SMALL=1 CK_FORK=no timeout 220 compute-sanitizer --tool $tool build/tests/test_gpu > $O/$tool.txt 2>&1
   echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $O/$tool.txt)" >> $O/san.txt) &
done
wait $fp; grep -v "^tar" $O/fla_rc.txt; el
wait; tail -n 1 $O/selftest.txt; cat $O/san.txt; grep triton_warm $O/warm_rc.txt | tail -n 2; el
for s in 128,128 100,100 64,64 60,60 18,18 190,190 63,63 200,200 256,256 100,256 128,100; do
  timeout 60 build/kdart bench --shape 2,8192,16,16,$s --reps 30 2>&1 | grep -E "bwd_dhu|ERROR|error"
done | tee $O/bench_masked.txt; el
GPU_CHECK_PARTS=sbs SBS_ARGS="--rows 5,12,13" SBS_TIMEOUT=120 SBS_BUDGET=100 tools/gpu_check.sh build $O; el
GPU_CHECK_PARTS=varlen VARLEN_ARGS="--rows 5" VARLEN_TIMEOUT=100 VARLEN_BUDGET=80 tools/gpu_check.sh build $O; el
grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
grep -E "ERROR|^\| bwd" $O/side_by_side.txt; grep "^| bwd" $O/varlen.txt
(cd $O && tar czf 0logs.tgz --exclude=0logs.tgz --exclude='*.tgz' .)
