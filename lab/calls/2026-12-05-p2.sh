#!/usr/bin/env bash
# lab/calls/2026-12-05-p2.sh (OUT set; carry build-gpu = main's build with main's kernels in build-gpu/k,
# build-cta1 = exp/cta1's build, with build-cta1/probes/diag/k: the branch without the off-diagonal loop
# change; about 2 minutes warm): the one-CTA fused kernel after the diagonal's pivot form (diag) and after
# the off-diagonal A fragments hoisted (cta1) against main: whole_ab.py's bare C call and profile at B2 T8192
# H32 and on the packed row, each tree in turn; test_gpu's wy_cta1 and chunk_bwd_whole first.
set -u
rm -rf build && mv build-cta1 build
. lab/calls/common.sh
(KDART_GPU_TESTS=wy_cta1,chunk_bwd_whole CK_FORK=no timeout 150 build/tests/test_gpu 2>&1 | grep -E "Checks|F:" ) | tee $O/test_gpu.txt
for t in main diag cta1; do
  case $t in main) k=$R/build-gpu/k lib=$(readlink -f $R/build-gpu/libkdart.so);; diag) k=$R/build/probes/diag/k lib=$R/build/libkdart.so;;
    *) k=$R/kernel_src lib=$R/build/libkdart.so;; esac
  KDART_LIBRARY=$lib KDART_KERNEL_DIR=$k KDART_CACHE_DIR=/tmp/co$t PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
    timeout 100 python3 lab/calls/whole_ab.py b2_t8192_h32,packed32768 2>&1 | grep -E "bare (C|profile)" | sed "s|^|$t |"
done | tee $O/ab.txt; el
