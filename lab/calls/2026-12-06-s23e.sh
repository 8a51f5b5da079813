# call s23e (carry build-gpu = main's build with main's kernels in build-gpu/k0 and L1's in build-gpu/k1,
# build-V = branch exp/post-qk-varlen's library (dq/dk's l2norm in the fused launch on packed rows too),
# .whl; kernel_src = L2).  L1 = main + the fused body takes the chunk's location from wy_dqkg's part (no
# second cu_seqlens scan at variable length) and the packed non-qk row loop not unrolled; L2 = L1 + the
# l2norm epilogue on packed rows (its text 8096 instructions, as main's packed kernel without it).
# 1. the bare whole call, L0 (main) / L1 / L2, packed rows two rounds, B2 once; 2. test_gpu: chunk_bwd_whole,
# wy_intra, varlen_garbage_writes_nothing (L1), chunk_bwd_whole, varlen_garbage_writes_nothing (L2) beside
# memcheck / racecheck of chunk_bwd_whole (L2) and the Python whole tests (L2's library and kernels).
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
export WB_CACHE=/tmp/cw WB_LIMIT=150
ROWS=packed32768,packed65536_n25
{ gc_whole_bare L0_1 $R/build/k0 build/libkdart.so $ROWS
  gc_whole_bare L1_1 $R/build/k1 build/libkdart.so $ROWS
  gc_whole_bare L2_1 $R/kernel_src build-V/libkdart.so $ROWS
  gc_whole_bare L0_2 $R/build/k0 build/libkdart.so packed32768,b2_t8192_h32
  gc_whole_bare L2_2 $R/kernel_src build-V/libkdart.so packed32768,b2_t8192_h32; } | gc_prof | cut -c1-300 | tee -a $O/ab.txt; el
[ $(( $(date +%s) - t0 )) -lt 170 ] || { echo "no time left for the tests"; gc_pack; exit 0; }
gc_fla_site
(KDART_KERNEL_DIR=$R/build/k1 KDART_CACHE_DIR=/tmp/t1 KDART_GPU_TESTS=chunk_bwd_whole,wy_intra,varlen_garbage_writes_nothing CK_FORK=no timeout 120 build/tests/test_gpu > $O/t1.txt 2>&1; echo "L1 rc=$?" >> $O/t1.txt) &
(KDART_CACHE_DIR=/tmp/t2 KDART_GPU_TESTS=chunk_bwd_whole,varlen_garbage_writes_nothing CK_FORK=no timeout 120 build-V/tests/test_gpu > $O/t2.txt 2>&1; echo "L2 rc=$?" >> $O/t2.txt) &
for tool in memcheck racecheck; do
  (KDART_CACHE_DIR=/tmp/c_$tool KDART_GPU_TESTS=chunk_bwd_whole CK_FORK=no timeout 120 \
     compute-sanitizer --tool $tool build-V/tests/test_gpu > $O/$tool.txt 2>&1; echo "$tool rc=$?" >> $O/$tool.txt) &
done
(KDART_CACHE_DIR=/tmp/cpy GPU_CHECK_PARTS=python PYTEST_LOG=pytest_whole PYTEST_TRITON=first PYTEST_TIMEOUT=120 \
   PYTEST_ARGS="-n 4 python/tests/test_whole_gpu.py" tools/gpu_check.sh build-V $O > $O/whole_rc.txt 2>&1) &
wait
for f in t1 t2 memcheck racecheck; do tail -1 $O/$f.txt; grep -E "Checks|F:|SUMMARY" $O/$f.txt | cut -c1-250 | head -4; done
grep -hE "passed|failed" $O/pytest_whole.txt | tail -1; grep -hE "^FAILED|^E  " $O/pytest_whole.txt | head -6; el
gc_pack
