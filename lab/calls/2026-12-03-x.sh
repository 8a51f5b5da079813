#!/usr/bin/env bash
# lab/calls/2026-12-03-x.sh (OUT set; carry build-gpu as build, .whl; devcache prewarmed with wy_dqkg's
# dAqk in a pass of its own): side by side, test_gpu's wy suites over every spec, memcheck + racecheck
# of the small wy cases, the torch fused/wy tests; then alone kdart bench's wy rows and side_by_side's
# dAv rows (B2 T8192 H32, prod8192).
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
gc_fla_site
(KDART_GPU_TESTS=wy_every_spec CK_FORK=no timeout 130 build/tests/test_gpu > $O/test_gpu_wy1.txt 2>&1
 echo "test_gpu wy_every_spec rc=$?" >> $O/test_gpu_wy1.txt) &
(KDART_GPU_TESTS=dav_fused,wy_production CK_FORK=no timeout 130 build/tests/test_gpu > $O/test_gpu_wy2.txt 2>&1
 echo "test_gpu dav_fused,wy_production rc=$?" >> $O/test_gpu_wy2.txt) &
gc_sanitize 130 KDART_GPU_SMALL=wy_dqkg
PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so KDART_TORCH_EXT=0 FLA_DISABLE_BACKEND_DISPATCH=1 \
  PYTHONUNBUFFERED=1 timeout 120 python3 -m pytest python/tests/test_torch_gpu.py -k "aqk or dav or wy" -q \
  -p no:cacheprovider > $O/pytest_fused.txt 2>&1; echo "pytest fused rc=$? $(tail -1 $O/pytest_fused.txt)"
wait; el
grep -hE "Checks|rc=|:F:|:E:" $O/test_gpu_wy*.txt | cut -c1-300; cat $O/san.txt
grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -10
gc_pack
for s in 2,8192,32,32,128,128 16,8192,16,16,128,256; do
  timeout 40 build/kdart bench --shape $s --reps 20 2>&1 | grep -E "wy_dqkg|FAIL|rror"
done | tee $O/bench.txt; el
PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 PYTHONUNBUFFERED=1 \
  timeout 60 python3 bench/side_by_side.py --stage dav --no-ceiling --rows b2_t8192_h32,prod8192 > $O/sbs_dav.txt 2>&1
echo "sbs dav rc=$?"; grep -E "^\| |bwd_dhu .* ms|kdart .* ms" $O/sbs_dav.txt; el
gc_pack
