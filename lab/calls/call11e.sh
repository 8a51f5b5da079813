#!/usr/bin/env bash
# lab/calls/call11e.sh (session 11's fifth call; OUT set; carry build, .whl, .triton-carry): bwd_dhu's
# head groups (4 or 2 heads per CTA at the K tile 256 on packed batches, rows longest first) in place of
# call11c's pairs.  Side by side: test_gpu in three processes (dhu_varlen_head_groups among them), the Triton
# warm-up of varlen row 5, the torch tests (Python path); then the sanitizers (small shapes; the head-group
# test as it is) beside the selftest; then alone: varlen row 5 (K = 256 documents) and row 0.
# (Ran with lab/experiments/dhu-head-groups/head-groups.diff applied; main keeps the pairs, whose test is dhu_varlen_head_pairs.)
set -u
. lab/calls/common.sh
gc_fla_site
gc_test_gpu 300
gc_warm WARM_VARLEN=5,0 WARM_VARLEN_JOBS=2 WARM_TIMEOUT=200
gpu_torch_pypath
wait $pids; tail -qn 2 $O/test_gpu?.txt; grep -h "dhu_varlen_head_groups\|Failure\|Error" $O/test_gpu?.txt | grep -v "Errors: 0" | head; el
gc_selftest
gc_sanitize 250 KDART_GPU_SMALL=1
wait; tail -n 1 $O/selftest.txt; cat $O/san.txt; grep triton_warm $O/warm_rc.txt | tail -n 2; el
gpu_varlen 5,0 120 100
grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
grep "^| bwd" $O/varlen.txt
(cd $O && tar czf 0logs.tgz --exclude=0logs.tgz --exclude='*.tgz' .)
