# call s26g (carry build-gpu: this tree's build; build-Y: kernel_src with the fused launch's fp32 dg store
# removed, as build-Y/k; .whl, .whl-cudnn, .triton-carry): 1. test_gpu's chunk_bwd_whole (with cuDNN
# frontend's configuration: the last step's part in the fused launch, dg in fp32) and
# with build-Y's kernels (its plain cases must fail); the Python whole-backward tests;
# 2. bench/e2e.py in cuDNN frontend's configuration at B2 T8192 H32, both routes, profiled, cuDNN beside.
set -u
. lab/calls/common.sh
gc_peers_setup
[ "${PYT:-160}" -gt 0 ] && gc_whole_tests ${PYT:-160}
KDART_CACHE_DIR=/tmp/cy KDART_KERNEL_DIR=$R/build-Y/k KDART_GPU_TESTS=chunk_bwd_whole CK_FORK=no timeout 150 \
  build/tests/test_gpu > $O/test_gpu_Y.txt 2>&1 &
KDART_GPU_TESTS=chunk_bwd_whole,wy_production,wy_intra CK_FORK=no timeout 150 build/tests/test_gpu > $O/test_gpu.txt 2>&1
tail -1 $O/test_gpu.txt; grep -E "F:" $O/test_gpu.txt | head -4
grep "plain" $O/test_gpu.txt | cut -c1-220
wait; el; gpu_whole_report
echo "== Y (fp32 dg store removed): its plain cases must fail"; tail -2 $O/test_gpu_Y.txt; grep -E "F:" $O/test_gpu_Y.txt | cut -c1-200 | head -4
PYTHONPATH=/tmp/site:$R/python timeout 120 python3 -m pytest -q -p no:cacheprovider python/tests/test_fla_cpu.py -k whole 2>&1 | tail -2
gc_pack
PYTHONPATH=/tmp/site:/tmp/cudnn-site:$R/python PYTHONUNBUFFERED=1 timeout $(( ${CALL_END:-590} - ($(date +%s) - t0) )) python3 bench/e2e.py \
  --shapes b2_t8192_h32 --configs cudnn --iters 6 --route both --no-overhead --profile > $O/e2e_cudnn.txt 2>&1
echo "e2e cudnn rc=$?"; el; gc_triton_save cudnn_b2_t8192_h32
grep -vE "Warning|_warn_once|nanobind|leaked| - " $O/e2e_cudnn.txt | grep -vE "^    (other|bwd_intra |wy_dqkg_fused|recompute_w_u |bwd_dhu |fwd_h \(re|bwd_dAv |dg cumsum)" | cut -c1-220 | tail -40
gc_pack
