# twenty-first session, call g (carry build-gpu = branch exp/post-icache's build, build-m = main's build with
# its kernels in build-m/k, .whl): the last step's gate part on packed rows too, its gate math out of line
# (the fused kernel's text: 6752 instructions fixed, 8096 varlen).  1. the bare call at B2 and on the packed
# row against main, alone; 2. test_gpu's chunk_bwd_whole (level 1 against level 0, packed cases included)
# beside the whole-backward Python tests (test_whole_gpu.py; test_production_gpu.py -k whole against fla);
# 3. memcheck and racecheck of chunk_bwd_whole.
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
L=${G_LIMIT:-500}
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
PP=$R/python:$R/python/tests:$R/lab/calls
ab() { # label, kernel dir, library, environment...
  local lab=$1 kd=$2 lib=$3; shift 3
  env "$@" KDART_CACHE_DIR=/tmp/cw KDART_LIBRARY=$(readlink -f $lib) KDART_KERNEL_DIR=$kd PYTHONPATH=$PP \
    timeout 170 python3 lab/calls/whole_ab.py b2_t8192_h32,packed32768 2>&1 | grep -E "bare (C|profile)" | sed "s|^|$lab |"
}
{ ab main $R/build-m/k build-m/libkdart.so; ab new $R/kernel_src build/libkdart.so; } | tee $O/ab.txt | cut -c1-330; el
gc_pack
gc_fla_site
T=$(( L - 90 - ($(date +%s) - t0) ))
(KDART_GPU_TESTS=chunk_bwd_whole CK_FORK=no timeout $T build/tests/test_gpu > $O/test_gpu.txt 2>&1; echo "test_gpu rc=$?" >> $O/test_gpu.txt) &
gc_whole_tests $T
wait; el
tail -3 $O/test_gpu.txt; grep -E "F:|differ" $O/test_gpu.txt | head -5; grep -E "chunk_bwd" $O/test_gpu.txt | cut -c1-200
gpu_whole_report; gc_pack
T=$(( L - 5 - ($(date +%s) - t0) )); [ $T -gt 40 ] || exit 0
for tool in memcheck racecheck; do
  (KDART_CACHE_DIR=/tmp/c_$tool KDART_GPU_TESTS=chunk_bwd_whole CK_FORK=no timeout $T \
     compute-sanitizer --tool $tool build/tests/test_gpu > $O/$tool.txt 2>&1; echo "$tool rc=$?" >> $O/$tool.txt) &
done; wait
for tool in memcheck racecheck; do tail -1 $O/$tool.txt; grep -E "SUMMARY|Race|hazard|Invalid" $O/$tool.txt | sort | uniq -c | head -6; done; el
gpu_finish
