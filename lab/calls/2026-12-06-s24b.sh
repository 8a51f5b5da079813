# call s24b (after s24a, on the warm machine: its build/ stays; else carry build-gpu as s24a does, and .whl,
# .triton-carry): bench/e2e.py's production rows $ROWS (default b2_t8192_h32) with the whole route, fla's
# autotuning saved after each row (triton-autotune-ROW.tgz: commit under lab/triton-autotune/, h100/ when the
# machine is an H100).
set -u
[ -d build-gpu ] && { rm -rf build && mv build-gpu build; }
. lab/calls/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
gc_fla_site
export TRITON_CACHE_DIR=$R/.triton-cache KDART_LIBRARY=$R/build/libkdart.so
if grep -q H100 $O/gpu.txt; then gc_triton_restore; else mkdir -p $TRITON_CACHE_DIR
  for f in lab/triton-autotune/*.tgz; do [ -f "$f" ] && tar xzf "$f" -C "$TRITON_CACHE_DIR"; done; fi
E2E_SAVE=1 gpu_e2e_rows ${ROWS:-b2_t8192_h32}
el; gc_pack
