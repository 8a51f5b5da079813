#!/usr/bin/env bash
# lab/calls/s9d.sh (OUT set; carry build-gpu as build): wy_dqkg's L2 prefetches of q, k, g (a K phase's, one
# step ahead; the intra part's first pass, at the start of the dA products), in kernel_src, against the same
# tree without them (/tmp/old: the diff reversed): test_gpu's wy lists with them, then wy_intra_bench and
# whole_ab alternating, two rounds.
set -u
. lab/calls/common.sh
export KDART_LIBRARY=$R/build/libkdart.so
rm -rf /tmp/old && mkdir -p /tmp/old && cp -a kernel_src /tmp/old/k && (cd /tmp/old/k && patch -s -R -p2 < $R/lab/experiments/wy-qkg-prefetch/wy_qkg_prefetch.diff) \
  || { echo "variant failed"; exit 3; }
grep -c prefetch_qkg /tmp/old/k/wy_dqkg.cuh kernel_src/wy_dqkg.cuh
(KDART_CACHE_DIR=/tmp/cnew KDART_GPU_TESTS=wy_intra,wy_production,varlen_garbage_writes_nothing CK_FORK=no \
  timeout 150 build/tests/test_gpu > $O/test_gpu_pf.txt 2>&1; echo "rc=$?" >> $O/test_gpu_pf.txt)
tail -1 $O/test_gpu_pf.txt; grep -hE "^[0-9]+%|Checks|Failures|FAIL" $O/test_gpu_pf.txt | head -8; el
for i in 1 2; do for v in old new; do
  d=/tmp/old/k; [ $v = new ] && d=$R/kernel_src
  KDART_KERNEL_DIR=$d KDART_CACHE_DIR=/tmp/c$v PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
    timeout 100 python3 lab/calls/wy_intra_bench.py b2_t8192_h32,packed32768,prod8192 2>&1 | grep -vE "Warning|warn|^row" \
    | sed "s|^|$v |"
  KDART_KERNEL_DIR=$d KDART_CACHE_DIR=/tmp/c$v PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
    timeout 80 python3 lab/calls/whole_ab.py 2>&1 | grep -E "bare" | sed "s|^|$v |"
done; done | tee $O/ab.txt; el
gc_pack
