#!/usr/bin/env bash
# lab/calls/next-s7a.sh (OUT set; carry build-gpu as build, .whl): the first call of the next session.  Two
# kernel-only experiments, patched into the device's copy of the tree (main's sources kept in /tmp/old):
# lab/experiments/intra-diag-mma (bwd_intra's diagonal blocks on tensor cores, 3xTF32) and
# lab/experiments/post-flat (bwd_post's dq/dk as row-wise runs without GVA).  (da-swizzle changes the same dA
# reads as intra-diag-mma: it waits for that one's verdict.)  Side by side: test_gpu's intra, wy and post tests, memcheck + racecheck of
# the small intra, wy and post cases, test_whole_gpu.py (all of it, fla in first-config mode: its
# fla-forward tests did not run with bwd_post's new grid), the production float64 tests of the whole route;
# then alone post_bench.py and wy_intra_bench.py with main's sources and the patched ones alternating, and
# whole_ab.py on the patched ones.
set -u
. lab/calls/common.sh
rm -rf /tmp/old && cp -a kernel_src /tmp/old
for d in intra-diag-mma post-flat; do patch -s -p1 < lab/experiments/$d/*.diff || { echo "$d: patch failed"; exit 3; }; done
gc_prologue
gc_gpu_tests 280 intra_every_spec,intra_every_spec_beta_f32,wy_intra,wy_every_spec,intra_varlen_lists,intra_varlen_short_sequences,varlen_thousand_sequences,intra_head_dims,intra_fixed_any_t,intra_gate_families,intra_k64_equal_heads,intra_graph_capture,post_every_spec kern
gc_sanitize 280 KDART_GPU_SMALL=bwd_intra,wy_dqkg,bwd_post
(GPU_CHECK_PARTS=python PYTEST_LOG=pytest_whole PYTEST_TRITON=first PYTEST_TIMEOUT=280 \
  PYTEST_ARGS="-n 2 python/tests/test_whole_gpu.py" tools/gpu_check.sh build $O > $O/whole_rc.txt 2>&1) &
(KDART_ERR_LOG=$O/prod_errors.txt GPU_CHECK_PARTS=python PYTEST_LOG=pytest_prod PYTEST_TRITON=first \
  PYTEST_TIMEOUT=280 PYTEST_ARGS="-n 2 python/tests/test_production_gpu.py -k whole" tools/gpu_check.sh build $O \
  > $O/prod_rc.txt 2>&1) &
wait; el
cat $O/san.txt; tail -2 $O/test_gpu_kern.txt; grep -E "FAIL|fail" $O/test_gpu_kern.txt | head -5
grep -hE "passed|failed" $O/pytest_whole.txt $O/pytest_prod.txt | tail -2
grep -hE "^FAILED|^E  " $O/pytest_whole.txt $O/pytest_prod.txt | head -8
gc_pack
for i in 1 2; do for d in /tmp/old $R/kernel_src; do
  for row in b2 packed prod8192; do
    POST_NO_FLA=1 KDART_KERNEL_DIR=$d KDART_CACHE_DIR=/tmp/c$(echo $d | tr / _) PYTHONPATH=$R/python:$R/lab/calls \
      timeout 40 python3 lab/calls/post_bench.py $row 2>&1 | grep -E "^bwd_post" | sed "s|^|$d |"
  done
  KDART_KERNEL_DIR=$d KDART_CACHE_DIR=/tmp/c$(echo $d | tr / _) PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
    timeout 60 python3 lab/calls/wy_intra_bench.py b2_t8192_h32,packed32768 2>&1 | grep -vE "Warning|warn" | sed "s|^|$d |"
done; done | tee $O/bench.txt; el
gc_pack
PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls timeout 100 python3 lab/calls/whole_ab.py > $O/whole_ab.txt 2>&1
echo "whole_ab rc=$?"; grep -vE "Warning|warn" $O/whole_ab.txt | grep -E "bare|profile" | cut -c1-330; el
gc_pack
