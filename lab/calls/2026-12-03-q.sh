#!/usr/bin/env bash
# lab/calls/2026-12-03-q.sh (OUT set; carry build-gpu as build, devcache prewarmed --all for sm_90a):
# fla's dAv fused into wy_dqkg (dAqk) and bwd_dhu (dv_intra from Aqk), first GPU run.  Side by side:
# test_gpu in six processes (every test: the new dav_fused, the dhu and wy suites whose kernels changed,
# and the rest as the review commit's first run), memcheck + racecheck over the small wy_dqkg and bwd_dhu
# cases (every spec; the fused forms where they run).  Then alone: `kdart bench` rows with the fused
# forms beside the plain ones (B2 T8192 H32, prod8192, 32768 tokens, K = V = 64).
set -u
. lab/calls/common.sh
gc_test_gpu 330 6
gc_sanitize 330 KDART_GPU_SMALL=wy_dqkg,bwd_dhu
wait; el
grep -h "^test_gpu part\|Checks\|:F:\|:E:" $O/test_gpu*.txt | cut -c1-400
cat $O/san.txt
grep -h "Aqk\|dAqk" $O/test_gpu*.txt | head -30
gc_pack
for s in 2,8192,32,32,128,128 16,8192,16,16,128,256 1,32768,32,32,128,128 2,4096,32,32,64,64; do
  timeout 90 build/kdart bench --shape $s --reps 20 2>&1 | grep -E "bwd_dhu|wy_dqkg|ceiling|FAIL|rror"
done | tee $O/bench.txt; el
gc_pack
