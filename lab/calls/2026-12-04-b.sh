#!/usr/bin/env bash
# lab/calls/2026-12-04-b.sh (OUT set; carry build-gpu as build; devcache prewarmed for kernel_src and the
# variant dirs build/ks_*): kdart bench's wy_dqkg and bwd_dhu rows at prod8192 and B2 T8192 H32 for main's
# kernels, this tree's (v1: dv2 through shared memory, dv_intra after QD), v2 (v1 with dvb's halves issued
# together) and norr (a lab hack: wy's value tiles not re-read in the second K block, results wrong: the
# bound of reading them once), two rounds; then test_gpu's wy and fused-dAv tests on this tree.
set -u
. lab/calls/common.sh
for s in 16,8192,16,16,128,256 2,8192,32,32,128,128; do
  for v in main v1 v2 norr main v1 v2 norr; do
    kd=$R/build/ks_$v; [ $v = v1 ] && kd=$R/kernel_src
    echo "== $v $s"; KDART_KERNEL_DIR=$kd timeout 60 build/kdart bench --shape $s --reps 20 2>&1 | grep -E "wy_dqkg|bwd_dhu|FAIL|rror"
  done
done | tee $O/bench.txt; el
gc_pack
pids=""
for t in wy_every_spec wy_production dav_fused dav_standalone; do
  (KDART_GPU_TESTS=$t CK_FORK=no timeout 250 build/tests/test_gpu > $O/tg_$t.txt 2>&1; echo "$t rc=$?" >> $O/tg_$t.txt) &
  pids="$pids $!"
done
gc_sanitize 250 KDART_GPU_SMALL=wy_dqkg,bwd_dav
wait; el
for t in wy_every_spec wy_production dav_fused dav_standalone; do grep -hE "Checks|rc=|:F:|:E:" $O/tg_$t.txt | cut -c1-300; done
cat $O/san.txt
gc_pack
