#!/usr/bin/env bash
# lab/calls/2026-12-04-g.sh (OUT set; carry build-gpu as build, build-fwdh, .whl): call f again after the
# fix of bwd_post's workspace device (a meta stand-in took the CPU's); the whole backward's bad calls now
# checked on meta stand-ins before anything launches.  Side by side: bwd_post and the whole backward
# (test_whole_gpu.py), the production float64 tests on the whole route, memcheck + racecheck of bwd_post, and
# fla's autotuning warm-up of the e2e shape (e2e.py --warm-only); then alone the whole backward at B2 T8192
# H32 (fla, the stage route, the whole route; profile, peak memory); then the fwd_h rewrite of the
# lab-fwdh-speed branch (build-fwdh: its library, test_gpu, kernel_src, python, bench): its GPU tests and its
# speed against fla.
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
(KDART_ERR_LOG=$O/prod_errors.txt GPU_CHECK_PARTS=python PYTEST_LOG=pytest_prod PYTEST_TRITON=first \
  PYTEST_TIMEOUT=250 PYTEST_ARGS="-n 4 -k whole python/tests/test_production_gpu.py" tools/gpu_check.sh build $O \
  > $O/prod_rc.txt 2>&1) &
(PYTHONPATH=/tmp/site KDART_LIBRARY=build/libkdart.so timeout 280 python3 bench/e2e.py --shapes b2_t8192_h32 \
  --configs prod --warm-only > $O/warm.txt 2>&1; echo "warm rc=$?" >> $O/warm.txt) &
wait; el
cat $O/san.txt; tail -1 $O/warm.txt
for f in $O/pytest_*.txt; do echo "== $f"; grep -hE "passed|failed" $f | tail -1; grep -hE "^FAILED|^ERROR|^E  " $f | head -12; done
grep -h "kdart vs fla pipeline" $O/pytest_whole.txt | head -8
cat $O/prod_errors.txt 2>/dev/null | head -8
gc_pack
PYTHONPATH=/tmp/site KDART_LIBRARY=build/libkdart.so PYTHONUNBUFFERED=1 timeout 200 \
  python3 bench/e2e.py --shapes b2_t8192_h32 --configs prod --profile --iters 8 --no-overhead > $O/e2e.txt 2>&1
echo "e2e rc=$?"; el; grep -vE "Warning|_warn_once|other:" $O/e2e.txt | tail -50
gc_pack
F=$R/build-fwdh
(cd $F && KDART_CACHE_DIR=$F/devcache KDART_KERNEL_DIR=$F/tree/kernel_src KDART_GPU_TESTS=fwdh_every_spec,fwdh_production \
  CK_FORK=no timeout 120 tests/test_gpu > $O/test_gpu_fwdh2.txt 2>&1; echo "test_gpu fwdh2 rc=$?" >> $O/test_gpu_fwdh2.txt)
grep -hE "Checks|rc=|:F:|:E:" $O/test_gpu_fwdh2.txt | cut -c1-300; el
(cd $F/tree && KDART_CACHE_DIR=$F/devcache KDART_KERNEL_DIR=$F/tree/kernel_src PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 \
  FLA_DISABLE_BACKEND_DISPATCH=1 timeout $(( 590 - ($(date +%s) - t0) )) python3 bench/side_by_side.py \
  --lib $F/libkdart.so --budget-s 120 --stage fwdh --rows b2_t8192_h32,prod8192 > $O/sbs_fwdh2.txt 2>&1; echo "sbs rc=$?")
grep -E "ERROR|MISMATCH|NONFINITE|^\| fwd_h" $O/sbs_fwdh2.txt; el
gc_pack
