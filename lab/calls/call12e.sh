#!/usr/bin/env bash
# lab/calls/call12e.sh (session 12's last call; OUT set; carry build, .whl): bwd_dhu's tail 2 (the
# V-first state at native dims: the native copies, its checkpoint in 16-byte units) and the masked path in
# 16-byte granules, with kdart.fla serving what measured at least as fast as fla.  At once: test_gpu in
# three processes, memcheck and racecheck on small shapes, the selftest, the torch_ext build, fla's recipes
# (first-config mode) and fla's Triton warm-up of bench/masked_dhu.py; the torch tests on the Python path,
# then through the C++ fast path; then alone: bench/masked_dhu.py.
set -u
. lab/calls/common.sh
gc_suite 300   # (the sanitizers ran with 290 s in the call)
gc_ext_build
gc_fla_recipes
(PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 timeout 220 \
   python3 tools/triton_warm.py -j 4 --log /tmp/warm-mdhu -- python3 bench/masked_dhu.py --warm-only >> $O/warm_mdhu.txt 2>&1) &
gpu_torch_pypath
wait $ep; tail -n 1 $O/ext_build.txt
gpu_torch_ext
wait $fp; grep -v "^tar" $O/fla_rc.txt; el
wait $pids; tail -qn 2 $O/test_gpu?.txt; el
wait; tail -n 1 $O/selftest.txt; cat $O/san.txt; tail -n 1 $O/warm_mdhu.txt; el
PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 timeout 90 \
  python3 bench/masked_dhu.py > $O/masked_dhu.txt 2>&1; cat $O/masked_dhu.txt; el
grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
(cd $O && tar czf all.tgz --exclude=all.tgz --exclude='*.tgz' . 2>/dev/null)
