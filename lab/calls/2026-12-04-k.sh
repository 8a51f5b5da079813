#!/usr/bin/env bash
# lab/calls/2026-12-04-k.sh (OUT set; carry build-gpu as build, .whl, .whl-cudnn): call j's two failures.
# test_whole_gpu's [False-shape2] (dg against fla's pipeline, non-safe gate, K = V = 100) with main's
# kernels, post-split alone, fwd-h-speed alone and both (build/ab/*: a library and its kernel_src each,
# compiled on demand into fresh caches); the CUDA-graph test after its fix (slack rows past cu_seqlens[-1]
# are never written); kdart selftest and test_gpu post_every_spec (tolerance of the fp32 sums); fla's
# warm-up of the cuDNN configuration; then alone bench/e2e.py --configs cudnn with cuDNN frontend 1.32.
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
gc_fla_site
python3 -m pip install -q --no-index --no-deps --target /tmp/cudnn-site .whl-cudnn/*.whl > $O/cudnn_install.txt 2>&1
export KDART_LIBRARY=$R/build/libkdart.so
(timeout 400 build/kdart selftest > $O/selftest.txt 2>&1; echo "selftest rc=$?" >> $O/selftest.txt) &
gc_gpu_tests 200 post_every_spec post
(PYTHONPATH=/tmp/site:/tmp/cudnn-site KDART_LIBRARY=build/libkdart.so timeout 330 python3 bench/e2e.py \
  --shapes b2_t8192_h32,packed_t32768_hv32 --configs cudnn --warm-only > $O/warm.txt 2>&1; echo "warm rc=$?" >> $O/warm.txt) &
for v in main split fwdh; do
  (KDART_LIBRARY=$R/build/ab/$v/libkdart.so KDART_KERNEL_DIR=$R/build/ab/$v/kernel_src KDART_CACHE_DIR=/tmp/c_$v \
   PYTHONPATH=/tmp/site:$R/python timeout 200 python3 -m pytest -q -s -p no:cacheprovider \
   "python/tests/test_whole_gpu.py::test_whole_backward_matches_fla_pipeline" > $O/ab_$v.txt 2>&1; echo "rc=$?" >> $O/ab_$v.txt) &
done
(PYTHONPATH=/tmp/site:$R/python timeout 200 python3 -m pytest -q -s -p no:cacheprovider \
   python/tests/test_whole_gpu.py::test_whole_backward_matches_fla_pipeline python/tests/test_whole_gpu.py::test_whole_backward_cuda_graph_replay \
   > $O/ab_both.txt 2>&1; echo "rc=$?" >> $O/ab_both.txt) &
wait; el
for v in main split fwdh both; do echo "== $v"; grep -E "kdart vs fla|passed|failed|^E  .*differ|rc=" $O/ab_$v.txt | cut -c1-220; done
tail -3 $O/selftest.txt; grep -E "FAIL|fail" $O/selftest.txt | head; grep -hE "Checks|rc=|:F:" $O/test_gpu_post.txt | tail -3; tail -1 $O/warm.txt
gc_pack
PYTHONPATH=/tmp/site:/tmp/cudnn-site KDART_LIBRARY=build/libkdart.so PYTHONUNBUFFERED=1 timeout $(( 590 - ($(date +%s) - t0) )) \
  python3 bench/e2e.py --shapes b2_t8192_h32,packed_t32768_hv32 --configs cudnn --iters 8 --no-overhead > $O/e2e.txt 2>&1
echo "e2e rc=$?"; el; grep -vE "Warning|_warn_once|other:" $O/e2e.txt | tail -30
gc_pack
