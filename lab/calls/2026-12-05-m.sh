#!/usr/bin/env bash
# lab/calls/2026-12-05-m.sh (OUT set; carry build-gpu = main's build with main's kernels in build-gpu/k,
# build-cta1 = exp/cta1's build; about 5 minutes on a warm machine): milestone 2 of lab/experiments/one-cta
# (the intra terms in the one-CTA body's registers): 1. test_gpu's wy_cta1, wy_intra and chunk_bwd_whole with
# the branch's build, memcheck and racecheck of wy_cta1 beside them; 2. main against the branch, two rounds:
# wy_intra_bench's rows (its "fused" column is the kernel the branch replaces) and whole_ab's bare C call.
set -u
rm -rf build && mv build-cta1 build
. lab/calls/common.sh
gc_ab_trees
gc_tests_san wy_cta1,wy_intra,chunk_bwd_whole wy_cta1 240
gc_pack
gpu_ab_dirs /tmp/main/k /tmp/cta1/k
gc_pack
