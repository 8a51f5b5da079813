#!/usr/bin/env bash
# lab/experiments/da-swizzle/call.sh (OUT set; carry build-gpu as build, .whl): the dA tiles' chunk swizzle
# (da_swizzle.diff, a kernel-only change) tested and timed without touching the tree: the patched sources go
# to /tmp/new/kernel_src.  Side by side: test_gpu's intra and wy tests, memcheck + racecheck of the small
# intra and wy cases, test_whole_gpu.py (first-config fla); then alone wy_intra_bench.py on two rows,
# main's sources and the patched ones alternating (the library is the same).
set -u
. lab/calls/common.sh
rm -rf /tmp/new && mkdir -p /tmp/new && cp -a kernel_src /tmp/new/ && patch -s -p1 -d /tmp/new < lab/experiments/da-swizzle/da_swizzle.diff \
  || { echo "patch failed"; exit 3; }
export KDART_KERNEL_DIR=/tmp/new/kernel_src KDART_CACHE_DIR=$R/build/newcache
gc_prologue
gc_gpu_tests 280 intra_every_spec,intra_every_spec_beta_f32,wy_intra,wy_every_spec,intra_varlen_lists,intra_varlen_short_sequences,varlen_thousand_sequences,intra_head_dims,intra_fixed_any_t,intra_gate_families,intra_k64_equal_heads,intra_graph_capture intra
gc_sanitize 280 KDART_GPU_SMALL=bwd_intra,wy_dqkg
(GPU_CHECK_PARTS=python PYTEST_LOG=pytest_whole PYTEST_TRITON=first PYTEST_TIMEOUT=280 \
  PYTEST_ARGS="-n 2 python/tests/test_whole_gpu.py" tools/gpu_check.sh build $O > $O/whole_rc.txt 2>&1) &
wait; el
cat $O/san.txt; tail -2 $O/test_gpu_intra.txt; grep -E "FAIL|fail" $O/test_gpu_intra.txt | head -5
grep -hE "passed|failed" $O/pytest_whole.txt | tail -1; grep -hE "^FAILED|^E  " $O/pytest_whole.txt | head -8
gc_pack
for i in 1 2; do for d in $R/kernel_src /tmp/new/kernel_src; do
  KDART_KERNEL_DIR=$d KDART_CACHE_DIR=/tmp/c$(echo $d | tr / _) PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
    timeout 60 python3 lab/calls/wy_intra_bench.py b2_t8192_h32,packed32768 2>&1 | grep -vE "Warning|warn" | sed "s|^|$d |"
done; done | tee $O/bench.txt; el
gc_pack
