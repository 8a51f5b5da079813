#!/usr/bin/env bash
# tools/gpu_calls/call11c.sh (session 11's third call; OUT set; carry build, .whl, .triton-carry): the full
# suite on the masked bwd_dhu of call11b (4-byte granules now in loops, the K tile 256's copies in loops) and
# bwd_dhu's head pairs (packed sequences at the K tile 256, sm_90a).  Side by side: test_gpu in three
# processes (dhu_varlen_head_pairs among them), the torch_ext build, fla's recipes, the Triton warm-up of
# side_by_side rows 5, 11-13, varlen row 5 and bench/masked_dhu.py; the torch tests on both paths; then the
# sanitizers on small shapes beside the selftest; then alone: bench/masked_dhu.py, kdart bench of masked
# shapes, side_by_side rows 5, 11-13, varlen row 5, the standard table.
set -u
. tools/gpu_calls/common.sh
gc_fla_site
gc_test_gpu 280
gc_ext_build
gc_fla_recipes
(mkdir -p $O/warm && WARM_SBS=5,11,12,13 WARM_VARLEN=5 WARM_JOBS=4 WARM_VARLEN_JOBS=1 WARM_TIMEOUT=200 GPU_CHECK_PARTS=warm tools/gpu_check.sh build $O/warm > $O/warm_rc.txt 2>&1
 PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 timeout 200 \
   python3 tools/triton_warm.py -j 4 --log /tmp/warm-mdhu -- python3 bench/masked_dhu.py --warm-only >> $O/warm_rc.txt 2>&1) &
KDART_TORCH_EXT=0 GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch_pypath PYTEST_TIMEOUT=150 PYTEST_ARGS="python/tests --ignore=python/tests/test_fla_gpu.py $DS" tools/gpu_check.sh build $O; el
wait $ep; tail -n 1 $O/ext_build.txt
GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch_ext PYTEST_TIMEOUT=120 PYTEST_ARGS="python/tests/test_torch_gpu.py python/tests/test_torch_ext.py $DS" tools/gpu_check.sh build $O; el
wait $pids; tail -qn 2 $O/test_gpu?.txt; el
gc_selftest
for tool in memcheck racecheck; do
  (KDART_GPU_SMALL=1 CK_FORK=no timeout 220 compute-sanitizer --tool $tool build/tests/test_gpu > $O/$tool.txt 2>&1
   echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $O/$tool.txt)" >> $O/san.txt) &
done
wait $fp; grep -v "^tar" $O/fla_rc.txt; el
wait; tail -n 1 $O/selftest.txt; cat $O/san.txt; grep triton_warm $O/warm_rc.txt | tail -n 3; el
PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 timeout 150 \
  python3 bench/masked_dhu.py > $O/masked_dhu.txt 2>&1; cat $O/masked_dhu.txt; el
for s in 200,200 190,190 256,256; do
  timeout 60 build/kdart bench --shape 2,8192,16,16,$s --reps 30 2>&1 | grep -E "bwd_dhu|ERROR|error"
done | tee $O/bench_masked.txt; el
GPU_CHECK_PARTS=sbs SBS_ARGS="--rows 5,11,12,13" SBS_TIMEOUT=120 SBS_BUDGET=100 tools/gpu_check.sh build $O; el
GPU_CHECK_PARTS=varlen VARLEN_ARGS="--rows 5" VARLEN_TIMEOUT=100 VARLEN_BUDGET=80 tools/gpu_check.sh build $O; el
timeout 120 build/kdart bench > $O/bench_std.txt 2>&1; grep -E "prod8192|b2_t4096|launch" $O/bench_std.txt | head -8; el
grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
grep -E "ERROR|^\| bwd" $O/side_by_side.txt; grep "^| bwd" $O/varlen.txt
(cd $O && tar czf 0logs.tgz --exclude=0logs.tgz --exclude='*.tgz' .)
