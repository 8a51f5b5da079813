#!/usr/bin/env bash
# lab/calls/next-s11c.sh (OUT set; carry build-gpu as build, .whl): experiments/intra-early-qkg and
# experiments/wy-snake tested and timed.  Kernel-only: main's build with main's kernels (/tmp/old/k) and the
# patched ones (/tmp/eq/k, /tmp/sn/k).  test_gpu's wy lists on both and the small wy_dqkg cases under memcheck
# and racecheck on intra-early-qkg; wy_intra_bench and whole_ab alternating the three, two rounds; then
# kernel_src patched with intra-early-qkg for the whole-backward Python tests.
set -u
. lab/calls/common.sh
E=$R/lab/experiments/intra-early-qkg/early_qkg.diff
S=$R/lab/experiments/wy-snake/wy_snake.diff
rm -rf /tmp/old /tmp/eq /tmp/sn && mkdir -p /tmp/old /tmp/eq /tmp/sn && cp -a kernel_src /tmp/old/k && cp -a kernel_src /tmp/eq/k \
  && cp -a kernel_src /tmp/sn/k && (cd /tmp/eq/k && patch -s -p2 < $E) && (cd /tmp/sn/k && patch -s -p2 < $S) \
  || { echo "variant failed"; exit 3; }
grep -c early_qkg /tmp/eq/k/wy_dqkg.cuh kernel_src/wy_dqkg.cuh
export KDART_LIBRARY=$R/build/libkdart.so TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR; gc_fla_site
(KDART_KERNEL_DIR=/tmp/eq/k KDART_CACHE_DIR=/tmp/ceq KDART_GPU_TESTS=wy_intra,wy_production,intra_fixed_any_t,intra_head_dims,intra_varlen_lists,varlen_garbage_writes_nothing \
  CK_FORK=no timeout 200 build/tests/test_gpu > $O/test_gpu_eq.txt 2>&1; echo "rc=$?" >> $O/test_gpu_eq.txt) &
(KDART_KERNEL_DIR=/tmp/sn/k KDART_CACHE_DIR=/tmp/csn KDART_GPU_TESTS=wy_intra,wy_production CK_FORK=no timeout 200 \
  build/tests/test_gpu > $O/test_gpu_sn.txt 2>&1; echo "rc=$?" >> $O/test_gpu_sn.txt) &
gc_sanitize_dir /tmp/eq/k 200 wy_dqkg
wait; el
for f in eq sn; do tail -1 $O/test_gpu_$f.txt; grep -hE "^[0-9]+%|:[EF]:" $O/test_gpu_$f.txt | head -6; done; cat $O/san.txt
grep -ciE "invalid|hazard" $O/memcheck.txt $O/racecheck.txt
gc_pack
gpu_ab_dirs /tmp/old/k /tmp/eq/k /tmp/sn/k   # wy_intra_bench: B2, packed, prod8192; whole_ab: B2, packed
gc_pack
(cd kernel_src && patch -s -p2 < $E)
gc_whole_tests 150
wait; el
gpu_whole_report
gc_pack
