#!/usr/bin/env bash
# lab/calls/call11a.sh (session 11's first call; OUT set; carry build): where the masked bwd_dhu's
# time goes (D = 100: 7.0 us per chunk against 1.24 native).  kdart bench of the masked shapes against
# the native ones, with kernel-source variants that each drop one part of the masked path (timing only:
# their results are wrong), the dhu-masked-stores branch's sources (build/dms_ks), then ncu profiles.
# (Ran on main at 0391376: the sed line numbers below refer to that bwd_dhu_scan.inc.)
set -u
. lab/calls/common.sh
mkdir -p $O/var
V=/tmp/var; mkdir -p $V
for n in main nostore noloadk noloadv noload none; do cp -r kernel_src $V/$n; done
cp -r build/dms_ks/kernel_src $V/dms
S=$V/nostore/bwd_dhu_scan.inc;  sed -i -e '351a return;' -e '327a return;' $S
S=$V/noloadk/bwd_dhu_scan.inc;  sed -i -e '108a return;' $S
S=$V/noloadv/bwd_dhu_scan.inc;  sed -i -e '124a return;' $S
S=$V/noload/bwd_dhu_scan.inc;   sed -i -e '124a return;' -e '108a return;' $S
S=$V/none/bwd_dhu_scan.inc; sed -i -e "351a return;" -e "327a return;" -e "124a return;" -e "108a return;" $S
grep -n -B1 "^return;" $V/*/bwd_dhu_scan.inc > $O/var/patches.txt
b() { # variant shape
  KDART_KERNEL_DIR=$V/$1 KDART_CACHE_DIR=/tmp/c_$1 timeout 120 build/kdart bench --shape $2 --reps 30 2>&1 | grep -E "bwd_dhu|bwd_intra|ERROR|error" | sed "s/^/$1 $2 /"
}
for s in 2,8192,16,16,128,128 2,8192,16,16,64,64; do b main $s; done > $O/var/bench.txt
for n in main dms nostore noloadk noloadv noload none; do for s in 2,8192,16,16,100,100 2,8192,16,16,60,60; do b $n $s; done; done >> $O/var/bench.txt
cat $O/var/bench.txt; el
# ncu: the masked D = 100 / 60 scans and the native 128 / 64 ones, first launch of each
for s in 100 128 60 64; do
  KDART_KERNEL_DIR=$V/main KDART_CACHE_DIR=/tmp/c_main timeout 150 ncu --set full -k regex:kdart_bwd_dhu -c 1 -o $O/var/ncu_$s \
    build/kdart bench --shape 2,8192,16,16,$s,$s --reps 1 > $O/var/ncu_$s.log 2>&1
  ncu -i $O/var/ncu_$s.ncu-rep --page details > $O/var/ncu_${s}_details.txt 2>&1
  ncu -i $O/var/ncu_$s.ncu-rep --page source --csv --print-source sass > $O/var/ncu_${s}_sass.csv 2>&1
  el
done
ls -la $O/var
(cd $O && tar czf var.tgz var && rm -rf var)
