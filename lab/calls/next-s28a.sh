# call s28a (carry build-gpu: main's build; build-Y: kernel_src with the fused launch's fp32 dg store removed
# (next-s26g.sh's header); build-S: kernel_src with experiments/dhu-split-margin (next-s27b.sh's header);
# build-D: kernel_src with experiments/wy-discard; .whl, .whl-cudnn, .triton-carry):
# 1. alone: the bare whole call, main (M) against the scratch discard (D) and the split margin (S), two
#    rounds, on B2, the 7-document packed row, two equal documents and seq8;
# 2. side by side: test_gpu chunk_bwd_whole, wy_production, wy_intra with main's kernels (the cuDNN
#    configuration's fused last step on the GPU), chunk_bwd_whole with build-Y's (its plain cases must fail),
#    S's (the V-split and whole lists) and D's, and the Python whole-backward tests;
# 3. bench/e2e.py in cuDNN frontend's configuration at B2 (both routes, profiled, cuDNN beside) if 150 s
#    are left of CALL_END (default 585).
set -u
. lab/calls/common.sh
gc_peers_setup
END=${CALL_END:-585}
# 1. alone, first (the call's main question): M, D, S bare whole calls
export WB_CACHE=/tmp/cw WB_LIMIT=120
ROWS=${AB_ROWS:-b2_t8192_h32,packed32768,packed2x8192,packed_seq8}
for r in 1 2; do
  { gc_whole_bare M_$r $R/kernel_src build/libkdart.so $ROWS
    gc_whole_bare D_$r $R/build-D/k build/libkdart.so $ROWS
    [ "${NO_S:-0}" = 1 ] || gc_whole_bare S_$r $R/build-S/k build/libkdart.so $ROWS; } | gc_prof | cut -c1-300 | tee -a $O/ab.txt
done; el; gc_pack
# 2.-3. every test side by side: main's lists, Y's (must fail its plain cases), S's, D's, the Python whole tests
if [ "${AB_ONLY:-0}" = 1 ]; then  # (a short budget: D's whole-call test alone)
  KDART_CACHE_DIR=/tmp/cd KDART_KERNEL_DIR=$R/build-D/k KDART_GPU_TESTS=chunk_bwd_whole CK_FORK=no timeout 120 \
    build/tests/test_gpu 2>&1 | grep -E "Checks|F:" | cut -c1-200; el; gc_pack; exit 0
fi
gc_whole_tests 150
KDART_CACHE_DIR=/tmp/cy KDART_KERNEL_DIR=$R/build-Y/k KDART_GPU_TESTS=chunk_bwd_whole CK_FORK=no timeout 150 \
  build/tests/test_gpu > $O/test_gpu_Y.txt 2>&1 &
(KDART_CACHE_DIR=/tmp/cs KDART_KERNEL_DIR=$R/build-S/k KDART_GPU_TESTS=dhu_varlen_v_split,dhu_varlen_head_pairs,chunk_bwd_whole,dav_fused \
  CK_FORK=no timeout 150 build/tests/test_gpu > $O/test_gpu_S.txt 2>&1; echo "S rc=$?" >> $O/test_gpu_S.txt) &
(KDART_CACHE_DIR=/tmp/cd KDART_KERNEL_DIR=$R/build-D/k KDART_GPU_TESTS=chunk_bwd_whole,varlen_garbage_writes_nothing CK_FORK=no \
  timeout 150 build/tests/test_gpu > $O/test_gpu_D.txt 2>&1; echo "D rc=$?" >> $O/test_gpu_D.txt) &
KDART_GPU_TESTS=chunk_bwd_whole,wy_production,wy_intra CK_FORK=no timeout 150 build/tests/test_gpu > $O/test_gpu.txt 2>&1
tail -1 $O/test_gpu.txt; grep -E "F:" $O/test_gpu.txt | head -4
grep "plain" $O/test_gpu.txt | cut -c1-220
wait; el; gpu_whole_report
echo "== Y (fp32 dg store removed): its plain cases must fail"; tail -2 $O/test_gpu_Y.txt; grep -E "F:" $O/test_gpu_Y.txt | cut -c1-200 | head -4
for v in S D; do echo "== $v"; grep -E "Checks|F:|rc=" $O/test_gpu_$v.txt | cut -c1-200 | head -5; done; gc_pack
# 3.
left=$(( END - ($(date +%s) - t0) ))
if [ $left -gt 150 ]; then
  PYTHONPATH=/tmp/site:/tmp/cudnn-site:$R/python PYTHONUNBUFFERED=1 timeout $left python3 bench/e2e.py \
    --shapes b2_t8192_h32 --configs cudnn --iters 6 --route both --no-overhead --profile > $O/e2e_cudnn.txt 2>&1
  echo "e2e cudnn rc=$?"; el; gc_triton_save cudnn_b2_t8192_h32
  grep -vE "Warning|_warn_once|nanobind|leaked| - " $O/e2e_cudnn.txt | grep -vE "^    (other|bwd_intra |wy_dqkg_fused|recompute_w_u |bwd_dhu |fwd_h \(re|bwd_dAv |dg cumsum)" | cut -c1-220 | tail -40
fi
gc_pack
