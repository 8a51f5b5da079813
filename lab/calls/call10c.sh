#!/usr/bin/env bash
# lab/calls/call10c.sh (session 10's first call; OUT set; carry build, .whl, .triton-carry): the whole
# correctness run of main with bwd_dhu's V split merged and issue 15's gate lifted.  Side by side: test_gpu
# in three processes (KDART_GPU_PART), the selftest, the torch_ext build, fla's recipes, the Triton warm-up
# of the next call's fla workloads (side_by_side rows 5, 11-13, varlen rows 0-5); then the torch tests on
# the Python path and through the C++ fast path, sanitizers on the V split's tests, and last, alone, the
# 4.3e9-element test on both paths (it takes 80 GB of the GPU).
set -u
. lab/calls/common.sh
gc_fla_site
gc_test_gpu 280
gc_selftest
gc_ext_build
gc_fla_recipes
gc_warm WARM_SBS=5,11,12,13 WARM_VARLEN=0,1,2,3,4,5 WARM_JOBS=4 WARM_VARLEN_JOBS=2 WARM_TIMEOUT=280
wp=$!
gpu_torch_pypath
wait $ep; cat $O/ext_build.txt
gpu_torch_ext
wait $pids; tail -qn 3 $O/test_gpu?.txt; el
T=dhu_varlen_v_split,varlen_garbage_writes_nothing,dhu_varlen_lists
gc_sanitize 200 KDART_GPU_TESTS=$T
wait $fp; cat $O/fla_rc.txt; el
wait $sp; tail -n 2 $O/selftest.txt
wait; cat $O/san.txt; cat $O/warm_rc.txt $O/warm/warm.txt 2>/dev/null | tail -n 12; el
for ext in 0 1; do   # alone: 80 GB
  KDART_TORCH_EXT=$ext GPU_CHECK_PARTS=python PYTEST_LOG=pytest_beyond32_ext$ext PYTEST_TIMEOUT=150 PYTEST_ARGS="python/tests/test_torch_gpu.py::test_beyond_32bit_indexing" tools/gpu_check.sh build $O; el
done
grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
cp $O/warm/triton-autotune.tgz $O/triton-autotune-warm.tgz 2>/dev/null
(cd $O && tar czf 0logs.tgz --exclude=0logs.tgz --exclude='*.tgz' .)
