#!/usr/bin/env bash
# lab/calls/call15d.sh (session 15's fourth call, run twice; OUT set; carry build, .whl): odd K / V padding that fills
# only the pad region (and never copies h0).  At once: fla's Triton warm-up of the odd masked_dhu cases, the
# torch tests on the Python path, and the CPU routing tests with kdart.fla serving odd dims too
# (build/var/pyflip: fla.py and test_fla_cpu.py of that variant); then alone: pad_probe (the copies), dhu_probe
# (the padded calls next to the padded dims natively), bench/masked_dhu.py on the odd cases against fla.
set -u
. lab/calls/common.sh
CASES=63:63,101:101,63:64,64:63,63:63:v
gc_fla_site
gc_warm_mdhu 200 5 $CASES
gpu_torch_pypath
rm -rf /tmp/pyflip && cp -r python /tmp/pyflip && cp build/var/pyflip/fla.py /tmp/pyflip/kdart/ && \
  cp build/var/pyflip/test_fla_cpu.py /tmp/pyflip/tests/ && \
  (cd /tmp/pyflip && PYTHONPATH="/tmp/site:/tmp/pyflip" KDART_TORCH_EXT=0 KDART_LIBRARY=$R/build/libkdart.so \
   timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_fla_cpu.py > $O/pytest_flip.txt 2>&1; \
   echo "flip rc=$?" >> $O/pytest_flip.txt); tail -n 3 $O/pytest_flip.txt; el
gc_pack
wait; tail -n 2 $O/warm_mdhu.txt; el
export PYTHONPATH=$R/python KDART_LIBRARY=$R/build/libkdart.so KDART_TORCH_EXT=0
timeout 60 python3 lab/calls/pad_probe.py 63 101 2>&1 | tee $O/pad_probe.txt
timeout 60 python3 lab/calls/dhu_probe.py k63 k64 k63v64 k101 k104 2>&1 | tee $O/probe.txt; el
unset KDART_TORCH_EXT
PYTHONPATH="/tmp/site:$R/python" FLA_DISABLE_BACKEND_DISPATCH=1 timeout 120 \
  python3 bench/masked_dhu.py --cases $CASES > $O/masked_dhu.txt 2>&1; cat $O/masked_dhu.txt; el
grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
gc_pack
