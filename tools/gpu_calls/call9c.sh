#!/usr/bin/env bash
# tools/gpu_calls/call9c.sh (session 9, branch issue15, after call9b ran out of time in its C suite): side by
# side, test_gpu whole (longer than gpu_check's 300 s with the tail specs), the torch tests on the Python
# path, then through the C++ fast path once it is built, and fla's recipes (D = 60, 100, 256 included).
set -u
O=$OUT; t0=$(date +%s); R=$PWD
export KDART_EXPERIMENTAL=1 KDART_TORCH_EXT_DIR=/tmp/kext LD_LIBRARY_PATH=/usr/local/cuda/lib64
export KDART_CACHE_DIR=$R/build/devcache KDART_KERNEL_DIR=$R/kernel_src
(CK_FORK=no timeout 400 build/tests/test_gpu > $O/test_gpu.txt 2>&1; echo "test_gpu rc=$? t=$(( $(date +%s) - t0 ))" >> $O/test_gpu.txt) &
tp=$!
(cd python && timeout 200 python3 -m kdart.torch_ext > $O/ext_build.txt 2>&1; echo "ext build rc=$?" >> $O/ext_build.txt) &
ep=$!
GPU_CHECK_PARTS=python PYTEST_LOG=pytest_fla PYTEST_TRITON=first PYTEST_TIMEOUT=330 PYTEST_ARGS="-n 6 python/tests/test_fla_gpu.py" tools/gpu_check.sh build $O > $O/fla_rc.txt 2>&1 &
fp=$!
KDART_TORCH_EXT=0 GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch_pypath PYTEST_TIMEOUT=150 PYTEST_ARGS="python/tests --ignore=python/tests/test_fla_gpu.py --deselect python/tests/test_torch_gpu.py::test_beyond_32bit_indexing" tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
wait $ep; cat $O/ext_build.txt
GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch_ext PYTEST_TIMEOUT=120 PYTEST_ARGS="python/tests/test_torch_gpu.py python/tests/test_torch_ext.py" tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
wait $fp; cat $O/fla_rc.txt; echo "t=$(( $(date +%s) - t0 ))"
wait $tp; tail -n 2 $O/test_gpu.txt
grep -E "^FAILED|^ERROR|error ratio" $O/pytest_*.txt | head -30
(cd $O && tar czf 0logs.tgz --exclude=0logs.tgz .)
