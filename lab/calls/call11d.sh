#!/usr/bin/env bash
# lab/calls/call11d.sh (session 11's last call; OUT set; carry build, .whl, .triton-carry): after
# kdart.fla's routing of the masked bwd_dhu cases measured slower than fla's (call11c, bench/masked_dhu.py):
# fla's recipes through kdart.fla and the Python tests on the Python path, side by side.
set -u
. lab/calls/common.sh
gc_fla_site
gc_fla_recipes
gpu_torch_pypath
wait $fp; grep -v "^tar" $O/fla_rc.txt; el
grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
grep -E "PASSED|FAILED" $O/pytest_fla.txt | sed 's/ \[.*//' | sort | uniq -c | sort -rn | head -30
