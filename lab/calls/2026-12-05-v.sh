# eighteenth session, call v: the branch's fused and unfused modes (same binary), timed (bare whole call, B2)
# and under ncu with the warp stall reasons.  Carry build-cta1, build-gpu.
set -u
rm -rf build && mv build-cta1 build
. lab/calls/common.sh
gc_ab_trees 2>/dev/null
for r in 1 2; do
  KDART_FUSE_POST=0 gc_whole_bare unfused /tmp/cta1/k /tmp/cta1/libkdart.so b2_t8192_h32
  gc_whole_bare fused /tmp/cta1/k /tmp/cta1/libkdart.so b2_t8192_h32
done | grep profile | sed 's/(kdart_[a-z_]*//' | cut -c1-130 | tee $O/ab.txt
for m in unfused fused; do
  env KDART_FUSE_POST=$([ $m = unfused ] && echo 0 || echo 1) WHOLE_NCU=1 \
    KDART_LIBRARY=$(readlink -f /tmp/cta1/libkdart.so) KDART_KERNEL_DIR=/tmp/cta1/k KDART_CACHE_DIR=/tmp/cwcta1 \
    PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls timeout 200 ncu --kernel-name regex:kdart_wy --launch-skip 2 \
    --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section WarpStateStats --metrics smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_membar,smsp__pcsamp_warps_issue_stalled_lg_throttle,smsp__pcsamp_warps_issue_stalled_drain,smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_sleeping,smsp__pcsamp_sample_count,l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum,l1tex__t_bytes_pipe_lsu_mem_global_op_st.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    python3 lab/calls/whole_ab.py b2_t8192_h32 > $O/ncu_$m.txt 2>&1
  grep -E "Duration|DRAM Throughput|L1/TEX Hit|L2 Hit|Stall|pcsamp|bytes" $O/ncu_$m.txt | head -40 | sed "s/^/$m /"
done; el
