#!/usr/bin/env bash
# lab/calls/call12c.sh (session 12's third call; OUT set; carry build with build/var/ref = HEAD's
# kernel_src): ncu (--set full, source counters per SASS instruction) of the masked bwd_dhu against the
# native scans it should match: the V-first state and the native scan at K = V = 128, D = 60 and 100 on
# the working tree's and HEAD's sources, K = 200 and 256 (the K tile 256).  Everything in one archive.
set -u
. lab/calls/common.sh
P="python3 lab/calls/dhu_probe.py"
export PYTHONPATH=$R/python KDART_LIBRARY=$R/build/libkdart.so
mkdir -p $O/n
prof() {   # tag kernel_dir case
  KDART_KERNEL_DIR=$2 KDART_CACHE_DIR=/tmp/c_$1 timeout 100 ncu --set full --import-source no -k regex:kdart_bwd_dhu \
    -s 0 -c 1 -o $O/n/$1_$3 $P $3 --iters 1 > $O/n/$1_$3.log 2>&1
  ncu -i $O/n/$1_$3.ncu-rep --page details > $O/n/$1_$3_details.txt 2>&1
  ncu -i $O/n/$1_$3.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $O/n/$1_$3_sass.csv.gz
  rm -f $O/n/$1_$3.ncu-rep; el
}
for c in svf128 k128 k60 k100 k200 k256; do prof new $R/kernel_src $c; done
for c in k60 k100; do prof ref $R/build/var/ref $c; done
grep -hE "kdart_bwd_dhu<|^  *(Duration|Executed Instructions|Registers Per Thread) " $O/n/*_details.txt
(cd $O && tar czf all.tgz n && rm -rf n)
