#!/usr/bin/env bash
# lab/calls/s9f.sh (OUT set; carry build-gpu as build): wy_dqkg's step without the accumulators' zeroing
# (wgmma's scale-d for a sum's first product) and without the step's integer division (experiments/wy-scale-d, in
# kernel_src), against the same tree without it (/tmp/old): test_gpu's wy lists, then wy_intra_bench
# alternating, two rounds (B2 and the packed row).
set -u
. lab/calls/common.sh
export KDART_LIBRARY=$R/build/libkdart.so
rm -rf /tmp/old && mkdir -p /tmp/old && cp -a kernel_src /tmp/old/k && (cd /tmp/old/k && patch -s -R -p2 < $R/lab/experiments/wy-scale-d/wy_scale_d.diff) \
  || { echo "variant failed"; exit 3; }
grep -c "k ? 1 : acc" /tmp/old/k/wy_dqkg.cuh kernel_src/wy_dqkg.cuh
(KDART_CACHE_DIR=/tmp/cnew KDART_GPU_TESTS=wy_intra,wy_production CK_FORK=no timeout 110 build/tests/test_gpu \
  > $O/test_gpu_sd.txt 2>&1; echo "rc=$?" >> $O/test_gpu_sd.txt)
tail -1 $O/test_gpu_sd.txt; grep -hE "^[0-9]+%|Checks|Failures|FAIL" $O/test_gpu_sd.txt | head -8; el
gc_pack
for i in 1 2; do for v in old new; do
  d=/tmp/old/k; [ $v = new ] && d=$R/kernel_src
  KDART_KERNEL_DIR=$d KDART_CACHE_DIR=/tmp/c$v PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
    timeout 60 python3 lab/calls/wy_intra_bench.py b2_t8192_h32,packed32768 2>&1 | grep -vE "Warning|warn|^row" \
    | sed "s|^|$v |"
done; done | tee $O/ab.txt; el
gc_pack
