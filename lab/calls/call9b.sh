#!/usr/bin/env bash
# lab/calls/call9b.sh (session 9, branch issue15; OUT set; carry build, .whl, .triton-carry): issue 15's
# GPU verification with KDART_EXPERIMENTAL=1: the C suite (head dims, state_v_first, spec_choice, the tail
# specs in the every-spec loops), selftest, memcheck and racecheck, SASS; the torch tests through the C++
# fast path and the head-dim ones again on the Python path; fla's recipes (D = 60, 100, 256 included).
set -u
O=$OUT; t0=$(date +%s)
export KDART_EXPERIMENTAL=1 KDART_TORCH_EXT_DIR=/tmp/kext
(cd python && LD_LIBRARY_PATH=/usr/local/cuda/lib64 timeout 200 python3 -m kdart.torch_ext > $O/ext_build.txt 2>&1; echo "ext build rc=$?" >> $O/ext_build.txt) &
ep=$!
GPU_CHECK_PARTS=core tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
wait $ep; cat $O/ext_build.txt; echo "t=$(( $(date +%s) - t0 ))"
GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch PYTEST_TIMEOUT=150 PYTEST_ARGS="python/tests --ignore=python/tests/test_fla_gpu.py --deselect python/tests/test_torch_gpu.py::test_beyond_32bit_indexing" tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
KDART_TORCH_EXT=0 GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch_pypath PYTEST_TIMEOUT=100 PYTEST_ARGS="python/tests/test_torch_gpu.py -k head_dims" tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
GPU_CHECK_PARTS=python PYTEST_LOG=pytest_fla PYTEST_TRITON=first PYTEST_TIMEOUT=200 PYTEST_ARGS="-n 8 python/tests/test_fla_gpu.py" tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
grep -E "Checks:|^[^ ]*:[0-9]+:[EF]:" $O/test_gpu.txt | head -20; tail -n 2 $O/selftest.txt
grep -E "^FAILED|^ERROR" $O/pytest_*.txt | head -20
# at most 8 files come back from $OUT, the first 8 by name: this bundle of all of them sorts first
(cd $O && tar czf 0logs.tgz --exclude=0logs.tgz .)
