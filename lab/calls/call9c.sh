#!/usr/bin/env bash
# lab/calls/call9c.sh (session 9, branch issue15, after call9b ran out of time in its C suite): side by
# side, test_gpu in three processes (KDART_GPU_PART; session 9 ran it with three named lists, KDART_GPU_TESTS), the
# torch tests on the Python path and then through the C++ fast path, and fla's recipes.
set -u
. lab/calls/common.sh
export KDART_EXPERIMENTAL=1   # (session 9: the head-dim gate, lifted in session 10)
gc_test_gpu 260
gc_ext_build
gc_fla_recipes
KDART_TORCH_EXT=0 GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch_pypath PYTEST_TIMEOUT=120 PYTEST_ARGS="python/tests --ignore=python/tests/test_fla_gpu.py --deselect python/tests/test_torch_gpu.py::test_beyond_32bit_indexing" tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
wait $ep; cat $O/ext_build.txt
GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch_ext PYTEST_TIMEOUT=90 PYTEST_ARGS="python/tests/test_torch_gpu.py python/tests/test_torch_ext.py" tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
wait $fp; cat $O/fla_rc.txt; echo "t=$(( $(date +%s) - t0 ))"
wait $pids; tail -qn 2 $O/test_gpu?.txt
grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
(cd $O && tar czf 0logs.tgz --exclude=0logs.tgz .)
