#!/usr/bin/env bash
# lab/calls/2026-12-04-x.sh (OUT set; carry build-gpu as build, .whl): kdart_kda_chunk_bwd's workspace with w,
# u, qg, kg and wy_dqkg's fp32 gradients in one region.  Default cache prewarmed; test_whole_gpu.py and the
# production float64 tests of the whole route side by side with memcheck of the C-call tests; then alone
# whole_ab.py (time, profile, peak memory), then bench/e2e.py's production row on 32768 packed tokens in 7
# documents, both routes, profiled, as long as the call lasts.
set -u
. lab/calls/common.sh
gc_prologue
(GPU_CHECK_PARTS=python PYTEST_LOG=pytest_whole PYTEST_TRITON=first PYTEST_TIMEOUT=200 \
  PYTEST_ARGS="-rA -n 2 python/tests/test_whole_gpu.py" tools/gpu_check.sh build $O > $O/whole_rc.txt 2>&1) &
(KDART_ERR_LOG=$O/prod_errors.txt GPU_CHECK_PARTS=python PYTEST_LOG=pytest_prod PYTEST_TRITON=first \
  PYTEST_TIMEOUT=200 PYTEST_ARGS="-n 2 python/tests/test_production_gpu.py -k whole" tools/gpu_check.sh build $O \
  > $O/prod_rc.txt 2>&1) &
(cd python/tests && PYTHONPATH=$R/python:/tmp/site timeout 200 compute-sanitizer --tool memcheck \
  python3 -m pytest -q -p no:cacheprovider test_whole_gpu.py -k "random_saved or is_the_stages" > $O/memcheck.txt 2>&1;
  echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $O/memcheck.txt | tail -1)" >> $O/san.txt) &
wait; el
cat $O/san.txt
grep -hE "passed|failed" $O/pytest_whole.txt $O/pytest_prod.txt | tail -2
grep -hE "^FAILED|^E  " $O/pytest_whole.txt $O/pytest_prod.txt | head -12
gc_pack
PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls timeout 100 python3 lab/calls/whole_ab.py > $O/whole_ab.txt 2>&1
echo "whole_ab rc=$?"; grep -vE "Warning|warn|profile" $O/whole_ab.txt | tail -12; el
gc_pack
export FLA_DISABLE_BACKEND_DISPATCH=1 PYTHONUNBUFFERED=1
PYTHONPATH=/tmp/site timeout $(( ${X_END:-560} - ($(date +%s) - t0) )) python3 bench/e2e.py --shapes packed_t32768_hv32 \
  --configs prod --profile --iters 8 --route both > $O/e2e_prod.txt 2>&1
echo "e2e prod rc=$?"; el; grep -vE "Warning|_warn_once|Python call|overhead" $O/e2e_prod.txt | tail -60
gc_pack
