# call o, from branch exp/rwu4's tree (or main with lab/experiments/rwu4/rwu4.diff applied) (carry build-gpu = its build, its V steps past the last K step taking the two stages in
# turn; build-main2 = main's library and kernels): the bare whole call at prod8192 and B2, main against the
# branch, one round; then test_gpu's rwu_every_spec and rwu_production (a K 256 case with V 64 and 100 added).
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
export WB_CACHE=/tmp/cw WB_LIMIT=100
{ gc_whole_bare main $R/build-main2/k build-main2/libkdart.so prod8192,b2_t8192_h32
  gc_whole_bare rwu4 $R/kernel_src build/libkdart.so prod8192,b2_t8192_h32; } | gc_prof | cut -c1-300 | tee -a $O/ab.txt; el
KDART_GPU_TESTS=rwu_every_spec,rwu_production CK_FORK=no timeout 60 build/tests/test_gpu > $O/test_gpu.txt 2>&1
echo "test_gpu rc=$?"; grep -E "Checks|F:|K256 V(64|100)" $O/test_gpu.txt | cut -c1-200; el
gc_pack
