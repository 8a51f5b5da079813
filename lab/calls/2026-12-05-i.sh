#!/usr/bin/env bash
# lab/calls/2026-12-05-i.sh (OUT set; carry build-gpu = main's build; about 2 minutes): main with the
# round trip's evict_last stores: 1. test_gpu's chunk_bwd_whole and wy_production on the GPU; 2. ncu of the
# fused kernel inside the bare whole call at B2 T8192 H32 (the third call's launch): the memory model's
# check before a one-CTA-an-SM rewrite (L2 and DRAM throughput, warp states).
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
export KDART_LIBRARY=$R/build/libkdart.so
KDART_GPU_TESTS=chunk_bwd_whole,wy_production CK_FORK=no timeout 70 build/tests/test_gpu > $O/test_gpu.txt 2>&1
echo "rc=$?" >> $O/test_gpu.txt; el; grep -E "^[0-9]+%|:[EF]:|rc=" $O/test_gpu.txt | head -5
gc_ncu_fused 100
gc_pack
