#!/usr/bin/env bash
# lab/calls/call15c.sh (session 15's third call; OUT set; carry build, .whl): the Python package after
# kdart.fla's routing change (every head dim served but an odd K or V) and the side-by-side rows of issue
# 15.  At once: the selftest, the torch_ext build, fla's recipes (first-config mode, five workers; D = 160
# added), fla's Triton warm-up of side_by_side rows 11, 12, 13, 5, the torch tests on the Python path, then
# through the C++ fast path; then alone: side_by_side rows 11 (K = V = 256), 12 (D = 100), 13 (D = 60) and
# 5 (K = 128, the reference row).  The archive is rewritten after every phase.
set -u
. lab/calls/common.sh
gc_fla_site
(timeout 400 build/kdart selftest > $O/selftest.txt 2>&1; echo "selftest rc=$?" >> $O/selftest.txt) &
gc_ext_build
gc_warm WARM_SBS=11,12,13,5 WARM_JOBS=8 WARM_TIMEOUT=240
gc_fla_recipes
gpu_torch_pypath
wait $ep; tail -n 1 $O/ext_build.txt
gpu_torch_ext
gc_pack
wait $fp; grep -v "^tar" $O/fla_rc.txt; el
wait; tail -n 2 $O/selftest.txt; grep triton_warm $O/warm_rc.txt $O/warm/warm.txt 2>/dev/null | tail -n 2; el
grep -hE "passed|failed" $O/pytest_*.txt | tail -5
grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
gc_pack
GPU_CHECK_PARTS=sbs SBS_ARGS="--rows 11,12,13,5" SBS_TIMEOUT=150 SBS_BUDGET=130 tools/gpu_check.sh build $O; el
[ -f $O/side_by_side.txt ] && grep -E "ERROR|^\| bwd|^\| row|ratio" $O/side_by_side.txt
gc_pack
