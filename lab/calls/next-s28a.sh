# call s28a (carry build-gpu: main's build; .whl, .whl-cudnn, .triton-carry; and three kernel trees, each a
# copy of kernel_src as build-X/k:
#   build-Y: the fused launch's fp32 dg store removed:
#     mkdir -p build-Y && cp -r kernel_src build-Y/k && sed -i 's/if (pp.dg_f32) st_out4/if (false) st_out4/' build-Y/k/bwd_intra_body.inc
#   build-S: experiments/dhu-split-margin, build-D: experiments/wy-discard:
#     mkdir -p build-S && cp -r kernel_src build-S/k && (cd build-S/k && patch -p2 < ../../lab/experiments/dhu-split-margin/split-margin.diff)
#     mkdir -p build-D && cp -r kernel_src build-D/k && (cd build-D/k && patch -p2 < ../../lab/experiments/wy-discard/wy-discard.diff) )
# 1. alone: the bare whole call, main (M) against the scratch discard (D) and the split margin (S), two
#    rounds, on B2, the 7-document packed row, two equal documents and seq8;
# 2. side by side: test_gpu chunk_bwd_whole, wy_production, wy_intra with main's kernels (the cuDNN
#    configuration's fused last step on the GPU), chunk_bwd_whole with build-Y's (its plain cases must fail),
#    S's (the V-split and whole lists) and D's, the Python whole-backward tests; then test_fla_cpu -k whole;
# 3. bench/e2e.py in cuDNN frontend's configuration at B2 (both routes, profiled, cuDNN beside) if 150 s
#    are left of CALL_END (default 585).
# A short budget: AB_ONLY=1 (step 1 and D's chunk_bwd_whole only), NO_S=1, AB_ROWS=row,...
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
if [ "${AB_ONLY:-0}" = 1 ]; then
  KDART_CACHE_DIR=/tmp/cd KDART_KERNEL_DIR=$R/build-D/k gc_tests_quick chunk_bwd_whole 120; el; gc_pack; exit 0
fi
# 2. every test side by side
gc_whole_tests 150
KDART_CACHE_DIR=/tmp/cy KDART_KERNEL_DIR=$R/build-Y/k gc_gpu_tests 150 chunk_bwd_whole Y
KDART_CACHE_DIR=/tmp/cs KDART_KERNEL_DIR=$R/build-S/k gc_gpu_tests 150 dhu_varlen_v_split,dhu_varlen_head_pairs,chunk_bwd_whole,dav_fused S
KDART_CACHE_DIR=/tmp/cd KDART_KERNEL_DIR=$R/build-D/k gc_gpu_tests 150 chunk_bwd_whole,varlen_garbage_writes_nothing D
gc_gpu_tests 150 chunk_bwd_whole,wy_production,wy_intra M
wait; el
grep -E "Checks|F:|rc=" $O/test_gpu_M.txt | head -5; grep "plain" $O/test_gpu_M.txt | cut -c1-220
gpu_whole_report
echo "== Y (fp32 dg store removed): its plain cases must fail"
for v in Y S D; do echo "== $v"; grep -E "Checks|F:|rc=" $O/test_gpu_$v.txt | cut -c1-200 | head -5; done
PYTHONPATH=/tmp/site:$R/python timeout 120 python3 -m pytest -q -p no:cacheprovider python/tests/test_fla_cpu.py -k whole 2>&1 | tail -2
gc_pack
# 3.
left=$(( END - ($(date +%s) - t0) ))
if [ $left -gt 150 ]; then
  gc_e2e_cudnn both $left
fi
gc_pack
