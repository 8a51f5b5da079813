# for the next session, call s22a (carry build-gpu = main's build and build-t with two kernel trees of branch
# exp/text, host code as main's: build-t/k1 = its first commit (8064 instructions, no spills), build-t/k2 = its
# second (7768, 44 bytes of spills on sm_90a); e.g. `git archive exp/text~1 kernel_src | tar x -C /tmp/k1`): 1. how much of the fused kernel's time is still instruction fetch, at B2 (fixed
# length, 6752 instructions) and on the packed row (8096): ncu's sampled stall reasons of the fused launch
# inside the bare call, no_instructions against the total; 2. exp/text (varlen dg_in loads without branches,
# load_tile's policy made once: 7976 -> 7928 by nvcc) against main on the packed row, alone.
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
PP=$R/python:$R/python/tests:$R/lab/calls
M="smsp__pcsamp_sample_count,smsp__pcsamp_warps_issue_stalled_no_instructions,smsp__pcsamp_warps_issue_stalled_branch_resolving,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_math_pipe_throttle,smsp__pcsamp_warps_issue_stalled_wait,gpu__time_duration.sum"
for row in b2_t8192_h32 packed32768; do
  KDART_CACHE_DIR=/tmp/cw KDART_LIBRARY=$R/build/libkdart.so WHOLE_NCU=1 PYTHONPATH=$PP timeout 150 ncu \
    --kernel-name regex:kdart_wy_dqkg --launch-skip 2 --launch-count 1 --metrics $M \
    python3 lab/calls/whole_ab.py $row > $O/ncu_$row.txt 2>&1
  echo "ncu $row rc=$?"; grep -E "smsp__|duration" $O/ncu_$row.txt
done; el
export WB_CACHE=/tmp/cw WB_LIMIT=170
{ gc_whole_bare main $R/kernel_src build/libkdart.so packed32768
  gc_whole_bare text1 $R/build-t/k1 build/libkdart.so packed32768
  gc_whole_bare text2 $R/build-t/k2 build/libkdart.so packed32768; } | cut -c1-330 | tee $O/ab.txt; el
gc_pack
