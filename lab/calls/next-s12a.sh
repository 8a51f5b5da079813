#!/usr/bin/env bash
# lab/calls/next-s12a.sh (OUT set; carry build-gpu as build: the fused-post experiment's build; build-main-gpu:
# main's build; .whl): experiments/fused-post tested and timed against main.  The working copy is patched
# with fused_post.diff at the start (kernels, runtime's tests, python/tests), main's kernels kept in /tmp/main_k.
# Tests on the experiment: test_whole_gpu.py and test_production_gpu.py -k whole (the whole call with the post
# kernels where HV == H, against the stages and the float64 recurrence), test_gpu's wy and bwd_post lists, the
# whole call on small shapes under memcheck and racecheck.  Then whole_ab (B2, packed 32768) alternating main,
# the experiment, and the experiment with KDART_FUSE_POST=0 (the separate bwd_post launch: the fast sigmoid and
# the wide final sum alone), two rounds, profiles of the bare C call included; round 1 also the post kernels
# with evict-first stores (exp-cs) and without the discard (exp-nodisc).  Before the call: main's build in
# build-main-gpu (tools/build.sh on main), the experiment's in build-gpu (a worktree with the diff applied,
# tools/build.sh there); both as the summary's GPU folders (kdart, libkdart.so*, libuv, libsqlite3, tests/test_gpu).
set -u
. lab/calls/common.sh
D=$R/lab/experiments/fused-post/fused_post.diff
rm -rf /tmp/main_k && cp -a kernel_src /tmp/main_k
patch -s -p1 < "$D" || { echo "fused_post.diff does not apply"; exit 3; }
grep -c post_step kernel_src/wy_dqkg.cuh
export TRITON_CACHE_DIR=$R/.triton-cache; mkdir -p $TRITON_CACHE_DIR; gc_fla_site
export KDART_LIBRARY=$R/build/libkdart.so
gc_whole_tests 180
gc_gpu_tests 180 wy_intra,wy_production,post_every_spec,chunk_bwd_whole wypost
for tool in memcheck racecheck; do
  (PYTHONPATH=$R/python:$R/python/tests KDART_CACHE_DIR=/tmp/csan_$tool timeout 180 compute-sanitizer --tool $tool \
     python3 lab/experiments/fused-post/post_fused_sanitize.py > $O/$tool.txt 2>&1
   echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $O/$tool.txt)" >> $O/san.txt) &
done
wait; el
gpu_whole_report
tail -1 $O/test_gpu_wypost.txt; grep -hE "^[0-9]+%|:[EF]:" $O/test_gpu_wypost.txt | head -6
cat $O/san.txt; grep -h "^[12] " $O/memcheck.txt | head -4
gc_pack
# two variants of the post kernels' L2 handling, for round 2: the intra part's fp32 stores evict-first (as
# qk-in-wy had them) and no discard (the rows only put back to the normal priority)
rm -rf /tmp/cs_k /tmp/nd_k && cp -a kernel_src /tmp/cs_k && cp -a kernel_src /tmp/nd_k
sed -i 's/BETA_F32, POST>(p.in);/BETA_F32, false>(p.in);/' /tmp/cs_k/wy_dqkg.cuh
sed -i 's/const bool drop = p.discard;/const bool drop = false \&\& p.discard;/' /tmp/nd_k/wy_dqkg.cuh
grep -c "BETA_F32, false>(p.in)" /tmp/cs_k/wy_dqkg.cuh; grep -c "drop = false && p.discard" /tmp/nd_k/wy_dqkg.cuh
for i in 1 2; do
  # round 1: both rows; round 2: B2 alone, with the L2 variants (the call's 600 s: a run that would start
  # past 540 s is skipped)
  vs="main exp exp-unfused" rows=b2_t8192_h32,packed32768
  [ $i = 2 ] && vs="main exp exp-cs exp-nodisc" rows=b2_t8192_h32
  for v in $vs; do
    [ $(( $(date +%s) - t0 )) -gt 540 ] && { echo "skipped $v round $i (t=$(( $(date +%s) - t0 )))"; continue; }
    case $v in
      main) lib=$R/build-main-gpu/libkdart.so kd=/tmp/main_k fp=1 ;;
      exp) lib=$R/build/libkdart.so kd=$R/kernel_src fp=1 ;;
      exp-unfused) lib=$R/build/libkdart.so kd=$R/kernel_src fp=0 ;;
      exp-cs) lib=$R/build/libkdart.so kd=/tmp/cs_k fp=1 ;;
      exp-nodisc) lib=$R/build/libkdart.so kd=/tmp/nd_k fp=1 ;;
    esac
    KDART_LIBRARY=$lib KDART_KERNEL_DIR=$kd KDART_FUSE_POST=$fp KDART_CACHE_DIR=/tmp/cab_$v \
      PYTHONPATH=$R/python:$R/python/tests:$R/lab/calls timeout 100 python3 lab/calls/whole_ab.py $rows 2>&1 \
      | grep -E "bare|chunk_kda_bwd [0-9]|profile" | grep -v "stages profile" | sed "s|^|$v |"
  done
done | tee $O/ab.txt; el
gc_pack
