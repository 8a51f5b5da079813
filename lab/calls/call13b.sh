#!/usr/bin/env bash
# lab/calls/call13b.sh (session 13's second call; OUT set; carry build, .whl): call A's crashes fixed
# (the handle's slot table sized for bwd_dhu's 144 specializations), the variable-length dht experiment
# reverted.  At once: test_gpu in six processes, the selftest, memcheck and racecheck on small shapes, fla's
# Triton warm-up of the bench/masked_dhu.py cases below; then alone: those cases (the K tile 192 native, masked
# and V-first, D = 60 / 100, K = 130 with V = 128), kdart.torch against fla.
set -u
. lab/calls/common.sh
CASES=100:100,60:60,192:192,160:160,192:192:v,160:160:v,130:128
gc_fla_site
pids=""
for i in 0 1 2 3 4 5; do
  (KDART_GPU_PART=$i/6 CK_FORK=no timeout 360 build/tests/test_gpu > $O/test_gpu$i.txt 2>&1
   echo "test_gpu part $i/6 rc=$? t=$(( $(date +%s) - t0 ))" >> $O/test_gpu$i.txt) &
  pids="$pids $!"
done
gc_selftest
gc_sanitize 330 KDART_GPU_SMALL=1
(PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 timeout 250 \
   python3 tools/triton_warm.py -j 4 --log /tmp/warm-mdhu -- python3 bench/masked_dhu.py --warm-only --cases $CASES \
   >> $O/warm_mdhu.txt 2>&1; echo "warm rc=$?" >> $O/warm_mdhu.txt) &
wait $pids; tail -qn 2 $O/test_gpu?.txt; el
wait; tail -n 1 $O/selftest.txt; cat $O/san.txt; tail -n 2 $O/warm_mdhu.txt; el
PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 timeout 150 \
  python3 bench/masked_dhu.py --cases $CASES > $O/masked_dhu.txt 2>&1; cat $O/masked_dhu.txt; el
(cd $O && tar czf all.tgz --exclude=all.tgz --exclude='*.tgz' . 2>/dev/null)
