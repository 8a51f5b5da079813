#!/usr/bin/env bash
# lab/calls/2026-12-04-j.sh (OUT set; carry build-gpu as build, .whl): main's rows never GPU-run (kdart
# selftest's new rows, test_gpu post_every_spec, the whole backward's CUDA-graph test) together with two
# kernels from lab/experiments: bwd_post split over grid.z (post-split) and fwd_h's shorter chunk step
# (fwd-h-speed).  Side by side: selftest, test_gpu's bwd_post and fwd_h suites, memcheck of fwd_h alone at
# the bench shapes, memcheck + racecheck of bwd_post, test_whole_gpu.py, the production tests of the whole
# route, fla's warm-up of the e2e shape.  Then alone: bwd_post against fla's three kernels, fwd_h alone,
# the e2e row (fla, stages, whole).
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
export KDART_LIBRARY=$R/build/libkdart.so
gc_fla_site
gc_selftest
gc_gpu_tests 280 post_every_spec,fwdh_every_spec,fwdh_production suites
(PYTHONPATH=/tmp/site:$R/python timeout 280 compute-sanitizer --tool memcheck python3 lab/calls/fwdh_sanitize.py \
   > $O/memcheck_fwdh.txt 2>&1; echo "fwdh memcheck rc=$? $(grep -E 'ERROR SUMMARY' $O/memcheck_fwdh.txt)" >> $O/san.txt) &
for tool in memcheck racecheck; do
  (PYTHONPATH=/tmp/site:$R/python timeout 200 compute-sanitizer --tool $tool python3 lab/calls/post_sanitize.py \
     > $O/${tool}_post.txt 2>&1; echo "post $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $O/${tool}_post.txt)" >> $O/san.txt) &
done
(GPU_CHECK_PARTS=python PYTEST_LOG=pytest_whole PYTEST_TRITON=first PYTEST_TIMEOUT=280 \
  PYTEST_ARGS="-n 3 -rA python/tests/test_whole_gpu.py" tools/gpu_check.sh build $O > $O/whole_rc.txt 2>&1) &
(KDART_ERR_LOG=$O/prod_errors.txt GPU_CHECK_PARTS=python PYTEST_LOG=pytest_prod PYTEST_TRITON=first PYTEST_TIMEOUT=280 \
  PYTEST_ARGS="-n 2 -k whole python/tests/test_production_gpu.py" tools/gpu_check.sh build $O > $O/prod_rc.txt 2>&1) &
(PYTHONPATH=/tmp/site KDART_LIBRARY=build/libkdart.so timeout 280 python3 bench/e2e.py --shapes b2_t8192_h32 \
  --configs prod --warm-only > $O/warm.txt 2>&1; echo "warm rc=$?" >> $O/warm.txt) &
wait; el
cat $O/san.txt; tail -1 $O/warm.txt; tail -4 $O/selftest.txt; grep -hE "Checks|rc=|Failures|Errors" $O/test_gpu_suites.txt | tail -4
for f in $O/pytest_*.txt; do echo "== $f"; grep -hE "passed|failed" $f | tail -1; grep -hE "^FAILED|^ERROR|^E  " $f | head -12; done
gc_pack
PYTHONPATH=/tmp/site:$R/python timeout 60 python3 lab/calls/post_bench.py 2>&1 | grep -v Warn | tee $O/post_bench.txt; el
PYTHONPATH=/tmp/site:$R/python timeout 60 python3 lab/calls/fwdh_sanitize.py --time 2>&1 | grep -v Warn | tee $O/fwdh_time.txt; el
gc_pack
PYTHONPATH=/tmp/site KDART_LIBRARY=build/libkdart.so PYTHONUNBUFFERED=1 timeout $(( 590 - ($(date +%s) - t0) )) \
  python3 bench/e2e.py --shapes b2_t8192_h32 --configs prod --profile --iters 8 --no-overhead > $O/e2e.txt 2>&1
echo "e2e rc=$?"; el; grep -vE "Warning|_warn_once|other:" $O/e2e.txt | grep -E "prod|queued|peak|bwd_post|fwd_h|kernel total|l2norm|gate_bwd"
gc_pack
