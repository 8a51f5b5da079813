#!/usr/bin/env bash
# lab/calls/2026-12-03-m.sh: wy_dqkg's tail path by copy granules (cp.async of 16 or 8 bytes where Kr and
# V allow), and what call l left: the autoload through a .pth in the interpreter's own site-packages (the
# image's python is a venv: no user site), the two CPU tests whose child processes lost PYTHONPATH.
# Side by side: wy's GPU tests (every spec: each granule; production), memcheck + racecheck over every wy
# specialization on small shapes, the torch tests of wy and the fixed CPU tests, the autoload e2e.
# Then alone: wy_dqkg rows, kdart vs fla in one process (D 100, D 60), kdart alone (the rest), and variant B
# (lab/experiments/wy-tail-granules/B-over-A.diff: pair loads in the V step) on the same rows.
set -u
. lab/calls/common.sh
gc_fla_site
(KDART_GPU_TESTS=wy_every_spec CK_FORK=no timeout 300 build/tests/test_gpu > $O/test_gpu_wy1.txt 2>&1; echo "rc=$?" >> $O/test_gpu_wy1.txt) &
(KDART_GPU_TESTS=wy_production CK_FORK=no timeout 300 build/tests/test_gpu > $O/test_gpu_wy2.txt 2>&1; echo "rc=$?" >> $O/test_gpu_wy2.txt) &
gc_sanitize 300 KDART_GPU_SMALL=wy_dqkg
(PYTHONPATH=$R/python KDART_LIBRARY=$R/build/libkdart.so KDART_CACHE_DIR=/tmp/onecache timeout 200 \
   python3 -m kdart prewarm > $O/py_prewarm.txt 2>&1; echo "py prewarm rc=$?" >> $O/py_prewarm.txt) & pwp=$!
PYTHONPATH="$R/tools/triton_warm:/tmp/site:$R/python" KDART_LIBRARY=$R/build/libkdart.so KDART_TORCH_EXT=0 \
  FLA_DISABLE_BACKEND_DISPATCH=1 PYTHONUNBUFFERED=1 timeout 300 python3 -m pytest python/tests/test_torch_gpu.py \
  python/tests/test_fla_cpu.py -k "wy or environment_switch or registry_route" -q -p no:cacheprovider > $O/pytest_wy2.txt 2>&1
echo "pytest rc=$? $(tail -1 $O/pytest_wy2.txt)"; el
grep -hE "^FAILED|^ERROR" $O/pytest_wy2.txt | head
gc_pack
wait $pwp; tail -1 $O/py_prewarm.txt
SP=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"); cp python/kdart-autoload.pth $SP/ && echo "pth in $SP"
export TRITON_CACHE_DIR=/tmp/tc
for via in names registry; do
  (export PYTHONPATH="$R/tools/triton_warm:/tmp/site:$R/python" KDART_TRITON_WARM=first KDART_LIBRARY=$R/build/libkdart.so \
     KDART_CACHE_DIR=/tmp/onecache FLA_KDART=1 KDART_FLA_VIA=$via PYTHONUNBUFFERED=1
   [ $via = names ] && export FLA_DISABLE_BACKEND_DISPATCH=1 || unset FLA_DISABLE_BACKEND_DISPATCH
   timeout 200 python3 lab/calls/onecache_e2e.py > $O/e2e_$via.txt 2>&1; echo "e2e $via rc=$?" >> $O/e2e_$via.txt)
  grep -vE "Warning|warn" $O/e2e_$via.txt | tail -7; el
done
rm -f $SP/kdart-autoload.pth
gc_pack
wait; el
grep -hE "Checks|rc=|:F:|:E:" $O/test_gpu_wy*.txt | cut -c1-300; cat $O/san.txt
gc_pack
# alone: the tables
SBS="python3 bench/side_by_side.py --stage wy"
PYTHONPATH=$R/python KDART_LIBRARY=$R/build/libkdart.so timeout 100 $SBS --no-fla \
  --rows b2_t8192_h32,prod8192,b2_t8192_h16_k256,b2_t8192_h16_d100,b2_t8192_h16_d60,b1_t32768_h32_packed > $O/wy_A.txt 2>&1
grep -E "^\| wy" $O/wy_A.txt; el
mkdir -p /tmp/B && cp -r kernel_src /tmp/B/ && (cd /tmp/B && patch -p1 -s < $R/lab/experiments/wy-tail-granules/B-over-A.diff)
KDART_KERNEL_DIR=/tmp/B/kernel_src PYTHONPATH=$R/python KDART_LIBRARY=$R/build/libkdart.so timeout 150 $SBS --no-fla \
  --rows b2_t8192_h32,prod8192,b2_t8192_h16_k256,b2_t8192_h16_d100,b2_t8192_h16_d60,b1_t32768_h32_packed > $O/wy_B.txt 2>&1
grep -E "^\| wy" $O/wy_B.txt; el
gc_pack
PYTHONPATH=/tmp/site:$R/python KDART_LIBRARY=$R/build/libkdart.so FLA_DISABLE_BACKEND_DISPATCH=1 \
  timeout $(( 585 - ($(date +%s) - t0) )) $SBS --rows b2_t8192_h16_d100,b2_t8192_h16_d60 > $O/wy_fla.txt 2>&1
echo "wy fla rc=$?"; grep -E "^\| wy|ERROR" $O/wy_fla.txt; el
gc_pack
