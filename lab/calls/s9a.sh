#!/usr/bin/env bash
# lab/calls/s9a.sh (OUT set; carry build-gpu as build, build-rwu, .whl): main's review commit on the GPU
# (kdart.fla.chunk_kda's layer tests with opcheck; test_gpu's chunk-grid lists), then experiments/rwu-256
# (build-rwu + the patched kernels): its tests, and whole_ab alternating main and rwu-256, two rounds.
set -u
. lab/calls/common.sh
rm -rf /tmp/old /tmp/rwu && mkdir -p /tmp/old /tmp/rwu && cp -a kernel_src /tmp/old/k && cp -a kernel_src /tmp/rwu/k \
  && (cd /tmp/rwu/k && patch -s -p2 < $R/lab/calls/s9a-k.diff) || { echo "variant failed"; exit 3; }
grep -c "sTot\[3\]\|256" /tmp/rwu/k/recompute_wu.cuh kernel_src/recompute_wu.cuh
gc_prologue
T1=intra_varlen_lists,varlen_garbage_writes_nothing,wy_intra,rwu_production,dav_standalone,dav_fused,varlen_thousand_sequences
gc_gpu_tests 200 $T1 k1
(GPU_CHECK_PARTS=python PYTEST_LOG=pytest_layer PYTEST_TRITON=first PYTEST_TIMEOUT=150 \
  PYTEST_ARGS="-n 3 python/tests/test_whole_gpu.py -k kda_layer" tools/gpu_check.sh build $O > $O/layer_rc.txt 2>&1) &
wait; el
tail -1 $O/test_gpu_k1.txt; grep -hE "^[0-9]+%|Checks|Failures|FAIL" $O/test_gpu_k1.txt | head -8
grep -hE "passed|failed" $O/pytest_layer.txt | tail -1; grep -hE "^FAILED|^E  " $O/pytest_layer.txt | head -12
gc_pack
# rwu-256: its own build and kernels
(KDART_KERNEL_DIR=/tmp/rwu/k KDART_CACHE_DIR=/tmp/crwu KDART_GPU_TESTS=rwu_every_spec,rwu_production,fwdh_production \
  CK_FORK=no timeout 200 build-rwu/tests/test_gpu > $O/test_gpu_rwu.txt 2>&1; echo "rc=$?" >> $O/test_gpu_rwu.txt) &
wait; el
tail -1 $O/test_gpu_rwu.txt; grep -hE "^[0-9]+%|Checks|Failures|FAIL" $O/test_gpu_rwu.txt | head -8
gc_pack
for i in 1 2; do for v in main rwu; do
  if [ $v = main ]; then L=$R/build/libkdart.so; d=/tmp/old/k; else L=$R/build-rwu/libkdart.so; d=/tmp/rwu/k; fi
  KDART_LIBRARY=$L KDART_KERNEL_DIR=$d KDART_CACHE_DIR=$([ $v = main ] && echo $R/build/devcache || echo /tmp/crwu) PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
    timeout 80 python3 lab/calls/whole_ab.py 2>&1 | grep -vE "Warning|warn" | grep -E "bare|chunk_kda_bwd profile|Error|error" \
    | sed -E "s/void kdart_//g; s/<kdart::bf16[^ ]*//g; s/\(kdart[^ ]*//g" | cut -c1-300 | sed "s|^|$v |"
done; done | tee $O/ab.txt; el
gc_pack
# the production float64 tests with rwu-256 in place (kernel_src patched here: gpu_check names it)
(cd kernel_src && patch -s -p2 < $R/lab/calls/s9a-k.diff) && rm -rf build-main && mv build build-main \
  && mv build-rwu build && export KDART_LIBRARY=$R/build/libkdart.so KDART_CACHE_DIR=/tmp/crwu \
  && KDART_ERR_LOG=$O/prod_errors.txt GPU_CHECK_PARTS=python PYTEST_LOG=pytest_prod PYTEST_TRITON=first \
  PYTEST_TIMEOUT=200 PYTEST_ARGS="-n 3 python/tests/test_production_gpu.py -k whole" tools/gpu_check.sh build $O \
  > $O/prod_rc.txt 2>&1
grep -hE "passed|failed" $O/pytest_prod.txt | tail -1; grep -hE "^FAILED|^E  " $O/pytest_prod.txt | head -8; el
gc_pack
