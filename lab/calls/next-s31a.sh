# call s31a (carry build-gpu: main's build): main's GPU checks after u moved into fwd_h, beside the
# sanitizers: test_gpu chunk_bwd_whole and fwdh_production (main's kernels), memcheck and racecheck of
# chunk_bwd_whole, each bounded by LIMIT (default 240) seconds.
set -u
. lab/calls/common.sh
gc_tests_san chunk_bwd_whole,fwdh_production chunk_bwd_whole ${LIMIT:-240}
grep -E "Checks|F:|rc=" $O/test_gpu.txt | cut -c1-200 | head -6; gc_pack
