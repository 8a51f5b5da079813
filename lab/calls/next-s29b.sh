# call s29b: experiments/fwdh-u again (call s29a's timing printed nothing: whole_ab's output is now kept in
# wb_*.log), with the __syncwarp before v_new goes over A's rows (s29a's racecheck warned of lanes writing
# rows that other lanes' ldmatrix read).  Same tree and build as s29a (the working tree with the diff).
# 1. alone: the bare whole call, M (KDART_FUSE_U=0) and U, two rounds on AB_ROWS; 2. side by side:
# test_gpu chunk_bwd_whole and fwdh_production, racecheck and memcheck of chunk_bwd_whole.
set -u
. lab/calls/common.sh
export WB_CACHE=/tmp/cw WB_LIMIT=${WB_LIMIT:-150}
ROWS=${AB_ROWS:-b2_t8192_h32,packed32768,prod8192}
for r in 1 2; do
  { KDART_FUSE_U=0 gc_whole_bare M_$r $R/kernel_src build/libkdart.so $ROWS
    gc_whole_bare U_$r $R/kernel_src build/libkdart.so $ROWS; } | gc_prof | cut -c1-300 | tee -a $O/ab.txt
done; el; gc_pack
tail -3 $O/wb_M_1.log | cut -c1-300
[ "${AB_ONLY:-0}" = 1 ] && exit 0
gc_tests_san chunk_bwd_whole,fwdh_production chunk_bwd_whole ${TEST_LIMIT:-200}; gc_pack
