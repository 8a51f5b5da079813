#!/usr/bin/env bash
# lab/calls/call10e.sh (session 10's third call; OUT set; carry build, .whl, .triton-carry): bwd_dhu's
# V split with the rows long sequences first (long_first) and the Python path passing v_tile = 0 (so it
# gets the split too).  Side by side: test_gpu in three processes, the selftest, the torch_ext build,
# fla's recipes, the Triton warm-up of the measured rows; then sanitizers on the V split's tests, the
# torch tests on both paths; then alone: side_by_side rows 5, 11-13, the varlen table (rows 0-5, through
# the C++ fast path, and row 1 again on the Python path), the 4.3e9-element test on both paths.
set -u
. lab/calls/common.sh
gc_fla_site
gc_test_gpu 280
gc_selftest
gc_ext_build
gc_fla_recipes
gc_warm WARM_SBS=5,11,12,13 WARM_VARLEN=0,1,2,3,4,5 WARM_JOBS=4 WARM_VARLEN_JOBS=3 WARM_TIMEOUT=250
wp=$!
gpu_torch_pypath
wait $ep; cat $O/ext_build.txt
wait $pids; tail -qn 2 $O/test_gpu?.txt; el
T=dhu_varlen_v_split,varlen_garbage_writes_nothing
gc_sanitize 200 KDART_GPU_TESTS=$T
gpu_torch_ext
wait $fp; cat $O/fla_rc.txt | grep -v "^tar"; el
wait $sp; tail -n 1 $O/selftest.txt
wait; cat $O/san.txt; grep triton_warm $O/warm/warm.txt $O/warm_rc.txt 2>/dev/null | tail -n 3; el
gpu_sbs 5,11,12,13
gpu_varlen 0,1,2,3,4,5 150 120
mv $O/varlen.txt $O/varlen_ext.txt; mv $O/varlen.json $O/varlen_ext.json
KDART_TORCH_EXT=0 gpu_varlen 1 100 80
mv $O/varlen.txt $O/varlen_pypath_row1.txt
for ext in 0 1; do
  KDART_TORCH_EXT=$ext GPU_CHECK_PARTS=python PYTEST_LOG=pytest_beyond32_ext$ext PYTEST_TIMEOUT=120 PYTEST_ARGS="python/tests/test_torch_gpu.py::test_beyond_32bit_indexing" tools/gpu_check.sh build $O; el
done
grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
grep -E "ERROR|^\| bwd" $O/side_by_side.txt; grep "^| bwd" $O/varlen_ext.txt; grep "^| bwd" $O/varlen_pypath_row1.txt
(cd $O && tar czf 0logs.tgz --exclude=0logs.tgz --exclude='*.tgz' .)
