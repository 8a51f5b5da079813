#!/usr/bin/env bash
# lab/calls/2026-12-04-c.sh (OUT set; carry build-gpu as build, .whl; devcache: every sm_90a spec of this
# tree): the last device time of the session.  kdart.fla's GPU tests (fla's recipes) and the production
# whole-function float64 tests side by side, on this tree (standalone bwd_dav serving the unfused dAv calls,
# wy_dqkg's dv2 through shared memory, bwd_dhu's dv_intra after QD); then alone the fused dAv rows against
# fla's dAv in one process (B2 T8192 H32, prod8192), as long as the time lasts.
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
gc_fla_site
gc_fla_prod 190
wait; el
grep -hE "passed|failed" $O/pytest_*.txt | tail -3; grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
cat $O/prod_errors.txt 2>/dev/null | tail -14
gc_pack
GPU_CHECK_PARTS=sbs SBS_ARGS="--stage dav --no-ceiling --rows b2_t8192_h32,prod8192" \
  SBS_TIMEOUT=$(( 315 - ($(date +%s) - t0) )) SBS_BUDGET=100 tools/gpu_check.sh build $O; el
grep -E "ERROR|^\| |bwd_dhu .* ms|kdart .* ms" $O/side_by_side.txt | head -20
gc_pack
