#!/usr/bin/env bash
# lab/calls/2026-12-05-e.sh (OUT set; carry build-gpu = main's build; 5-6 minutes; timing only):
# fused_probes.py's p7, p8 (the two halves of p2's saving: the wy part's fp32 stores of dq, dk, dg, the intra
# part's reloads), p9, p10 (candidates, results right: the round trip's stores evict_last in L2, and the
# reloads evict_first) and p2, against this tree's kernels (da-onchip landed), two rounds: wy_intra_bench at
# B2 (its fused column still asks for dA, dAqk) and whole_ab (the bare C call's fused kernel, which does not).
# As run (lab/runs/2026-12-05-e); p9 has since landed, and fused_probes.py no longer makes it.
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
gc_probes
AB_OUT=probes AB_ROWS=b2_t8192_h32 \
  gpu_ab_dirs /tmp/pr/main/k /tmp/pr/p9/k /tmp/pr/p10/k /tmp/pr/p2/k /tmp/pr/p7/k /tmp/pr/p8/k
gc_pack
