# call s30c (carry build-gpu = main's build, .whl, build-B, build-C, build-E, build-V): fwd_h's uv kernels
# at B2 (experiments/fwdh-beta-ahead).  Variants: A main's kernels; B beta loaded a chunk ahead; C B with
# the next chunk's copies issued behind the w . S MMAs; D B's kernels with BV 64 forced at B2 (build-V's
# library); E two warpgroups of 32 columns at K128 BV64 uv, BV 64 forced (build-E's library and kernels).
# Make the trees here first, from main's checkout (build/ built):
#   E=lab/experiments/fwdh-beta-ahead; rm -rf build-B build-C build-E build-V; mkdir -p build-B build-C
#   cp -r kernel_src build-B/k && (cd build-B/k && patch -p2 < ../../$E/beta_ahead.diff)
#   cp -r build-B/k build-C/k && patch build-C/k/fwd_h.cuh < $E/C_on_B.diff
#   git apply $E/lib_V.diff  # V: BV 64 forced; E: V launching 256 threads at K128 BV64 uv
#   for v in V E; do [ $v = E ] && git apply $E/lib_E_on_V.diff
#     cmake -S . -B /tmp/b$v -DCUDAToolkit_ROOT=/usr/local/cuda -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
#     cmake --build /tmp/b$v -j2 --target kdart_shared && mkdir -p build-$v && cp -a /tmp/b$v/libkdart.so* build-$v/ &&
#     cp -aL build/libuv.so.1 build/libsqlite3.so.0 build-$v/; done; git checkout runtime/core/stages/fwd_h.c
#   cp -r build-B/k build-E/k && patch build-E/k/fwd_h.cuh < $E/E_on_B.diff
# 1. alone: the bare whole call, A and B two rounds on AB_ROWS, E, D, C two rounds at B2; A and B once at
#    prod8192 (AB_PROD=0: not);
# 2. side by side (unless AB_ONLY=1): test_gpu's fwd_h / whole lists with B's kernels, the Python whole
#    tests (main's kernels: tools/gpu_check.sh sets KDART_KERNEL_DIR to kernel_src).
set -u
. lab/calls/common.sh
gc_fla_site
mkdir -p /tmp/A && cp -a kernel_src /tmp/A/k
export WB_CACHE=/tmp/cw WB_LIMIT=${WB_LIMIT:-150}
ROWS=${AB_ROWS:-b2_t8192_h32,packed32768}
for r in $(seq 1 ${AB_ROUNDS:-2}); do
  { gc_whole_bare A_$r /tmp/A/k build/libkdart.so $ROWS
    gc_whole_bare B_$r $R/build-B/k build/libkdart.so $ROWS
    gc_whole_bare E_$r $R/build-E/k build-E/libkdart.so b2_t8192_h32
    gc_whole_bare D_$r $R/build-B/k build-V/libkdart.so b2_t8192_h32
    gc_whole_bare C_$r $R/build-C/k build/libkdart.so b2_t8192_h32; } | gc_prof | cut -c1-300 | tee -a $O/ab.txt
done; el
[ "${AB_PROD:-1}" = 1 ] && { gc_whole_bare A_p /tmp/A/k build/libkdart.so prod8192
  gc_whole_bare B_p $R/build-B/k build/libkdart.so prod8192; } | gc_prof | cut -c1-300 | tee -a $O/ab.txt; el; gc_pack
[ "${AB_ONLY:-0}" = 1 ] && exit 0
export KDART_KERNEL_DIR=$R/build-B/k
gc_gpu_tests ${LIMIT:-160} chunk_bwd_whole,fwdh_production,fwdh_every_spec,rwu_production M
gc_pytest whole ${LIMIT:-160} "-n 4 python/tests/test_whole_gpu.py"
gc_pytest prod ${LIMIT:-160} "-n 3 python/tests/test_production_gpu.py -k whole"
wait; el
grep -E "Checks|F:|rc=" $O/test_gpu_M.txt | cut -c1-200 | head -6; gpu_whole_report; gc_pack
