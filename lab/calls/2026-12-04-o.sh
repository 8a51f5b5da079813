#!/usr/bin/env bash
# lab/calls/2026-12-04-o.sh (OUT set; carry build-gpu as build, .whl): wy_dqkg with bwd_intra's terms in the
# same launch (intra=1).  Every wy_dqkg and bwd_intra specialization prewarmed on 16 cores first; then side
# by side: test_gpu's wy_intra, wy_production, dav_fused; wy_every_spec; intra_every_spec(_beta_f32);
# memcheck and racecheck over every wy_dqkg spec on small shapes; the torch tests of the fusion, the whole
# backward (test_whole_gpu.py) and the production float64 tests of the whole route, fla in first-config
# mode.  Then, alone: lab/calls/wy_intra_bench.py (the fused launch against the two it replaces).
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
gc_fla_site
export KDART_LIBRARY=$R/build/libkdart.so
timeout 200 build/kdart prewarm --kernel wy_dqkg --kernel bwd_intra --all --jobs 16 > $O/prewarm.txt 2>&1
echo "prewarm rc=$?"; tail -1 $O/prewarm.txt; el
gc_gpu_tests 330 wy_intra,wy_production,dav_fused wy
gc_gpu_tests 330 wy_every_spec every
gc_gpu_tests 330 intra_every_spec,intra_every_spec_beta_f32 intra
gc_sanitize 330 KDART_GPU_SMALL=wy_dqkg
(GPU_CHECK_PARTS=python PYTEST_LOG=pytest_whole PYTEST_TRITON=first PYTEST_TIMEOUT=330 \
  PYTEST_ARGS="-rA -n 3 python/tests/test_whole_gpu.py python/tests/test_torch_gpu.py::test_wy_dqkg_intra_is_the_two_launches" \
  tools/gpu_check.sh build $O > $O/whole_rc.txt 2>&1) &
(KDART_ERR_LOG=$O/prod_errors.txt GPU_CHECK_PARTS=python PYTEST_LOG=pytest_prod PYTEST_TRITON=first \
  PYTEST_TIMEOUT=330 PYTEST_ARGS="-n 3 python/tests/test_production_gpu.py -k whole" tools/gpu_check.sh build $O \
  > $O/prod_rc.txt 2>&1) &
wait; el
for f in wy every intra; do grep -hE "Checks|rc=|:F:" $O/test_gpu_$f.txt | tail -3; done
cat $O/san.txt
grep -hE "passed|failed" $O/pytest_whole.txt $O/pytest_prod.txt | tail -2
grep -hE "^FAILED|^E  " $O/pytest_whole.txt $O/pytest_prod.txt | head -12
gc_pack
PYTHONPATH=$R/python:$R/python/tests timeout 120 python3 lab/calls/wy_intra_bench.py > $O/wy_intra_bench.txt 2>&1
echo "bench rc=$?"; cat $O/wy_intra_bench.txt | grep -vE "Warning|warn"; el
gc_pack
