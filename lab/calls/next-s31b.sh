# call s31b (carry build-gpu = main's build, .whl, build-F): fwd_h's uv kernels at K128 BV64 in two
# warpgroups, one CTA an SM, with deeper copy pipelines (experiments/fwdh-beta-ahead, F).  Variants: A
# main; E two warpgroups, 2 stages (s30c's E); F3, F4 the same with 3 and 4 stages.  build-F's library
# forces BV 64 and reads the stage count from KDART_LAB_FWDH_STAGES (it must match the kernel tree).
# Make build-F here first, from main's checkout (build/ built; build-E/k as next-s30c.sh's header makes it):
#   E=lab/experiments/fwdh-beta-ahead; git apply $E/lib_V.diff $E/lib_E_on_V.diff $E/lib_F_on_E.diff
#   cmake -S . -B /tmp/bF -DCUDAToolkit_ROOT=/usr/local/cuda -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
#   cmake --build /tmp/bF -j2 --target kdart_shared && mkdir -p build-F && cp -a /tmp/bF/libkdart.so* build-F/ &&
#   cp -aL build/libuv.so.1 build/libsqlite3.so.0 build-F/; git checkout runtime/core/stages/fwd_h.c
#   cp -r build-E/k build-F/k2; for n in 3 4; do cp -r build-E/k build-F/k$n
#     sed "s/? 4 : 2; \/\* LAB F/? $n : 2; \/* LAB F/" $E/F4_on_E.diff | patch build-F/k$n/fwd_h.cuh; done
# 1. timed alone, the bare whole call, AB_ROUNDS (default 2) rounds on AB_ROWS (default B2, the packed row
#    (BV 64 there already, so F changes it too) and prod8192);
# 2. unless NCU=0: ncu's warp states of fwd_h inside the bare call at B2, A and F4 (where its chunk step waits).
set -u
. lab/calls/common.sh
gc_fla_site
mkdir -p /tmp/A && cp -a kernel_src /tmp/A/k
export WB_CACHE=/tmp/cw WB_LIMIT=${WB_LIMIT:-150}
ROWS=${AB_ROWS:-b2_t8192_h32,packed32768,prod8192}
for r in $(seq 1 ${AB_ROUNDS:-2}); do
  { gc_whole_bare A_$r /tmp/A/k build/libkdart.so $ROWS
    for n in 2 3 4; do export KDART_LAB_FWDH_STAGES=$n
      gc_whole_bare F${n}_$r $R/build-F/k$n build-F/libkdart.so $ROWS; done; unset KDART_LAB_FWDH_STAGES
  } | gc_prof | cut -c1-300 | tee -a $O/ab.txt
done; el; gc_pack
[ "${NCU:-1}" = 1 ] || exit 0
S="--section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy"
KDART_KERNEL_DIR=/tmp/A/k KDART_LIBRARY=$R/build/libkdart.so gc_ncu_whole 120 ncu_fwdh_A.txt kdart_fwd_h 1 $S
KDART_LAB_FWDH_STAGES=4 KDART_KERNEL_DIR=$R/build-F/k4 KDART_LIBRARY=$(readlink -f build-F/libkdart.so) \
  gc_ncu_whole 120 ncu_fwdh_F4.txt kdart_fwd_h 1 $S
for v in A F4; do echo "== $v"; grep -E "Duration|Stall|Warp Cycles|Eligible|Issued|Throughput|Hit Rate" \
  $O/ncu_fwdh_$v.txt | head -24; done; gc_pack
