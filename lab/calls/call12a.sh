#!/usr/bin/env bash
# lab/calls/call12a.sh (session 12's first call; OUT set; carry build, .whl): bwd_dhu's masked path
# in 16-byte granules and the V-first checkpoint through ldmatrix.trans (st_vfirst); the variable-length
# prologue's first copies before varlen_locate; the head pair's second dht through shared memory.  At
# once: test_gpu in three processes, the selftest, memcheck and racecheck on small shapes, fla's Triton
# warm-up of bench/masked_dhu.py and varlen rows 0, 1, 2, 5, then the torch tests on the Python path;
# then alone: bench/masked_dhu.py, varlen rows 0, 1, 2, 5, the standard table.
set -u
. lab/calls/common.sh
gc_suite 330
(mkdir -p $O/warm && WARM_VARLEN=0,1,2,5 WARM_VARLEN_JOBS=2 WARM_TIMEOUT=300 GPU_CHECK_PARTS=warm tools/gpu_check.sh build $O/warm > $O/warm_rc.txt 2>&1) &
(PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 timeout 200 \
   python3 tools/triton_warm.py -j 3 --log /tmp/warm-mdhu -- python3 bench/masked_dhu.py --warm-only >> $O/warm_mdhu.txt 2>&1) &
gpu_torch_pypath
wait $pids; tail -qn 2 $O/test_gpu?.txt; el
wait; tail -n 1 $O/selftest.txt; cat $O/san.txt; tail -n 2 $O/warm_mdhu.txt; grep -h triton_warm $O/warm_rc.txt | tail -n 3; el
PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 timeout 150 \
  python3 bench/masked_dhu.py > $O/masked_dhu.txt 2>&1; cat $O/masked_dhu.txt; el
gpu_varlen 0,1,2,5 150 120
timeout 100 build/kdart bench > $O/bench_std.txt 2>&1; grep -E "prod8192|launch" $O/bench_std.txt | head -4; el
gpu_finish
