#!/usr/bin/env bash
# lab/calls/next-s10a.sh (OUT set; carry build-gpu as build, .whl): experiments/fp32-swizzle tested and timed.
# The patched kernels in /tmp/fs/k, main's in kernel_src: test_gpu's intra and wy lists and the sanitizers on
# the patched ones; then kernel_src patched in place for the Python whole-backward tests (gpu_check names
# kernel_src); wy_intra_bench and whole_ab alternating main (/tmp/old/k) and fp32-swizzle, two rounds.
set -u
. lab/calls/common.sh
rm -rf /tmp/old /tmp/fs && mkdir -p /tmp/old /tmp/fs && cp -a kernel_src /tmp/old/k && cp -a kernel_src /tmp/fs/k \
  && (cd /tmp/fs/k && patch -s -p2 < $R/lab/experiments/fp32-swizzle/fp32_swizzle.diff) || { echo "variant failed"; exit 3; }
grep -c fsw /tmp/fs/k/bwd_intra_body.inc kernel_src/bwd_intra_body.inc
export KDART_LIBRARY=$R/build/libkdart.so TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR; gc_fla_site
TD=intra_varlen_lists,intra_fixed_any_t,intra_head_dims,varlen_garbage_writes_nothing,wy_intra,wy_production,intra_graph_capture,intra_varlen_short_sequences
(KDART_KERNEL_DIR=/tmp/fs/k KDART_CACHE_DIR=/tmp/cfs KDART_GPU_TESTS=$TD CK_FORK=no timeout 200 build/tests/test_gpu \
  > $O/test_gpu_fs.txt 2>&1; echo "rc=$?" >> $O/test_gpu_fs.txt) &
gc_sanitize_dir /tmp/fs/k 170 bwd_intra
wait; el
tail -1 $O/test_gpu_fs.txt; grep -hE "^[0-9]+%|Checks|Failures|FAIL" $O/test_gpu_fs.txt | head -8; cat $O/san.txt
grep -ciE "invalid|hazard" $O/memcheck.txt $O/racecheck.txt
gc_pack
gpu_ab_dirs /tmp/old/k /tmp/fs/k
gc_pack
(cd kernel_src && patch -s -p2 < $R/lab/experiments/fp32-swizzle/fp32_swizzle.diff)
gc_whole_tests 250
wait; el
gpu_whole_report
gc_pack
