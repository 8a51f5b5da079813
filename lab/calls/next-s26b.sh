# call s26b (carry build-gpu, build-X as next-s26a.sh says, and .whl, .triton-carry): on an H100, call s26a
# (main against experiments/wy-hdh-overlap); on an H200, one round of its bare rows, then call s24b's e2e B2
# row against fla (the official ratio; fla's H200 autotune saved, about 300 s).
set -u
. lab/calls/common.sh
if grep -q H100 $O/gpu.txt; then exec bash lab/calls/next-s26a.sh; fi
export WB_CACHE=/tmp/cw WB_LIMIT=60
{ gc_whole_bare M_1 $R/kernel_src build/libkdart.so b2_t8192_h32,packed32768
  gc_whole_bare X_1 $R/build-X/k build/libkdart.so b2_t8192_h32,packed32768; } | gc_prof | cut -c1-300 | tee -a $O/ab.txt; el
gc_pack
LIMIT=$(( 585 - ($(date +%s) - t0) )) ROWS=b2_t8192_h32 bash lab/calls/2026-12-06-s24b.sh
