# for the next session, call s24a (run from main's tree; carry build-gpu = main's build with main's kernels
# copied to build-gpu/k1, build-V = branch exp/post-qk-varlen's build with its kernel_src in build-V/k,
# build-main2 = 5bdb272's library with its kernels in build-main2/k (before f1aec93), .whl, .triton-carry):
# 1. the bare whole call on packed rows and B2: L0 (5bdb272) / L1 (main: the fused body takes the chunk's
# location, no second cu_seqlens scan) / L2 (the branch: dq/dk's l2norm in the fused launch on packed rows
# too), two rounds; 2. test_gpu chunk_bwd_whole, wy_intra, varlen_garbage_writes_nothing (main), chunk_bwd_whole,
# varlen_garbage_writes_nothing (L2) beside memcheck / racecheck (L2); the Python whole tests (main);
# 3. e2e's packed row (main).  Land L2 if its packed fused kernel + bwd_post beat L1's.
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
export WB_CACHE=/tmp/cw WB_LIMIT=150
ROWS=packed32768,packed65536_n25,b2_t8192_h32
for r in 1 2; do
  { gc_whole_bare L0_$r $R/build-main2/k build-main2/libkdart.so $ROWS
    gc_whole_bare L1_$r $R/build/k1 build/libkdart.so $ROWS
    gc_whole_bare L2_$r $R/build-V/k build-V/libkdart.so $ROWS; } | gc_prof | cut -c1-300 | tee -a $O/ab.txt; el
done
gc_fla_site
gc_whole_tests 200
(KDART_GPU_TESTS=chunk_bwd_whole,wy_intra,varlen_garbage_writes_nothing CK_FORK=no timeout 200 build/tests/test_gpu > $O/t1.txt 2>&1; echo "L1 rc=$?" >> $O/t1.txt) &
(KDART_KERNEL_DIR=$R/build-V/k KDART_CACHE_DIR=/tmp/t2 KDART_GPU_TESTS=chunk_bwd_whole,varlen_garbage_writes_nothing CK_FORK=no timeout 200 build-V/tests/test_gpu > $O/t2.txt 2>&1; echo "L2 rc=$?" >> $O/t2.txt) &
for tool in memcheck racecheck; do
  (KDART_KERNEL_DIR=$R/build-V/k KDART_CACHE_DIR=/tmp/c_$tool KDART_GPU_TESTS=chunk_bwd_whole CK_FORK=no timeout 200 \
     compute-sanitizer --tool $tool build-V/tests/test_gpu > $O/$tool.txt 2>&1; echo "$tool rc=$?" >> $O/$tool.txt) &
done
wait; gpu_whole_report
for f in t1 t2 memcheck racecheck; do tail -1 $O/$f.txt; grep -E "Checks|F:|SUMMARY" $O/$f.txt | cut -c1-250 | head -4; done; el
grep -q H100 $O/gpu.txt || { echo "not an H100: fla's autotune is not carried, no e2e"; gc_pack; exit 0; }
export TRITON_CACHE_DIR=$R/.triton-cache KDART_LIBRARY=$R/build/libkdart.so; gc_triton_restore
left=$(( 590 - ($(date +%s) - t0) ))
[ $left -gt 60 ] && PYTHONPATH=/tmp/site:$R/python PYTHONUNBUFFERED=1 timeout $left python3 bench/e2e.py --shapes packed_t32768_hv32 \
  --configs prod --profile --iters 6 --route whole --no-overhead > $O/e2e.txt 2>&1
grep -vE "Warning|_warn_once|Python call|overhead" $O/e2e.txt | grep -E "ratio|prod |queued|peak|kernel total|\(kdart" | cut -c1-160 | head -16
el; gc_pack
