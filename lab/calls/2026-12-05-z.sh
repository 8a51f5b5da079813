# nineteenth session, call z: the branch exp/gate-d's checks beside each other: memcheck and racecheck of
# test_gpu's chunk_bwd_whole, the whole-backward Python tests (test_whole_gpu.py, test_production_gpu.py -k
# whole: kdart's gradients against the float64 recurrence and fla's).  Carry build-gd (the branch's build)
# and .whl.
set -u
rm -rf build && mv build-gd build
. lab/calls/common.sh
gc_fla_site
gc_whole_tests 300
gc_tests_san chunk_bwd_whole chunk_bwd_whole 300
gpu_whole_report; gpu_finish
