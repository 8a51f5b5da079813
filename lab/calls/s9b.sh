#!/usr/bin/env bash
# lab/calls/s9b.sh (OUT set; carry build-gpu as build, .whl): the layer op-check test as rewritten (opcheck's
# schema/fake/autograd tests, then the op compiled against eager on the parts fla's forward writes), and
# experiments/da-swizzle (kernel-only: its own kernel dir and cache): test_gpu's intra and wy lists, memcheck
# and racecheck of bwd_intra's small cases, then wy_intra_bench alternating main and da-swizzle, two rounds.
set -u
. lab/calls/common.sh
rm -rf /tmp/old /tmp/das && mkdir -p /tmp/old /tmp/das && cp -a kernel_src /tmp/old/k && cp -a kernel_src /tmp/das/k \
  && (cd /tmp/das/k && patch -s -p2 < $R/lab/experiments/da-swizzle/da_swizzle.diff) || { echo "variant failed"; exit 3; }
grep -c dasw /tmp/das/k/bwd_intra_body.inc kernel_src/bwd_intra_body.inc
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR; gc_fla_site; export KDART_LIBRARY=$R/build/libkdart.so
(GPU_CHECK_PARTS=python PYTEST_LOG=pytest_layer PYTEST_TRITON=first PYTEST_TIMEOUT=150 \
  PYTEST_ARGS="-n 3 python/tests/test_whole_gpu.py -k kda_layer" tools/gpu_check.sh build $O > $O/layer_rc.txt 2>&1) &
TD=intra_varlen_lists,intra_fixed_any_t,intra_head_dims,varlen_garbage_writes_nothing,wy_intra,wy_production,intra_graph_capture
(KDART_KERNEL_DIR=/tmp/das/k KDART_CACHE_DIR=/tmp/cdas KDART_GPU_TESTS=$TD CK_FORK=no timeout 200 build/tests/test_gpu \
  > $O/test_gpu_das.txt 2>&1; echo "rc=$?" >> $O/test_gpu_das.txt) &
for tool in memcheck racecheck; do
  (KDART_KERNEL_DIR=/tmp/das/k KDART_CACHE_DIR=/tmp/cdas_$tool KDART_GPU_SMALL=bwd_intra CK_FORK=no timeout 170 \
     compute-sanitizer --tool $tool build/tests/test_gpu > $O/$tool.txt 2>&1
   echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $O/$tool.txt)" >> $O/san.txt) &
done
wait; el
grep -hE "passed|failed" $O/pytest_layer.txt | tail -1; grep -hE "^FAILED|^E  " $O/pytest_layer.txt | head -12
tail -1 $O/test_gpu_das.txt; grep -hE "^[0-9]+%|Checks|Failures|FAIL" $O/test_gpu_das.txt | head -8; cat $O/san.txt
grep -hE "Checks|Failures" $O/memcheck.txt $O/racecheck.txt | head -4
gc_pack
for i in 1 2; do for v in main das; do
  d=/tmp/old/k; [ $v = das ] && d=/tmp/das/k
  KDART_KERNEL_DIR=$d KDART_CACHE_DIR=/tmp/cb$v PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
    timeout 100 python3 lab/calls/wy_intra_bench.py b2_t8192_h32,packed32768,prod8192 2>&1 | grep -vE "Warning|warn" \
    | sed "s|^|$v |"
done; done | tee $O/ab.txt; el
gc_pack
