#!/usr/bin/env bash
# lab/calls/2026-12-04-w.sh (OUT set; carry build-gpu as build, .whl): kdart.torch.chunk_kda_bwd as one C call
# (kdart_kda_chunk_bwd, which now clears bwd_post's counters itself).  Default cache prewarmed; then side by
# side: test_whole_gpu.py (the C door against the stages, its refusals, CUDA-graph replay), the production
# float64 tests of the whole route, fla's recipes on both kdart.fla routes (first-config mode); then alone
# lab/calls/whole_ab.py.
set -u
. lab/calls/common.sh
gc_prologue
(GPU_CHECK_PARTS=python PYTEST_LOG=pytest_whole PYTEST_TRITON=first PYTEST_TIMEOUT=330 \
  PYTEST_ARGS="-rA -n 2 python/tests/test_whole_gpu.py" tools/gpu_check.sh build $O > $O/whole_rc.txt 2>&1) &
(KDART_ERR_LOG=$O/prod_errors.txt GPU_CHECK_PARTS=python PYTEST_LOG=pytest_prod PYTEST_TRITON=first \
  PYTEST_TIMEOUT=330 PYTEST_ARGS="-n 2 python/tests/test_production_gpu.py -k whole" tools/gpu_check.sh build $O \
  > $O/prod_rc.txt 2>&1) &
(GPU_CHECK_PARTS=python PYTEST_LOG=pytest_fla PYTEST_TRITON=first PYTEST_TIMEOUT=330 \
  PYTEST_ARGS="-n 5 python/tests/test_fla_gpu.py" tools/gpu_check.sh build $O > $O/fla_rc.txt 2>&1) &
wait; el
grep -hE "passed|failed" $O/pytest_whole.txt $O/pytest_prod.txt $O/pytest_fla.txt | tail -3
grep -hE "^FAILED|^E  " $O/pytest_whole.txt $O/pytest_prod.txt $O/pytest_fla.txt | head -16
gc_pack
PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls timeout 150 python3 lab/calls/whole_ab.py > $O/whole_ab.txt 2>&1
echo "whole_ab rc=$?"; grep -vE "Warning|warn" $O/whole_ab.txt | tail -8; el
gc_pack
