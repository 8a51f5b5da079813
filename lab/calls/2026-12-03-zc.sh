#!/usr/bin/env bash
# lab/calls/2026-12-03-zc.sh (OUT set; carry build-gpu as build, .whl): kdart.fla's GPU tests (fla's own
# recipes with kdart enabled) with the recompute and the gate cumsum served, on the last device seconds.
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
gc_fla_site
GPU_CHECK_PARTS=python PYTEST_LOG=pytest_fla PYTEST_TRITON=first PYTEST_TIMEOUT=105 \
  PYTEST_ARGS="-n 8 python/tests/test_fla_gpu.py" tools/gpu_check.sh build $O > $O/fla_rc.txt 2>&1
el; grep -hE "passed|failed" $O/pytest_fla.txt | tail -2; grep -hE "^FAILED|^ERROR" $O/pytest_fla.txt | head -12
