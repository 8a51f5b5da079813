# nineteenth session, call y3: exp/gate-d without the wy part's zero-row store (the host clears the packed
# partial rows instead): test_gpu's chunk_bwd_whole at levels 1 and 2 with every line, synccheck and
# racecheck of it at level 1 side by side, then the packed row at levels 0 and 1.  Carry build-gd; run from
# the branch's checkout.
set -u
rm -rf build && mv build-gd build
. lab/calls/common.sh
gc_whole_levels 1 2
for tool in synccheck racecheck; do
  (KDART_FUSE_POST=1 KDART_CACHE_DIR=/tmp/c_$tool KDART_GPU_TESTS=chunk_bwd_whole CK_FORK=no timeout 170 \
     compute-sanitizer --tool $tool build/tests/test_gpu > $O/$tool.txt 2>&1; echo "$tool rc=$?" >> $O/$tool.txt) &
done; wait
for tool in synccheck racecheck; do tail -1 $O/$tool.txt; grep -E "SUMMARY|Barrier|Race|hazard|Invalid" $O/$tool.txt | sort | uniq -c | head -6; done; el
for lv in 0 1; do KDART_FUSE_POST=$lv gc_whole_bare lv$lv $R/kernel_src build/libkdart.so packed32768; done | tee $O/ab_packed.txt; el
