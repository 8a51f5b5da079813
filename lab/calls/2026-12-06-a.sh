# twentieth session, call a: exp/gate-d at level 1 only (level 2 dropped; the host clears the packed partial
# rows, no POST code in the wy part).  test_gpu's chunk_bwd_whole at levels 1 (and 0 inside it); if its packed
# K64 case still fails, the bisect: the same test with POST's parts switched off (lab/bisect-gd/k?: G all of
# them, A the gate math and partial sums, D the gate loads, E the gate math, B the partial sums, C the db
# step; dq comes from bwd_post's launch on the intra part's fp32 rows, so dq alone says whether the intra
# part's own terms went wrong), with initcheck beside it.  Else memcheck, racecheck, synccheck, then the
# B2 and packed rows at levels 0 and 1.  Carry build-gd; lab/bisect-gd (python3 lab/calls/bisect_gd.py)
# travels untracked; run from the branch's checkout.
set -u
rm -rf build && mv build-gd build
. lab/calls/common.sh
gc_whole_levels 1
if grep -q "packed.*F:\|differs" $O/test_gpu_1.txt; then
  # a read of device memory this call never wrote reads 0xa5 bytes (about -3e-16) on the emulated device
  (KDART_FUSE_POST=1 KDART_CACHE_DIR=/tmp/c_init KDART_GPU_TESTS=chunk_bwd_whole CK_FORK=no timeout 200 \
     compute-sanitizer --tool initcheck build/tests/test_gpu > $O/initcheck.txt 2>&1; echo "initcheck rc=$?" >> $O/initcheck.txt) &
  for v in G A D E B C; do
    KDART_KERNEL_DIR=$R/lab/bisect-gd/k$v KDART_FUSE_POST=1 KDART_GPU_TESTS=chunk_bwd_whole CK_FORK=no timeout 60 \
      build/tests/test_gpu > $O/bisect_$v.txt 2>&1
    echo "variant $v rc=$? $(grep 'K64 V64 packed' $O/bisect_$v.txt | head -1 | cut -c40-250)"
  done; el
  wait; tail -1 $O/initcheck.txt; grep -E "SUMMARY|Uninitialized|at 0x|in .*kdart" $O/initcheck.txt | cut -c1-200 | sort | uniq -c | head -12; el
  # the packed row's fused kernel with every POST part off (G) against post = 0
  for lv in 0 1; do KDART_FUSE_POST=$lv gc_whole_bare G$lv $R/lab/bisect-gd/kG build/libkdart.so packed32768; done | tee $O/ab_G.txt; el
  exit 0
fi
# the timings alone first (a sanitizer beside them would inflate them)
for lv in 0 1; do KDART_FUSE_POST=$lv WB_LIMIT=150 gc_whole_bare lv$lv $R/kernel_src build/libkdart.so b2_t8192_h32,packed32768; done | tee $O/ab.txt; el
for tool in memcheck synccheck racecheck; do
  (KDART_FUSE_POST=1 KDART_CACHE_DIR=/tmp/c_$tool KDART_GPU_TESTS=chunk_bwd_whole CK_FORK=no timeout 200 \
     compute-sanitizer --tool $tool build/tests/test_gpu > $O/$tool.txt 2>&1; echo "$tool rc=$?" >> $O/$tool.txt) &
done; wait
for tool in memcheck synccheck racecheck; do tail -1 $O/$tool.txt; grep -E "SUMMARY|Barrier|Race|hazard|Invalid" $O/$tool.txt | sort | uniq -c | head -6; done; el
