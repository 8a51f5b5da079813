# call s33b (carry build-gpu = main's build, build-BV, build-G64, .whl, .whl-cudnn, .triton-carry).
# 1. experiments/fwdh-packed-bv: the bare whole call on packed32768, main (fwd_h's V tile 64 there) against
#    build-BV's library with KDART_LAB_FWDH_BV=32, and main's library with build-G64/k (fwd_h's v scaled
#    once a CTA at packed BV 64 too, u product in two passes), two rounds interleaved, each timed alone;
# 2. next-s32a.sh's rows with what is left (H200: official B2 production row, fla's autotune saved, then
#    cuDNN's configuration; H100: the side-by-side production rows at B2 and packed32768).
# Make build-BV here first: git apply lab/experiments/fwdh-packed-bv/lib_bv.diff in a worktree of main,
#   cmake --build <b> --target kdart_shared, copy libkdart.so* and build/'s libuv.so.1, libsqlite3.so.0.
set -u
. lab/calls/common.sh
gc_fla_site
export WB_CACHE=/tmp/cw WB_LIMIT=${WB_LIMIT:-150}
for r in 1 2; do
  { gc_whole_bare A_$r $R/kernel_src build/libkdart.so packed32768
    export KDART_LAB_FWDH_BV=32; gc_whole_bare BV32_$r $R/kernel_src build-BV/libkdart.so packed32768
    unset KDART_LAB_FWDH_BV
    gc_whole_bare G64_$r $R/build-G64/k build/libkdart.so packed32768
  } | gc_prof | cut -c1-300 | tee -a $O/bv.txt
done; el; gc_pack
left=$(( ${CALL_END:-585} - ($(date +%s) - t0) ))
echo "left for rows: $left s"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  gc_peers_setup
  LIMIT=${CALL_END:-585} E2E_SAVE=1 gpu_e2e_rows b2_t8192_h32; gc_pack
else
  gc_peers_setup
  LIMIT=${CALL_END:-585} gpu_e2e_rows b2_t8192_h32 packed_t32768_hv32; gc_pack
fi
gc_pack
