# call j (carry build-gpu = the working tree's build with the V split's mixed form, build-main = main's at
# 65d4dae with its kernels in build-main/k, .whl, .triton-carry with the H100 autotune of the packed row):
# 1. the bare whole call, main against the mixed form (fla's dAv inside bwd_dhu's 64-column scans on
#    packed rows, bwd_dav for the long documents alone), two rounds, rows B2, packed32768, packed32768_long;
# 2. test_gpu's chunk_bwd_whole, dhu_varlen_v_split, dav_* beside memcheck / racecheck of chunk_bwd_whole,
#    then the Python whole tests; 3. bench/e2e.py's packed production row (fla's autotune carried).
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
export WB_CACHE=/tmp/cw WB_LIMIT=120
ROWS=b2_t8192_h32,packed32768,packed32768_long
for r in 1 2; do
  { gc_whole_bare main$r $R/build-main/k build-main/libkdart.so $ROWS
    gc_whole_bare new$r $R/kernel_src build/libkdart.so $ROWS; } | cut -c1-200 | tee -a $O/ab.txt; el
done
KDART_GPU_TESTS=chunk_bwd_whole,dhu_varlen_v_split,dav_standalone,dav_fused CK_FORK=no timeout 200 build/tests/test_gpu \
  > $O/test_gpu.txt 2>&1; echo "test_gpu rc=$?"; grep -E "Checks|F:|T2048" $O/test_gpu.txt | cut -c1-250; el
gc_fla_site
gc_whole_tests 200
gc_san_whole 220
wait; gpu_whole_report; el
export TRITON_CACHE_DIR=$R/.triton-cache KDART_LIBRARY=$R/build/libkdart.so; gc_triton_restore
left=$(( 585 - ($(date +%s) - t0) ))
[ $left -gt 60 ] && { PYTHONPATH=/tmp/site:$R/python PYTHONUNBUFFERED=1 timeout $left python3 bench/e2e.py \
  --shapes packed_t32768_hv32 --configs prod --profile --iters 6 --route whole --no-overhead > $O/e2e_packed.txt 2>&1
  echo "e2e rc=$?"; grep -vE "Warning|_warn_once|Python call|overhead" $O/e2e_packed.txt | grep -E "ratio|prod |queued|floor|peak|kernel total|\(kdart" | head -16; }
el; gc_pack
