#!/usr/bin/env bash
# lab/calls/call1.sh (run from the repo root on the device, OUT set; carry build, .whl, .triton-carry)
# call 1: Triton warm-up (background) beside the C suite, sanitizers, SASS, the torch tests and fla's
# recipes (first-config mode); then the 4.3e9-element test and kdart bench with the GPU to themselves.
set -u
O=$OUT; t0=$(date +%s)
export WARM_E2E=b2_t8192_h32,prod8192,b1_t32768_h32,b4_t4096_h16_hv32 WARM_VARLEN=0,1,2,3,4 WARM_JOBS=10 WARM_TIMEOUT=400
GPU_CHECK_PARTS=warm tools/gpu_check.sh build $O > $O/warm_log.txt 2>&1 &
wp=$!
sleep 20
GPU_CHECK_PARTS=core tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch PYTEST_TIMEOUT=200 PYTEST_ARGS="python/tests --ignore=python/tests/test_fla_gpu.py --deselect python/tests/test_torch_gpu.py::test_beyond_32bit_indexing" tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
GPU_CHECK_PARTS=python PYTEST_LOG=pytest_fla PYTEST_TRITON=first PYTEST_TIMEOUT=260 PYTEST_ARGS="-n 6 python/tests/test_fla_gpu.py" tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
wait $wp; cat $O/warm_log.txt; echo "t=$(( $(date +%s) - t0 ))"
GPU_CHECK_PARTS=python PYTEST_LOG=pytest_big PYTEST_TIMEOUT=120 PYTEST_ARGS="python/tests/test_torch_gpu.py::test_beyond_32bit_indexing" tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
GPU_CHECK_PARTS=bench tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
tail -n 4 $O/bench.txt; nvidia-smi --query-gpu=memory.used --format=csv
# at most 8 files come back from $OUT, the first 8 by name: this bundle of all of them sorts first
(cd $O && tar czf 0logs.tgz --exclude=0logs.tgz .)
