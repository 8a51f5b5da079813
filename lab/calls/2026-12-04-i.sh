#!/usr/bin/env bash
# lab/calls/2026-12-04-i.sh (OUT set; carry build-gpu as build, .whl): bwd_post split by role over grid.z
# (dq, dk, dg+db CTAs; 80 registers, three CTAs per SM): its float64 tests and memcheck side by side, then
# alone its time against fla's epilogue kernels (lab/calls/post_bench.py).
set -u
. lab/calls/common.sh
export KDART_LIBRARY=$R/build/libkdart.so
gc_fla_site
(PYTHONPATH=/tmp/site:$R/python timeout 100 compute-sanitizer --tool memcheck python3 lab/calls/post_sanitize.py \
   > $O/memcheck.txt 2>&1; echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $O/memcheck.txt)" >> $O/san.txt) &
(GPU_CHECK_PARTS=python PYTEST_LOG=pytest_post PYTEST_TIMEOUT=90 \
  PYTEST_ARGS="-n 3 -k bwd_post python/tests/test_whole_gpu.py" tools/gpu_check.sh build $O > $O/post_rc.txt 2>&1) &
wait; el
cat $O/san.txt; grep -hE "passed|failed" $O/pytest_post.txt | tail -1; grep -hE "^FAILED|^E  " $O/pytest_post.txt | head
PYTHONPATH=/tmp/site:$R/python timeout 60 python3 lab/calls/post_bench.py 2>&1 | grep -v Warn | tee $O/post_bench.txt; el
