# call s24a (run from the tree with packed qk's changes; carry build-gpu = that tree's build, build-L1 = main's
# (d85f5a4) library and test_gpu with its kernels in build-L1/k, .whl, .triton-carry): 1. the bare whole call,
# L1 (main: packed rows finish dq/dk in bwd_post) / L2 (dq/dk's l2norm in the fused launch on packed rows too),
# packed rows and B2, two rounds; 2. test_gpu chunk_bwd_whole, wy_intra, varlen_garbage_writes_nothing (L2),
# chunk_bwd_whole (L1), memcheck / racecheck of chunk_bwd_whole (L2), the Python whole tests (L2); 3. e2e's
# packed row, then B2 (L2, H100 only: fla's autotune carried).
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
export WB_CACHE=/tmp/cw WB_LIMIT=150
ROWS=packed32768,packed65536_n25,b2_t8192_h32
for r in 1 2; do
  { gc_whole_bare L1_$r $R/build-L1/k build-L1/libkdart.so $ROWS
    gc_whole_bare L2_$r $R/kernel_src build/libkdart.so $ROWS; } | gc_prof | cut -c1-300 | tee -a $O/ab.txt; el
done
gc_fla_site
gc_whole_tests 200
(KDART_GPU_TESTS=chunk_bwd_whole,wy_intra,varlen_garbage_writes_nothing CK_FORK=no timeout 200 build/tests/test_gpu > $O/t2.txt 2>&1; echo "L2 rc=$?" >> $O/t2.txt) &
(KDART_KERNEL_DIR=$R/build-L1/k KDART_CACHE_DIR=/tmp/t1 KDART_GPU_TESTS=chunk_bwd_whole CK_FORK=no timeout 200 build-L1/tests/test_gpu > $O/t1.txt 2>&1; echo "L1 rc=$?" >> $O/t1.txt) &
for tool in memcheck racecheck; do
  (KDART_CACHE_DIR=/tmp/c_$tool KDART_GPU_TESTS=chunk_bwd_whole CK_FORK=no timeout 200 \
     compute-sanitizer --tool $tool build/tests/test_gpu > $O/$tool.txt 2>&1; echo "$tool rc=$?" >> $O/$tool.txt) &
done
wait; gpu_whole_report
for f in t2 t1 memcheck racecheck; do tail -1 $O/$f.txt; grep -E "Checks|F:|SUMMARY" $O/$f.txt | cut -c1-250 | head -4; done; el
grep -q H100 $O/gpu.txt || { echo "not an H100: fla's autotune is not carried, no e2e"; gc_pack; exit 0; }
export TRITON_CACHE_DIR=$R/.triton-cache KDART_LIBRARY=$R/build/libkdart.so; gc_triton_restore
for ROW in packed_t32768_hv32 b2_t8192_h32; do
  left=$(( ${LIMIT:-590} - ($(date +%s) - t0) )); [ $left -gt 50 ] || break
  PYTHONPATH=/tmp/site:$R/python PYTHONUNBUFFERED=1 timeout $left python3 bench/e2e.py --shapes $ROW --configs prod \
    --profile --iters 6 --route whole --no-overhead > $O/e2e_$ROW.txt 2>&1
  echo "e2e $ROW rc=$?"; grep -vE "Warning|_warn_once|Python call|overhead" $O/e2e_$ROW.txt | grep -E "ratio|prod |queued|peak|kernel total|\(kdart" | cut -c1-160 | head -16
done
el; gc_pack
