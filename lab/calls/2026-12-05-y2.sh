# nineteenth session, call y2: why the packed rows of call y failed (chunk_bwd_whole's packed K64 case: dq off
# by 0.4 rel RMS at KDART_FUSE_POST=2) and ran slow (the fused kernel 6.0 ms against 3.35 on 32768 packed
# tokens at 1 and 2).  chunk_bwd_whole's full output at 2 and 1, memcheck of it at 2, and whole_ab's packed row
# at 1 with the profile lines whole.  Carry build-gd.
set -u
rm -rf build && mv build-gd build
. lab/calls/common.sh
for lv in 2 1; do
  KDART_FUSE_POST=$lv KDART_GPU_TESTS=chunk_bwd_whole CK_FORK=no timeout 150 build/tests/test_gpu > $O/test_gpu_$lv.txt 2>&1
  echo "level $lv rc=$?"; grep -E "chunk_bwd|Checks|F:" $O/test_gpu_$lv.txt | cut -c1-250
done; el
(KDART_FUSE_POST=2 KDART_CACHE_DIR=/tmp/csan KDART_GPU_TESTS=chunk_bwd_whole CK_FORK=no timeout 200 \
   compute-sanitizer --tool memcheck build/tests/test_gpu > $O/memcheck.txt 2>&1; echo "memcheck rc=$?") 
grep -E "ERROR SUMMARY|Invalid|at 0x|by thread" $O/memcheck.txt | head -12; el
for lv in 0 1; do KDART_FUSE_POST=$lv gc_whole_bare lv$lv $R/kernel_src build/libkdart.so packed32768; done | tee $O/ab_packed.txt; el
