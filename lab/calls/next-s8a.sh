#!/usr/bin/env bash
# lab/calls/next-s8a.sh (OUT set; carry build-gpu as build, .whl): the chunk kernels' CTAs with the heads
# fastest (kdart::chunk_cta), tested, then timed against main's kernels (/tmp/old, from git) and with
# experiments/post-flat on top (/tmp/pf): whole_ab per variant, two rounds alternating.
set -u
. lab/calls/common.sh
rm -rf /tmp/old /tmp/pf && mkdir -p /tmp/old && cp -a kernel_src /tmp/old/k && cp -a kernel_src /tmp/pf \
  && (cd /tmp/old/k && patch -s -R -p2 < $R/lab/calls/s8a.diff) \
  && (cd /tmp/pf && patch -s -p2 < $R/lab/experiments/post-flat/post_flat.diff) || { echo "variants failed"; exit 3; }
grep -c chunk_cta /tmp/old/k/kdart_varlen.cuh kernel_src/kdart_varlen.cuh
gc_prologue
T1=intra_varlen_lists,intra_varlen_short_sequences,varlen_thousand_sequences,varlen_garbage_writes_nothing,wy_production,wy_intra,rwu_production,dav_standalone,dav_fused
T2=intra_fixed_any_t,intra_head_dims,rwu_every_spec,intra_graph_capture,fwdh_production,post_every_spec
gc_gpu_tests 250 $T1 k1
gc_gpu_tests 250 $T2 k2
gc_sanitize 250 KDART_GPU_SMALL=wy_dqkg
(GPU_CHECK_PARTS=python PYTEST_LOG=pytest_whole PYTEST_TRITON=first PYTEST_TIMEOUT=250 \
  PYTEST_ARGS="-n 2 python/tests/test_whole_gpu.py" tools/gpu_check.sh build $O > $O/whole_rc.txt 2>&1) &
(KDART_ERR_LOG=$O/prod_errors.txt GPU_CHECK_PARTS=python PYTEST_LOG=pytest_prod PYTEST_TRITON=first \
  PYTEST_TIMEOUT=250 PYTEST_ARGS="-n 2 python/tests/test_production_gpu.py -k whole" tools/gpu_check.sh build $O \
  > $O/prod_rc.txt 2>&1) &
wait; el
cat $O/san.txt; tail -1 $O/test_gpu_k1.txt $O/test_gpu_k2.txt; grep -hE "^[0-9]+%|Checks|Failures|FAIL" $O/test_gpu_k?.txt | head -8
grep -hE "passed|failed" $O/pytest_whole.txt $O/pytest_prod.txt | tail -2
grep -hE "^FAILED|^E  " $O/pytest_whole.txt $O/pytest_prod.txt | head -8
gc_pack
for i in 1 2; do for d in /tmp/old/k $R/kernel_src /tmp/pf; do
  KDART_KERNEL_DIR=$d KDART_CACHE_DIR=/tmp/c$(echo $d | tr / _) PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
    timeout 80 python3 lab/calls/whole_ab.py 2>&1 | grep -vE "Warning|warn" | grep -E "bare|chunk_kda_bwd profile" \
    | sed -E "s/void kdart_//g; s/<kdart::bf16[^ ]*//g; s/\(kdart[^ ]*//g" | cut -c1-300 | sed "s|^|$d |"
done; done | tee $O/ab.txt; el
gc_pack
