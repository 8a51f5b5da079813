#!/usr/bin/env bash
# lab/calls/wy-wgmma.sh (call p of 2026-12-03): wy_dqkg's products by wgmma on sm_90a (lab/experiments/wy-wgmma/wgmma.diff applied
# to the working tree, and build/devcache prewarmed with it, before the call).  Side by side: wy's GPU tests
# (every spec, production), memcheck + racecheck of every wy specialization on small shapes, the torch wy
# tests.  Then alone: wy rows, kdart vs fla in one process; and kdart alone with rotate-over-wgmma.diff
# (sum_v h dh without bank conflicts) on the same rows, compiled on the machine.
set -u
. lab/calls/common.sh
# first the operand modes alone (probe.cu, built here with the diff applied: see its header; carried as
# build/wg_probe): if a mode is wrong, the kernel tests below fail for that reason
[ -x build/wg_probe ] && timeout 30 build/wg_probe | tee $O/wg_probe.txt
gc_fla_site
(KDART_GPU_TESTS=wy_every_spec CK_FORK=no timeout 240 build/tests/test_gpu > $O/test_gpu_wy1.txt 2>&1; echo "rc=$?" >> $O/test_gpu_wy1.txt) &
(KDART_GPU_TESTS=wy_production CK_FORK=no timeout 240 build/tests/test_gpu > $O/test_gpu_wy2.txt 2>&1; echo "rc=$?" >> $O/test_gpu_wy2.txt) &
gc_sanitize 240 KDART_GPU_SMALL=wy_dqkg
PYTHONPATH="/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so KDART_TORCH_EXT=0 \
  FLA_DISABLE_BACKEND_DISPATCH=1 PYTHONUNBUFFERED=1 timeout 240 python3 -m pytest python/tests/test_torch_gpu.py \
  -k wy -q -p no:cacheprovider > $O/pytest_wy.txt 2>&1
echo "pytest rc=$? $(tail -1 $O/pytest_wy.txt)"; el
wait; el
grep -hE "Checks|rc=|:F:|:E:" $O/test_gpu_wy*.txt | cut -c1-300; cat $O/san.txt
gc_pack
PYTHONPATH=/tmp/site:$R/python KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 \
  timeout $(( 580 - ($(date +%s) - t0) )) python3 bench/side_by_side.py --stage wy \
  --rows b2_t8192_h32,b2_t8192_h16_k256,b2_t8192_h16_d100,prod8192,b1_t32768_h32_packed > $O/wy_fla.txt 2>&1
echo "wy rc=$?"; grep -E "^\| wy|ERROR" $O/wy_fla.txt; el
gc_pack
mkdir -p /tmp/R && cp -r kernel_src /tmp/R/ && (cd /tmp/R && patch -p1 -s < $R/lab/experiments/wy-wgmma/rotate-over-wgmma.diff)
KDART_KERNEL_DIR=/tmp/R/kernel_src PYTHONPATH=$R/python KDART_LIBRARY=$R/build/libkdart.so timeout 100 \
  python3 bench/side_by_side.py --stage wy --no-fla --rows b2_t8192_h32,b2_t8192_h16_k256,b2_t8192_h16_d100,prod8192,b1_t32768_h32_packed \
  > $O/wy_rotate.txt 2>&1
echo "rotate rc=$?"; grep -E "^\| wy|ERROR" $O/wy_rotate.txt; el
gc_pack
