#!/usr/bin/env bash
# tools/gpu_calls/call9c.sh (session 9, branch issue15, after call9b ran out of time in its C suite): side by
# side, test_gpu in three processes (KDART_GPU_PART; session 9 ran it with three named lists, KDART_GPU_TESTS), the
# torch tests on the Python path and then through the C++ fast path, and fla's recipes.
set -u
O=$OUT; t0=$(date +%s); R=$PWD
export KDART_EXPERIMENTAL=1 KDART_TORCH_EXT_DIR=/tmp/kext LD_LIBRARY_PATH=/usr/local/cuda/lib64
export KDART_CACHE_DIR=$R/build/devcache KDART_KERNEL_DIR=$R/kernel_src
pids=""
for i in 0 1 2; do   # every test in exactly one of three processes (KDART_GPU_PART), as gpu_check's core
  (KDART_GPU_PART=$i/3 CK_FORK=no timeout 260 build/tests/test_gpu > $O/test_gpu$i.txt 2>&1; echo "test_gpu part $i/3 rc=$? t=$(( $(date +%s) - t0 ))" >> $O/test_gpu$i.txt) &
  pids="$pids $!"
done
(cd python && timeout 150 python3 -m kdart.torch_ext > $O/ext_build.txt 2>&1; echo "ext build rc=$?" >> $O/ext_build.txt) &
ep=$!
GPU_CHECK_PARTS=python PYTEST_LOG=pytest_fla PYTEST_TRITON=first PYTEST_TIMEOUT=250 PYTEST_ARGS="-n 5 python/tests/test_fla_gpu.py" tools/gpu_check.sh build $O > $O/fla_rc.txt 2>&1 &
fp=$!
KDART_TORCH_EXT=0 GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch_pypath PYTEST_TIMEOUT=120 PYTEST_ARGS="python/tests --ignore=python/tests/test_fla_gpu.py --deselect python/tests/test_torch_gpu.py::test_beyond_32bit_indexing" tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
wait $ep; cat $O/ext_build.txt
GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch_ext PYTEST_TIMEOUT=90 PYTEST_ARGS="python/tests/test_torch_gpu.py python/tests/test_torch_ext.py" tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
wait $fp; cat $O/fla_rc.txt; echo "t=$(( $(date +%s) - t0 ))"
wait $pids; tail -qn 2 $O/test_gpu?.txt
grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
(cd $O && tar czf 0logs.tgz --exclude=0logs.tgz .)
