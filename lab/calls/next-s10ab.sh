#!/usr/bin/env bash
# lab/calls/next-s10ab.sh (OUT set; carry build-main-gpu as build, .whl): experiments/fp32-swizzle and
# experiments/fwdh-lpt in one call.  The tree: main with fwdh_lpt_test.diff applied (test_gpu's case of 300
# documents), built.  Kernel dirs: /tmp/old/k (main), /tmp/fs/k (fp32-swizzle), /tmp/lpt/k (fwdh-lpt),
# /tmp/fsl/k (both).  First each variant's test_gpu lists and fp32-swizzle's sanitizers side by side; then
# wy_intra_bench old vs fs and whole_ab (three rows, profiles) old vs fsl, two rounds alternating; then
# kernel_src patched with both for the whole-backward Python tests.
set -u
. lab/calls/common.sh
E=$R/lab/experiments
rm -rf /tmp/old /tmp/fs /tmp/lpt /tmp/fsl && mkdir -p /tmp/old /tmp/fs /tmp/lpt /tmp/fsl \
  && for v in old fs lpt fsl; do cp -a kernel_src /tmp/$v/k; done \
  && (cd /tmp/fs/k && patch -s -p2 < $E/fp32-swizzle/fp32_swizzle.diff) \
  && (cd /tmp/lpt/k && patch -s -p2 < $E/fwdh-lpt/fwdh_lpt.diff) \
  && (cd /tmp/fsl/k && patch -s -p2 < $E/fp32-swizzle/fp32_swizzle.diff && patch -s -p2 < $E/fwdh-lpt/fwdh_lpt.diff) \
  || { echo "variant failed"; exit 3; }
grep -c fsw /tmp/fs/k/bwd_intra_body.inc /tmp/fsl/k/bwd_intra_body.inc; grep -c lpt_row /tmp/lpt/k/fwd_h.cuh /tmp/fsl/k/fwd_h.cuh
export KDART_LIBRARY=$R/build/libkdart.so TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR; gc_fla_site
TD=intra_varlen_lists,intra_fixed_any_t,intra_head_dims,varlen_garbage_writes_nothing,wy_intra,wy_production,intra_graph_capture,intra_varlen_short_sequences
TL=fwdh_every_spec,fwdh_production,varlen_thousand_sequences,dhu_varlen_lists,dhu_varlen_v_split,varlen_garbage_writes_nothing
(KDART_KERNEL_DIR=/tmp/fs/k KDART_CACHE_DIR=/tmp/cfs KDART_GPU_TESTS=$TD CK_FORK=no timeout 190 build/tests/test_gpu \
  > $O/test_gpu_fs.txt 2>&1; echo "rc=$?" >> $O/test_gpu_fs.txt) &
(KDART_KERNEL_DIR=/tmp/lpt/k KDART_CACHE_DIR=/tmp/clpt KDART_GPU_TESTS=$TL CK_FORK=no timeout 190 build/tests/test_gpu \
  > $O/test_gpu_lpt.txt 2>&1; echo "rc=$?" >> $O/test_gpu_lpt.txt) &
gc_sanitize_dir /tmp/fs/k 160 bwd_intra
wait; el
for f in fs lpt; do tail -1 $O/test_gpu_$f.txt; grep -hE "^[0-9]+%|Checks|Failures|FAIL" $O/test_gpu_$f.txt | head -6; done
cat $O/san.txt; grep -ciE "invalid|hazard" $O/memcheck.txt $O/racecheck.txt
gc_pack
for i in 1 2; do for v in old fs; do
  KDART_KERNEL_DIR=/tmp/$v/k KDART_CACHE_DIR=/tmp/cb$v PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
    timeout 90 python3 lab/calls/wy_intra_bench.py b2_t8192_h32,packed32768 2>&1 | grep -vE "Warning|warn|^row" | sed "s|^|$v |"
done; for v in old fsl; do
  KDART_KERNEL_DIR=/tmp/$v/k KDART_CACHE_DIR=/tmp/cb$v PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
    timeout 90 python3 lab/calls/whole_ab.py b2_t8192_h32,packed32768,packed65536_n25 2>&1 | grep -E "bare|chunk_kda_bwd profile" \
    | sed -E "s/void kdart_//g; s/<kdart::bf16[^ ]*//g; s/\(kdart[^ ]*//g" | cut -c1-300 | sed "s|^|$v |"
done; done | tee $O/ab.txt; el
gc_pack
(cd kernel_src && patch -s -p2 < $E/fp32-swizzle/fp32_swizzle.diff && patch -s -p2 < $E/fwdh-lpt/fwdh_lpt.diff)
gc_whole_tests 200
wait; el
gpu_whole_report
gc_pack
