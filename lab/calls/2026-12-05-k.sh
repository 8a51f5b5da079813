#!/usr/bin/env bash
# lab/calls/2026-12-05-k.sh (OUT set; carry build-gpu = main's build, .whl, .triton-carry with call h's
# autotune results; about 6 minutes with the start): 1. host_profile.py at B2 T8192 H32 (where the whole
# route's 1.1 ms of host time per backward goes); 2. ncu of recompute_wu and bwd_post inside the bare whole
# call (74% and 83% of their byte floors on the H100: what holds each); 3. ncu's source counters of the fused
# kernel (1.6-way bank conflicts on 11.6% of its shared-store wavefronts: which instructions).
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
export KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=$R/.triton-cache; gc_triton_restore; gc_fla_site
PYTHONPATH=/tmp/site:$R/python timeout ${K_HOST:-200} python3 lab/calls/host_profile.py b2_t8192_h32 \
  $O/host_trace.json > $O/host_profile.txt 2>&1
echo "host rc=$?"; el; grep -vE "Warning|_warn_once" $O/host_profile.txt | head -60
gzip -f $O/host_trace.json 2>/dev/null; gc_pack
left=$(( ${K_MID:-290} - ($(date +%s) - t0) )); [ $left -gt 40 ] || exit 0
gc_ncu_whole $left ncu_rwu_post.txt "kdart_recompute_wu|kdart_bwd_post" 2 --section SpeedOfLight \
  --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section LaunchStats \
  --section SchedulerStats
grep -E "kdart_|Duration|DRAM Throughput|Registers|Achieved Occupancy|Block Limit|Eligible|L2 Hit|Mem Busy" \
  $O/ncu_rwu_post.txt | head -40
gc_pack
left=$(( ${K_END:-380} - ($(date +%s) - t0) )); [ $left -gt 40 ] || exit 0
gc_ncu_whole $left ncu_fused_src.txt kdart_wy_dqkg 1 --section SourceCounters --print-details all
grep -iE "bank|shared|0x[0-9a-f]{4,}" $O/ncu_fused_src.txt | head -40
gc_pack
