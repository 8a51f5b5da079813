#!/usr/bin/env bash
# lab/calls/2026-12-05-f.sh (OUT set; carry build-main-gpu, build-exp, .whl; about 8 minutes):
# experiments/da-onchip tested and timed.  build-exp is the branch's build (its runtime passes NULL dA, dAqk
# to the fused kernel in the whole call, which main's kernels cannot take), so every timing pairs each
# kernel tree with its own library: main = build-main-gpu + kernel_src, exp = build-exp + the patched tree.
# 1. exp's GPU tests: test_gpu's wy and intra lists and the whole call (its new check: the five gradients
#    bitwise equal with and without the dA, dAqk outputs), memcheck and racecheck of the small wy_dqkg
#    cases, the whole-backward Python tests; 2. wy_intra_bench and whole_ab, two rounds alternating.
set -u
grep -q da_stash kernel_src/wy_dqkg.cuh && { echo "run it from main's tree (kernel_src without the experiment)"; exit 3; }
rm -rf build && mv build-exp build
. lab/calls/common.sh
D=$R/lab/experiments/da-onchip/da_onchip.diff
# the diff's files under the given folders
part() { python3 -c 'import re, sys; t = open(sys.argv[1]).read(); print("".join(c for c in re.split(r"(?m)^(?=diff --git )", t)
  if c.startswith(tuple("diff --git a/" + p for p in sys.argv[2:]))), end="")' $D "$@"; }
# each tree with its own library and Python package (gpu_ab_dirs: the branch's asks kdart for dA by name,
# which its registry made optional)
rm -rf /tmp/old /tmp/new && mkdir -p /tmp/old /tmp/new && cp -a kernel_src /tmp/old/k && cp -a kernel_src /tmp/new/k \
  && cp -a python /tmp/new/py && (part kernel_src/ | (cd /tmp/new/k && patch -s -p2)) \
  && (part python/ | (cd /tmp/new/py && patch -s -p2)) || { echo "the diff does not apply"; exit 3; }
ln -s $R/build-main-gpu/libkdart.so /tmp/old/libkdart.so; ln -s $R/build/libkdart.so /tmp/new/libkdart.so
grep -c da_stash /tmp/new/k/wy_dqkg.cuh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR; gc_fla_site
(KDART_KERNEL_DIR=/tmp/new/k KDART_CACHE_DIR=/tmp/cnew KDART_GPU_TESTS=wy_intra,wy_production,wy_every_spec,intra_fixed_any_t,intra_head_dims,intra_varlen_lists,varlen_garbage_writes_nothing,chunk_bwd_whole \
  CK_FORK=no timeout 280 build/tests/test_gpu > $O/test_gpu_new.txt 2>&1; echo "rc=$?" >> $O/test_gpu_new.txt) &
gc_sanitize_dir /tmp/new/k 280 wy_dqkg
wait; el
tail -1 $O/test_gpu_new.txt; grep -hE "^[0-9]+%|:[EF]:" $O/test_gpu_new.txt | head -6; cat $O/san.txt
grep -ciE "invalid|hazard" $O/memcheck.txt $O/racecheck.txt
gc_pack
gpu_ab_dirs /tmp/old/k /tmp/new/k
gc_pack
part kernel_src/ python/ | patch -s -p1
export KDART_LIBRARY=$R/build/libkdart.so
gc_whole_tests 150
wait; el
gpu_whole_report; gc_pack
