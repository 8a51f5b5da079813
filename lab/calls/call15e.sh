#!/usr/bin/env bash
# lab/calls/call15e.sh (session 15's last call; OUT set; carry build, .whl): a kdart.fla odd-dim rule, not kept
# (fall back only when K and V are both odd): the torch tests on the Python path (test_fla_cpu's routing
# tests among them) and the C++ fast path's.
set -u
. lab/calls/common.sh
gc_fla_site
gpu_torch_pypath
(cd python && timeout 120 python3 -m kdart.torch_ext > $O/ext_build.txt 2>&1); tail -n 1 $O/ext_build.txt
gpu_torch_ext
grep -hE "passed|failed" $O/pytest_*.txt | tail -3
grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
gc_pack
