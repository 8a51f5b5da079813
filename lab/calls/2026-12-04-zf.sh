#!/usr/bin/env bash
# lab/calls/2026-12-04-zf.sh (OUT set; carry build-gpu as build, .whl): bwd_post with the heads as the grid's
# fastest index and up to 512 tokens per CTA.  Side by side: test_gpu post_every_spec, memcheck + racecheck
# of bwd_post's small cases, test_whole_gpu -k "post or c_chunk or is_the_stages", the production float64
# tests of the whole route; then alone whole_ab.py (both rows).
set -u
. lab/calls/common.sh
gc_prologue
gc_gpu_tests 200 post_every_spec post
gc_sanitize 200 KDART_GPU_SMALL=bwd_post
(cd python/tests && PYTHONPATH=$R/python:/tmp/site timeout 200 python3 -m pytest -q -p no:cacheprovider -n 2 \
  test_whole_gpu.py -k "post or c_chunk or is_the_stages" > $O/pytest_whole.txt 2>&1) &
(KDART_ERR_LOG=$O/prod_errors.txt GPU_CHECK_PARTS=python PYTEST_LOG=pytest_prod PYTEST_TRITON=first \
  PYTEST_TIMEOUT=200 PYTEST_ARGS="-n 2 python/tests/test_production_gpu.py -k whole" tools/gpu_check.sh build $O \
  > $O/prod_rc.txt 2>&1) &
wait; el
cat $O/san.txt; tail -2 $O/test_gpu_post.txt
grep -hE "passed|failed" $O/pytest_whole.txt $O/pytest_prod.txt | tail -2
grep -hE "^FAILED|^E  " $O/pytest_whole.txt $O/pytest_prod.txt | head -8
gc_pack
PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls timeout 100 python3 lab/calls/whole_ab.py > $O/whole_ab.txt 2>&1
echo "whole_ab rc=$?"; grep -vE "Warning|warn" $O/whole_ab.txt | grep -E "bare|profile" | cut -c1-330; el
gc_pack
