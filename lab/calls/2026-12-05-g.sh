#!/usr/bin/env bash
# lab/calls/2026-12-05-g.sh (OUT set; carry build-main-gpu, build-exp; about 7 minutes): what call f left
# undone.  Its test_gpu ran out of time compiling (the wy and intra lists passed, the whole call was not
# reached) and its A/B loaded no library (a link to libkdart.so in /tmp: $ORIGIN there has no libuv).
# Call f (removed; its logs in lab/runs/2026-12-05-f) had this setup and also ran memcheck and racecheck of
# the small wy_dqkg cases and the whole-backward Python tests beside test_gpu's wy and intra lists.
# 1. exp's test_gpu chunk_bwd_whole (the five gradients bitwise equal with and without dA, dAqk);
# 2. gpu_ab_dirs main vs exp, each with its own library and Python, B2 and prod8192, two rounds.
set -u
grep -q da_stash kernel_src/wy_dqkg.cuh && { echo "run it from main's tree (kernel_src without the experiment)"; exit 3; }
rm -rf build && mv build-exp build
. lab/calls/common.sh
D=$R/lab/experiments/da-onchip/da_onchip.diff
part() { python3 -c 'import re, sys; t = open(sys.argv[1]).read(); print("".join(c for c in re.split(r"(?m)^(?=diff --git )", t)
  if c.startswith(tuple("diff --git a/" + p for p in sys.argv[2:]))), end="")' $D "$@"; }
rm -rf /tmp/old /tmp/new && mkdir -p /tmp/old /tmp/new && cp -a kernel_src /tmp/old/k && cp -a kernel_src /tmp/new/k \
  && cp -a python /tmp/new/py && (part kernel_src/ | (cd /tmp/new/k && patch -s -p2)) \
  && (part python/ | (cd /tmp/new/py && patch -s -p2)) || { echo "the diff does not apply"; exit 3; }
ln -s $R/build-main-gpu/libkdart.so /tmp/old/libkdart.so; ln -s $R/build/libkdart.so /tmp/new/libkdart.so
KDART_KERNEL_DIR=/tmp/new/k KDART_CACHE_DIR=/tmp/cbnew KDART_GPU_TESTS=chunk_bwd_whole CK_FORK=no timeout 200 \
  build/tests/test_gpu > $O/test_gpu_whole.txt 2>&1; echo "rc=$?" >> $O/test_gpu_whole.txt; el
grep -E "^[0-9]+%|:[EF]:|rc=" $O/test_gpu_whole.txt | head -6
AB_ROWS=b2_t8192_h32,prod8192 gpu_ab_dirs /tmp/old/k /tmp/new/k
