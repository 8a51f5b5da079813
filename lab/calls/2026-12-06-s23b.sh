# call s23b (carry build-gpu, build-rw, .whl): the fused launch's l2norm epilogue with each row's loads
# issued together (k2) or one row ahead (kernel_src, "k1") against main's kernels (build-gpu/k0), one library;
# recompute_wu at four CTAs an SM (build-rw: exp/rwu4 merged with main, its own library and kernels) against
# main.  Bare whole call, B2 and prod8192, two rounds.  Then test_gpu's chunk_bwd_whole with k1 and k2 and
# rwu4's rwu_every_spec, rwu_production.
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
export WB_CACHE=/tmp/cw WB_LIMIT=200
L=build/libkdart.so
for r in 1 2; do
  { gc_whole_bare k0_$r $R/build/k0 $L b2_t8192_h32,prod8192
    gc_whole_bare k1_$r $R/kernel_src $L b2_t8192_h32,prod8192
    gc_whole_bare k2_$r $R/build/k2 $L b2_t8192_h32,prod8192
    gc_whole_bare rw_$r $R/build-rw/k build-rw/libkdart.so b2_t8192_h32,prod8192; } | gc_prof | cut -c1-300 | tee -a $O/ab.txt; el
done
[ $(( $(date +%s) - t0 )) -lt 400 ] || { echo "no time left for the tests"; gc_pack; exit 0; }
(KDART_KERNEL_DIR=$R/kernel_src KDART_CACHE_DIR=/tmp/t1 KDART_GPU_TESTS=chunk_bwd_whole CK_FORK=no timeout 150 build/tests/test_gpu > $O/t1.txt 2>&1; echo "k1 rc=$?" >> $O/t1.txt) &
(KDART_KERNEL_DIR=$R/build/k2 KDART_CACHE_DIR=/tmp/t2 KDART_GPU_TESTS=chunk_bwd_whole CK_FORK=no timeout 150 build/tests/test_gpu > $O/t2.txt 2>&1; echo "k2 rc=$?" >> $O/t2.txt) &
(KDART_KERNEL_DIR=$R/build-rw/k KDART_CACHE_DIR=/tmp/t3 KDART_GPU_TESTS=rwu_every_spec,rwu_production CK_FORK=no timeout 150 build-rw/tests/test_gpu > $O/t3.txt 2>&1; echo "rw rc=$?" >> $O/t3.txt) &
wait
for f in t1 t2 t3; do tail -1 $O/$f.txt; grep -E "Checks|F:" $O/$f.txt | cut -c1-250; done; el
gc_pack
