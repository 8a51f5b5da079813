#!/usr/bin/env bash
# lab/calls/2026-12-05-c.sh (OUT set; carry build-main-gpu, .whl): kernel_src = main + intra-early-qkg.
# Its whole-backward Python tests, racecheck and memcheck of test_gpu's wy_intra on a warm cache, and
# post-sig (bwd_post's sigmoid by the fast division) through post_every_spec; then, alone on the GPU,
# whole_ab alternating early-qkg and early-qkg + post-sig, two rounds; then fused_probes.py's timing probes.
set -u
rm -rf build && mv build-main-gpu build
. lab/calls/common.sh
rm -rf /tmp/old /tmp/eq /tmp/ps && mkdir -p /tmp/old /tmp/eq /tmp/ps && cp -a kernel_src /tmp/eq/k && cp -a kernel_src /tmp/ps/k \
  && cp -a kernel_src /tmp/old/k && (cd /tmp/old/k && patch -s -R -p2 < $R/lab/experiments/intra-early-qkg/early_qkg.diff) \
  && sed -i 's|return 1.f / (1.f + __expf(-x));|return __fdividef(1.f, 1.f + __expf(-x));|' /tmp/ps/k/bwd_post.cuh \
  && grep -c fdividef /tmp/ps/k/bwd_post.cuh || { echo "variant failed"; exit 3; }
export KDART_LIBRARY=$R/build/libkdart.so TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR; gc_fla_site
gc_whole_tests 190
(KDART_KERNEL_DIR=/tmp/ps/k KDART_CACHE_DIR=/tmp/cps KDART_GPU_TESTS=post_every_spec,chunk_bwd_whole CK_FORK=no timeout 200 \
  build/tests/test_gpu > $O/test_gpu_ps.txt 2>&1; echo "rc=$?" >> $O/test_gpu_ps.txt) &
(KDART_CACHE_DIR=/tmp/csan KDART_GPU_TESTS=wy_intra,chunk_bwd_whole CK_FORK=no timeout 100 build/tests/test_gpu > $O/test_gpu_eq.txt 2>&1
 echo "rc=$?" >> $O/test_gpu_eq.txt
 for tool in memcheck racecheck; do
   (KDART_CACHE_DIR=/tmp/csan KDART_GPU_TESTS=wy_intra,chunk_bwd_whole CK_FORK=no timeout 180 compute-sanitizer --tool $tool build/tests/test_gpu > $O/$tool.txt 2>&1
    echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $O/$tool.txt)" >> $O/san.txt) &
 done; wait) &
wait; el
gpu_whole_report
for f in eq ps; do tail -1 $O/test_gpu_$f.txt; grep -hE "^[0-9]+%|:[EF]:" $O/test_gpu_$f.txt | head -6; done; cat $O/san.txt
gc_pack
for i in 1 2; do for d in /tmp/eq/k /tmp/ps/k; do
  v=$(basename $(dirname $d))
  KDART_KERNEL_DIR=$d KDART_CACHE_DIR=/tmp/cb$v PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
    timeout 80 python3 lab/calls/whole_ab.py b2_t8192_h32,packed32768 2>&1 | grep -E "bare" | sed "s|^|$v |"
done; done | tee $O/ab.txt; el
gc_pack
# timing probes of the fused kernel (lab/calls/fused_probes.py: results wrong on purpose), one round,
# against this tree's kernels (eq)
python3 lab/calls/fused_probes.py kernel_src /tmp/pr
for d in /tmp/eq/k /tmp/pr/p1/k /tmp/pr/p2/k /tmp/pr/p3/k /tmp/pr/p4/k /tmp/pr/p5/k /tmp/pr/p6/k /tmp/eq/k; do
  v=$(basename $(dirname $d))
  KDART_KERNEL_DIR=$d KDART_CACHE_DIR=/tmp/cb$v PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
    timeout 60 python3 lab/calls/wy_intra_bench.py b2_t8192_h32,prod8192 2>&1 \
    | grep -vE "Warning|warn|^row" | sed "s|^|$v |"
done | tee $O/probes.txt; el
gc_pack
