#!/usr/bin/env bash
# lab/calls/2026-12-04-u.sh (OUT set; carry build-gpu as build, .whl): wy_dqkg finishing dq and dk in its
# launch (qk = 1: bwd_post's l2norm backward and cast) inside kdart_kda_chunk_bwd, bwd_post for dg and db
# only.  Default cache prewarmed on 16 cores; then side by side: test_whole_gpu.py -k c_chunk (the C call,
# which takes qk where HV == H, against kdart.torch.chunk_kda_bwd's stages, which do not: bit for bit),
# memcheck and racecheck of the fla-free C-call test; then alone lab/calls/whole_ab.py.
set -u
. lab/calls/common.sh
gc_prologue
(GPU_CHECK_PARTS=python PYTEST_LOG=pytest_c PYTEST_TRITON=first PYTEST_TIMEOUT=300 \
  PYTEST_ARGS="-rA -n 2 python/tests/test_whole_gpu.py -k c_chunk" tools/gpu_check.sh build $O > $O/c_rc.txt 2>&1) &
for tool in memcheck racecheck; do
  (cd python/tests && PYTHONPATH=$R/python:/tmp/site timeout 300 compute-sanitizer --tool $tool \
    python3 -m pytest -q -p no:cacheprovider test_whole_gpu.py -k "random_saved and (k64 or packed-k128)" > $O/$tool.txt 2>&1;
    echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $O/$tool.txt | tail -1)" >> $O/san.txt) &
done
wait; el
cat $O/san.txt; tail -3 $O/memcheck.txt
grep -hE "passed|failed" $O/pytest_c.txt | tail -2
grep -hE "^FAILED|^E  " $O/pytest_c.txt | head -12
gc_pack
PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls timeout 150 python3 lab/calls/whole_ab.py > $O/whole_ab.txt 2>&1
echo "whole_ab rc=$?"; grep -vE "Warning|warn" $O/whole_ab.txt | tail -8; el
gc_pack
