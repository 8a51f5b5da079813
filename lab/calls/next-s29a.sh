# call s29a: experiments/fwdh-u (u made in fwd_h's scan from v, Akk and beta; the recompute without its
# V steps) timed against u made in the recompute, in one build: KDART_FUSE_U=0 is today's path.  Run from
# a tree with fwdh-u.diff applied (to main at 0a95bd5), its build carried as build-gpu:
#   git apply lab/experiments/fwdh-u/fwdh-u.diff && tools/build.sh && rm -rf build-gpu && mkdir -p build-gpu/tests &&
#   cp -a build/kdart build/libkdart.so* build-gpu/ && cp -aL build/libuv.so.1 build/libsqlite3.so.0 build-gpu/ &&
#   cp build/tests/test_gpu build-gpu/tests/
# 1. alone: the bare whole call, M (KDART_FUSE_U=0) and U, two rounds, rows AB_ROWS (default B2, packed,
#    prod8192); 2. test_gpu's chunk_bwd_whole (its second handle makes u in the recompute: dv, dg, dbeta,
#    dh0 must be bitwise), fwdh_production, rwu_production beside memcheck and racecheck of chunk_bwd_whole.
# A short budget: AB_ONLY=1, AB_ROWS=b2_t8192_h32.
set -u
. lab/calls/common.sh
export WB_CACHE=/tmp/cw WB_LIMIT=${WB_LIMIT:-120}
ROWS=${AB_ROWS:-b2_t8192_h32,packed32768,prod8192}
for r in 1 2; do
  { KDART_FUSE_U=0 gc_whole_bare M_$r $R/kernel_src build/libkdart.so $ROWS
    gc_whole_bare U_$r $R/kernel_src build/libkdart.so $ROWS; } | gc_prof | cut -c1-300 | tee -a $O/ab.txt
done; el; gc_pack
[ "${AB_ONLY:-0}" = 1 ] && exit 0
gc_gpu_tests 240 chunk_bwd_whole,fwdh_production,rwu_production,fwdh_every_spec U
gc_san_whole 240
grep -E "Checks|F:|rc=" $O/test_gpu_U.txt | cut -c1-200 | head -6; gc_pack
