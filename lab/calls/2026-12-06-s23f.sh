# call s23f: call s23e cut to what the last minutes of device time allow (the same trees): the bare whole
# call on the packed row, L0 / L1 / L2 once, then chunk_bwd_whole and varlen_garbage_writes_nothing (L1, L2).
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
export WB_CACHE=/tmp/cw WB_LIMIT=60
{ gc_whole_bare L0 $R/build/k0 build/libkdart.so packed32768
  gc_whole_bare L1 $R/build/k1 build/libkdart.so packed32768
  gc_whole_bare L2 $R/kernel_src build-V/libkdart.so packed32768; } | gc_prof | cut -c1-300 | tee -a $O/ab.txt; el
(KDART_KERNEL_DIR=$R/build/k1 KDART_CACHE_DIR=/tmp/t1 KDART_GPU_TESTS=chunk_bwd_whole,varlen_garbage_writes_nothing CK_FORK=no timeout 70 build/tests/test_gpu > $O/t1.txt 2>&1; echo "L1 rc=$?" >> $O/t1.txt) &
(KDART_CACHE_DIR=/tmp/t2 KDART_GPU_TESTS=chunk_bwd_whole,varlen_garbage_writes_nothing CK_FORK=no timeout 70 build-V/tests/test_gpu > $O/t2.txt 2>&1; echo "L2 rc=$?" >> $O/t2.txt) &
wait
for f in t1 t2; do tail -1 $O/$f.txt; grep -E "Checks|F:" $O/$f.txt | cut -c1-250 | head -3; done; el
