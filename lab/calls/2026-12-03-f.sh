#!/usr/bin/env bash
# lab/calls/2026-12-03-f.sh (as call d, after call e): kdart.torch.wy_dqkg's GPU tests after the packed float64
# reference was fixed (dg's per-column term on a partial chunk's last valid row); then wy_dqkg alone, for the next
# round of tuning: ncu of one
# launch at B2 T8192 H32 (speed of light, memory, occupancy, warp stalls), and kdart's time alone
# (bench/side_by_side.py --no-fla) of main's kernel and of lab/experiments/wy-1cta (one CTA per SM, no spills:
# kernel_src with lab/experiments/wy-1cta.diff applied, which this call read from that folder).
set -u
. lab/calls/common.sh
KDART_TORCH_EXT=0 GPU_CHECK_PARTS=python PYTEST_LOG=pytest_wy PYTEST_TIMEOUT=100 \
  PYTEST_ARGS="python/tests/test_torch_gpu.py -k wy" tools/gpu_check.sh build $O; el
grep -hE "passed|failed|^FAILED" $O/pytest_wy.txt | tail -4
PYTHONPATH=$R/python KDART_LIBRARY=$R/build/libkdart.so timeout 90 ncu --kernel-name regex:kdart_wy --launch-skip 1 \
  --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
  --section WarpStateStats --section LaunchStats --section SchedulerStats python3 lab/experiments/wy_ncu.py > $O/ncu_wy.txt 2>&1; el
grep -E "Duration|Throughput|Registers|Achieved Occupancy|Stall|Block Limit|Hit Rate|Eligible|Issued" $O/ncu_wy.txt | head -50
gc_pack
for v in main wy-1cta; do
  kd=$R/kernel_src; [ $v != main ] && kd=$R/lab/experiments/$v
  KDART_KERNEL_DIR=$kd PYTHONPATH=$R/python KDART_LIBRARY=$R/build/libkdart.so timeout 60 python3 bench/side_by_side.py \
    --stage wy --no-fla --no-ceiling --iters 30 --rows b2_t8192_h32 > $O/sbs_$v.txt 2>&1
  echo "$v rc=$?"; grep -E "^\| wy" $O/sbs_$v.txt; el
done
gc_pack
