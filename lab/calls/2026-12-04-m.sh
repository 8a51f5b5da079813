#!/usr/bin/env bash
# lab/calls/2026-12-04-m.sh (OUT set; carry build-gpu as build, .whl): after the bwd_post plan's key took the
# gate's form (call l: a safe-gate plan was reused by a softplus-gate call on the same shapes): the whole of
# test_whole_gpu.py (its new two-forms test, the CUDA-graph test with the slack-row contract) with fla in
# first-config mode, and test_gpu post_every_spec with its new fp32-sum tolerance.  (Run twice: then
# M_TESTS=the CUDA-graph test alone, its slack rows past cu_seqlens[-1] left out of the comparison.)
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
gc_fla_site
export KDART_LIBRARY=$R/build/libkdart.so
gc_gpu_tests 200 post_every_spec post
GPU_CHECK_PARTS=python PYTEST_LOG=pytest_whole PYTEST_TRITON=first PYTEST_TIMEOUT=250 \
  PYTEST_ARGS="-rA ${M_TESTS:-python/tests/test_whole_gpu.py}" tools/gpu_check.sh build $O > $O/whole_rc.txt 2>&1
wait; el
grep -hE "passed|failed" $O/pytest_whole.txt | tail -1; grep -hE "^FAILED|^E  " $O/pytest_whole.txt | head -12
grep -hE "Checks|rc=|:F:" $O/test_gpu_post.txt | tail -3
gc_pack
