# calls k and l (carry build-gpu = the working tree's build: the V split's mixed form; call k with the split's
# rows longest first, call l with its CTAs mapped by split_cta;
# build-main = main's at 65d4dae with its kernels in build-main/k, build-x = the probe's library (branch
# exp/dhu-fused-packed: fused, no split, KDART_LAB_DHU_FUSED=1), .whl, .triton-carry (H100 autotune of
# both rows)): 1. the bare whole call, main / probe / new, two rounds, packed rows; 2. test_gpu's
# chunk_bwd_whole, dhu_varlen_v_split, dav_standalone beside memcheck / racecheck of chunk_bwd_whole, then
# the Python whole tests; 3. bench/e2e.py's production rows, packed then B2 (fla's autotune carried).
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
export WB_CACHE=/tmp/cw WB_LIMIT=120
ROWS=${ROWS:-packed32768,packed32768_long,packed65536_n25}  # call k: packed32768,packed32768_long
for r in 1 2; do
  { gc_whole_bare main$r $R/build-main/k build-main/libkdart.so $ROWS
    KDART_LAB_DHU_FUSED=1 gc_whole_bare probe$r $R/build-main/k build-x/libkdart.so $ROWS
    gc_whole_bare new$r $R/kernel_src build/libkdart.so $ROWS; } | gc_prof | cut -c1-330 | tee -a $O/ab.txt; el
done
gc_fla_site
gc_whole_tests 200
(KDART_GPU_TESTS=${TESTS:-chunk_bwd_whole,dhu_varlen_v_split,dav_standalone,dhu_varlen_lists,varlen_garbage_writes_nothing} CK_FORK=no timeout 200 build/tests/test_gpu \
  > $O/test_gpu.txt 2>&1; echo "test_gpu rc=$?" >> $O/test_gpu.txt) &
SAN_TESTS=${SAN_TESTS:-chunk_bwd_whole,dhu_varlen_v_split} gc_san_whole 230  # call k: chunk_bwd_whole
wait; gpu_whole_report; tail -1 $O/test_gpu.txt; grep -E "Checks|F:|T2048" $O/test_gpu.txt | cut -c1-250; el
export TRITON_CACHE_DIR=$R/.triton-cache KDART_LIBRARY=$R/build/libkdart.so; gc_triton_restore
for ROW in ${E2E_ROWS-packed_t32768_hv32}; do  # call k: packed_t32768_hv32 b2_t8192_h32
  left=$(( 590 - ($(date +%s) - t0) )); [ $left -gt 50 ] || break
  PYTHONPATH=/tmp/site:$R/python PYTHONUNBUFFERED=1 timeout $left python3 bench/e2e.py --shapes $ROW --configs prod \
    --profile --iters 6 --route whole --no-overhead > $O/e2e_$ROW.txt 2>&1
  echo "e2e $ROW rc=$?"; grep -vE "Warning|_warn_once|Python call|overhead" $O/e2e_$ROW.txt | grep -E "ratio|prod |queued|floor|peak|kernel total|\(kdart" | cut -c1-160 | head -16
done
el; gc_pack
