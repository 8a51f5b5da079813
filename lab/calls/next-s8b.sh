#!/usr/bin/env bash
# lab/calls/next-s8b.sh (OUT set; carry build-gpu as build, .whl): bwd_intra's phase C with the
# exponentials factored through the block's row 8 (lab/calls/s8b.diff on main), tested (the intra and wy
# tests, strong gates for the direct form; test_whole_gpu; production float64) and timed against main's
# kernels (/tmp/old): wy_intra_bench and whole_ab, two rounds alternating.
set -u
. lab/calls/common.sh
rm -rf /tmp/old && mkdir -p /tmp/old && cp -a kernel_src /tmp/old/k && (cd /tmp/old/k && patch -s -R -p2 < $R/lab/calls/s8b.diff) \
  || { echo "variant failed"; exit 3; }
grep -c kPivotSpan /tmp/old/k/bwd_intra.cuh kernel_src/bwd_intra.cuh
gc_prologue
gc_gpu_tests 230 intra_fixed_any_t,intra_gate_families,intra_varlen_lists,intra_beta_f32_production,intra_k64_equal_heads k1
gc_gpu_tests 230 wy_intra,wy_production,intra_head_dims,intra_varlen_short_sequences k2
(GPU_CHECK_PARTS=python PYTEST_LOG=pytest_whole PYTEST_TRITON=first PYTEST_TIMEOUT=230 \
  PYTEST_ARGS="-n 2 python/tests/test_whole_gpu.py" tools/gpu_check.sh build $O > $O/whole_rc.txt 2>&1) &
(KDART_ERR_LOG=$O/prod_errors.txt GPU_CHECK_PARTS=python PYTEST_LOG=pytest_prod PYTEST_TRITON=first \
  PYTEST_TIMEOUT=230 PYTEST_ARGS="-n 2 python/tests/test_production_gpu.py -k whole" tools/gpu_check.sh build $O \
  > $O/prod_rc.txt 2>&1) &
wait; el
grep -hE "^[0-9]+%|FAIL|rc=" $O/test_gpu_k?.txt | head -8
grep -hE "passed|failed" $O/pytest_whole.txt $O/pytest_prod.txt | tail -2
grep -hE "^FAILED|^E  " $O/pytest_whole.txt $O/pytest_prod.txt | head -8
cat $O/prod_errors.txt 2>/dev/null | head -20
gc_pack
for i in 1 2; do for d in /tmp/old/k $R/kernel_src; do
  KDART_KERNEL_DIR=$d KDART_CACHE_DIR=/tmp/c$(echo $d | tr / _) PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
    timeout 60 python3 lab/calls/wy_intra_bench.py b2_t8192_h32,packed32768,prod8192 2>&1 | grep -vE "Warning|warn" | sed "s|^|$d |"
  KDART_KERNEL_DIR=$d KDART_CACHE_DIR=/tmp/c$(echo $d | tr / _) PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
    timeout 80 python3 lab/calls/whole_ab.py 2>&1 | grep -vE "Warning|warn" | grep -E "bare|chunk_kda_bwd profile" \
    | sed -E "s/void kdart_//g; s/<kdart::bf16[^ ]*//g; s/\(kdart[^ ]*//g" | cut -c1-200 | sed "s|^|$d |"
done; done | tee $O/ab.txt; el
gc_pack
