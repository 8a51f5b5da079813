#!/usr/bin/env bash
# lab/calls/2026-12-04-a.sh (OUT set; carry build-gpu as build; devcache prewarmed with main's kernels plus
# the reordered bwd_dhu, and build/ks_old = main's kernel_src): bwd_dhu with fla's dAv fused, dv_intra moved
# after QD's issue (off the scan's critical path) against main's order, kdart bench at prod8192 and B2 T8192
# H32, twice each; test_gpu dav_fused and dhu_every_spec on the new order; then Nsight Compute on wy_dqkg at
# prod8192 (warp states and the SASS source counters) for the next wy work.
set -u
. lab/calls/common.sh
for s in 16,8192,16,16,128,256 2,8192,32,32,128,128; do
  for v in new old new old; do
    kd=$R/kernel_src; [ $v = old ] && kd=$R/build/ks_old
    echo "== $v $s"; KDART_KERNEL_DIR=$kd timeout 90 build/kdart bench --shape $s --reps 20 2>&1 | grep -E "bwd_dhu|FAIL|rror"
  done
done | tee $O/bench.txt; el
KDART_GPU_TESTS=dav_fused,dhu_every_spec CK_FORK=no timeout 200 build/tests/test_gpu > $O/test_gpu.txt 2>&1
echo "test_gpu rc=$?"; grep -hE "Checks|:F:|:E:" $O/test_gpu.txt | cut -c1-300; el
gc_pack
timeout 200 ncu --clock-control none --kernel-name regex:kdart_wy_dqkg --launch-skip 2 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
  --section LaunchStats --section Occupancy --section SourceCounters -o $O/wy \
  build/kdart bench --shape 16,8192,16,16,128,256 --reps 3 > $O/ncu_run.txt 2>&1
echo "ncu rc=$?"; tail -3 $O/ncu_run.txt; el
ncu -i $O/wy.ncu-rep --page details > $O/wy_details.txt 2>&1
ncu -i $O/wy.ncu-rep --page source --csv --print-source sass > $O/wy_source.csv 2>&1
grep -E "Stall|Issued|Eligible|Throughput|Warp Cycles" $O/wy_details.txt | head -40; el
gc_pack
