#!/usr/bin/env bash
# lab/calls/2026-12-04-y.sh (OUT set; carry build-gpu as build): ncu's sections of the fused wy_dqkg + intra
# kernel at B2 T8192 H32 (lab/calls/fused_ncu.py), for the next step on its body: speed of light, occupancy,
# warp states, scheduler, memory workload.
set -u
. lab/calls/common.sh
export KDART_LIBRARY=$R/build/libkdart.so
PYTHONPATH=$R/python:$R/python/tests timeout 60 ncu --kernel-name regex:kdart_wy_dqkg --launch-skip 2 --launch-count 1 \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
  --section MemoryWorkloadAnalysis --section LaunchStats python3 lab/calls/fused_ncu.py > $O/ncu.txt 2>&1
echo "ncu rc=$?"; el; grep -E "Duration|Throughput|Achieved Occupancy|Registers|Stall|Issued Warp|No Eligible|Eligible Warps|L2 Hit|Mem Busy|Max Bandwidth|Theoretical Occ" $O/ncu.txt | head -40
