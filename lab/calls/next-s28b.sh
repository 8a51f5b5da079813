# call s28b (after s28a on the same machine, or carry build-gpu, .whl, .whl-cudnn, .triton-carry): the tree
# to land, kernel_src = main + experiments/wy-discard + experiments/dhu-split-margin: test_gpu's whole,
# wy and dhu lists beside memcheck and racecheck of chunk_bwd_whole and the Python whole tests; then, alone,
# bench/e2e.py's production rows (B2, packed) and cuDNN frontend's configuration, profiled.
set -u
. lab/calls/common.sh
gc_peers_setup
gc_gpu_tests 240 chunk_bwd_whole,wy_production,wy_intra,varlen_garbage_writes_nothing,dav_fused,dhu_varlen_v_split,dhu_varlen_head_pairs DS
gc_whole_tests 200
gc_san_whole 240
gpu_whole_report
grep -E "Checks|F:|rc=" $O/test_gpu_DS.txt | cut -c1-200 | head -6; gc_pack
LIMIT=${CALL_END:-560} gpu_e2e_rows b2_t8192_h32 packed_t32768_hv32; gc_pack
left=$(( ${CALL_END:-560} - ($(date +%s) - t0) ))
if [ $left -gt 60 ]; then
  gc_e2e_cudnn whole $left
fi
gc_pack
