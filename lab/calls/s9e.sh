#!/usr/bin/env bash
# lab/calls/s9e.sh (OUT set; carry build-gpu as build, .whl): bench/e2e.py's production row on 32768 packed
# tokens in 7 documents, whole route, profiled, with da-swizzle in kernel_src (fla's autotuning first).
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR; gc_fla_site; export KDART_LIBRARY=$R/build/libkdart.so
PYTHONPATH=/tmp/site:$R/python timeout $(( 560 - ($(date +%s) - t0) )) python3 bench/e2e.py --shapes packed_t32768_hv32 \
  --configs prod --profile --iters 6 --route whole --no-overhead > $O/e2e_packed.txt 2>&1
echo "e2e rc=$?"; el; grep -vE "Warning|_warn_once|Python call|overhead" $O/e2e_packed.txt | tail -40
gc_pack
