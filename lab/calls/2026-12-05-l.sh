#!/usr/bin/env bash
# lab/calls/2026-12-05-l.sh (OUT set; carry build-gpu = main's build with main's kernels in build-gpu/k,
# build-cta1 = exp/cta1's build; about 4 minutes on a warm machine): the one-CTA wy_dqkg body (milestone 1
# of lab/experiments/one-cta): 1. test_gpu's wy_cta1 and wy_production with the branch's build, memcheck and
# racecheck of wy_cta1 beside them; 2. wy_intra_bench's rows, main against the branch, two rounds (its
# "wy+dAqk" column is the kernel that the branch replaces; the others must not move).
set -u
rm -rf build && mv build-cta1 build
. lab/calls/common.sh
gc_ab_trees
gc_tests_san wy_cta1,wy_production wy_cta1 200
gc_pack
AB_WHOLE=0 gpu_ab_dirs /tmp/main/k /tmp/cta1/k
gc_pack
