#!/usr/bin/env bash
# lab/calls/next-s10b.sh (OUT set; carry build-gpu as build, .whl): experiments/fwdh-lpt tested and timed.
# Before: `git apply` both of its diffs (kernels, and test_gpu's case of 300 documents) and build build-gpu
# with them.  Here: its kernels (/tmp/lpt/k, own cache): test_gpu's fwd_h and varlen lists on it, then whole_ab's
# packed rows (7 and 25 documents) alternating main (/tmp/old/k) and fwdh-lpt (/tmp/lpt/k), two rounds
# (the fwd_h and bwd_dhu lines of the profile), then the C-call tests of test_whole_gpu.py (kernel_src has it).
set -u
. lab/calls/common.sh
rm -rf /tmp/old /tmp/lpt && mkdir -p /tmp/old /tmp/lpt && cp -a kernel_src /tmp/old/k && cp -a kernel_src /tmp/lpt/k \
  && (cd /tmp/old/k && patch -s -R -p2 < $R/lab/experiments/fwdh-lpt/fwdh_lpt.diff) || { echo "variant failed"; exit 3; }
grep -c lpt_row /tmp/lpt/k/fwd_h.cuh kernel_src/fwd_h.cuh
export KDART_LIBRARY=$R/build/libkdart.so TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR; gc_fla_site
TL=fwdh_every_spec,fwdh_production,varlen_thousand_sequences,varlen_garbage_writes_nothing,intra_varlen_lists,dhu_varlen_lists
(KDART_KERNEL_DIR=/tmp/lpt/k KDART_CACHE_DIR=/tmp/clpt KDART_GPU_TESTS=$TL CK_FORK=no timeout 200 build/tests/test_gpu \
  > $O/test_gpu_lpt.txt 2>&1; echo "rc=$?" >> $O/test_gpu_lpt.txt)
tail -1 $O/test_gpu_lpt.txt; grep -hE "^[0-9]+%|Checks|Failures|FAIL" $O/test_gpu_lpt.txt | head -8; el
gc_pack
for i in 1 2; do for v in old lpt; do
  KDART_KERNEL_DIR=/tmp/$v/k KDART_CACHE_DIR=/tmp/cb$v PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
    timeout 100 python3 lab/calls/whole_ab.py packed32768,packed65536_n25 2>&1 | grep -E "bare|chunk_kda_bwd profile" \
    | sed -E "s/void kdart_//g; s/<kdart::bf16[^ ]*//g; s/\(kdart[^ ]*//g" | cut -c1-300 | sed "s|^|$v |"
done; done | tee $O/ab.txt; el
gc_pack
gc_pytest whole 200 "-n 4 python/tests/test_whole_gpu.py -k c_chunk"; wait
grep -hE "passed|failed" $O/pytest_whole.txt | tail -1; grep -hE "^FAILED|^E  " $O/pytest_whole.txt | head -8; el
gc_pack
