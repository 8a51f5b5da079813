# twenty-first session, call h (carry build-gpu = main's build at 7d55d48, .whl, .triton-carry): bench/e2e.py's
# production rows against fla in one process each, alone: the packed row first (fla autotunes it, about
# 300 s; its results saved as $OUT/triton-autotune-packed_t32768_hv32.tgz), then B2 T8192 H32 from the
# carried results.  H_LIMIT: the call's budget in seconds.
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
L=${H_LIMIT:-470}
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
export TRITON_CACHE_DIR=$R/.triton-cache KDART_LIBRARY=$R/build/libkdart.so; gc_triton_restore; gc_fla_site
for ROW in packed_t32768_hv32 b2_t8192_h32; do
  left=$(( L - 10 - ($(date +%s) - t0) )); [ $left -gt 40 ] || break
  PYTHONPATH=/tmp/site:$R/python PYTHONUNBUFFERED=1 timeout $left python3 bench/e2e.py --shapes $ROW \
    --configs prod --profile --iters 6 --route whole --no-overhead > $O/e2e_$ROW.txt 2>&1
  echo "e2e $ROW rc=$?"; el; gc_triton_save $ROW
  grep -vE "Warning|_warn_once|Python call|overhead" $O/e2e_$ROW.txt | grep -E "ratio|prod |queued|floor|peak|kernel total|\(kdart" | head -14
  gc_pack
done
