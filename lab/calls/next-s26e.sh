# call s26e (carry build-gpu: this tree's build; build-Z: kernel_src with the partial chunk's row zeroing
# removed, as build-Z/k; .whl, .triton-carry): 1. test_gpu's wy_production and wy_intra with this tree's kernels
# (pass) and with build-Z's (the NaN-past-cu[N] cases must fail: the test bites); memcheck and racecheck of
# wy_intra; 2. call s26d (e2e rows against fla) in what is left.
set -u
. lab/calls/common.sh
KDART_CACHE_DIR=/tmp/cz KDART_KERNEL_DIR=$R/build-Z/k KDART_GPU_TESTS=wy_production,wy_intra CK_FORK=no timeout 120 \
  build/tests/test_gpu > $O/test_gpu_Z.txt 2>&1 &
gc_tests_san wy_production,wy_intra,varlen_garbage_writes_nothing wy_intra 120
echo "== Z (zeroing removed): must fail"; tail -3 $O/test_gpu_Z.txt; grep -E "rel RMS|differ|F:" $O/test_gpu_Z.txt | head -8
el; gc_pack
LIMIT=$(( 585 - ($(date +%s) - t0) )) bash lab/calls/next-s26d.sh
