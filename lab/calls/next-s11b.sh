#!/usr/bin/env bash
# lab/calls/next-s11b.sh (OUT set; carry build-gpu as build, .whl): bench/e2e.py's production row, whole route,
# profiled, on main's kernels (wy_dqkg's TMA step, the longest-first scans): ROW=b2_t8192_h32 (default) or
# ROW=packed_t32768_hv32, one row a call (fla's autotuning alone takes 300-330 s of it, unless its results
# are restored: gc_triton_restore).  After the call, keep files_at/triton-autotune-ROW.tgz in
# lab/triton-autotune/ (small JSON: fla's chosen configs on the H200 for that shape; commit it) so that later
# calls skip the benchmarking.
set -u
. lab/calls/common.sh
ROW=${ROW:-b2_t8192_h32}
export TRITON_CACHE_DIR=$R/.triton-cache; gc_triton_restore; gc_fla_site; export KDART_LIBRARY=$R/build/libkdart.so
PYTHONPATH=/tmp/site:$R/python timeout $(( 560 - ($(date +%s) - t0) )) python3 bench/e2e.py --shapes $ROW \
  --configs prod --profile --iters 6 --route whole --no-overhead > $O/e2e_$ROW.txt 2>&1
echo "e2e rc=$?"; el; gc_triton_save $ROW; grep -vE "Warning|_warn_once|Python call|overhead" $O/e2e_$ROW.txt | tail -40
gc_pack
