# call s25c: s25a cut to fit a small device budget (carry build-gpu, build-L2 (85ff265's kernels as build-L2/k),
# .whl, .triton-carry as s25a's header says): 1. the bare whole call, L2 against main (M), packed32768 and B2,
# one round each (M twice); 2. test_gpu chunk_bwd_whole, wy_intra, varlen_garbage_writes_nothing beside memcheck
# and racecheck of chunk_bwd_whole; 3. on an H100, e2e's packed row (fla's autotune carried).
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
export WB_CACHE=/tmp/cw WB_LIMIT=110
ROWS=packed32768,b2_t8192_h32
{ gc_whole_bare M_1 $R/kernel_src build/libkdart.so $ROWS
  gc_whole_bare L2_1 $R/build-L2/k build/libkdart.so $ROWS
  gc_whole_bare M_2 $R/kernel_src build/libkdart.so $ROWS; } | gc_prof | cut -c1-300 | tee -a $O/ab.txt; el
(KDART_GPU_TESTS=chunk_bwd_whole,wy_intra,varlen_garbage_writes_nothing CK_FORK=no timeout ${T_LIMIT:-170} build/tests/test_gpu > $O/t.txt 2>&1; echo "M rc=$?" >> $O/t.txt) &
for tool in memcheck racecheck; do
  (KDART_CACHE_DIR=/tmp/c_$tool KDART_GPU_TESTS=chunk_bwd_whole CK_FORK=no timeout ${T_LIMIT:-170} \
     compute-sanitizer --tool $tool build/tests/test_gpu > $O/$tool.txt 2>&1; echo "$tool rc=$?" >> $O/$tool.txt) &
done
wait
for f in t memcheck racecheck; do tail -1 $O/$f.txt; grep -E "Checks|F:|SUMMARY" $O/$f.txt | cut -c1-250 | head -4; done; el
grep -q H100 $O/gpu.txt || { gc_pack; exit 0; }
gc_fla_site
export TRITON_CACHE_DIR=$R/.triton-cache KDART_LIBRARY=$R/build/libkdart.so; gc_triton_restore
LIMIT=${LIMIT:-560} gpu_e2e_rows packed_t32768_hv32
el; gc_pack
