#!/usr/bin/env bash
# lab/calls/2026-12-05-e.sh (OUT set; carry build-main-gpu): fused_probes.py's p7, p8 (the two halves of p2's
# saving: the wy part's fp32 stores, the intra part's reloads), p9, p10 (candidates, results right: the round
# trip's stores evict_last in L2, and the reloads evict_first) and p2 again, against this tree's kernels, B2
# and prod8192, two rounds, main first and last; timing only (about 4 minutes).  Supersedes 2026-12-05-d.sh.
set -u
rm -rf build && mv build-main-gpu build
. lab/calls/common.sh
python3 lab/calls/fused_probes.py kernel_src /tmp/pr
for i in 1 2; do for d in $R/kernel_src /tmp/pr/p7/k /tmp/pr/p8/k /tmp/pr/p9/k /tmp/pr/p10/k /tmp/pr/p2/k $R/kernel_src; do
  v=$(basename $(dirname $d)); [ $d = $R/kernel_src ] && v=main
  KDART_KERNEL_DIR=$d KDART_CACHE_DIR=/tmp/cb$v PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
    timeout 60 python3 lab/calls/wy_intra_bench.py b2_t8192_h32,prod8192 2>&1 \
    | grep -vE "Warning|warn|^row" | sed "s|^|$i $v |"
done; done | tee $O/probes.txt; el
