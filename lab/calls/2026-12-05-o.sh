#!/usr/bin/env bash
# lab/calls/2026-12-05-o.sh (OUT set; carry build-gpu = main's build with main's kernels in build-gpu/k,
# build-cta1 = exp/cta1's build; about 2 minutes warm): the one-CTA fused kernel with the diagonal blocks in
# bwd_intra's phase C map (slots in shared memory) against main: test_gpu's wy_cta1 on the GPU, then
# whole_ab.py's bare C call and profile at B2 T8192 H32 and on the packed row, main and the branch in turn.
set -u
rm -rf build && mv build-cta1 build
. lab/calls/common.sh
(KDART_GPU_TESTS=wy_cta1 CK_FORK=no timeout 120 build/tests/test_gpu 2>&1 | grep -E "Checks|F:" ) | tee $O/test_gpu.txt
for t in main cta1; do
  if [ $t = main ]; then k=$R/build-gpu/k lib=$(readlink -f $R/build-gpu/libkdart.so); else k=$R/kernel_src lib=$R/build/libkdart.so; fi
  KDART_LIBRARY=$lib KDART_KERNEL_DIR=$k KDART_CACHE_DIR=/tmp/co$t PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
    timeout 100 python3 lab/calls/whole_ab.py b2_t8192_h32,packed32768 2>&1 | grep -E "bare (C|profile)" | sed "s|^|$t |"
done | tee $O/ab.txt; el
