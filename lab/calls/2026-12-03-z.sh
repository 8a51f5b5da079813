#!/usr/bin/env bash
# lab/calls/2026-12-03-z.sh (OUT set; carry build-gpu as build, .whl): recompute_wu after its fixes (its
# tile copies by 128 threads; the plain recompute's NULL raw gate): test_gpu rwu suites, memcheck +
# racecheck of the small rwu cases, the production whole-function float64 tests, fla's warm-up of the e2e
# row; then alone: the rwu rows and the whole backward in the production configuration at B2 T8192 H32.
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
gc_fla_site
(KDART_GPU_TESTS=rwu_every_spec,rwu_production CK_FORK=no timeout 200 build/tests/test_gpu > $O/test_gpu_rwu.txt 2>&1
 echo "test_gpu rwu rc=$?" >> $O/test_gpu_rwu.txt) &
gc_sanitize 200 KDART_GPU_SMALL=recompute_wu
(KDART_ERR_LOG=$O/prod_errors.txt GPU_CHECK_PARTS=python PYTEST_LOG=pytest_prod PYTEST_TRITON=first \
  PYTEST_TIMEOUT=230 PYTEST_ARGS="-n 4 python/tests/test_production_gpu.py" tools/gpu_check.sh build $O \
  > $O/prod_rc.txt 2>&1) &
gc_warm WARM_E2E=b2_t8192_h32 WARM_JOBS=4 WARM_TIMEOUT=230
wait; el
grep -hE "Checks|rc=|:F:|:E:" $O/test_gpu_*.txt | cut -c1-300; grep -h "^rwu" $O/test_gpu_rwu.txt | head -8; cat $O/san.txt
grep -hE "passed|failed" $O/pytest_*.txt | tail -3; grep -hE "^FAILED|^ERROR|^E  " $O/pytest_*.txt | cut -c1-200 | head -12
cat $O/prod_errors.txt 2>/dev/null | tail -8; tail -1 $O/warm_rc.txt
gc_pack
gpu_rwu_bench b2_t8192_h32,prod8192
gc_pack
gpu_e2e_prod 590
gc_pack
