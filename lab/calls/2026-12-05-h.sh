#!/usr/bin/env bash
# lab/calls/2026-12-05-h.sh (OUT set; carry build-gpu = main's build, .whl; 7-8 minutes): with da-onchip
# landed, 1. bench/e2e.py's production row B2 T8192 H32 against fla (fla autotunes about 330 s; its results
# saved); 2. with the time left (H_LIMIT, the call's budget in seconds), ncu of the fused kernel inside the bare
# whole call at B2 T8192 H32 (the third call's launch: memory workload, warp states; what the memory model of
# the fused kernel predicts, before any rewrite).
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
export KDART_LIBRARY=$R/build/libkdart.so
L=${H_LIMIT:-560}
ROW=b2_t8192_h32
export TRITON_CACHE_DIR=$R/.triton-cache; gc_triton_restore; gc_fla_site
PYTHONPATH=/tmp/site:$R/python timeout $(( L - 30 - ($(date +%s) - t0) )) python3 bench/e2e.py --shapes $ROW \
  --configs prod --profile --iters 6 --route whole --no-overhead > $O/e2e_$ROW.txt 2>&1
echo "e2e rc=$?"; el; gc_triton_save $ROW; grep -vE "Warning|_warn_once|Python call|overhead" $O/e2e_$ROW.txt | tail -30
gc_pack
left=$(( L - 5 - ($(date +%s) - t0) )); [ $left -gt 40 ] || exit 0
gc_ncu_fused $left "--section MemoryWorkloadAnalysis_Tables"
gc_pack
