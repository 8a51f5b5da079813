#!/usr/bin/env bash
# lab/calls/next-s10d.sh (OUT set; carry build-gpu as build and build-main-gpu, .whl): what lands together
# (fp32-swizzle, fwdh-lpt with its fix, wy-tma, the chunk_kda tracing fix), tested and timed against main.
# The tree holds the change, built into build-gpu; lab/calls/s10d_kernels.diff (the change's kernel part)
# reversed gives main's kernels in /tmp/old/k, which pair with build-main-gpu.
set -u
. lab/calls/common.sh
rm -rf /tmp/old && mkdir -p /tmp/old && cp -a kernel_src /tmp/old/k \
  && (cd /tmp/old/k && patch -s -R -p2 < $R/lab/calls/s10d_kernels.diff) || { echo "variant failed"; exit 3; }
grep -c "kTma" /tmp/old/k/wy_dqkg.cuh kernel_src/wy_dqkg.cuh; grep -c lpt_row /tmp/old/k/fwd_h.cuh kernel_src/fwd_h.cuh
export KDART_LIBRARY=$R/build/libkdart.so TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR; gc_fla_site
gc_gpu_tests 220 wy_intra,wy_production,intra_varlen_lists,intra_fixed_any_t,intra_head_dims,intra_graph_capture,varlen_garbage_writes_nothing wy
gc_gpu_tests 220 fwdh_every_spec,fwdh_production,varlen_thousand_sequences,dhu_varlen_lists,dhu_varlen_v_split,intra_varlen_short_sequences,bad_arguments_write_nothing lpt
gc_gpu_tests 220 wy_every_spec every
gc_sanitize_dir $R/kernel_src 200 fwd_h,bwd_dhu
wait; el
for f in wy lpt every; do tail -1 $O/test_gpu_$f.txt; grep -hE "^[0-9]+%|:[EF]:" $O/test_gpu_$f.txt | head -6; done
cat $O/san.txt; grep -ciE "invalid|hazard" $O/memcheck.txt $O/racecheck.txt
gc_pack
gc_whole_tests 150
wait; el
gpu_whole_report
gc_pack
for i in 1 2; do for v in old new; do
  if [ $v = old ]; then L=$R/build-main-gpu/libkdart.so; d=/tmp/old/k; else L=$R/build/libkdart.so; d=$R/kernel_src; fi
  KDART_LIBRARY=$L KDART_KERNEL_DIR=$d KDART_CACHE_DIR=/tmp/c$v PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls \
    timeout 90 python3 lab/calls/whole_ab.py b2_t8192_h32,packed32768,packed65536_n25 2>&1 | grep -E "bare|chunk_kda_bwd profile|Error" \
    | sed -E "s/void kdart_//g; s/<kdart::bf16[^ ]*//g; s/\(kdart[^ ]*//g" | cut -c1-300 | sed "s|^|$v |"
done; done | tee $O/ab.txt; el
gc_pack
