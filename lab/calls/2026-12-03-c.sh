#!/usr/bin/env bash
# lab/calls/2026-12-03-c.sh (OUT set; carry build-gpu as build, devcache prewarmed --all for sm_90a, and .whl):
# the last check of main before the session ends, inside the few minutes of device time left.  Side by side:
# a subset of test_gpu in two processes (the loads, the spec choice, the production-configuration bwd_intra,
# bad arguments, a second context, the varlen lists), the torch tests on the Python path (kdart_spec_for
# behind prepare_for and CUDA graphs; the per-handle KDART_DISABLE_CUDA), and the float64 whole-function
# tests of the production flags (first-config Triton, five workers).
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
gc_fla_site
for i in 0 1; do
  (KDART_GPU_TESTS=warm_load_times,spec_choice,intra_beta_f32_production,bad_arguments_write_nothing,second_context,intra_varlen_lists,dhu_varlen_lists,intra_head_dims \
   KDART_GPU_PART=$i/2 CK_FORK=no timeout 200 build/tests/test_gpu > $O/test_gpu$i.txt 2>&1
   echo "test_gpu part $i/2 rc=$? t=$(( $(date +%s) - t0 ))" >> $O/test_gpu$i.txt) &
done
(KDART_ERR_LOG=$O/prod_errors.txt GPU_CHECK_PARTS=python PYTEST_LOG=pytest_prod PYTEST_TRITON=first \
  PYTEST_TIMEOUT=200 PYTEST_ARGS="-n 5 python/tests/test_production_gpu.py" tools/gpu_check.sh build $O \
  > $O/prod_rc.txt 2>&1) &
KDART_TORCH_EXT=0 GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch PYTEST_TIMEOUT=200 \
  PYTEST_ARGS="python/tests --ignore=python/tests/test_fla_gpu.py --ignore=python/tests/test_production_gpu.py $DS" \
  tools/gpu_check.sh build $O; el
wait; el
grep -h "^test_gpu part\|Checks" $O/test_gpu*.txt
grep -hE "passed|failed" $O/pytest_*.txt | tail -3
grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
cat $O/prod_errors.txt
gc_pack
