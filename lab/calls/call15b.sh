#!/usr/bin/env bash
# lab/calls/call15b.sh (session 15's second call; OUT set; carry build, .whl): bwd_dhu's BV 64 at the
# K tiles 192/256 (two warpgroups, no head pairs at BV 64), the measured tile costs, kdart.torch's padding of
# odd K / V.  At once: test_gpu in six processes (dhu_every_spec split by io), the selftest, memcheck and
# racecheck on small shapes, fla's Triton warm-up of the masked cases below and of varlen row 5, the torch
# tests on the Python path; then alone: bench/masked_dhu.py on those cases, varlen rows 5 and 0 (bwd_dhu),
# side_by_side rows 11 and 5 (bwd_dhu).  The archive is rewritten after every phase.
set -u
. lab/calls/common.sh
CASES=160:160,160:160:v,130:128,144:144,192:192:v,200:200:v,250:250:v,256:96:v,63:63,101:101,256:256,192:192
gc_fla_site
gc_test_gpu 330 6
gc_selftest
gc_sanitize 300 KDART_GPU_SMALL=1
gc_warm_mdhu 250 4 $CASES
gc_warm WARM_VARLEN=5,0 WARM_VARLEN_JOBS=2 WARM_TIMEOUT=250
gpu_torch_pypath
gc_pack
wait $pids; tail -qn 2 $O/test_gpu?.txt; el
wait; tail -n 1 $O/selftest.txt; cat $O/san.txt; tail -n 2 $O/warm_mdhu.txt; el
gc_pack
PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 timeout 120 \
  python3 bench/masked_dhu.py --cases $CASES > $O/masked_dhu.txt 2>&1; cat $O/masked_dhu.txt; el
gc_pack
[ $(( $(date +%s) - t0 )) -lt 470 ] && GPU_CHECK_PARTS=varlen VARLEN_ARGS="--rows 5,0 --stage dhu" VARLEN_TIMEOUT=80 VARLEN_BUDGET=70 tools/gpu_check.sh build $O
[ $(( $(date +%s) - t0 )) -lt 520 ] && GPU_CHECK_PARTS=sbs SBS_ARGS="--rows 11,5 --stage dhu" SBS_TIMEOUT=50 SBS_BUDGET=45 tools/gpu_check.sh build $O
el
grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
[ -f $O/varlen.txt ] && grep "^| bwd" $O/varlen.txt
[ -f $O/side_by_side.txt ] && grep -E "ERROR|^\| bwd" $O/side_by_side.txt
gc_pack
