# call s23d (carry build-gpu = main's build with 5657d90's kernels in build-gpu/k0, build-V = branch
# exp/post-qk-varlen (dq/dk's l2norm in the fused launch on packed rows too) with its kernels in build-V/k,
# .whl, .triton-carry): 1. the bare whole call on packed rows, main / V, two rounds; 2. the Python whole
# tests (main) and test_gpu's chunk_bwd_whole (V) beside memcheck / racecheck of chunk_bwd_whole (V);
# 3. bench/e2e.py's production rows (main), B2 then packed (fla's autotune carried).
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
export WB_CACHE=/tmp/cw WB_LIMIT=150
ROWS=packed32768,packed65536_n25
for r in 1 2; do
  { gc_whole_bare main$r $R/kernel_src build/libkdart.so $ROWS
    gc_whole_bare V$r $R/build-V/k build-V/libkdart.so $ROWS; } | gc_prof | cut -c1-330 | tee -a $O/ab.txt; el
done
gc_fla_site
gc_whole_tests 200
(KDART_KERNEL_DIR=$R/build-V/k KDART_CACHE_DIR=/tmp/tV KDART_GPU_TESTS=chunk_bwd_whole CK_FORK=no timeout 200 build-V/tests/test_gpu \
  > $O/test_gpu.txt 2>&1; echo "test_gpu rc=$?" >> $O/test_gpu.txt) &
for tool in memcheck racecheck; do
  (KDART_KERNEL_DIR=$R/build-V/k KDART_CACHE_DIR=/tmp/c_$tool KDART_GPU_TESTS=chunk_bwd_whole CK_FORK=no timeout 200 \
     compute-sanitizer --tool $tool build-V/tests/test_gpu > $O/$tool.txt 2>&1; echo "$tool rc=$?" >> $O/$tool.txt) &
done
wait; gpu_whole_report; tail -1 $O/test_gpu.txt; grep -E "Checks|F:" $O/test_gpu.txt | cut -c1-250
for tool in memcheck racecheck; do tail -1 $O/$tool.txt; grep -E "SUMMARY" $O/$tool.txt | head -2; done; el
grep -q H100 $O/gpu.txt || { echo "not an H100: fla's autotune is not carried, no e2e here"; gc_pack; exit 0; }
export TRITON_CACHE_DIR=$R/.triton-cache KDART_LIBRARY=$R/build/libkdart.so; gc_triton_restore
for ROW in b2_t8192_h32 packed_t32768_hv32; do
  left=$(( 590 - ($(date +%s) - t0) )); [ $left -gt 50 ] || break
  PYTHONPATH=/tmp/site:$R/python PYTHONUNBUFFERED=1 timeout $left python3 bench/e2e.py --shapes $ROW --configs prod \
    --profile --iters 6 --route whole --no-overhead > $O/e2e_$ROW.txt 2>&1
  echo "e2e $ROW rc=$?"; grep -vE "Warning|_warn_once|Python call|overhead" $O/e2e_$ROW.txt | grep -E "ratio|prod |queued|floor|peak|kernel total|\(kdart" | cut -c1-160 | head -16
done
el; gc_pack
