#!/usr/bin/env bash
# lab/calls/call13a.sh (session 13's first call; OUT set; carry build): bwd_dhu's K tile 192 (head
# dims 129..192: native at 192, masked below) and, on packed sequences, the native state's dht loaded
# before varlen_locate with the head pair's second dht prefetched into L2.  At once: test_gpu in four
# processes, the selftest, memcheck and racecheck on small shapes, the torch tests on the Python path; then
# alone, kdart only: dhu_probe over the kernel-source variants build/var/ref (main's sources), build/var/v1
# (the early dht without the prefetch) and kernel_src (both), each with a cache of its own.
set -u
. lab/calls/common.sh
pids=""
for i in 0 1 2 3; do
  (KDART_GPU_PART=$i/4 CK_FORK=no timeout 330 build/tests/test_gpu > $O/test_gpu$i.txt 2>&1
   echo "test_gpu part $i/4 rc=$? t=$(( $(date +%s) - t0 ))" >> $O/test_gpu$i.txt) &
  pids="$pids $!"
done
gc_fla_site
gc_selftest
gc_sanitize 300 KDART_GPU_SMALL=1
gpu_torch_pypath
wait $pids; tail -qn 2 $O/test_gpu?.txt; el
wait; tail -n 1 $O/selftest.txt; cat $O/san.txt; el
P="python3 lab/calls/dhu_probe.py"
probe() {   # $1: tag, $2: kernel dir, rest: cases
  local tag=$1 kd=$2; shift 2
  PYTHONPATH=$R/python KDART_LIBRARY=$R/build/libkdart.so PROBE_TAG=$tag KDART_KERNEL_DIR=$kd \
    KDART_CACHE_DIR=/tmp/c_${tag%?} timeout 120 $P "$@" 2>&1 | tee -a $O/probe.txt
}
for rep in 1 2; do
  for v in ref v1; do probe $v$rep $R/build/var/$v docs256 eq256x fix256 docs128; done
  probe new$rep $R/kernel_src docs256 eq256x fix256 docs128
done
probe new3 $R/kernel_src k192 k160 svf192 docs192 k256 k128
el
grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
(cd $O && tar czf all.tgz --exclude=all.tgz --exclude='*.tgz' . 2>/dev/null)
