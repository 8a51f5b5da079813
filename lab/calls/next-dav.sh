#!/usr/bin/env bash
# lab/calls/next-dav.sh (OUT set; carry build-gpu as build, .whl): the new bwd_dav stage, fla's
# chunk_kda_bwd_dAv as a kernel of its own, which kdart.fla now runs wherever it does not fuse dAv into
# bwd_dhu and wy_dqkg.  Side by side: test_gpu dav_standalone (every spec, the packed production shapes, Aqk
# with garbage above its diagonal, determinism, refused arguments and garbage cu_seqlens), memcheck +
# racecheck of the small bwd_dav cases, kdart.fla's GPU tests (fla's recipes: bwd_dAv now served, never a
# grid fallback) and the production whole-function float64 tests; then alone the dAv rows where kdart.fla
# does not fuse (K = V = 256, D = 100, the packed row): kdart's own kernel against fla's.
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
gc_fla_site
gc_gpu_tests 200 dav_standalone dav
gc_sanitize 200 KDART_GPU_SMALL=bwd_dav
gc_fla_prod 280
wait; el
grep -hE "Checks|rc=|:F:|:E:" $O/test_gpu_dav.txt | cut -c1-300; grep -hE "^dav" $O/test_gpu_dav.txt | head -24
cat $O/san.txt
grep -hE "passed|failed" $O/pytest_*.txt | tail -3; grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
cat $O/prod_errors.txt 2>/dev/null | tail -12
gc_pack
GPU_CHECK_PARTS=sbs SBS_ARGS="--stage dav --rows b2_t8192_h16_k256,b2_t8192_h16_d100,b1_t32768_h32_packed" \
  SBS_TIMEOUT=$(( 585 - ($(date +%s) - t0) )) SBS_BUDGET=200 tools/gpu_check.sh build $O; el
grep -E "ERROR|own kernel|fla's:|^\| bwd" $O/side_by_side.txt
gc_pack
