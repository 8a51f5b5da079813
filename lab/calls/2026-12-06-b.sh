# twentieth session, call b: exp/gate-d at level 1, fixed length only (packed keeps the last step in
# bwd_post): test_gpu's chunk_bwd_whole, then beside each other the whole-backward Python tests
# (test_whole_gpu.py: the C call against the stage calls and the float64 recurrence; test_production_gpu.py
# -k whole: against fla).  Carry build-gd and .whl; run from the branch's checkout.
set -u
rm -rf build && mv build-gd build
. lab/calls/common.sh
gc_whole_levels 1
gc_fla_site
gc_whole_tests ${B_LIMIT:-190}
wait; el
gpu_whole_report; gpu_finish
