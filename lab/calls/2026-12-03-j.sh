#!/usr/bin/env bash
# lab/calls/2026-12-03-j.sh: the last device minutes of the session: bench/side_by_side.py --stage wy on the
# rows of the wy_dqkg issue that were never measured (prod8192, K = V = 256, K = V = 100), fla autotuning each
# shape in this one process (no warm-up: there is no time for one beside it); the log is packed after the run.
set -u
. lab/calls/common.sh
gc_fla_site
PYTHONPATH=/tmp/site:$R/python KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 timeout 430 \
  python3 bench/side_by_side.py --stage wy --iters 20 --rows prod8192,b2_t8192_h16_k256,b2_t8192_h16_d100 \
  > $O/sbs_wy.txt 2>&1
echo "sbs rc=$?"; grep -E "^\| wy|kdart .* ms, fla|ERROR|Error" $O/sbs_wy.txt; el
