#!/usr/bin/env bash
# lab/calls/call15a.sh (session 15's first call; OUT set; carry build with build/var/lib_np = this
# libkdart.so with head pairs off at BV 64, beside its libuv.so.1): bwd_dhu's K tiles 192/256 at BV 64 as
# two warpgroups over one copy of the K-side tiles.  First, side by side: the selftest (every
# specialization), test_gpu's head pairs (BV 32 and 64), head dims, spec choice and every-spec tests,
# memcheck and racecheck of spec_choice; then alone, dhu_probe: BV 32 (as main), 64 with and without head
# pairs, the picker's choice, and BV 16 on the one-wave shape; a second round while the clock allows.
set -u
. lab/calls/common.sh
P="python3 lab/calls/dhu_probe.py"
gc_selftest
for t in dhu_varlen_head_pairs dhu_head_dims,spec_choice dhu_every_spec; do
  (KDART_GPU_TESTS=$t CK_FORK=no timeout 240 build/tests/test_gpu > $O/tg_${t%%,*}.txt 2>&1
   echo "test_gpu $t rc=$? t=$(( $(date +%s) - t0 ))" >> $O/tg_${t%%,*}.txt) &
done
gc_sanitize 240 KDART_GPU_TESTS=spec_choice
wait; tail -qn 3 $O/tg_*.txt; tail -n 2 $O/selftest.txt; cat $O/san.txt; el
C="w256 k256 k256x fix256 one256 docs256 eq256x svf256 docs256v"
export KDART_TORCH_EXT=0 PYTHONPATH=$R/python KDART_LIBRARY=$R/build/libkdart.so
for rep in 1 2; do
  [ $(( $(date +%s) - t0 )) -gt 330 ] && break
  PROBE_TAG=b32_$rep PROBE_BV=32 timeout 60 $P $C 2>&1 | tee -a $O/probe.txt
  PROBE_TAG=b64_$rep PROBE_BV=64 timeout 60 $P $C 2>&1 | tee -a $O/probe.txt
  PROBE_TAG=np64_$rep PROBE_BV=64 KDART_LIBRARY=$R/build/var/lib_np/libkdart.so timeout 40 $P docs256 eq256x docs256v 2>&1 | tee -a $O/probe.txt
  PROBE_TAG=auto_$rep timeout 60 $P $C 2>&1 | tee -a $O/probe.txt
  [ $rep = 1 ] && PROBE_TAG=b16 PROBE_BV=16 timeout 40 $P w256 k256 2>&1 | tee -a $O/probe.txt
  el
done
gc_pack
