# tools/gpu_calls/common.sh: sourced by the call scripts (sessions 9-10), which run on the lent GPU machine
# from the repository root with OUT set.  What every one of them starts with: the environment, the clock,
# and the runs they start side by side.  Each starter puts its job in the background and leaves its pid
# (gc_test_gpu: all three in $pids).
O=$OUT; t0=$(date +%s); R=$PWD
export KDART_TORCH_EXT_DIR=/tmp/kext LD_LIBRARY_PATH=/usr/local/cuda/lib64
export KDART_CACHE_DIR=$R/build/devcache KDART_KERNEL_DIR=$R/kernel_src
# pytest ids of the 80 GB test, both as the repo root and as python/ (pytest's rootdir there) spell them
DS="--deselect=python/tests/test_torch_gpu.py::test_beyond_32bit_indexing --deselect=tests/test_torch_gpu.py::test_beyond_32bit_indexing"
el() { echo "t=$(( $(date +%s) - t0 ))"; }
# fla for every gpu_check that follows (once, before they run side by side)
gc_fla_site() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl; }
# test_gpu in three processes, every test in exactly one (KDART_GPU_PART); $1: each one's time limit
gc_test_gpu() {
  pids=""
  for i in 0 1 2; do
    (KDART_GPU_PART=$i/3 CK_FORK=no timeout "$1" build/tests/test_gpu > $O/test_gpu$i.txt 2>&1
     echo "test_gpu part $i/3 rc=$? t=$(( $(date +%s) - t0 ))" >> $O/test_gpu$i.txt) &
    pids="$pids $!"
  done
}
gc_selftest() { (timeout 240 build/kdart selftest > $O/selftest.txt 2>&1; echo "selftest rc=$?" >> $O/selftest.txt) & sp=$!; }
gc_ext_build() { (cd python && timeout 150 python3 -m kdart.torch_ext > $O/ext_build.txt 2>&1; echo "ext build rc=$?" >> $O/ext_build.txt) & ep=$!; }
# fla's recipes in first-config mode, five workers
gc_fla_recipes() {
  GPU_CHECK_PARTS=python PYTEST_LOG=pytest_fla PYTEST_TRITON=first PYTEST_TIMEOUT=250 \
    PYTEST_ARGS="-n 5 python/tests/test_fla_gpu.py" tools/gpu_check.sh build $O > $O/fla_rc.txt 2>&1 &
  fp=$!
}
