#!/usr/bin/env bash
# lab/calls/call12b.sh (session 12's second call; OUT set; carry build with build/var/ref = HEAD's
# kernel_src): where the masked path's time goes (the V-first state at K = V = 128, the K tile 256 at 200)
# and what the K = V = 256 varlen row is made of.  kdart alone (lab/calls/dhu_probe.py): HEAD's
# sources against the working tree's, alternately, twice; then ncu (--set full, source counters) on the
# V-first and native K = 128 scans, K = 200 / 256, and the 256 varlen / fixed rows.
set -u
. lab/calls/common.sh
P="python3 lab/calls/dhu_probe.py"
export PYTHONPATH=$R/python KDART_LIBRARY=$R/build/libkdart.so
CASES="k128 svf128 k256 k200 k192 k100 k60 fix256 one256 eq256x eq256 docs256 docs128"
for rep in 1 2; do
  for tag in ref new; do
    kd=$R/kernel_src; [ $tag = ref ] && kd=$R/build/var/ref
    PROBE_TAG=$tag$rep KDART_KERNEL_DIR=$kd KDART_CACHE_DIR=/tmp/c_$tag timeout 120 $P $CASES 2>&1 | tee -a $O/probe.txt
  done
done
el
mkdir -p $O/ncu
for c in svf128 k128 k200 k256 docs256 fix256; do
  timeout 100 ncu --set full --import-source no -k regex:kdart_bwd_dhu -s 0 -c 1 -o $O/ncu/$c $P $c --iters 1 > $O/ncu/$c.log 2>&1
  ncu -i $O/ncu/$c.ncu-rep --page details > $O/ncu/${c}_details.txt 2>&1
  case $c in svf128|k128|k200|docs256)
    ncu -i $O/ncu/$c.ncu-rep --page source --csv --print-source sass > $O/ncu/${c}_sass.csv 2>&1
    gzip -f $O/ncu/${c}_sass.csv;;
  esac
  rm -f $O/ncu/$c.ncu-rep
  el
done
grep -hE "^  *(Duration|Elapsed Cycles|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Executed Ipc Active|Registers Per Thread|Achieved Occupancy|One or More Eligible|Issued Warp Per Scheduler|Waves Per SM)" $O/ncu/*_details.txt | head -80
