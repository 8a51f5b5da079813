#!/usr/bin/env bash
# tools/gpu_calls/call11e.sh (session 11's fifth call; OUT set; carry build, .whl, .triton-carry): bwd_dhu's
# head groups (4 or 2 heads per CTA at the K tile 256 on packed batches, rows longest first) in place of
# call11c's pairs.  Side by side: test_gpu in three processes (dhu_varlen_head_groups among them), the Triton
# warm-up of varlen row 5, the torch tests (Python path); then the sanitizers (small shapes; the head-group
# test as it is) beside the selftest; then alone: varlen row 5 (K = 256 documents) and row 0.
# (Ran with wip/dhu-head-groups/head-groups.diff applied; main keeps the pairs, whose test is dhu_varlen_head_pairs.)
set -u
. tools/gpu_calls/common.sh
gc_fla_site
gc_test_gpu 300
(mkdir -p $O/warm && WARM_VARLEN=5,0 WARM_VARLEN_JOBS=2 WARM_TIMEOUT=200 GPU_CHECK_PARTS=warm tools/gpu_check.sh build $O/warm > $O/warm_rc.txt 2>&1) &
KDART_TORCH_EXT=0 GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch_pypath PYTEST_TIMEOUT=150 PYTEST_ARGS="python/tests --ignore=python/tests/test_fla_gpu.py $DS" tools/gpu_check.sh build $O; el
wait $pids; tail -qn 2 $O/test_gpu?.txt; grep -h "dhu_varlen_head_groups\|Failure\|Error" $O/test_gpu?.txt | grep -v "Errors: 0" | head; el
gc_selftest
for tool in memcheck racecheck; do
  (KDART_GPU_SMALL=1 CK_FORK=no timeout 250 compute-sanitizer --tool $tool build/tests/test_gpu > $O/$tool.txt 2>&1
   echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $O/$tool.txt)" >> $O/san.txt) &
done
wait; tail -n 1 $O/selftest.txt; cat $O/san.txt; grep triton_warm $O/warm_rc.txt | tail -n 2; el
GPU_CHECK_PARTS=varlen VARLEN_ARGS="--rows 5,0" VARLEN_TIMEOUT=120 VARLEN_BUDGET=100 tools/gpu_check.sh build $O; el
grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
grep "^| bwd" $O/varlen.txt
(cd $O && tar czf 0logs.tgz --exclude=0logs.tgz --exclude='*.tgz' .)
