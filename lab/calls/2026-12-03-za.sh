#!/usr/bin/env bash
# lab/calls/2026-12-03-za.sh (OUT set; carry build-gpu as build, .whl): recompute_wu with the gate's
# functions in their approximate hardware forms: test_gpu rwu suites and fla's e2e warm-up side by side,
# then alone the rwu rows and the whole backward in the production configuration at B2 T8192 H32.
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
gc_fla_site
(KDART_GPU_TESTS=rwu_every_spec,rwu_production CK_FORK=no timeout 200 build/tests/test_gpu > $O/test_gpu_rwu.txt 2>&1
 echo "test_gpu rwu rc=$?" >> $O/test_gpu_rwu.txt) &
gc_warm WARM_E2E=b2_t8192_h32 WARM_JOBS=4 WARM_TIMEOUT=230
wait; el
grep -hE "Checks|rc=|:F:|:E:" $O/test_gpu_*.txt | cut -c1-300; grep -h "^rwu" $O/test_gpu_rwu.txt | grep gate | head -4
gc_pack
gpu_rwu_bench b2_t8192_h32,prod8192
gc_pack
gpu_e2e_prod 590
gc_pack
