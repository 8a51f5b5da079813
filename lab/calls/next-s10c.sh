#!/usr/bin/env bash
# lab/calls/next-s10c.sh (OUT set; carry build-gpu as build and build-main-gpu, .whl): experiments/wy-tma.
# Before: build main into build-main-gpu (as build-gpu is built), then `git apply
# lab/experiments/wy-tma/wy_tma.diff`, rebuild and make build-gpu.  Here: main's kernels in /tmp/old/k (the
# kernel part reversed) with build-main-gpu, the TMA path in kernel_src with build: test_gpu's wy lists and
# the small wy cases under memcheck and racecheck, then wy_intra_bench and whole_ab alternating, two rounds,
# then the whole-backward tests.
set -u
. lab/calls/common.sh
rm -rf /tmp/old && mkdir -p /tmp/old && cp -a kernel_src /tmp/old/k \
  && (cd /tmp/old/k && patch -s -R -p2 < $R/lab/experiments/wy-tma/wy_tma_kernels.diff) || { echo "variant failed"; exit 3; }
grep -c "kTma" /tmp/old/k/wy_dqkg.cuh kernel_src/wy_dqkg.cuh
export KDART_LIBRARY=$R/build/libkdart.so TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR; gc_fla_site
(KDART_GPU_TESTS=wy_intra,wy_production,wy_every_spec,varlen_garbage_writes_nothing CK_FORK=no timeout 240 \
  build/tests/test_gpu > $O/test_gpu_tma.txt 2>&1; echo "rc=$?" >> $O/test_gpu_tma.txt) &
gc_sanitize_dir $R/kernel_src 200 wy_dqkg
wait; el
tail -1 $O/test_gpu_tma.txt; grep -hE "^[0-9]+%|Checks|Failures|FAIL" $O/test_gpu_tma.txt | head -8; cat $O/san.txt
grep -ciE "invalid|hazard" $O/memcheck.txt $O/racecheck.txt
gc_pack
for i in 1 2; do for v in old tma; do
  if [ $v = old ]; then L=$R/build-main-gpu/libkdart.so; d=/tmp/old/k; else L=$R/build/libkdart.so; d=$R/kernel_src; fi
  KDART_LIBRARY=$L KDART_KERNEL_DIR=$d KDART_CACHE_DIR=/tmp/c$v PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
    timeout 100 python3 lab/calls/wy_intra_bench.py b2_t8192_h32,prod8192 2>&1 | grep -vE "Warning|warn|^row" | sed "s|^|$v |"
  KDART_LIBRARY=$L KDART_KERNEL_DIR=$d KDART_CACHE_DIR=/tmp/c$v PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
    timeout 80 python3 lab/calls/whole_ab.py b2_t8192_h32 2>&1 | grep -E "bare|Error|error" | sed "s|^|$v |"
done; done | tee $O/ab.txt; el
gc_pack
gc_whole_tests 200
wait; el
gpu_whole_report
gc_pack
