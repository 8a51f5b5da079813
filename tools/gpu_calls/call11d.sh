#!/usr/bin/env bash
# tools/gpu_calls/call11d.sh (session 11's last call; OUT set; carry build, .whl, .triton-carry): after
# kdart.fla's routing of the masked bwd_dhu cases measured slower than fla's (call11c, bench/masked_dhu.py):
# fla's recipes through kdart.fla and the Python tests on the Python path, side by side.
set -u
. tools/gpu_calls/common.sh
gc_fla_site
gc_fla_recipes
KDART_TORCH_EXT=0 GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch_pypath PYTEST_TIMEOUT=150 PYTEST_ARGS="python/tests --ignore=python/tests/test_fla_gpu.py $DS" tools/gpu_check.sh build $O; el
wait $fp; grep -v "^tar" $O/fla_rc.txt; el
grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
grep -E "PASSED|FAILED" $O/pytest_fla.txt | sed 's/ \[.*//' | sort | uniq -c | sort -rn | head -30
