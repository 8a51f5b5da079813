# call s25d (carry build-gpu as s25a's header says): kdart's bare whole call alone on B2 and the packed row
# (no fla: for an H200 when no budget is left for fla's autotune; compare with fla's H200 kernel times of
# the last e2e rows there, not measured in this process).
set -u
. lab/calls/common.sh
export WB_CACHE=/tmp/cw WB_LIMIT=${WB_LIMIT:-100}
gc_whole_bare M $R/kernel_src build/libkdart.so b2_t8192_h32,packed32768 | gc_prof | cut -c1-300 | tee -a $O/ab.txt
el; gc_pack
