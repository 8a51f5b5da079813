#!/usr/bin/env bash
# lab/calls/2026-12-03-y.sh (OUT set; carry build-gpu as build, .whl): the new recompute_wu stage (fla's
# gate cumsum + recompute_w_u_fwd) and wy_dqkg after its helpers moved to kdart_tile.cuh / chunk_of:
# test_gpu rwu + wy suites, memcheck + racecheck of the small rwu cases, the kdart.fla GPU tests and the
# production whole-function float64 tests (kdart.fla now serves the recompute), then the rwu rows alone.
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
gc_fla_site
(KDART_GPU_TESTS=rwu_every_spec,rwu_production,dav_fused CK_FORK=no timeout 200 build/tests/test_gpu > $O/test_gpu_rwu.txt 2>&1
 echo "test_gpu rwu rc=$?" >> $O/test_gpu_rwu.txt) &
(KDART_GPU_TESTS=wy_every_spec,wy_production CK_FORK=no timeout 240 build/tests/test_gpu > $O/test_gpu_wy.txt 2>&1
 echo "test_gpu wy rc=$?" >> $O/test_gpu_wy.txt) &
gc_sanitize 200 KDART_GPU_SMALL=recompute_wu
(KDART_ERR_LOG=$O/prod_errors.txt GPU_CHECK_PARTS=python PYTEST_LOG=pytest_prod PYTEST_TRITON=first \
  PYTEST_TIMEOUT=280 PYTEST_ARGS="-n 4 python/tests/test_production_gpu.py" tools/gpu_check.sh build $O \
  > $O/prod_rc.txt 2>&1) &
(GPU_CHECK_PARTS=python PYTEST_LOG=pytest_fla PYTEST_TRITON=first PYTEST_TIMEOUT=280 \
  PYTEST_ARGS="-n 4 python/tests/test_fla_gpu.py" tools/gpu_check.sh build $O > $O/fla_rc.txt 2>&1) &
wait; el
grep -hE "Checks|rc=|:F:|:E:" $O/test_gpu_*.txt | cut -c1-300; grep -h "^rwu" $O/test_gpu_rwu.txt | head -12; cat $O/san.txt
grep -hE "passed|failed" $O/pytest_*.txt | tail -3; grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
cat $O/prod_errors.txt 2>/dev/null | tail -12
gc_pack
PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 PYTHONUNBUFFERED=1 \
  timeout $(( 585 - ($(date +%s) - t0) )) python3 lab/experiments/rwu/rwu_bench.py b2_t8192_h32,prod8192,d100 \
  > $O/rwu_bench.txt 2>&1
echo "rwu bench rc=$?"; grep -vE "Warning|warn_once" $O/rwu_bench.txt | tail -8; el
gc_pack
