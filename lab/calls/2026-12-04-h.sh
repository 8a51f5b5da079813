#!/usr/bin/env bash
# lab/calls/2026-12-04-h.sh (OUT set; carry build-gpu as build, .whl): bwd_post with every load of four
# tokens a warp in flight (two CTAs per SM; call g had it at 0.656 ms in the whole backward against fla's
# 0.387 for l2norm_bwd, kda_gate_bwd and the sigmoid), and test_whole_gpu.py's ddt_bias comparison fixed
# (the reference's [HV, K] against the output's [HV*K]).  Side by side: test_whole_gpu.py, memcheck +
# racecheck of bwd_post, fla's warm-up of the e2e shape; then alone the e2e row (fla, stages, whole).
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
(PYTHONPATH=/tmp/site KDART_LIBRARY=build/libkdart.so timeout 200 python3 bench/e2e.py --shapes b2_t8192_h32 \
  --configs prod --warm-only > $O/warm.txt 2>&1; echo "warm rc=$?" >> $O/warm.txt) &
wait; el
cat $O/san.txt; tail -1 $O/warm.txt
for f in $O/pytest_*.txt; do echo "== $f"; grep -hE "passed|failed" $f | tail -1; grep -hE "^FAILED|^ERROR|^E  " $f | head -12; done
gc_pack
PYTHONPATH=/tmp/site KDART_LIBRARY=build/libkdart.so PYTHONUNBUFFERED=1 timeout 200 \
  python3 bench/e2e.py --shapes b2_t8192_h32 --configs prod --profile --iters 8 --no-overhead > $O/e2e.txt 2>&1
echo "e2e rc=$?"; el; grep -vE "Warning|_warn_once|other:" $O/e2e.txt | grep -E "prod|queued|peak|bwd_post|fwd_h|kernel total|l2norm|gate_bwd"
gc_pack
