# call s31b (carry build-gpu = main's build, .whl, build-F, build-G): fwd_h's uv kernels
# (experiments/fwdh-beta-ahead).  Variants: A main; G v scaled by beta once a CTA, in place, by the
# threads that copied it (G_vscale.diff; main's library); F2 (= s30c's E: two warpgroups, one CTA an SM,
# BV 64 forced), F3, F4 the same with 3 and 4 stages.  build-F's library forces BV 64 and reads the stage
# count from KDART_LAB_FWDH_STAGES (it must match the kernel tree).
# Make build-F and build-G here first, from main's checkout (build/ built; build-E/k as next-s30c.sh's
# header makes it):
#   E=lab/experiments/fwdh-beta-ahead; git apply $E/lib_V.diff $E/lib_E_on_V.diff $E/lib_F_on_E.diff
#   cmake -S . -B /tmp/bF -DCUDAToolkit_ROOT=/usr/local/cuda -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
#   cmake --build /tmp/bF -j2 --target kdart_shared && mkdir -p build-F && cp -a /tmp/bF/libkdart.so* build-F/ &&
#   cp -aL build/libuv.so.1 build/libsqlite3.so.0 build-F/; git checkout runtime/core/stages/fwd_h.c
#   cp -r build-E/k build-F/k2; for n in 3 4; do cp -r build-E/k build-F/k$n
#     sed "s/? 4 : 2; \/\* LAB F/? $n : 2; \/* LAB F/" $E/F4_on_E.diff | patch build-F/k$n/fwd_h.cuh; done
#   mkdir -p build-G && cp -r kernel_src build-G/k && (cd build-G/k && patch -p2 < ../../$E/G_vscale.diff)
# 1. timed alone, the bare whole call: AB_ROUNDS (default 2) rounds of every variant on AB_ROWS (default
#    B2 and the packed row, BV 64 there already, so F changes it too), then A, G, F4 once at prod8192
#    (AB_PROD=0: not);
# 2. test_gpu's chunk_bwd_whole and fwdh_production with G's kernels (LIMIT, default 150 s);
# 3. unless NCU=0: ncu's warp states of fwd_h inside the bare call at B2 for A, G and F4.
set -u
. lab/calls/common.sh
gc_fla_site
mkdir -p /tmp/A && cp -a kernel_src /tmp/A/k
export WB_CACHE=/tmp/cw WB_LIMIT=${WB_LIMIT:-150}
ROWS=${AB_ROWS:-b2_t8192_h32,packed32768}
fv() { export KDART_LAB_FWDH_STAGES=$2; gc_whole_bare F${2}_$1 $R/build-F/k$2 build-F/libkdart.so $3; unset KDART_LAB_FWDH_STAGES; }
for r in $(seq 1 ${AB_ROUNDS:-2}); do
  { gc_whole_bare A_$r /tmp/A/k build/libkdart.so $ROWS
    gc_whole_bare G_$r $R/build-G/k build/libkdart.so $ROWS
    for n in 2 3 4; do fv $r $n $ROWS; done
  } | gc_prof | cut -c1-300 | tee -a $O/ab.txt
done; el
[ "${AB_PROD:-1}" = 1 ] && { gc_whole_bare A_p /tmp/A/k build/libkdart.so prod8192
  gc_whole_bare G_p $R/build-G/k build/libkdart.so prod8192; fv p 4 prod8192; } | gc_prof | cut -c1-300 | tee -a $O/ab.txt
el; gc_pack
export KDART_KERNEL_DIR=$R/build-G/k; gc_gpu_tests ${LIMIT:-150} chunk_bwd_whole,fwdh_production G
wait; export KDART_KERNEL_DIR=$R/kernel_src; grep -E "Checks|F:|rc=" $O/test_gpu_G.txt | cut -c1-200 | head -6; el; gc_pack
[ "${NCU:-1}" = 1 ] || exit 0
S="--section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy"
KDART_KERNEL_DIR=/tmp/A/k KDART_LIBRARY=$R/build/libkdart.so gc_ncu_whole 100 ncu_fwdh_A.txt kdart_fwd_h 1 $S
KDART_KERNEL_DIR=$R/build-G/k KDART_LIBRARY=$R/build/libkdart.so gc_ncu_whole 100 ncu_fwdh_G.txt kdart_fwd_h 1 $S
KDART_LAB_FWDH_STAGES=4 KDART_KERNEL_DIR=$R/build-F/k4 KDART_LIBRARY=$(readlink -f build-F/libkdart.so) \
  gc_ncu_whole 100 ncu_fwdh_F4.txt kdart_fwd_h 1 $S
for v in A G F4; do echo "== $v"; grep -E "Duration|Stall|Warp Cycles|Eligible|Issued|Throughput|Hit Rate" \
  $O/ncu_fwdh_$v.txt | head -24; done; gc_pack
