# twenty-first session, call c (carry build-gpu = main's build at 4d792a8, .whl, .triton-carry): main as
# landed, on whatever card comes.  1. bench/e2e.py's production row B2 T8192 H32 against fla, alone (an H100
# finds fla's autotuning results carried; an H200 autotunes about 330 s, results saved for the next call);
# 2. then test_gpu's chunk_bwd_whole and the whole-backward Python tests (test_whole_gpu.py, test_production_gpu.py
# -k whole) side by side, which call b never ran.  C_LIMIT: the call's budget in seconds.
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
L=${C_LIMIT:-590}
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
export TRITON_CACHE_DIR=$R/.triton-cache; gc_triton_restore; gc_fla_site
export KDART_LIBRARY=$R/build/libkdart.so
ROW=b2_t8192_h32
# the tests need about 200 s; on an H200 without results the e2e row needs about 400 (a cut-off one still
# saves the kernels it tuned)
E=$(( L - 200 ))
PYTHONPATH=/tmp/site:$R/python PYTHONUNBUFFERED=1 timeout $(( E - ($(date +%s) - t0) )) python3 bench/e2e.py --shapes $ROW \
  --configs prod --profile --iters 6 --route whole --no-overhead > $O/e2e_$ROW.txt 2>&1
echo "e2e rc=$?"; el; gc_triton_save $ROW
grep -vE "Warning|_warn_once|Python call|overhead" $O/e2e_$ROW.txt | tail -30
gc_pack
T=$(( L - 10 - ($(date +%s) - t0) ))
(KDART_GPU_TESTS=chunk_bwd_whole CK_FORK=no timeout $T build/tests/test_gpu > $O/test_gpu.txt 2>&1; echo "test_gpu rc=$?" >> $O/test_gpu.txt) &
gc_whole_tests $T
wait; el
tail -3 $O/test_gpu.txt; grep -E "F:|differ" $O/test_gpu.txt | head -5
gpu_whole_report; gpu_finish
