#!/usr/bin/env bash
# lab/calls/call13d.sh (session 13's fourth call; OUT set; carry build with build/var/main = main's
# kernel_src and build/var/lib_main = main's libkdart.so): head pairs at the K tile 192 (packed sequences,
# HV even, grids of 8 waves or more).  At once: test_gpu's head-pair, every-spec, head-dim and spec-choice
# tests (one process each), memcheck and racecheck over the head-pair test; then alone, kdart only: main's
# library and sources against the working tree's (dhu_probe, twice).
set -u
. lab/calls/common.sh
pids=""
for t in dhu_varlen_head_pairs dhu_every_spec dhu_head_dims spec_choice; do
  (KDART_GPU_TESTS=$t CK_FORK=no timeout 300 build/tests/test_gpu > $O/test_gpu_$t.txt 2>&1
   echo "test_gpu $t rc=$? t=$(( $(date +%s) - t0 ))" >> $O/test_gpu_$t.txt) &
  pids="$pids $!"
done
gc_sanitize 300 KDART_GPU_TESTS=dhu_varlen_head_pairs
wait $pids; tail -qn 2 $O/test_gpu_*.txt; el
wait; cat $O/san.txt; el
P="python3 lab/calls/dhu_probe.py"
probe() {   # $1: tag, $2: kernel dir, $3: library, rest: cases
  local tag=$1 kd=$2 lib=$3; shift 3
  PYTHONPATH=$R/python KDART_LIBRARY=$lib PROBE_TAG=$tag KDART_KERNEL_DIR=$kd \
    KDART_CACHE_DIR=/tmp/c_${tag%?} timeout 120 $P "$@" 2>&1 | tee -a $O/probe.txt
}
for rep in 1 2; do
  probe main$rep $R/build/var/main $R/build/var/lib_main/libkdart.so docs192 docs256 k192
  probe new$rep $R/kernel_src $R/build/libkdart.so docs192 docs256 k192
done
el
(cd $O && tar czf all.tgz --exclude=all.tgz --exclude='*.tgz' . 2>/dev/null)
