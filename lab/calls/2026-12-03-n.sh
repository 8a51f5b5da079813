#!/usr/bin/env bash
# lab/calls/2026-12-03-n.sh: wy_dqkg's tail path with pair stores (dq, dk, dg, dv2 where Kr and V are
# multiples of 4) over call m's copy granules.  Side by side: wy's GPU tests (every spec: each granule;
# production), memcheck + racecheck over every wy specialization on small shapes, the torch wy tests.
# Then alone: D 100 kdart vs fla in one process, kdart alone on the other rows, and ncu's warp stall
# reasons and the stalls' top source lines of one native launch at B2 T8192 H32 (for the next redesign).
set -u
. lab/calls/common.sh
gc_fla_site
(KDART_GPU_TESTS=wy_every_spec CK_FORK=no timeout 300 build/tests/test_gpu > $O/test_gpu_wy1.txt 2>&1; echo "rc=$?" >> $O/test_gpu_wy1.txt) &
(KDART_GPU_TESTS=wy_production CK_FORK=no timeout 300 build/tests/test_gpu > $O/test_gpu_wy2.txt 2>&1; echo "rc=$?" >> $O/test_gpu_wy2.txt) &
gc_sanitize 300 KDART_GPU_SMALL=wy_dqkg
PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so KDART_TORCH_EXT=0 \
  FLA_DISABLE_BACKEND_DISPATCH=1 PYTHONUNBUFFERED=1 timeout 300 python3 -m pytest python/tests/test_torch_gpu.py \
  -k wy -q -p no:cacheprovider > $O/pytest_wy.txt 2>&1
echo "pytest rc=$? $(tail -1 $O/pytest_wy.txt)"; el
grep -hE "^FAILED|^ERROR" $O/pytest_wy.txt | head
wait; el
grep -hE "Checks|rc=|:F:|:E:" $O/test_gpu_wy*.txt | cut -c1-300; cat $O/san.txt
gc_pack
SBS="python3 bench/side_by_side.py --stage wy"
PYTHONPATH=$R/python KDART_LIBRARY=$R/build/libkdart.so timeout 100 $SBS --no-fla \
  --rows b2_t8192_h32,b2_t8192_h16_k256,b2_t8192_h16_d100,b2_t8192_h16_d60 > $O/wy_C.txt 2>&1
grep -E "^\| wy" $O/wy_C.txt; el
PYTHONPATH=/tmp/site:$R/python KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 \
  timeout $(( 400 - ($(date +%s) - t0) )) $SBS --rows b2_t8192_h16_d100 > $O/wy_fla.txt 2>&1
echo "wy fla rc=$?"; grep -E "^\| wy|ERROR" $O/wy_fla.txt; el
gc_pack
PYTHONPATH=$R/python KDART_LIBRARY=$R/build/libkdart.so timeout 90 ncu --kernel-name regex:kdart_wy --launch-skip 1 \
  --launch-count 1 --section WarpStateStats --section SourceCounters --section InstructionStats \
  --section SchedulerStats python3 lab/experiments/wy_ncu.py > $O/ncu_wy_stalls.txt 2>&1; el
grep -E "Stall|Warp Cycles|Issued|Executed Instructions|Branch" $O/ncu_wy_stalls.txt | head -30
gc_pack
