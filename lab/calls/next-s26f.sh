# call s26f (carry build-gpu: this tree's build; build-Z: kernel_src with the partial chunk's row zeroing removed,
# as build-Z/k; .whl, .whl-cudnn (call 2026-12-04-p's pip download), .triton-carry): 1. test_gpu's
# wy_production and wy_intra with this tree's kernels (pass) and with build-Z's (the NaN-past-cu[N] cases
# must fail); memcheck and racecheck of wy_intra; 2. bench/e2e.py in cuDNN frontend's configuration at B2
# T8192 H32, both of kdart's routes and cuDNN frontend's backward (fla's autotune saved as cudnn_b2).
set -u
. lab/calls/common.sh
gc_fla_site
python3 -m pip install -q --no-index --no-deps --target /tmp/cudnn-site .whl-cudnn/*.whl 2>&1 | tail -2
KDART_CACHE_DIR=/tmp/cz KDART_KERNEL_DIR=$R/build-Z/k KDART_GPU_TESTS=wy_production,wy_intra CK_FORK=no timeout 110 \
  build/tests/test_gpu > $O/test_gpu_Z.txt 2>&1 &
gc_tests_san wy_production,wy_intra,varlen_garbage_writes_nothing wy_intra 110
echo "== Z (zeroing removed): must fail"; tail -3 $O/test_gpu_Z.txt; grep -E "rel RMS|differ|F:" $O/test_gpu_Z.txt | head -8
el; gc_pack
export TRITON_CACHE_DIR=$R/.triton-cache KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1
gc_triton_restore
PYTHONPATH=/tmp/site:/tmp/cudnn-site:$R/python PYTHONUNBUFFERED=1 timeout $(( 590 - ($(date +%s) - t0) )) python3 bench/e2e.py \
  --shapes b2_t8192_h32 --configs cudnn --iters 6 --route both --no-overhead > $O/e2e_cudnn.txt 2>&1
echo "e2e cudnn rc=$?"; gc_triton_save cudnn_b2; el
grep -vE "Warning|_warn_once" $O/e2e_cudnn.txt | tail -24 | cut -c1-200
gc_pack
