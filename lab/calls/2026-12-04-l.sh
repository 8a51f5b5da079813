#!/usr/bin/env bash
# lab/calls/2026-12-04-l.sh (OUT set; carry build-gpu as build, .whl): call k's A/B again with fla's
# autotuners in first-config mode (call k's timed out in fla's autotuning): test_whole_gpu's
# [False-shape2] with main's kernels, post-split alone, fwd-h-speed alone, both; the CUDA-graph test after
# its fix; kdart selftest of bwd_post and fwd_h alone.  (Run twice: the second time with the libraries of
# build/ab/* beside their own libuv and SQLite, the non-safe gate cases only.)
set -u
. lab/calls/common.sh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR
gc_fla_site
export KDART_LIBRARY=$R/build/libkdart.so KDART_TRITON_WARM=first FLA_DISABLE_BACKEND_DISPATCH=1

T=python/tests/test_whole_gpu.py
ab() {  # $1 variant, $2 library dir, $3 kernel dir, $4.. tests
  local v=$1 lib=$2 kd=$3; shift 3
  (KDART_LIBRARY=$lib/libkdart.so KDART_KERNEL_DIR=$kd KDART_CACHE_DIR=/tmp/c_$v \
   PYTHONPATH=$R/tools/triton_warm:/tmp/site:$R/python timeout 250 python3 -m pytest -q -s -p no:cacheprovider "$@" \
   > $O/ab_$v.txt 2>&1; echo "rc=$?" >> $O/ab_$v.txt) &
}
for v in main split fwdh; do ab $v $R/build/ab/$v $R/build/ab/$v/kernel_src "$T::test_whole_backward_matches_fla_pipeline" -k False; done
ab both $R/build $R/kernel_src "$T::test_whole_backward_matches_fla_pipeline" -k False
wait; el
for v in main split fwdh both; do echo "== $v"; grep -E "kdart vs fla|passed|failed|^E  .*differ|rc=" $O/ab_$v.txt | cut -c1-250; done
tail -2 $O/selftest_*.txt; grep -hiE "fail" $O/selftest_*.txt | head
gc_pack
