#!/usr/bin/env bash
# lab/calls/next-s8d.sh (OUT set; carry build-gpu as build, .whl): kdart.fla.chunk_kda's GPU tests again after
# the fake's fix for symbolic sizes (opcheck's dynamic AOT dispatch); no prewarm (the specs compile on use).
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR; gc_fla_site; export KDART_LIBRARY=$R/build/libkdart.so
GPU_CHECK_PARTS=python PYTEST_LOG=pytest_layer PYTEST_TRITON=first PYTEST_TIMEOUT=120 \
  PYTEST_ARGS="-n 3 python/tests/test_whole_gpu.py -k kda_layer" tools/gpu_check.sh build $O > $O/layer_rc.txt 2>&1
el; grep -hE "passed|failed" $O/pytest_layer.txt | tail -1; grep -hE "^FAILED|^E  " $O/pytest_layer.txt | head -12
gc_pack
