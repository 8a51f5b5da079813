#!/usr/bin/env bash
# lab/calls/call11b.sh (session 11's second call; OUT set; carry build, .whl, .triton-carry): bwd_dhu's
# masked path with fixed-column unrolled granule copies and stores (call11a: it issued 5.4x the native
# instructions), kdart.fla serving masked bwd_dhu again.  Side by side: test_gpu in three processes, fla's
# recipes, the Triton warm-up of side_by_side rows 5, 12, 13 and varlen row 5, the torch tests (Python
# path); then the sanitizers on small shapes beside the selftest; then alone: kdart bench of the masked
# shapes (every granule width, odd, K tile 256), side_by_side rows 5, 12, 13, varlen row 5.
set -u
. lab/calls/common.sh
gc_fla_site
gc_test_gpu 280
gc_fla_recipes
gc_warm WARM_SBS=5,12,13 WARM_VARLEN=5 WARM_JOBS=4 WARM_VARLEN_JOBS=1 WARM_TIMEOUT=200
gpu_torch_pypath
wait $pids; tail -qn 2 $O/test_gpu?.txt; el
gc_selftest
gc_sanitize 220 KDART_GPU_SMALL=1
wait $fp; grep -v "^tar" $O/fla_rc.txt; el
wait; tail -n 1 $O/selftest.txt; cat $O/san.txt; grep triton_warm $O/warm_rc.txt | tail -n 2; el
gpu_bench_dhu 128,128 100,100 64,64 60,60 18,18 190,190 63,63 200,200 256,256 100,256 128,100
gpu_sbs 5,12,13
gpu_varlen 5 100 80
gpu_finish
