#!/usr/bin/env bash
# lab/calls/2026-12-03-r.sh (OUT set; carry build-gpu as build, .whl; devcache prewarmed): the dAv fusion
# with wy_dqkg's dAqk accumulated in registers over the last K block's V tiles (variant B, the working
# tree) against call q's form that added each V tile's product to dAqk in global memory (variant A,
# build/ksA/kernel_src).  Side by side: test_gpu dav_fused + wy_production (B), memcheck + racecheck
# of the small wy cases (B), the torch tests of the fused ops and the whole-function float64 tests of
# the production flags (first-config Triton), fla's Triton warm-up of the e2e row.  Then alone: kdart
# bench rows of A and B; bench/e2e.py's production row at B2 T8192 H32 with the per-stage profile.
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
gc_fla_site
gc_warm WARM_E2E=b2_t8192_h32 WARM_JOBS=6 WARM_TIMEOUT=200
(KDART_GPU_TESTS=dav_fused,wy_production CK_FORK=no timeout 250 build/tests/test_gpu > $O/test_gpu_B.txt 2>&1
 echo "test_gpu B rc=$?" >> $O/test_gpu_B.txt) &
gc_sanitize 250 KDART_GPU_SMALL=wy_dqkg
(KDART_ERR_LOG=$O/prod_errors.txt GPU_CHECK_PARTS=python PYTEST_LOG=pytest_prod PYTEST_TRITON=first \
  PYTEST_TIMEOUT=240 PYTEST_ARGS="-n 4 python/tests/test_production_gpu.py" tools/gpu_check.sh build $O \
  > $O/prod_rc.txt 2>&1) &
PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so KDART_TORCH_EXT=0 FLA_DISABLE_BACKEND_DISPATCH=1 \
  PYTHONUNBUFFERED=1 timeout 200 python3 -m pytest python/tests/test_torch_gpu.py -k "aqk or dav or wy or dhu" -q \
  -p no:cacheprovider > $O/pytest_fused.txt 2>&1; echo "pytest fused rc=$? $(tail -1 $O/pytest_fused.txt)"; el
wait; el
grep -hE "Checks|rc=|:F:|:E:" $O/test_gpu_B.txt | cut -c1-300; cat $O/san.txt
grep -hE "passed|failed" $O/pytest_*.txt | tail -3; grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
cat $O/prod_errors.txt 2>/dev/null
gc_pack
for s in 2,8192,32,32,128,128 16,8192,16,16,128,256; do
  echo "B $s"; timeout 60 build/kdart bench --shape $s --reps 20 2>&1 | grep -E "wy_dqkg|FAIL|rror"
  echo "A $s"; KDART_KERNEL_DIR=$R/build/ksA/kernel_src timeout 60 build/kdart bench --shape $s --reps 20 2>&1 | grep -E "wy_dqkg|FAIL|rror"
done | tee $O/bench_AB.txt; el
gc_pack
PYTHONPATH=/tmp/site KDART_LIBRARY=build/libkdart.so PYTHONUNBUFFERED=1 timeout $(( 520 - ($(date +%s) - t0) )) \
  python3 bench/e2e.py --shapes b2_t8192_h32 --configs prod --profile --iters 6 --no-overhead > $O/e2e.txt 2>&1
echo "e2e rc=$?"; el; grep -vE "Warning|_warn_once|other:" $O/e2e.txt | tail -40
gc_pack
