# call s23c (carry build-gpu, .whl; kernel_src = variant S): the fused launch's l2norm epilogue.  k0 = main's
# kernels (build-gpu/k0); k1 = every row's loads one row ahead, raw q and k from global on every pass
# (build-gpu/k1); S (kernel_src) = the earlier passes only store their fp32 values, the last pass takes
# its own q, k from shared memory and every row's s at once.  Bare whole call, B2 and prod8192, two
# rounds.  Then test_gpu's chunk_bwd_whole and wy_intra (S and k1) beside memcheck / racecheck of
# chunk_bwd_whole (S), then the Python whole tests (S).
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
export WB_CACHE=/tmp/cw WB_LIMIT=200
L=build/libkdart.so
for r in 1 2; do
  { gc_whole_bare k0_$r $R/build/k0 $L b2_t8192_h32,prod8192
    gc_whole_bare k1_$r $R/build/k1 $L b2_t8192_h32,prod8192
    gc_whole_bare S_$r $R/kernel_src $L b2_t8192_h32,prod8192; } | gc_prof | cut -c1-300 | tee -a $O/ab.txt; el
done
[ $(( $(date +%s) - t0 )) -lt 330 ] || { echo "no time left for the tests"; gc_pack; exit 0; }
gc_fla_site
(KDART_KERNEL_DIR=$R/build/k1 KDART_CACHE_DIR=/tmp/t1 KDART_GPU_TESTS=chunk_bwd_whole,wy_intra CK_FORK=no timeout 200 build/tests/test_gpu > $O/t1.txt 2>&1; echo "k1 rc=$?" >> $O/t1.txt) &
(KDART_GPU_TESTS=chunk_bwd_whole,wy_intra CK_FORK=no timeout 200 build/tests/test_gpu > $O/test_gpu.txt 2>&1; echo "S rc=$?" >> $O/test_gpu.txt) &
gc_san_whole 200
wait; for f in t1 test_gpu; do tail -1 $O/$f.txt; grep -E "Checks|F:" $O/$f.txt | cut -c1-250; done; el
[ $(( $(date +%s) - t0 )) -lt 480 ] || { echo "no time left for the Python tests"; gc_pack; exit 0; }
gc_whole_tests 110
gpu_whole_report; el
gc_pack
