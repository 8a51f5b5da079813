#!/usr/bin/env bash
# lab/calls/2026-12-04-zb.sh (OUT set; carry build-gpu as build): where the fused wy_dqkg + intra kernel's
# instructions and stalls are, per SASS instruction (ncu SourceCounters, exported as CSV), at B2 T8192 H32
# K = V = 128 bf16 (lab/calls/fused_ncu.py), and its SASS.
set -u
. lab/calls/common.sh
export KDART_LIBRARY=$R/build/libkdart.so
PYTHONPATH=$R/python:$R/python/tests timeout 200 ncu --kernel-name regex:kdart_wy_dqkg --launch-skip 2 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --section InstructionStats -o /tmp/fused \
  python3 lab/calls/fused_ncu.py > $O/ncu_run.txt 2>&1
echo "ncu rc=$?"; el; tail -3 $O/ncu_run.txt
ncu -i /tmp/fused.ncu-rep --page source --csv --print-source sass > $O/src.csv 2> $O/src_err.txt
echo "export rc=$? $(wc -l < $O/src.csv) lines"; head -c 600 $O/src.csv; echo
ncu -i /tmp/fused.ncu-rep --page details --print-details all > $O/details.txt 2>&1
gc_pack; el
