#!/usr/bin/env bash
# lab/calls/2026-12-03-g.sh (as call d): the last device minutes: the tests of the other stages that this
# session's changes to the registry, the operations and the check harness could touch (spec choice, bad
# arguments, the production-configuration bwd_intra, packed bwd_dhu), in two processes.
set -u
. lab/calls/common.sh
for i in 0 1; do
  (KDART_GPU_TESTS=spec_choice,bad_arguments_write_nothing,intra_beta_f32_production,dhu_varlen_lists \
   KDART_GPU_PART=$i/2 CK_FORK=no timeout 120 build/tests/test_gpu > $O/test_gpu$i.txt 2>&1
   echo "test_gpu part $i/2 rc=$? t=$(( $(date +%s) - t0 ))" >> $O/test_gpu$i.txt) &
done
wait; el
grep -h "^test_gpu part\|Checks\|:F:\|:E:" $O/test_gpu*.txt | cut -c1-300
gc_pack
