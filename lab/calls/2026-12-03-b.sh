#!/usr/bin/env bash
# lab/calls/2026-12-03-b.sh (OUT set; carry build-gpu as build, with build/devcache prewarmed --all for sm_90a,
# and .whl): main after the house's layers and CLI merged.  Side by side: test_gpu in four processes (the
# check harness now in tests/check), the selftest, the whole-function float64 tests of the production flags
# (first-config Triton, five workers, errors to prod_errors.txt), fla's recipes through kdart.fla (four
# workers), the CPU routing tests and the torch tests on the Python path.  Then a smoke run of bench/e2e.py's
# production row in first-config mode (its timings mean nothing there: it checks the autograd.backward
# path and the profile run).
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
gc_fla_site
gc_test_gpu 330 4
(timeout 420 build/kdart selftest > $O/selftest.txt 2>&1; echo "selftest rc=$?" >> $O/selftest.txt) &
(KDART_ERR_LOG=$O/prod_errors.txt GPU_CHECK_PARTS=python PYTEST_LOG=pytest_prod PYTEST_TRITON=first \
  PYTEST_TIMEOUT=330 PYTEST_ARGS="-n 5 python/tests/test_production_gpu.py" tools/gpu_check.sh build $O \
  > $O/prod_rc.txt 2>&1) &
(GPU_CHECK_PARTS=python PYTEST_LOG=pytest_fla PYTEST_TRITON=first PYTEST_TIMEOUT=330 \
  PYTEST_ARGS="-n 4 python/tests/test_fla_gpu.py" tools/gpu_check.sh build $O > $O/fla_rc.txt 2>&1) &
KDART_TORCH_EXT=0 GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch PYTEST_TIMEOUT=300 \
  PYTEST_ARGS="python/tests --ignore=python/tests/test_fla_gpu.py --ignore=python/tests/test_production_gpu.py $DS" \
  tools/gpu_check.sh build $O; el
gc_pack
wait; el
grep -h "^test_gpu part\|Checks" $O/test_gpu*.txt; tail -n 2 $O/selftest.txt
grep -hE "passed|failed" $O/pytest_*.txt | tail -4
grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
cat $O/prod_errors.txt
gc_pack
KDART_TRITON_WARM=first PYTHONPATH=$R/tools/triton_warm:/tmp/site KDART_LIBRARY=build/libkdart.so \
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/e2e.py --shapes b2_t8192_h32 --configs prod --profile --iters 2 \
  --profile-iters 1 --no-overhead > $O/e2e_smoke.txt 2>&1
echo "e2e smoke rc=$?"; el; tail -n 8 $O/e2e_smoke.txt
gc_pack
