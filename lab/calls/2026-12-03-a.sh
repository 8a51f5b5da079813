#!/usr/bin/env bash
# lab/calls/2026-12-03-a.sh (OUT set; carry build with build/devcache prewarmed for sm_90a, and .whl): the
# production configuration (beta in fp32 for bwd_intra).  Side by side: test_gpu in three processes, the
# selftest, memcheck/racecheck on small shapes, the whole-function float64 tests of the production flags
# (first-config Triton, five workers), the CPU routing tests and the torch tests on the Python path, and
# fla's Triton warm-up of bench/e2e.py's rows.  Then alone: bench/e2e.py, production and recipe rows, with
# the per-stage profile.
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
gc_fla_site
gc_test_gpu 330 4
(timeout 420 build/kdart selftest > $O/selftest.txt 2>&1; echo "selftest rc=$?" >> $O/selftest.txt) &
gc_sanitize 330 KDART_GPU_SMALL=1
gc_warm WARM_E2E=b2_t8192_h32,packed_t32768_hv32,prod8192 WARM_JOBS=6 WARM_TIMEOUT=300
(GPU_CHECK_PARTS=python PYTEST_LOG=pytest_prod PYTEST_TRITON=first PYTEST_TIMEOUT=330 \
  PYTEST_ARGS="-n 5 python/tests/test_production_gpu.py" tools/gpu_check.sh build $O > $O/prod_rc.txt 2>&1) &
pp=$!
KDART_TORCH_EXT=0 GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch PYTEST_TIMEOUT=300 \
  PYTEST_ARGS="python/tests --ignore=python/tests/test_fla_gpu.py --ignore=python/tests/test_production_gpu.py $DS" \
  tools/gpu_check.sh build $O; el
gc_pack
wait $pp; cat $O/prod_rc.txt; el
wait; el
grep -h "^test_gpu part\|Checks" $O/test_gpu*.txt; tail -n 2 $O/selftest.txt; cat $O/san.txt
grep -hE "passed|failed" $O/pytest_*.txt | tail -4
grep -hE "^FAILED|^ERROR|error vs float64" $O/pytest_*.txt | head -30
gc_pack
PYTHONPATH=/tmp/site KDART_LIBRARY=build/libkdart.so PYTHONUNBUFFERED=1 timeout 170 \
  python3 bench/e2e.py --shapes b2_t8192_h32 --configs prod,recipe --profile --iters 6 > $O/e2e_a.txt 2>&1
echo "e2e a rc=$?"; el; cat $O/e2e_a.txt
gc_pack
PYTHONPATH=/tmp/site KDART_LIBRARY=build/libkdart.so PYTHONUNBUFFERED=1 timeout $(( 575 - ($(date +%s) - t0) )) \
  python3 bench/e2e.py --shapes packed_t32768_hv32,prod8192 --configs prod --profile --iters 6 --no-overhead \
  > $O/e2e_b.txt 2>&1
echo "e2e b rc=$?"; el; cat $O/e2e_b.txt
(cd $TRITON_CACHE_DIR; find . -name '*.autotune.json' | tar czf $O/triton-autotune.tgz -T -) 2>/dev/null
gc_pack
