#!/usr/bin/env bash
# lab/calls/2026-12-03-t.sh (OUT set; carry build-gpu as build, .whl; devcache prewarmed at 9a14013): the
# GPU checks main still owed (the dAv grid policy of kdart.fla: test_production_gpu.py with its
# "fixed-wide" case, test_fla_gpu.py; test_gpu on 9a14013's kernels), side by side.  Then alone: kdart
# bench's wy rows for main's wy_dqkg and for the L2-hinted variant (lab/experiments/wy_l2hint, hint_only.patch: the value
# tiles kept in L2 for the next K block, everything read once evicted first), the variant's wy tests, and
# side_by_side's new bwd_dAv rows.
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
gc_fla_site
gc_test_gpu 300 6
(KDART_ERR_LOG=$O/prod_errors.txt GPU_CHECK_PARTS=python PYTEST_LOG=pytest_prod PYTEST_TRITON=first \
  PYTEST_TIMEOUT=250 PYTEST_ARGS="-n 4 python/tests/test_production_gpu.py" tools/gpu_check.sh build $O \
  > $O/prod_rc.txt 2>&1) &
gc_fla_recipes
wait; el
grep -hE "Checks|rc=|:F:|:E:" $O/test_gpu*.txt | cut -c1-300
grep -hE "passed|failed" $O/pytest_*.txt | tail -3; grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
cat $O/prod_errors.txt 2>/dev/null | tail -20
gc_pack
# the L2-hinted variant: its own kernel dir and cache
rm -rf /tmp/ks_hint && cp -r kernel_src /tmp/ks_hint && cp lab/experiments/wy_l2hint/wy_dqkg.cuh /tmp/ks_hint/
for s in 2,8192,32,32,128,128 16,8192,16,16,128,256; do
  for v in main hint main hint; do
    if [ $v = main ]; then kd=$R/kernel_src; cd=$KDART_CACHE_DIR; else kd=/tmp/ks_hint; cd=/tmp/hcache; fi
    echo "== $v $s"; KDART_KERNEL_DIR=$kd KDART_CACHE_DIR=$cd timeout 90 build/kdart bench --shape $s --reps 20 2>&1 \
      | grep -E "wy_dqkg|FAIL|rror"
  done
done | tee $O/bench.txt; el
(KDART_KERNEL_DIR=/tmp/ks_hint KDART_CACHE_DIR=/tmp/hcache KDART_GPU_TESTS=wy_production,dav_fused CK_FORK=no \
  timeout 120 build/tests/test_gpu > $O/test_gpu_hint.txt 2>&1; echo "test_gpu hint rc=$?" >> $O/test_gpu_hint.txt)
grep -hE "Checks|rc=|:F:|:E:" $O/test_gpu_hint.txt | cut -c1-300; el
gc_pack
PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 PYTHONUNBUFFERED=1 \
  timeout $(( 570 - ($(date +%s) - t0) )) python3 bench/side_by_side.py --stage dav --no-ceiling \
  --rows b2_t8192_h32,prod8192,b1_t32768_h32_packed,b2_t8192_h16_k256,b2_t8192_h16_d100 > $O/side_by_side.txt 2>&1
echo "sbs rc=$?"; grep -vE "Warning|warn_once" $O/side_by_side.txt | tail -22; el
gc_pack
# where prod8192's wy_dqkg loses: one kernel under Nsight Compute (main's, then the variant's)
for v in main hint; do
  if [ $v = main ]; then kd=$R/kernel_src; cd=$KDART_CACHE_DIR; else kd=/tmp/ks_hint; cd=/tmp/hcache; fi
  left=$(( 590 - ($(date +%s) - t0) )); [ $left -lt 40 ] && break
  KDART_KERNEL_DIR=$kd KDART_CACHE_DIR=$cd timeout $(( left / 2 )) ncu --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section Occupancy --section LaunchStats -k regex:kdart_wy_dqkg -c 1 \
    build/kdart bench --shape 16,8192,16,16,128,256 --reps 1 > $O/ncu_$v.txt 2>&1; echo "ncu $v rc=$?"
done; el
gc_pack
