#!/usr/bin/env bash
# lab/calls/call10d.sh (session 10's second call, right after call10c on the same machine, so that
# Triton's compile cache from call10c's warm-up is still there (else it warms up first); OUT set; carry build, .devrun): the
# performance rows, each with the GPU to itself.  issue 15: side_by_side rows 5 (K = 128 reference),
# 11-13 (K = V = 256, D = 100, D = 60 at B2 T8192 H16); issues 14 and 15: the varlen table rows 0-5;
# then the standard table before and after in one run: `kdart bench` of session 6's last build
# (7f49f3f, before issues 14 and 15: .devrun/before, its own kernel sources and cache) and of this
# build, twice in turn.
set -u
O=$OUT; t0=$(date +%s); R=$PWD
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
el() { echo "t=$(( $(date +%s) - t0 ))"; }
# a fresh machine has no Triton cache: compile fla's configs for these rows first, in parallel
[ "$(ls .triton-cache 2>/dev/null | wc -l)" -gt 100 ] || { WARM_SBS=5,11,12,13 WARM_VARLEN=0,1,2,3,4,5 WARM_JOBS=8 WARM_VARLEN_JOBS=5 WARM_TIMEOUT=150 GPU_CHECK_PARTS=warm tools/gpu_check.sh build $O; cat $O/warm.txt; }; el
GPU_CHECK_PARTS=sbs SBS_ARGS="--rows 5,11,12,13" SBS_TIMEOUT=170 SBS_BUDGET=150 tools/gpu_check.sh build $O; el
GPU_CHECK_PARTS=varlen VARLEN_ARGS="--rows 0,1,2,3,4,5" VARLEN_TIMEOUT=200 VARLEN_BUDGET=170 tools/gpu_check.sh build $O; el
for r in 1 2; do
  KDART_KERNEL_DIR=$R/.devrun/before/kernel_src KDART_CACHE_DIR=$R/.devrun/before/cache timeout 100 .devrun/before/kdart bench > $O/bench_before$r.txt 2>&1; echo "before rc=$?"; el
  KDART_KERNEL_DIR=$R/kernel_src KDART_CACHE_DIR=$R/build/devcache timeout 100 build/kdart bench > $O/bench_after$r.txt 2>&1; echo "after rc=$?"; el
done
tail -n 14 $O/side_by_side.txt; grep "^|" $O/varlen.txt
paste -d'|' <(cut -c1-100 $O/bench_before1.txt) <(cut -c60-100 $O/bench_after1.txt) | head -30
(cd $O && tar czf 0logs.tgz --exclude=0logs.tgz --exclude='*.tgz' .)
