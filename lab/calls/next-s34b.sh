# call s34b (carry build-gpu = main's build): racecheck over the small shapes, finishing what call s33's
# racecheck (KDART_GPU_SMALL=1, 430 s) did not reach: it ran bwd_intra's and bwd_dhu's and stopped inside
# wy_dqkg's specializations.  Two sanitizer processes side by side: wy_dqkg alone, and the kernels after it
# (recompute_wu, bwd_dav, fwd_h, bwd_post, chunk_bwd); LIMIT each (default 500 s).  The cache is filled
# first (`kdart prewarm` on every core), so the sanitized processes compile nothing.
# WV=WFB: the kernels of build-WFB/k (carry it too) instead of main's.
set -u
. lab/calls/common.sh
[ -n "${WV:-}" ] && export KDART_KERNEL_DIR=$R/build-$WV/k
timeout 120 build/kdart prewarm -j "$(nproc)" --json > $O/prewarm.json 2> $O/prewarm.txt; echo "prewarm rc=$?"; el
for part in wy_dqkg recompute_wu,bwd_dav,fwd_h,bwd_post,chunk_bwd; do
  n=${part%%,*}
  (KDART_GPU_SMALL=$part CK_FORK=no timeout ${LIMIT:-500} compute-sanitizer --tool racecheck build/tests/test_gpu \
     > $O/racecheck_$n.txt 2>&1
   echo "racecheck $part rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $O/racecheck_$n.txt)" >> $O/san.txt) &
done
wait; el; cat $O/san.txt
for f in $O/racecheck_*.txt; do echo "== $f"; grep -E "Checks|hazard|Race" $f | head -5; done
gc_pack
