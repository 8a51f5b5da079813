#!/usr/bin/env bash
# lab/calls/call13e.sh (session 13's last call; OUT set; carry build with build/var/{main,pairs} =
# main's kernel_src and it with the head-pair path at K >= 192, build/var/lib_{main,pairs} = main's
# libkdart.so and one whose ops.c pairs the K tiles 192 and 256, each with its libuv.so.1): call D's A/B
# redone in one call, kdart only, three alternating rounds of dhu_probe (docs192; docs256 as the control).
set -u
. lab/calls/common.sh
P="python3 lab/calls/dhu_probe.py"
for rep in 1 2 3; do
  for v in main pairs; do
    PYTHONPATH=$R/python KDART_LIBRARY=$R/build/var/lib_$v/libkdart.so PROBE_TAG=$v$rep \
      KDART_KERNEL_DIR=$R/build/var/$v KDART_CACHE_DIR=/tmp/c_$v timeout 60 $P docs192 docs256 2>&1 | tee -a $O/probe.txt
  done
done
el
