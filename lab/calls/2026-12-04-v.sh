#!/usr/bin/env bash
# lab/calls/2026-12-04-v.sh (OUT set; carry build-gpu as build): lab/calls/whole_ab.py with per-kernel
# profiles, the qk tail loading eight rows a warp at once (kernel_src), then four (lab/tmp_ksrc_u4, B2 T8192
# H32 only).
set -u
. lab/calls/common.sh
export KDART_LIBRARY=$R/build/libkdart.so
timeout 100 build/kdart prewarm --kernel wy_dqkg --kernel bwd_post --kernel bwd_dhu --kernel fwd_h --kernel recompute_wu --jobs 16 > $O/prewarm.txt 2>&1
echo "prewarm rc=$?"; tail -1 $O/prewarm.txt; el
PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls timeout 150 python3 lab/calls/whole_ab.py > $O/whole_ab.txt 2>&1
echo "whole_ab rc=$?"; grep -vE "Warning|warn" $O/whole_ab.txt | tail -12; el
KDART_KERNEL_DIR=$R/lab/tmp_ksrc_u4 PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls timeout 150 python3 lab/calls/whole_ab.py b2_t8192_h32 > $O/whole_ab_u4.txt 2>&1
echo "whole_ab u4 rc=$?"; grep -vE "Warning|warn" $O/whole_ab_u4.txt | tail -6; el
gc_pack
