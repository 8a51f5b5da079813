# twenty-first session, call d (carry build-gpu = branch exp/pair's build, build-m = main's build with its
# kernels in build-m/k, .whl): the two scans side by side.  1. whole_ab.py's bare C call and profile at B2
# T8192 H32 and on the packed row, alone, each in its own process: main, the branch with KDART_SCAN_PAIR=0
# (bwd_dhu's two stages at <128, 64>, one stream), the branch as it is (fwd_h's pair form on a second
# stream beside bwd_dhu); 2. test_gpu's chunk_bwd_whole (pair on against off, bitwise) and the bwd_dhu
# suites (two stages at <128, 64>), beside the whole-backward Python tests (CUDA-graph replay of a packed
# step included); 3. memcheck and racecheck of chunk_bwd_whole.  D_LIMIT: the call's budget in seconds.
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
L=${D_LIMIT:-590}
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
export KDART_CACHE_DIR=/tmp/cw WB_CACHE=/tmp/cw WB_LIMIT=170
ROWS=b2_t8192_h32,packed32768
{ gc_whole_bare main $R/build-m/k build-m/libkdart.so $ROWS
  KDART_SCAN_PAIR=0 gc_whole_bare p0 $R/kernel_src build/libkdart.so $ROWS
  KDART_SCAN_PAIR=1 gc_whole_bare p1 $R/kernel_src build/libkdart.so $ROWS; } | tee $O/ab.txt | cut -c1-400; el
gc_pack
T=$(( L - 100 - ($(date +%s) - t0) )); [ $T -gt 60 ] || exit 0
gc_fla_site
(KDART_GPU_TESTS=chunk_bwd_whole,dhu_every_spec,dhu_fixed_any_t,dhu_varlen_v_split,dhu_graph_capture_and_mixed,fwdh_production \
   CK_FORK=no timeout $T build/tests/test_gpu > $O/test_gpu.txt 2>&1; echo "test_gpu rc=$?" >> $O/test_gpu.txt) &
gc_pytest whole $T "-n 4 python/tests/test_whole_gpu.py"
wait; el
tail -3 $O/test_gpu.txt; grep -E "F:|differ" $O/test_gpu.txt | head -5; grep -E "chunk_bwd" $O/test_gpu.txt | cut -c1-200
gpu_whole_report; gc_pack
T=$(( L - 10 - ($(date +%s) - t0) )); [ $T -gt 40 ] || exit 0
gc_san_whole $T
gpu_finish
