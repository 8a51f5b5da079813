# eighteenth session, call u: ncu of the one-CTA wy_dqkg kernel in the bare whole call (B2), unfused
# (KDART_FUSE_POST=0) against the fused launch with the kernel told to ignore it (KDART_POST_PROBE=128): the
# same kernel work, 0.75 ms apart in call t.  Carry build-cta1, build-gpu.
set -u
rm -rf build && mv build-cta1 build
. lab/calls/common.sh
gc_ab_trees 2>/dev/null
for m in unfused probe128; do
  env $([ $m = unfused ] && echo KDART_FUSE_POST=0 || echo KDART_POST_PROBE=128) WHOLE_NCU=1 \
    KDART_LIBRARY=$(readlink -f /tmp/cta1/libkdart.so) KDART_KERNEL_DIR=/tmp/cta1/k KDART_CACHE_DIR=/tmp/cwcta1 \
    PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls timeout 200 ncu --kernel-name regex:kdart_wy --launch-skip 2 \
    --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats \
    --section Occupancy --section WarpStateStats --section SchedulerStats \
    python3 lab/calls/whole_ab.py b2_t8192_h32 > $O/ncu_$m.txt 2>&1
  grep -E "Duration|DRAM Throughput|Memory Throughput|Registers|Shared Memory Config|Dynamic Shared|Achieved Occ|Block Limit|Stall|Warp Cycles|Eligible|Threads|Grid Size" $O/ncu_$m.txt | head -40 | sed "s/^/$m /"
done; el
