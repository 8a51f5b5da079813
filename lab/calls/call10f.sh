#!/usr/bin/env bash
# lab/calls/call10f.sh (session 10's fourth call; OUT set; carry build, .whl, .triton-carry): bwd_dhu's
# masked path copying by cp.async in 8- / 4-byte granules (it loaded element by element: 0.08-0.12x fla at
# D = 100 / 60 in call10e).  Side by side: test_gpu in three processes, the torch_ext build, fla's recipes,
# the Triton warm-up of side_by_side rows 5, 11-13 and varlen row 5; then compute-sanitizer memcheck and
# racecheck over every specialization on small shapes (KDART_GPU_SMALL) beside the selftest and the torch
# tests on both paths; then alone: side_by_side rows 5, 11-13 and varlen row 5.
set -u
. lab/calls/common.sh
gc_fla_site
gc_test_gpu 280
gc_ext_build
gc_fla_recipes
gc_warm WARM_SBS=5,11,12,13 WARM_VARLEN=5 WARM_JOBS=4 WARM_VARLEN_JOBS=1 WARM_TIMEOUT=200
gpu_torch_pypath
wait $ep; cat $O/ext_build.txt
gpu_torch_ext
wait $pids; tail -qn 2 $O/test_gpu?.txt; el
gc_selftest
gc_sanitize 220 KDART_GPU_SMALL=1
wait $fp; grep -v "^tar" $O/fla_rc.txt; el
wait; tail -n 1 $O/selftest.txt; cat $O/san.txt; grep triton_warm $O/warm_rc.txt | tail -n 2; el
gpu_sbs 5,11,12,13
gpu_varlen 5 100 80
gpu_finish
