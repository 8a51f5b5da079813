# twenty-first session, call g (carry build-gpu = branch exp/post-icache's build, build-m = main's build with
# its kernels in build-m/k, .whl): the last step's gate part on packed rows too, its gate math out of line
# (the fused kernel's text: 6752 instructions fixed, 8096 varlen).  1. the bare call at B2 and on the packed
# row against main, alone; 2. test_gpu's chunk_bwd_whole (level 1 against level 0, packed cases included)
# beside the whole-backward Python tests (test_whole_gpu.py; test_production_gpu.py -k whole against fla);
# 3. memcheck and racecheck of chunk_bwd_whole.
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
L=${G_LIMIT:-500}
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
export WB_CACHE=/tmp/cw WB_LIMIT=170
{ gc_whole_bare main $R/build-m/k build-m/libkdart.so b2_t8192_h32,packed32768
  gc_whole_bare new $R/kernel_src build/libkdart.so b2_t8192_h32,packed32768; } | tee $O/ab.txt | cut -c1-330; el
gc_pack
gc_fla_site
T=$(( L - 90 - ($(date +%s) - t0) ))
(KDART_GPU_TESTS=chunk_bwd_whole CK_FORK=no timeout $T build/tests/test_gpu > $O/test_gpu.txt 2>&1; echo "test_gpu rc=$?" >> $O/test_gpu.txt) &
gc_whole_tests $T
wait; el
tail -3 $O/test_gpu.txt; grep -E "F:|differ" $O/test_gpu.txt | head -5; grep -E "chunk_bwd" $O/test_gpu.txt | cut -c1-200
gpu_whole_report; gc_pack
T=$(( L - 5 - ($(date +%s) - t0) )); [ $T -gt 40 ] || exit 0
gc_san_whole $T
gpu_finish
