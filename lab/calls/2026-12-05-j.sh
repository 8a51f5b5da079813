#!/usr/bin/env bash
# lab/calls/2026-12-05-j.sh (OUT set; carry build-gpu = main's build; about 4 minutes; timing only): the
# one-CTA-an-SM design's open risk, measured on today's kernel.  fused_probes.py's p11 (phase C makes each
# diagonal exp2 twice, as the fragment layout would: 205 -> 325 MUFU.EX2 in the production cubin, 4 bytes
# of spill) and p5 (phase C skipped) bracket what phase C's MUFU work costs; p10 (the round trip's reloads
# evict_first, on top of main's evict_last stores) is a candidate.  Two rounds, wy_intra_bench at B2 and
# whole_ab (the bare call's fused kernel).
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
gc_probes
AB_OUT=probes AB_ROWS=b2_t8192_h32 gpu_ab_dirs /tmp/pr/main/k /tmp/pr/p11/k /tmp/pr/p5/k /tmp/pr/p10/k
gc_pack
