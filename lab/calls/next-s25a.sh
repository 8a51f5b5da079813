# for the next session, call s25a (run from main's tree; carry build-gpu = main's build, build-L2/k = 85ff265's
# kernels, .whl, .triton-carry).  Make them on a fresh checkout:
#   tools/build.sh && mkdir -p build-gpu/tests && cp -a build/kdart build/libkdart.so* build-gpu/ &&
#   cp -aL build/libuv.so.1 build/libsqlite3.so.0 build-gpu/ && cp build/tests/test_gpu build-gpu/tests/
#   mkdir -p build-L2 && git archive 85ff265 kernel_src | tar x -C build-L2 && mv build-L2/kernel_src build-L2/k
#   pip download --no-deps fla-core==0.6.0 -d .whl
#   mkdir -p .triton-carry && cp lab/triton-autotune/h100/*.tgz .triton-carry/
# 1. the bare whole call, L2 = 85ff265's kernels (the packed fused kernel with 128 bytes of stack) against main
# (M: no stack there, nor in recompute_wu with the gate: the profile lines tell the two apart), packed rows and
# B2, two rounds; 2. test_gpu chunk_bwd_whole, wy_intra,
# varlen_garbage_writes_nothing (M) beside memcheck / racecheck of chunk_bwd_whole; the Python whole tests;
# 3. e2e's packed row, then B2 (H100 only: fla's autotune carried).
set -u
. lab/calls/common.sh
export WB_CACHE=/tmp/cw WB_LIMIT=150
ROWS=packed32768,packed65536_n25,b2_t8192_h32
for r in 1 2; do
  { gc_whole_bare L2_$r $R/build-L2/k build/libkdart.so $ROWS
    gc_whole_bare M_$r $R/kernel_src build/libkdart.so $ROWS; } | gc_prof | cut -c1-300 | tee -a $O/ab.txt; el
done
gc_fla_site
gc_whole_tests 200
gc_tests_san chunk_bwd_whole,wy_intra,varlen_garbage_writes_nothing chunk_bwd_whole 200 # (waits for gc_whole_tests too)
gpu_whole_report; el
grep -q H100 $O/gpu.txt || { echo "not an H100: fla's autotune is not carried, no e2e"; gc_pack; exit 0; }
export TRITON_CACHE_DIR=$R/.triton-cache KDART_LIBRARY=$R/build/libkdart.so; gc_triton_restore
gpu_e2e_rows packed_t32768_hv32 b2_t8192_h32
el; gc_pack
