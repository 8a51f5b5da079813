#!/usr/bin/env bash
# lab/calls/2026-12-03-o.sh: wy_dqkg's sum_v h dh without bank conflicts (each lane's order rotated by its
# quarter).  Side by side: wy's GPU tests, memcheck + racecheck on small shapes.  Then alone: kdart's rows.
set -u
. lab/calls/common.sh
(KDART_GPU_TESTS=wy_every_spec CK_FORK=no timeout 200 build/tests/test_gpu > $O/test_gpu_wy1.txt 2>&1; echo "rc=$?" >> $O/test_gpu_wy1.txt) &
(KDART_GPU_TESTS=wy_production CK_FORK=no timeout 200 build/tests/test_gpu > $O/test_gpu_wy2.txt 2>&1; echo "rc=$?" >> $O/test_gpu_wy2.txt) &
gc_sanitize 200 KDART_GPU_SMALL=wy_dqkg
wait; el
grep -hE "Checks|rc=|:F:|:E:" $O/test_gpu_wy*.txt | cut -c1-300; cat $O/san.txt
PYTHONPATH=$R/python KDART_LIBRARY=$R/build/libkdart.so timeout 100 python3 bench/side_by_side.py --stage wy --no-fla \
  --rows b2_t8192_h32,prod8192,b2_t8192_h16_k256,b2_t8192_h16_d100,b1_t32768_h32_packed > $O/wy_D.txt 2>&1
grep -E "^\| wy" $O/wy_D.txt; el
gc_pack
