#!/usr/bin/env bash
# lab/calls/2026-12-03-h.sh (third session of 2026-12-03, first call): main at ddda76c on the H200, what the
# last session could not run (its call g), and the baseline of `kdart bench` for the house's changes:
# 1. `kdart bench` (the standard table) alone, before anything else runs on the GPU;
# 2. side by side: test_gpu in six processes (every test, wy_dqkg's V = 256 / 512 cases included), the
#    selftest (with its wy rows), memcheck and racecheck over the small shapes (every wy specialization),
#    fla's Triton warm-up of side_by_side's wy rows;
# 3. side_by_side --stage wy on the rows the issue names that were never measured.
set -u
. lab/calls/common.sh
timeout 120 build/kdart bench --reps 30 > $O/bench_before.txt 2>&1; echo "bench rc=$?" >> $O/bench_before.txt; el
gc_fla_site
gc_test_gpu 240 6
gc_selftest
gc_sanitize 240 KDART_GPU_SMALL=1
gc_warm WARM_SBS=b2_t8192_h32,prod8192,b2_t8192_h16_k256,b2_t8192_h16_d100 WARM_SBS_ARGS="--stage wy" WARM_JOBS=4 WARM_TIMEOUT=220
wait; el
grep -h "^test_gpu part\|Checks\|:F:\|:E:" $O/test_gpu*.txt | cut -c1-300
tail -3 $O/selftest.txt; cat $O/san.txt
gc_pack
PYTHONPATH=/tmp/site:$R/python KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 timeout 200 \
  python3 bench/side_by_side.py --stage wy --iters 30 \
  --rows b2_t8192_h32,prod8192,b2_t8192_h16_k256,b2_t8192_h16_d100,b1_t32768_h32_packed > $O/sbs_wy.txt 2>&1
echo "sbs rc=$?"; grep -E "^\| wy|ERROR|Error" $O/sbs_wy.txt; el
gc_pack
