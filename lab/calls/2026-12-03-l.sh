#!/usr/bin/env bash
# lab/calls/2026-12-03-l.sh: the review commit's first GPU run, and one cache for every door on the H200.
# Side by side: test_gpu in six processes (every test), test_stage, a fresh cache prewarmed through the
# Python door (python3 -m kdart prewarm, the local GPU's arch, one job per CPU).  Foreground: the torch
# tests (Python path); the two doors on one spec (2026-12-03-k.sh); then, once the prewarm is done, a
# training script's chunk_kda steps with FLA_KDART=1 (autoload .pth, names route, then the registry route
# with fla's dispatch on) against that cache: nothing may compile.  Then `kdart selftest --kernel wy_dqkg`
# and, alone at the end, wy_dqkg's kdart times on issue rows (the baseline of any later change).
set -u
. lab/calls/common.sh
gc_fla_site
gc_test_gpu 330 6
(CK_FORK=no timeout 200 build/tests/test_stage > $O/test_stage.txt 2>&1; echo "test_stage rc=$?" >> $O/test_stage.txt) &
(PYTHONPATH=$R/python KDART_LIBRARY=$R/build/libkdart.so KDART_CACHE_DIR=/tmp/onecache timeout 300 \
   python3 -m kdart prewarm > $O/py_prewarm.txt 2>&1; echo "py prewarm rc=$? t=$(( $(date +%s) - t0 ))" >> $O/py_prewarm.txt) & pwp=$!
KDART_TORCH_EXT=0 GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch PYTEST_TIMEOUT=300 \
  PYTEST_ARGS="python/tests --ignore=python/tests/test_fla_gpu.py --ignore=python/tests/test_production_gpu.py $DS" \
  tools/gpu_check.sh build $O; el
grep -hE "passed|failed" $O/pytest_torch.txt | tail -1; grep -hE "^FAILED|^ERROR" $O/pytest_torch.txt | head -20
bash lab/calls/2026-12-03-k.sh > $O/twodoors.txt 2>&1; cat $O/twodoors.txt
gc_pack
wait $pwp; tail -3 $O/py_prewarm.txt
US=$(python3 -m site --user-site); mkdir -p $US; cp python/kdart-autoload.pth $US/
export TRITON_CACHE_DIR=/tmp/tc
for via in names registry; do
  (export PYTHONPATH="$R/tools/triton_warm:/tmp/site:$R/python" KDART_TRITON_WARM=first KDART_LIBRARY=$R/build/libkdart.so \
     KDART_CACHE_DIR=/tmp/onecache FLA_KDART=1 KDART_FLA_VIA=$via PYTHONUNBUFFERED=1
   [ $via = names ] && export FLA_DISABLE_BACKEND_DISPATCH=1 || unset FLA_DISABLE_BACKEND_DISPATCH
   timeout 240 python3 lab/calls/onecache_e2e.py > $O/e2e_$via.txt 2>&1; echo "e2e $via rc=$?" >> $O/e2e_$via.txt)
  grep -vE "Warning|warn" $O/e2e_$via.txt | tail -8; el
done
gc_pack
(timeout 200 build/kdart selftest --kernel wy_dqkg > $O/selftest_wy.txt 2>&1; echo "selftest rc=$?" >> $O/selftest_wy.txt)
tail -3 $O/selftest_wy.txt; el
wait; el
grep -h "^test_gpu part\|Checks\|:F:\|:E:" $O/test_gpu*.txt | cut -c1-300
grep -E "Checks|:F:|:E:|launched|rc=" $O/test_stage.txt
gc_pack
PYTHONPATH=$R/python KDART_LIBRARY=$R/build/libkdart.so timeout $(( 590 - ($(date +%s) - t0) )) python3 bench/side_by_side.py \
  --stage wy --no-fla --rows b2_t8192_h32,prod8192,b2_t8192_h16_k256,b2_t8192_h16_d100,b2_t8192_h16_d60,b1_t32768_h32_packed > $O/wy_base.txt 2>&1
echo "wy base rc=$?"; grep -E "^\||ms" $O/wy_base.txt | head -12; el
gc_pack
