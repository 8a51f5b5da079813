#!/usr/bin/env bash
# lab/calls/2026-12-04-t.sh (OUT set; carry build-gpu as build, .whl): the whole backward as one C call
# (kdart_kda_chunk_bwd) and wy_dqkg with bwd_intra's terms on every grid of the whole route.  The default
# cache prewarmed on 16 cores; then side by side: test_whole_gpu.py (the C call's two bitwise tests among
# them), test_production_gpu.py -k whole (fla first-config mode), test_torch_gpu's bitwise fusion test,
# memcheck of the fla-free C-call test.  Then alone: lab/calls/whole_ab.py.
set -u
. lab/calls/common.sh
gc_prologue
(GPU_CHECK_PARTS=python PYTEST_LOG=pytest_whole PYTEST_TRITON=first PYTEST_TIMEOUT=300 \
  PYTEST_ARGS="-rA -n 3 python/tests/test_whole_gpu.py python/tests/test_torch_gpu.py::test_wy_dqkg_intra_is_the_two_launches" \
  tools/gpu_check.sh build $O > $O/whole_rc.txt 2>&1) &
(KDART_ERR_LOG=$O/prod_errors.txt GPU_CHECK_PARTS=python PYTEST_LOG=pytest_prod PYTEST_TRITON=first \
  PYTEST_TIMEOUT=300 PYTEST_ARGS="-n 3 python/tests/test_production_gpu.py -k whole" tools/gpu_check.sh build $O \
  > $O/prod_rc.txt 2>&1) &
(cd python/tests && PYTHONPATH=$R/python:/tmp/site timeout 300 compute-sanitizer --tool memcheck \
  python3 -m pytest -q -p no:cacheprovider test_whole_gpu.py -k random_saved > $O/memcheck_c.txt 2>&1;
  echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $O/memcheck_c.txt | tail -1)" >> $O/san.txt) &
wait; el
cat $O/san.txt; tail -3 $O/memcheck_c.txt
grep -hE "passed|failed" $O/pytest_whole.txt $O/pytest_prod.txt | tail -2
grep -hE "^FAILED|^E  " $O/pytest_whole.txt $O/pytest_prod.txt | head -12
gc_pack
PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls timeout 150 python3 lab/calls/whole_ab.py > $O/whole_ab.txt 2>&1
echo "whole_ab rc=$?"; grep -vE "Warning|warn" $O/whole_ab.txt | tail -8; el
gc_pack
