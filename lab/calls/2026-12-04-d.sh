#!/usr/bin/env bash
# lab/calls/2026-12-04-d.sh (OUT set; carry build-gpu as build, .whl): call c's last part again, with
# KDART_LIBRARY set (side_by_side's dAv rows ask kdart.fla, which loads the library): the fused dAv against
# fla's dAv in one process at B2 T8192 H32 and prod8192.
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
gc_fla_site
PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 PYTHONUNBUFFERED=1 \
  timeout 85 python3 bench/side_by_side.py --lib $R/build/libkdart.so --stage dav --no-ceiling \
  --rows b2_t8192_h32,prod8192 > $O/sbs_dav.txt 2>&1
echo "sbs rc=$?"; el; grep -E "ERROR|^\| |bwd_dhu .* ms|kdart .* ms|fla" $O/sbs_dav.txt | head -24
