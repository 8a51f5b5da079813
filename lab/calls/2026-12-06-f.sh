# twenty-first session, call f (carry build-gpu = branch exp/post-icache's build: the last step's gate part
# allowed on packed rows again, its four-element gate backward a non-inlined function; build-m = main's
# build with its kernels in build-m/k): call e found the packed post = 1 launch stalled on instruction
# fetch (a third of its cycles; its text 8904 instructions, 142 KB, against 7576 for post = 0).  With the
# gate math out of line (8184 varlen, 6840 fixed), the bare call at B2 and on the packed row at
# KDART_FUSE_POST=0 and 1, against main; then ncu's warp states of the packed post = 1 launch.
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
export KDART_CACHE_DIR=/tmp/cw
PP=$R/python:$R/python/tests:$R/lab/calls
export WB_CACHE=/tmp/cw WB_LIMIT=170
ROWS=b2_t8192_h32,packed32768
{ gc_whole_bare main $R/build-m/k build-m/libkdart.so $ROWS
  KDART_FUSE_POST=0 gc_whole_bare lv0 $R/kernel_src build/libkdart.so $ROWS
  KDART_FUSE_POST=1 gc_whole_bare lv1 $R/kernel_src build/libkdart.so $ROWS; } | tee $O/ab.txt | cut -c1-330; el
gc_pack
KDART_LIBRARY=$R/build/libkdart.so KDART_FUSE_POST=1 WHOLE_NCU=1 PYTHONPATH=$PP timeout 200 ncu --kernel-name regex:kdart_wy_dqkg \
  --launch-skip 2 --launch-count 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight \
  python3 lab/calls/whole_ab.py packed32768 > $O/ncu_src1.txt 2>&1
echo "ncu rc=$?"; el; grep -E "Duration|Warp Cycles Per Issued|fetch an|represents" $O/ncu_src1.txt | head
gc_pack
