#!/usr/bin/env bash
# lab/calls/call9a.sh (session 9, run from the repo root on the device, OUT set; carry build, .whl,
# .triton-carry): the C++ fast path's direct entries built beside the C suite, sanitizers and SASS; the
# torch tests and fla's recipes through them; the Python call overhead; `kdart bench`; the varlen table.
set -u
O=$OUT; t0=$(date +%s)
export KDART_TORCH_EXT_DIR=/tmp/kext
(cd python && LD_LIBRARY_PATH=/usr/local/cuda/lib64 timeout 200 python3 -m kdart.torch_ext > $O/ext_build.txt 2>&1; echo "ext build rc=$?" >> $O/ext_build.txt) &
ep=$!
GPU_CHECK_PARTS=core tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
wait $ep; cat $O/ext_build.txt; echo "t=$(( $(date +%s) - t0 ))"
GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch PYTEST_TIMEOUT=150 PYTEST_ARGS="python/tests --ignore=python/tests/test_fla_gpu.py --deselect python/tests/test_torch_gpu.py::test_beyond_32bit_indexing" tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
GPU_CHECK_PARTS=e2e E2E_ARGS=--overhead-only E2E_TIMEOUT=90 tools/gpu_check.sh build $O; cat $O/e2e.txt; echo "t=$(( $(date +%s) - t0 ))"
GPU_CHECK_PARTS=bench tools/gpu_check.sh build $O; tail -n 4 $O/bench.txt; echo "t=$(( $(date +%s) - t0 ))"
GPU_CHECK_PARTS=varlen VARLEN_TIMEOUT=150 VARLEN_BUDGET=120 VARLEN_ARGS="--rows 0,1,2,3,4" tools/gpu_check.sh build $O; tail -n 14 $O/varlen.txt; echo "t=$(( $(date +%s) - t0 ))"
GPU_CHECK_PARTS=python PYTEST_LOG=pytest_fla PYTEST_TRITON=first PYTEST_TIMEOUT=150 PYTEST_ARGS="-n 6 python/tests/test_fla_gpu.py" tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
grep -E "intra_varlen_short|Checks:|FAIL" $O/test_gpu.txt | head; tail -n 3 $O/selftest.txt
# at most 8 files come back from $OUT, the first 8 by name: this bundle of all of them sorts first
(cd $O && tar czf 0logs.tgz --exclude=0logs.tgz .)
