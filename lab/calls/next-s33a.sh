# call s33a (carry build-gpu): the whole test_gpu suite on main, run to its end at last.  Earlier calls
# ran it in parts that each compiled their own specializations and timed out compiling; here `kdart
# prewarm --all` fills the shared cache on every core first (about 620 CPU-seconds for sm_90a: under a
# minute on 16 cores), then test_gpu runs in PARTS parts side by side (default 4, LIMIT s each, default
# 420), every one hitting the cache.
set -u
. lab/calls/common.sh
timeout 240 build/kdart prewarm --all -j "$(nproc)" --json > $O/prewarm.json 2> $O/prewarm.txt
echo "prewarm rc=$? $(cat $O/prewarm.json)"; grep FAILED $O/prewarm.txt | cut -c1-200 | head -5; el
gc_test_gpu ${LIMIT:-420} ${PARTS:-4}; wait; el
for f in $O/test_gpu[0-9]*.txt; do echo "== $f"; grep -E "Checks|:F:|:E:|rc=" $f | cut -c1-240 | head -8; done
gc_pack
