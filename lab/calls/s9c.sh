#!/usr/bin/env bash
# lab/calls/s9c.sh (OUT set; carry build-gpu as build, .whl): with da-swizzle in kernel_src, (1) ncu
# SourceCounters of the fused wy_dqkg + intra launch at B2 T8192 H32 (per SASS instruction: stall samples,
# shared wavefronts and their excess), exported as CSV with the SASS; then (2) the whole-backward tests:
# production -k whole and test_whole_gpu.py.
set -u
. lab/calls/common.sh
export KDART_LIBRARY=$R/build/libkdart.so
gpu_ncu_fused "--section MemoryWorkloadAnalysis_Tables"
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR; gc_fla_site
gc_whole_tests 250
wait; el
gpu_whole_report
gc_pack
