#!/usr/bin/env bash
# lab/calls/2026-12-03-e.sh (as call d): after kdart.torch.wy_dqkg's pointer order was fixed (do and dh had
# been swapped in the Python path) and wy_dqkg's K phase took q, k, g from shared memory.  Side by side:
# wy_dqkg's GPU tests, memcheck/racecheck of its production cases, the whole-function float64 tests of the
# production flags with wy_dqkg served (first-config Triton), the torch tests, and fla's Triton warm-up of
# the e2e rows.  Then alone: bench/e2e.py's production rows (B2 T8192 H32 with the recipe, the packed row)
# with the per-stage profile.
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
gc_fla_site
gc_warm WARM_E2E=b2_t8192_h32,packed_t32768_hv32 WARM_JOBS=6 WARM_TIMEOUT=240
(KDART_GPU_TESTS=wy_every_spec,wy_production CK_FORK=no timeout 240 build/tests/test_gpu > $O/test_gpu_wy.txt 2>&1
 echo "test_gpu rc=$?" >> $O/test_gpu_wy.txt) &
for tool in memcheck racecheck; do
  (KDART_GPU_TESTS=wy_production CK_FORK=no timeout 240 compute-sanitizer --tool $tool build/tests/test_gpu > $O/$tool.txt 2>&1
   echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $O/$tool.txt)" >> $O/san.txt) &
done
(KDART_ERR_LOG=$O/prod_errors.txt GPU_CHECK_PARTS=python PYTEST_LOG=pytest_prod PYTEST_TRITON=first \
  PYTEST_TIMEOUT=240 PYTEST_ARGS="-n 5 python/tests/test_production_gpu.py" tools/gpu_check.sh build $O \
  > $O/prod_rc.txt 2>&1) &
KDART_TORCH_EXT=0 GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch PYTEST_TIMEOUT=200 \
  PYTEST_ARGS="python/tests --ignore=python/tests/test_fla_gpu.py --ignore=python/tests/test_production_gpu.py $DS" \
  tools/gpu_check.sh build $O; el
wait; el
grep -E "Checks|rc=|:E:|:F:" $O/test_gpu_wy.txt | cut -c1-300
cat $O/san.txt; grep -hE "passed|failed" $O/pytest_*.txt | tail -3
grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
cat $O/prod_errors.txt
gc_pack
PYTHONPATH=/tmp/site KDART_LIBRARY=build/libkdart.so PYTHONUNBUFFERED=1 timeout 200 \
  python3 bench/e2e.py --shapes b2_t8192_h32 --configs prod,recipe --profile --iters 6 --no-overhead > $O/e2e_a.txt 2>&1
echo "e2e a rc=$?"; el; grep -vE "Warning|_warn_once|other:" $O/e2e_a.txt
gc_pack
PYTHONPATH=/tmp/site KDART_LIBRARY=build/libkdart.so PYTHONUNBUFFERED=1 timeout $(( 580 - ($(date +%s) - t0) )) \
  python3 bench/e2e.py --shapes packed_t32768_hv32 --configs prod --profile --iters 6 --no-overhead > $O/e2e_b.txt 2>&1
echo "e2e b rc=$?"; el; grep -vE "Warning|_warn_once|other:" $O/e2e_b.txt
gc_pack
