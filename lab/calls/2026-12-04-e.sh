#!/usr/bin/env bash
# lab/calls/2026-12-04-e.sh (OUT set; carry build-gpu as build, .whl): the new fwd_h stage, fla's
# chunk_gated_delta_rule_fwd_h (chunk_kda's forward scan and its backward's recompute of h and v_new) as a
# kernel of kdart's, which kdart.fla now serves in both places.  Side by side: test_gpu fwdh_every_spec and
# fwdh_production (every spec against float64 with fla's roundings and the exact scan; packed documents with
# one-token and partial-chunk ones, gates of -1000, h0 and the final state, both state layouts, determinism,
# garbage cu_seqlens), memcheck + racecheck of the small fwd_h cases, kdart.fla's GPU tests (fla's recipes:
# fwd_h served in the forward and in the recompute); then alone fwd_h against fla's at b2_t8192_h32 and
# prod8192 (fla: 0.297 ms at B2 T8192 H32; the bytes-once floor 0.191 ms).  Never run in the session that
# wrote it: the kernel's first run on a GPU is this call's.
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
export KDART_LIBRARY=$R/build/libkdart.so
gc_fla_site
gc_gpu_tests 250 fwdh_every_spec,fwdh_production fwdh
gc_sanitize 250 KDART_GPU_SMALL=fwd_h
(GPU_CHECK_PARTS=python PYTEST_LOG=pytest_fla PYTEST_TRITON=first PYTEST_TIMEOUT=280 \
  PYTEST_ARGS="-n 4 python/tests/test_fla_gpu.py" tools/gpu_check.sh build $O > $O/fla_rc.txt 2>&1) &
wait; el
grep -hE "Checks|rc=|:F:|:E:" $O/test_gpu_fwdh.txt | cut -c1-300; grep -hE "^fwdh" $O/test_gpu_fwdh.txt | head -40
cat $O/san.txt
grep -hE "passed|failed" $O/pytest_*.txt | tail -3; grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
gc_pack
GPU_CHECK_PARTS=sbs SBS_ARGS="--stage fwdh --rows b2_t8192_h32,prod8192" \
  SBS_TIMEOUT=$(( 585 - ($(date +%s) - t0) )) SBS_BUDGET=200 tools/gpu_check.sh build $O; el
grep -E "ERROR|MISMATCH|NONFINITE|^\| fwd_h" $O/side_by_side.txt
gc_pack
