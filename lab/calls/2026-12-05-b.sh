#!/usr/bin/env bash
# lab/calls/2026-12-05-b.sh (OUT set; carry build-main-gpu, .whl, .whl-cudnn): next-s11c's tests and A/B of
# intra-early-qkg and wy-snake against main, then cuDNN's per-kernel profile (next-s12c) while time is left,
# then the whole-backward tests on early-qkg's kernels.
set -u
rm -rf build && mv build-main-gpu build
. lab/calls/common.sh
E=$R/lab/experiments/intra-early-qkg/early_qkg.diff
S=$R/lab/experiments/wy-snake/wy_snake.diff
rm -rf /tmp/old /tmp/eq /tmp/sn && mkdir -p /tmp/old /tmp/eq /tmp/sn && cp -a kernel_src /tmp/old/k && cp -a kernel_src /tmp/eq/k \
  && cp -a kernel_src /tmp/sn/k && (cd /tmp/eq/k && patch -s -p2 < $E) && (cd /tmp/sn/k && patch -s -p2 < $S) \
  || { echo "variant failed"; exit 3; }
export KDART_LIBRARY=$R/build/libkdart.so TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR; gc_fla_site
(KDART_KERNEL_DIR=/tmp/eq/k KDART_CACHE_DIR=/tmp/ceq KDART_GPU_TESTS=wy_intra,wy_production,intra_fixed_any_t,intra_head_dims,intra_varlen_lists,varlen_garbage_writes_nothing \
  CK_FORK=no timeout 150 build/tests/test_gpu > $O/test_gpu_eq.txt 2>&1; echo "rc=$?" >> $O/test_gpu_eq.txt) &
(KDART_KERNEL_DIR=/tmp/sn/k KDART_CACHE_DIR=/tmp/csn KDART_GPU_TESTS=wy_intra,wy_production CK_FORK=no timeout 150 \
  build/tests/test_gpu > $O/test_gpu_sn.txt 2>&1; echo "rc=$?" >> $O/test_gpu_sn.txt) &
gc_sanitize_dir /tmp/eq/k 150 wy_dqkg
wait; el
for f in eq sn; do tail -1 $O/test_gpu_$f.txt; grep -hE "^[0-9]+%|:[EF]:" $O/test_gpu_$f.txt | head -6; done; cat $O/san.txt
gc_pack
gpu_ab_dirs /tmp/old/k /tmp/eq/k /tmp/sn/k
gc_pack
[ $(( $(date +%s) - t0 )) -lt 420 ] && bash lab/calls/next-s12c.sh
gc_pack; el
