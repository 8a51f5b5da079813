#!/usr/bin/env bash
# lab/calls/2026-12-03-v.sh (OUT set; carry build-gpu as build, .whl; devcache prewarmed with the adopted
# wy_dqkg: L2 eviction priorities, sum_v h dh in 16-byte chunks): side by side, test_gpu's wy suites over
# every spec, memcheck + racecheck of the small wy cases, the production whole-function float64 tests,
# the torch fused/wy tests, the C++ fast path's build and fla's Triton warm-up (e2e row, side_by_side wy
# rows).  Then alone: kdart bench's wy rows, bench/e2e.py's production row (profile, queued launches,
# host time, the fast path's overhead), side_by_side's wy rows at B2 T8192 H32 and prod8192.
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
gc_fla_site
gc_ext_build
gc_warm WARM_E2E=b2_t8192_h32 WARM_SBS=b2_t8192_h32,prod8192 WARM_SBS_ARGS="--stage wy" WARM_JOBS=4 WARM_TIMEOUT=200
(KDART_GPU_TESTS=wy_every_spec CK_FORK=no timeout 200 build/tests/test_gpu > $O/test_gpu_wy1.txt 2>&1
 echo "test_gpu wy_every_spec rc=$?" >> $O/test_gpu_wy1.txt) &
(KDART_GPU_TESTS=dav_fused,wy_production CK_FORK=no timeout 200 build/tests/test_gpu > $O/test_gpu_wy2.txt 2>&1
 echo "test_gpu dav_fused,wy_production rc=$?" >> $O/test_gpu_wy2.txt) &
gc_sanitize 200 KDART_GPU_SMALL=wy_dqkg
(KDART_ERR_LOG=$O/prod_errors.txt GPU_CHECK_PARTS=python PYTEST_LOG=pytest_prod PYTEST_TRITON=first \
  PYTEST_TIMEOUT=230 PYTEST_ARGS="-n 4 python/tests/test_production_gpu.py" tools/gpu_check.sh build $O \
  > $O/prod_rc.txt 2>&1) &
PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so KDART_TORCH_EXT=0 FLA_DISABLE_BACKEND_DISPATCH=1 \
  PYTHONUNBUFFERED=1 timeout 150 python3 -m pytest python/tests/test_torch_gpu.py -k "aqk or dav or wy" -q \
  -p no:cacheprovider > $O/pytest_fused.txt 2>&1; echo "pytest fused rc=$? $(tail -1 $O/pytest_fused.txt)"; el
wait; el
grep -hE "Checks|rc=|:F:|:E:" $O/test_gpu_wy*.txt | cut -c1-300; cat $O/san.txt
grep -hE "passed|failed" $O/pytest_*.txt | tail -3; grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
cat $O/prod_errors.txt 2>/dev/null; tail -1 $O/ext_build.txt; tail -2 $O/warm_rc.txt
gc_pack
for s in 2,8192,32,32,128,128 16,8192,16,16,128,256; do
  timeout 60 build/kdart bench --shape $s --reps 20 2>&1 | grep -E "wy_dqkg|bwd_dhu|FAIL|rror"
done | tee $O/bench.txt; el
gc_pack
PYTHONPATH=/tmp/site KDART_LIBRARY=build/libkdart.so PYTHONUNBUFFERED=1 timeout $(( 470 - ($(date +%s) - t0) )) \
  python3 bench/e2e.py --shapes b2_t8192_h32 --configs prod --profile --iters 8 > $O/e2e.txt 2>&1
echo "e2e rc=$?"; el; grep -vE "Warning|_warn_once|other:" $O/e2e.txt | tail -30
gc_pack
PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 PYTHONUNBUFFERED=1 \
  timeout $(( 585 - ($(date +%s) - t0) )) python3 bench/side_by_side.py --stage wy --no-ceiling \
  --rows b2_t8192_h32,prod8192 > $O/side_by_side.txt 2>&1
echo "sbs rc=$?"; grep -vE "Warning|warn_once" $O/side_by_side.txt | tail -8; el
gc_pack
