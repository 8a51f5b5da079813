#!/usr/bin/env bash
# lab/calls/2026-12-04-f.sh (OUT set; carry build-gpu as build, .whl): the new bwd_post stage and the whole
# backward (kdart.torch.chunk_kda_bwd; kdart.fla.enable(whole=True)).  Side by side: bwd_post and the whole
# backward against float64 / fla's pipeline (test_whole_gpu.py), the production float64 tests on both routes
# (test_production_gpu.py), kdart.fla's GPU tests, memcheck + racecheck of bwd_post; then alone the whole
# backward in the production configuration at B2 T8192 H32, fla vs kdart.fla's stage route vs the whole route,
# with the per-stage profile and peak memory.
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
export KDART_LIBRARY=$R/build/libkdart.so
gc_fla_site
for tool in memcheck racecheck; do
  (PYTHONPATH=/tmp/site:$R/python timeout 200 compute-sanitizer --tool $tool python3 lab/calls/post_sanitize.py \
     > $O/$tool.txt 2>&1; echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $O/$tool.txt)" >> $O/san.txt) &
done
(GPU_CHECK_PARTS=python PYTEST_LOG=pytest_whole PYTEST_TRITON=first PYTEST_TIMEOUT=250 \
  PYTEST_ARGS="-n 3 -rA python/tests/test_whole_gpu.py" tools/gpu_check.sh build $O > $O/whole_rc.txt 2>&1) &
gc_fla_prod 280
wait; el
cat $O/san.txt
for f in $O/pytest_*.txt; do echo "== $f"; grep -hE "passed|failed" $f | tail -1; grep -hE "^FAILED|^ERROR" $f | head -12; done
grep -h "kdart vs fla pipeline" $O/pytest_whole.txt | head -8
cat $O/prod_errors.txt 2>/dev/null | head -14
gc_pack
gpu_e2e_prod 590
gc_pack
