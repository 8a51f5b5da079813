#!/usr/bin/env bash
# lab/calls/call11c.sh (session 11's third call; OUT set; carry build, .whl, .triton-carry): the full
# suite on the masked bwd_dhu of call11b (4-byte granules now in loops, the K tile 256's copies in loops) and
# bwd_dhu's head pairs (packed sequences at the K tile 256, sm_90a).  Side by side: test_gpu in three
# processes (dhu_varlen_head_pairs among them), the torch_ext build, fla's recipes, the Triton warm-up of
# side_by_side rows 5, 11-13, varlen row 5 and bench/masked_dhu.py; the torch tests on both paths; then the
# sanitizers on small shapes beside the selftest; then alone: bench/masked_dhu.py, kdart bench of masked
# shapes, side_by_side rows 5, 11-13, varlen row 5, the standard table.
set -u
. lab/calls/common.sh
gc_fla_site
gc_test_gpu 280
gc_ext_build
gc_fla_recipes
(mkdir -p $O/warm && WARM_SBS=5,11,12,13 WARM_VARLEN=5 WARM_JOBS=4 WARM_VARLEN_JOBS=1 WARM_TIMEOUT=200 GPU_CHECK_PARTS=warm tools/gpu_check.sh build $O/warm > $O/warm_rc.txt 2>&1
 PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 timeout 200 \
   python3 tools/triton_warm.py -j 4 --log /tmp/warm-mdhu -- python3 bench/masked_dhu.py --warm-only >> $O/warm_rc.txt 2>&1) &
gpu_torch_pypath
wait $ep; tail -n 1 $O/ext_build.txt
gpu_torch_ext
wait $pids; tail -qn 2 $O/test_gpu?.txt; el
gc_selftest
gc_sanitize 220 KDART_GPU_SMALL=1
wait $fp; grep -v "^tar" $O/fla_rc.txt; el
wait; tail -n 1 $O/selftest.txt; cat $O/san.txt; grep triton_warm $O/warm_rc.txt | tail -n 3; el
PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 timeout 150 \
  python3 bench/masked_dhu.py > $O/masked_dhu.txt 2>&1; cat $O/masked_dhu.txt; el
gpu_bench_dhu 200,200 190,190 256,256
gpu_sbs 5,11,12,13
gpu_varlen 5 100 80
timeout 120 build/kdart bench > $O/bench_std.txt 2>&1; grep -E "prod8192|b2_t4096|launch" $O/bench_std.txt | head -8; el
gpu_finish
