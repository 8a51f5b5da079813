#!/usr/bin/env bash
# lab/calls/call12d.sh (session 12's fourth call; OUT set; carry build with build/var/ref = HEAD's
# kernel_src, .whl): the masked bwd_dhu with the native copies on full tiles and the V-first stores
# batched.  At once: test_gpu in three processes, memcheck and racecheck on small shapes, the selftest and
# fla's Triton warm-up of bench/masked_dhu.py; then alone: kdart against HEAD's sources (dhu_probe.py,
# alternately, twice) and bench/masked_dhu.py against fla.
set -u
. lab/calls/common.sh
gc_suite 330
(PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 timeout 250 \
   python3 tools/triton_warm.py -j 4 --log /tmp/warm-mdhu -- python3 bench/masked_dhu.py --warm-only >> $O/warm_mdhu.txt 2>&1) &
wait $pids; tail -qn 2 $O/test_gpu?.txt; el
wait; tail -n 1 $O/selftest.txt; cat $O/san.txt; tail -n 1 $O/warm_mdhu.txt; el
P="python3 lab/calls/dhu_probe.py"
for rep in 1 2; do
  for tag in ref new; do
    kd=$R/kernel_src; [ $tag = ref ] && kd=$R/build/var/ref
    PYTHONPATH=$R/python KDART_LIBRARY=$R/build/libkdart.so PROBE_TAG=$tag$rep KDART_KERNEL_DIR=$kd \
      KDART_CACHE_DIR=/tmp/c_$tag timeout 120 $P k128 svf128 k60 k100 k200 k192 k256 2>&1 | tee -a $O/probe.txt
  done
done
el
PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 timeout 150 \
  python3 bench/masked_dhu.py > $O/masked_dhu.txt 2>&1; cat $O/masked_dhu.txt; el
grep -h "Checks\|FAIL\|Error" $O/test_gpu?.txt | head
(cd $O && tar czf all.tgz --exclude=all.tgz --exclude='*.tgz' .)
