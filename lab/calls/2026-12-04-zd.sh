#!/usr/bin/env bash
# lab/calls/2026-12-04-zd.sh (OUT set; carry build-gpu as build, .whl): bwd_post's tokens per CTA (libraries
# built with the floor of tb at 128, 256, 512 tokens, build/postlibs/, against main's), post_bench.py on both
# rows; then bench/e2e.py's production row at prod8192 (B16 T8192 H16 K128 V256), both routes, profiled, as
# long as the call lasts (fla autotunes that shape first, in the same process).
set -u
. lab/calls/common.sh
gc_prologue
for row in b2 packed; do for i in 1 2; do for lib in $R/build/libkdart.so $R/build/postlibs/libkdart_*.so; do
  POST_NO_FLA=1 KDART_LIBRARY=$lib PYTHONPATH=$R/python:$R/lab/calls timeout 40 \
    python3 lab/calls/post_bench.py $row 2>&1 | grep -E "bwd_post" | sed "s|^|$(basename $lib) |"
done; done; done | tee $O/post_tb.txt; el
gc_pack
export FLA_DISABLE_BACKEND_DISPATCH=1 PYTHONUNBUFFERED=1
PYTHONPATH=/tmp/site timeout $(( ${D_END:-585} - ($(date +%s) - t0) )) python3 bench/e2e.py --shapes prod8192 \
  --configs prod --profile --iters 6 --route both --no-overhead > $O/e2e_prod8192.txt 2>&1
echo "e2e prod8192 rc=$?"; el; grep -vE "Warning|_warn_once|Python call|overhead" $O/e2e_prod8192.txt | tail -50
gc_pack
