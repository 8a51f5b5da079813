#!/usr/bin/env bash
# lab/calls/call3.sh: session 8's re-run after call1/call2's findings: the torch tests (the shared
# runtime fixture), fla's recipes (kdart no worse than fla where fla misses its own tolerance), the
# second-context GPU test's output, and the Python call overhead.
set -u
O=$OUT; t0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 KDART_CACHE_DIR=$PWD/build/devcache KDART_KERNEL_DIR=$PWD/kernel_src
(CK_FORK=no timeout 300 build/tests/test_gpu > $O/test_gpu.txt 2>&1; echo "test_gpu rc=$?" >> $O/test_gpu.txt) &
tp=$!
GPU_CHECK_PARTS=python PYTEST_LOG=pytest_fla PYTEST_TRITON=first PYTEST_TIMEOUT=200 PYTEST_ARGS="-n 6 python/tests/test_fla_gpu.py" tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
wait $tp; tail -n 3 $O/test_gpu.txt; echo "t=$(( $(date +%s) - t0 ))"
GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch PYTEST_TIMEOUT=200 PYTEST_ARGS="python/tests --ignore=python/tests/test_fla_gpu.py --deselect python/tests/test_torch_gpu.py::test_beyond_32bit_indexing" tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
GPU_CHECK_PARTS=e2e E2E_ARGS=--overhead-only E2E_TIMEOUT=120 tools/gpu_check.sh build $O; cat $O/e2e.txt
grep -E "error ratio|^FAILED|passed|failed" $O/pytest_fla.txt | tail -20
# at most 8 files come back from $OUT, the first 8 by name: this bundle of all of them sorts first
(cd $O && tar czf 0logs.tgz --exclude=0logs.tgz .)
