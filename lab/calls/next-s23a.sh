# for the next session, call s23a, from branch exp/post-qk's tree (carry build-gpu = its build; build-main2 =
# main's library with main's kernels in build-main2/k; .whl): the l2norm backward of dq and dk at the end of
# the fused wy_dqkg + bwd_intra launch at fixed length (HV == H; KDART_FUSE_POST=2, the branch's default),
# bwd_post then only sums the gate's partial rows.  1. the bare whole call, main / the branch at level 1 /
# level 2 (levels 1 and 2 twice), B2 and prod8192 (the fused kernel and bwd_post in the profile); 2. test_gpu's
# chunk_bwd_whole and wy_intra beside memcheck / racecheck of chunk_bwd_whole, then the Python whole tests.
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
export WB_CACHE=/tmp/cw WB_LIMIT=200
# (round 1 compiles each tree's prod8192 kernels on first use; round 2 only what the comparison needs)
{ gc_whole_bare main1 $R/build-main2/k build-main2/libkdart.so b2_t8192_h32,prod8192
  KDART_FUSE_POST=1 gc_whole_bare lvl1_1 $R/kernel_src build/libkdart.so b2_t8192_h32,prod8192
  gc_whole_bare lvl2_1 $R/kernel_src build/libkdart.so b2_t8192_h32,prod8192
  KDART_FUSE_POST=1 gc_whole_bare lvl1_2 $R/kernel_src build/libkdart.so b2_t8192_h32,prod8192
  gc_whole_bare lvl2_2 $R/kernel_src build/libkdart.so b2_t8192_h32,prod8192; } | gc_prof | cut -c1-300 | tee -a $O/ab.txt; el
[ $(( $(date +%s) - t0 )) -lt 330 ] || { echo "no time left for the tests: run them in a call of their own"; gc_pack; exit 0; }
gc_fla_site
gc_whole_tests 200
(KDART_GPU_TESTS=chunk_bwd_whole,wy_intra CK_FORK=no timeout 200 build/tests/test_gpu > $O/test_gpu.txt 2>&1
 echo "test_gpu rc=$?" >> $O/test_gpu.txt) &
gc_san_whole 220
wait; gpu_whole_report; tail -1 $O/test_gpu.txt; grep -E "Checks|F:" $O/test_gpu.txt | cut -c1-250; el
gc_pack
