#!/usr/bin/env bash
# lab/calls/2026-12-05-e.sh (OUT set; carry build-main-gpu): fused_probes.py's p7, p8 (the two halves of p2's
# saving: the wy part's fp32 stores, the intra part's reloads), p9, p10 (candidates, results right: the round
# trip's stores evict_last in L2, and the reloads evict_first) and p2 again, against this tree's kernels, B2
# and prod8192, two rounds; wy_intra_bench only (about 4 minutes; timing only).
set -u
rm -rf build && mv build-main-gpu build
. lab/calls/common.sh
python3 lab/calls/fused_probes.py kernel_src /tmp/pr
rm -rf /tmp/pr/main && mkdir -p /tmp/pr/main && cp -a kernel_src /tmp/pr/main/k
AB_WHOLE=0 AB_OUT=probes AB_ROWS=b2_t8192_h32,prod8192 \
  gpu_ab_dirs /tmp/pr/main/k /tmp/pr/p7/k /tmp/pr/p8/k /tmp/pr/p9/k /tmp/pr/p10/k /tmp/pr/p2/k
