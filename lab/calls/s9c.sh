#!/usr/bin/env bash
# lab/calls/s9c.sh (OUT set; carry build-gpu as build, .whl): with da-swizzle in kernel_src, (1) ncu
# SourceCounters of the fused wy_dqkg + intra launch at B2 T8192 H32 (per SASS instruction: stall samples,
# shared wavefronts and their excess), exported as CSV with the SASS; then (2) the whole-backward tests:
# production -k whole and test_whole_gpu.py.
set -u
. lab/calls/common.sh
export KDART_LIBRARY=$R/build/libkdart.so
gpu_ncu_fused "--section MemoryWorkloadAnalysis_Tables"
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR; gc_fla_site
(KDART_ERR_LOG=$O/prod_errors.txt GPU_CHECK_PARTS=python PYTEST_LOG=pytest_prod PYTEST_TRITON=first \
  PYTEST_TIMEOUT=250 PYTEST_ARGS="-n 3 python/tests/test_production_gpu.py -k whole" tools/gpu_check.sh build $O \
  > $O/prod_rc.txt 2>&1) &
(GPU_CHECK_PARTS=python PYTEST_LOG=pytest_whole PYTEST_TRITON=first PYTEST_TIMEOUT=250 \
  PYTEST_ARGS="-n 4 python/tests/test_whole_gpu.py" tools/gpu_check.sh build $O > $O/whole_rc.txt 2>&1) &
wait; el
grep -hE "passed|failed" $O/pytest_whole.txt $O/pytest_prod.txt | tail -2
grep -hE "^FAILED|^E  " $O/pytest_whole.txt $O/pytest_prod.txt | head -8
gc_pack
