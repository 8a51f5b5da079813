#!/usr/bin/env bash
# lab/calls/2026-12-03-u.sh (OUT set; carry build-gpu as build, .whl; devcache prewarmed at 9a14013):
# kdart bench's wy rows for main's wy_dqkg, the L2-hinted variant and the variant with sum_v h dh read in
# 16-byte chunks as well (lab/experiments/wy_l2hint), alone; then, with fla's Triton warm-up and the C++
# fast path's build side by side, the variant's wy tests; then alone bench/e2e.py's production row at
# B2 T8192 H32 with the profile, the queued-launch and host times and the idle-gap trace.
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
gc_fla_site
gc_ext_build
rm -rf /tmp/ks_hint /tmp/ks_v2 && cp -r kernel_src /tmp/ks_hint && cp -r kernel_src /tmp/ks_v2
cp lab/experiments/wy_l2hint/wy_dqkg.cuh /tmp/ks_hint/ && cp lab/experiments/wy_l2hint/wy_dqkg_v2.cuh /tmp/ks_v2/wy_dqkg.cuh
for s in 16,8192,16,16,128,256 2,8192,32,32,128,128; do
  for v in main hint v2 main hint v2; do
    case $v in main) kd=$R/kernel_src; cd=$KDART_CACHE_DIR;; hint) kd=/tmp/ks_hint; cd=/tmp/hcache;; v2) kd=/tmp/ks_v2; cd=/tmp/v2cache;; esac
    echo "== $v $s"; KDART_KERNEL_DIR=$kd KDART_CACHE_DIR=$cd timeout 90 build/kdart bench --shape $s --reps 20 2>&1 \
      | grep -E "wy_dqkg|FAIL|rror"
  done
done | tee $O/bench.txt; el
gc_warm WARM_E2E=b2_t8192_h32 WARM_JOBS=4 WARM_TIMEOUT=150
(KDART_KERNEL_DIR=/tmp/ks_v2 KDART_CACHE_DIR=/tmp/v2cache KDART_GPU_TESTS=wy_every_spec,wy_production,dav_fused CK_FORK=no \
  timeout 200 build/tests/test_gpu > $O/test_gpu_v2.txt 2>&1; echo "test_gpu v2 rc=$?" >> $O/test_gpu_v2.txt) &
wait; el
grep -hE "Checks|rc=|:F:|:E:" $O/test_gpu_v2.txt | cut -c1-300; cat $O/ext_build.txt | tail -2; cat $O/warm_rc.txt | tail -2
gc_pack
mkdir -p $O/trace
PYTHONPATH=/tmp/site KDART_LIBRARY=build/libkdart.so PYTHONUNBUFFERED=1 timeout $(( 560 - ($(date +%s) - t0) )) \
  python3 bench/e2e.py --shapes b2_t8192_h32 --configs prod --profile --iters 8 --trace $O/trace/t > $O/e2e.txt 2>&1
echo "e2e rc=$?"; el; grep -vE "Warning|_warn_once|other:" $O/e2e.txt | tail -50
gc_pack
