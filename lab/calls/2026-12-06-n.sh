# call n (carry build-gpu = branch exp/rwu4's build: recompute_wu at four CTAs an SM, one large and one small
# stage, K and V steps in turn; build-main2 = main's library with main's kernels in build-main2/k, .whl):
# 1. the bare whole call, main against the branch, two rounds, B2 and the packed row; 2. test_gpu's
# rwu_every_spec, rwu_production, chunk_bwd_whole beside memcheck / racecheck of rwu_production, then the
# Python whole tests.
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
export WB_CACHE=/tmp/cw WB_LIMIT=120
for r in 1 2; do
  { gc_whole_bare main$r $R/build-main2/k build-main2/libkdart.so b2_t8192_h32,packed32768
    gc_whole_bare rwu4$r $R/kernel_src build/libkdart.so b2_t8192_h32,packed32768; } | gc_prof | cut -c1-300 | tee -a $O/ab.txt; el
done
gc_fla_site
gc_whole_tests 150
(KDART_GPU_TESTS=rwu_every_spec,rwu_production,chunk_bwd_whole CK_FORK=no timeout 170 build/tests/test_gpu \
  > $O/test_gpu.txt 2>&1; echo "test_gpu rc=$?" >> $O/test_gpu.txt) &
SAN_TESTS=rwu_production gc_san_whole 170
wait; gpu_whole_report; tail -1 $O/test_gpu.txt; grep -E "Checks|F:" $O/test_gpu.txt | cut -c1-250; el
gc_pack
