#!/usr/bin/env bash
# lab/calls/2026-12-04-ze.sh (OUT set; carry build-gpu as build): bwd_post with the heads as the grid's fastest
# index (the CTAs in flight read one contiguous stretch), with the floor of tokens per CTA at 8 (as main), 256
# and 512 (build/postlibs/), against main's (libkdart_main.so with lab/calls/old_bwd_post.cuh), alternating,
# post_bench.py at B2 T8192 H32, 32768 tokens, prod8192.
set -u
. lab/calls/common.sh
rm -rf /tmp/ks0 && cp -a kernel_src /tmp/ks0 && cp lab/calls/old_bwd_post.cuh /tmp/ks0/bwd_post.cuh
for row in b2 packed prod8192 b2 packed; do for lib in main swap swap_tb256 swap_tb512; do
  d=$R/kernel_src; [ $lib = main ] && d=/tmp/ks0
  POST_NO_FLA=1 KDART_LIBRARY=$R/build/postlibs/libkdart_$lib.so KDART_KERNEL_DIR=$d KDART_CACHE_DIR=/tmp/pc_$lib \
    PYTHONPATH=$R/python:$R/lab/calls timeout 40 python3 lab/calls/post_bench.py $row 2>&1 | grep -E "bwd_post|Error" | sed "s|^|$lib |"
done; done | tee $O/post_swap.txt; el
