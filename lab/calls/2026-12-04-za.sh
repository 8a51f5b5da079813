#!/usr/bin/env bash
# lab/calls/2026-12-04-za.sh (OUT set; carry build-gpu as build, .whl): the sixth session's first call.  main
# da95961 + lab/experiments/dav-dv-only applied.  Side by side: test_whole_gpu.py (the compiled-is-eager test
# is new; the C call now runs bwd_dav for dv alone on the unfused grids), fla's recipes on both routes (the
# refused-input tests refactored), the production float64 tests of the whole route, test_gpu's dav tests and
# memcheck of the C-call tests; then alone whole_ab.py (both rows) and ncu's sections of the fused kernel.
set -u
. lab/calls/common.sh
gc_prologue
(GPU_CHECK_PARTS=python PYTEST_LOG=pytest_whole PYTEST_TRITON=first PYTEST_TIMEOUT=240 \
  PYTEST_ARGS="-rA -n 2 python/tests/test_whole_gpu.py" tools/gpu_check.sh build $O > $O/whole_rc.txt 2>&1) &
(KDART_ERR_LOG=$O/prod_errors.txt GPU_CHECK_PARTS=python PYTEST_LOG=pytest_prod PYTEST_TRITON=first \
  PYTEST_TIMEOUT=240 PYTEST_ARGS="-n 2 python/tests/test_production_gpu.py -k whole" tools/gpu_check.sh build $O \
  > $O/prod_rc.txt 2>&1) &
(GPU_CHECK_PARTS=python PYTEST_LOG=pytest_fla PYTEST_TRITON=first PYTEST_TIMEOUT=240 \
  PYTEST_ARGS="-n 4 python/tests/test_fla_gpu.py" tools/gpu_check.sh build $O > $O/fla_rc.txt 2>&1) &
gc_gpu_tests 200 dav_standalone,dav_fused dav
(cd python/tests && PYTHONPATH=$R/python:/tmp/site timeout 240 compute-sanitizer --tool memcheck \
  python3 -m pytest -q -p no:cacheprovider test_whole_gpu.py -k "random_saved or is_the_stages" > $O/memcheck.txt 2>&1;
  echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $O/memcheck.txt | tail -1)" >> $O/san.txt) &
wait; el
cat $O/san.txt; tail -2 $O/test_gpu_dav.txt
grep -hE "passed|failed" $O/pytest_whole.txt $O/pytest_prod.txt $O/pytest_fla.txt | tail -3
grep -hE "^FAILED|^E  " $O/pytest_whole.txt $O/pytest_prod.txt $O/pytest_fla.txt | head -16
gc_pack
PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls timeout 120 python3 lab/calls/whole_ab.py > $O/whole_ab.txt 2>&1
echo "whole_ab rc=$?"; grep -vE "Warning|warn" $O/whole_ab.txt | tail -30; el
gc_pack
PYTHONPATH=$R/python:$R/python/tests timeout 90 ncu --kernel-name regex:kdart_wy_dqkg --launch-skip 2 --launch-count 1 \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
  --section MemoryWorkloadAnalysis --section LaunchStats --section ComputeWorkloadAnalysis --section InstructionStats \
  python3 lab/calls/fused_ncu.py > $O/ncu.txt 2>&1
echo "ncu rc=$?"; el
gc_pack
