# twenty-first session, call e (carry build-gpu = branch exp/post-varlen's build: main with the last step's
# gate part allowed on packed rows again): why the fused wy_dqkg + intra launch is 61% slower on the packed
# row with the gate part (post = 1) than without, where it is 5% slower at fixed length.  1. whole_ab.py's
# bare call on the packed row at KDART_FUSE_POST=0 and 1 (the slowdown on this card); 2. ncu of the fused
# launch inside the bare call at both levels (speed of light, memory, warp states, scheduler, launch,
# occupancy, instruction stats); 3. the hot spots (source counters) of the post = 1 launch.
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
export KDART_CACHE_DIR=/tmp/cw KDART_LIBRARY=$R/build/libkdart.so
PP=$R/python:$R/python/tests:$R/lab/calls
for lv in 0 1; do KDART_FUSE_POST=$lv PYTHONPATH=$PP timeout 150 python3 lab/calls/whole_ab.py packed32768 2>&1 \
  | grep -E "bare (C|profile)" | sed "s|^|lv$lv |" | cut -c1-420; done | tee $O/ab.txt; el
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy --section InstructionStats --section ComputeWorkloadAnalysis"
for lv in 0 1; do
  KDART_FUSE_POST=$lv WHOLE_NCU=1 PYTHONPATH=$PP timeout 150 ncu --kernel-name regex:kdart_wy_dqkg --launch-skip 2 \
    --launch-count 1 $S python3 lab/calls/whole_ab.py packed32768 > $O/ncu_lv$lv.txt 2>&1; echo "ncu lv$lv rc=$?"
done; el
paste <(grep -E "^    [A-Z]" $O/ncu_lv0.txt | cut -c1-110) <(grep -E "^    [A-Z]" $O/ncu_lv1.txt | awk '{print $NF}') | \
  grep -E "Duration|Throughput|Registers|Achieved Occ|Stall|Eligible|Issued|Busy|Pipe|Waves|Grid|Shared Memory Config|Executed Ipc|L1/TEX Hit|L2 Hit|Mem Pipes|Block Limit|Dynamic Shared" | head -60
gc_pack
KDART_FUSE_POST=1 WHOLE_NCU=1 PYTHONPATH=$PP timeout 200 ncu --kernel-name regex:kdart_wy_dqkg --launch-skip 2 \
  --launch-count 1 --section SourceCounters --section WarpStateStats python3 lab/calls/whole_ab.py packed32768 > $O/ncu_src1.txt 2>&1
echo "ncu src rc=$?"; el; grep -A40 "Section: Source Counters" $O/ncu_src1.txt | head -60
gc_pack
