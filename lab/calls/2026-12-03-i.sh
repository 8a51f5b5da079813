#!/usr/bin/env bash
# lab/calls/2026-12-03-i.sh: the house's stage descriptions (runtime/core/stages/, the engine in
# runtime/core/stage.c, kdart_op_arg, the Python package building its calls from it) on the H200:
# 1. `kdart bench` alone (the kernels are call h's; the host path is new);
# 2. side by side: test_gpu in six processes (every test), test_stage (the test-only stage launched), the
#    selftest, memcheck and racecheck over wy_dqkg's small shapes, and the torch tests on the Python path
#    (the plans now built from kdart's description), fla's tests excluded (no Triton in this call).
set -u
. lab/calls/common.sh
timeout 120 build/kdart bench --reps 30 > $O/bench_after.txt 2>&1; echo "bench rc=$?" >> $O/bench_after.txt; el
grep -E "prod8192|1x8192 H32|overhead" $O/bench_after.txt
gc_test_gpu 400 6
(CK_FORK=no timeout 200 build/tests/test_stage > $O/test_stage.txt 2>&1; echo "test_stage rc=$?" >> $O/test_stage.txt) &
(timeout 420 build/kdart selftest > $O/selftest.txt 2>&1; echo "selftest rc=$?" >> $O/selftest.txt) &
gc_sanitize 400 KDART_GPU_SMALL=wy_dqkg
KDART_TORCH_EXT=0 GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch PYTEST_TIMEOUT=300 \
  PYTEST_ARGS="python/tests --ignore=python/tests/test_fla_gpu.py --ignore=python/tests/test_production_gpu.py $DS" \
  tools/gpu_check.sh build $O; el
grep -hE "passed|failed" $O/pytest_torch.txt | tail -2; grep -hE "^FAILED|^ERROR" $O/pytest_torch.txt | head -20
gc_pack
wait; el
grep -h "^test_gpu part\|Checks\|:F:\|:E:" $O/test_gpu*.txt | cut -c1-300
grep -E "Checks|:F:|:E:|launched|rc=" $O/test_stage.txt
tail -4 $O/selftest.txt | cut -c1-200; cat $O/san.txt
gc_pack
