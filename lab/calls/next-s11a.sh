#!/usr/bin/env bash
# lab/calls/next-s11a.sh (OUT set; carry build-gpu as build): the portable build's kernels on the H200.
# kdart compiles for sm_90 (no "a") with the mma.sync paths that sm_100a also compiles (KDART_WY_WG 0 in
# wy_dqkg, no wgmma in bwd_dhu), so KDART_ARCH=sm_90 runs on the H200 the code that the sm_100a cubins
# run and no H200 test has run so far (wy_dqkg's sm_100a spill fix among it).  test_gpu's lists in three
# processes on one cache, then memcheck of the small wy_dqkg cases; nothing of kdart's is timed.  Then, alone on
# the GPU and where .whl-cudnn was carried too, next-s12c.sh's profile of cuDNN frontend's backward (about a
# minute; lab/peers/cudnn-hopper-bwd.md).
set -u
. lab/calls/common.sh
export KDART_ARCH=sm_90 KDART_CACHE_DIR=/tmp/c90
timeout 150 build/kdart prewarm --arch sm_90 --jobs 16 > $O/prewarm90.txt 2>&1; echo "prewarm rc=$?"; tail -1 $O/prewarm90.txt; el
gc_gpu_tests 240 wy_intra,wy_production,dav_fused,dav_standalone wy
gc_gpu_tests 240 intra_varlen_lists,intra_fixed_any_t,intra_head_dims,dhu_varlen_lists,dhu_fixed_any_t,dhu_head_dims,fwdh_production,rwu_production,post_every_spec rest
gc_gpu_tests 240 wy_every_spec every
(KDART_GPU_SMALL=wy_dqkg CK_FORK=no timeout 240 compute-sanitizer --tool memcheck build/tests/test_gpu > $O/memcheck.txt 2>&1
 echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $O/memcheck.txt)" >> $O/san.txt) &
wait; el
for f in wy rest every; do tail -1 $O/test_gpu_$f.txt; grep -hE "^[0-9]+%|:[EF]:" $O/test_gpu_$f.txt | head -6; done
cat $O/san.txt; gc_pack
[ -d .whl-cudnn ] && [ $(( $(date +%s) - t0 )) -lt 450 ] && bash lab/calls/next-s12c.sh; gc_pack
