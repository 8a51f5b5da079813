#!/usr/bin/env bash
# lab/calls/call13c.sh (session 13's last call; OUT set; carry build, .whl): the Python package after
# kdart.fla's routing change (K = 192 served in its own K tile, both state layouts).  At once: the torch_ext
# build and fla's recipes (first-config mode, five workers; D = 192 added), the torch tests on the Python
# path; then the torch tests through the C++ fast path.
set -u
. lab/calls/common.sh
gc_fla_site
gc_ext_build
gc_fla_recipes
gpu_torch_pypath
wait $ep; tail -n 1 $O/ext_build.txt
gpu_torch_ext
wait $fp; grep -v "^tar" $O/fla_rc.txt; el
grep -hE "passed|failed" $O/pytest_*.txt | tail -5
grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
(cd $O && tar czf all.tgz --exclude=all.tgz --exclude='*.tgz' . 2>/dev/null)
