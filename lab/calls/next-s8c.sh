#!/usr/bin/env bash
# lab/calls/next-s8c.sh (OUT set; carry build-gpu as build, .whl): kdart.fla.chunk_kda (fla's forward and
# kdart's backward, one custom op each) tested on the GPU (eager = compiled fullgraph = fla with kdart.fla's
# whole backward, bit for bit; opcheck), then bench/e2e.py's production row at B2 T8192 H32 (fla and the whole
# route, profiled; fla's autotuning first, in the same process).
set -u
. lab/calls/common.sh
gc_prologue
GPU_CHECK_PARTS=python PYTEST_LOG=pytest_layer PYTEST_TRITON=first PYTEST_TIMEOUT=150 \
  PYTEST_ARGS="-n 3 python/tests/test_whole_gpu.py -k kda_layer" tools/gpu_check.sh build $O > $O/layer_rc.txt 2>&1
el; grep -hE "passed|failed" $O/pytest_layer.txt | tail -1; grep -hE "^FAILED|^E  " $O/pytest_layer.txt | head -12
gc_pack
export FLA_DISABLE_BACKEND_DISPATCH=1 PYTHONUNBUFFERED=1
PYTHONPATH=/tmp/site timeout $(( 520 - ($(date +%s) - t0) )) python3 bench/e2e.py --shapes b2_t8192_h32 --configs prod \
  --profile --iters 6 --route whole --no-overhead > $O/e2e_prod.txt 2>&1
echo "e2e prod rc=$?"; el; grep -vE "Warning|_warn_once|Python call|overhead" $O/e2e_prod.txt | tail -40
gc_pack
