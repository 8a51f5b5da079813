#!/usr/bin/env bash
# lab/calls/2026-12-04-q.sh (OUT set; carry build-gpu as build, .whl): bwd_post taking twice the tokens a
# warp at once where K <= 128 (one group of four columns a lane).  Its specs prewarmed; test_gpu
# post_every_spec; memcheck and racecheck of its small set; the torch tests of bwd_post and the whole
# backward (test_whole_gpu.py) and the production float64 tests of the whole route (fla first-config);
# then, alone, post_bench.py with main's kernel (build/oldsrc/bwd_post.cuh) and with the new one.
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
gc_fla_site
export KDART_LIBRARY=$R/build/libkdart.so
timeout 100 build/kdart prewarm --jobs 16 > $O/prewarm.txt 2>&1; timeout 60 build/kdart prewarm --kernel bwd_post --all --jobs 16 >> $O/prewarm.txt 2>&1; grep "^prewarm" $O/prewarm.txt; el
gc_gpu_tests 300 post_every_spec post
gc_sanitize 300 KDART_GPU_SMALL=bwd_post
(GPU_CHECK_PARTS=python PYTEST_LOG=pytest_whole PYTEST_TRITON=first PYTEST_TIMEOUT=300 \
  PYTEST_ARGS="-rA -n 3 python/tests/test_whole_gpu.py" tools/gpu_check.sh build $O > $O/whole_rc.txt 2>&1) &
(KDART_ERR_LOG=$O/prod_errors.txt GPU_CHECK_PARTS=python PYTEST_LOG=pytest_prod PYTEST_TRITON=first \
  PYTEST_TIMEOUT=300 PYTEST_ARGS="-n 3 python/tests/test_production_gpu.py -k whole" tools/gpu_check.sh build $O \
  > $O/prod_rc.txt 2>&1) &
wait; el
grep -hE "Checks|rc=|:F:" $O/test_gpu_post.txt | tail -3
cat $O/san.txt
grep -hE "passed|failed" $O/pytest_whole.txt $O/pytest_prod.txt | tail -2
grep -hE "^FAILED|^E  " $O/pytest_whole.txt $O/pytest_prod.txt | head -12
gc_pack
rm -rf /tmp/ks_old && cp -r kernel_src /tmp/ks_old && cp build/oldsrc/bwd_post.cuh /tmp/ks_old/
for v in old new new old; do
  kd=$R/kernel_src; [ $v = old ] && kd=/tmp/ks_old
  echo "== $v" >> $O/post_bench.txt
  KDART_KERNEL_DIR=$kd KDART_CACHE_DIR=/tmp/cache_$v PYTHONPATH=/tmp/site:$R/python timeout 100 \
    python3 lab/calls/post_bench.py >> $O/post_bench.txt 2>&1
done
grep -vE "Warning|warn" $O/post_bench.txt; el
gc_pack
