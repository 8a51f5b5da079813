#!/usr/bin/env bash
# lab/calls/2026-12-04-zc.sh (OUT set; carry build-gpu as build, .whl): bwd_post's dq/dk steps with every load
# issued before any use.  Side by side: test_gpu post_every_spec, memcheck + racecheck of bwd_post's small
# cases, test_whole_gpu -k "post or c_chunk or is_the_stages"; then alone post_bench.py with main's kernel
# (lab/calls/old_bwd_post.cuh) and the new one, alternating, both rows; then whole_ab.py.
set -u
. lab/calls/common.sh
gc_prologue
gc_gpu_tests 200 post_every_spec post
gc_sanitize 200 KDART_GPU_SMALL=bwd_post
(cd python/tests && PYTHONPATH=$R/python:/tmp/site timeout 200 python3 -m pytest -q -p no:cacheprovider -n 2 \
  test_whole_gpu.py -k "post or c_chunk or is_the_stages" > $O/pytest_whole.txt 2>&1) &
wait; el
cat $O/san.txt; tail -2 $O/test_gpu_post.txt
grep -hE "passed|failed" $O/pytest_whole.txt | tail -1; grep -hE "^FAILED|^E  " $O/pytest_whole.txt | head -8
gc_pack
rm -rf /tmp/ks0 && cp -a kernel_src /tmp/ks0 && cp lab/calls/old_bwd_post.cuh /tmp/ks0/bwd_post.cuh
for row in b2 packed; do for i in 1 2 3; do for d in /tmp/ks0 $R/kernel_src; do
  POST_NO_FLA=$([ $i = 3 ] && [ $d != /tmp/ks0 ] || echo 1) KDART_KERNEL_DIR=$d KDART_CACHE_DIR=/tmp/pc$(basename $d) PYTHONPATH=$R/python:$R/lab/calls:/tmp/site timeout 60 \
    python3 lab/calls/post_bench.py $row 2>&1 | grep -E "bwd_post|kdart /" | sed "s|^|$(basename $d) |"
done; done; done | tee $O/post_bench.txt; el
PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls timeout 100 python3 lab/calls/whole_ab.py > $O/whole_ab.txt 2>&1
echo "whole_ab rc=$?"; grep -vE "Warning|warn" $O/whole_ab.txt | grep -E "bare|profile" | cut -c1-400; el
gc_pack
