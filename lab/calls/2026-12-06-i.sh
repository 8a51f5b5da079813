# call i: bwd_dhu on packed rows with fla's dAv fused (the longest sequence first, no V split; branch
# exp/dhu-fused-packed's library in build-x, KDART_LAB_DHU_FUSED=1) against main's split + bwd_dav; and
# exp/text's first commit (build-t/k1: varlen dg_in loads without branches) on the packed row.  Carry build-gpu
# (main), build-x (the branch's library), build-t.
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader
export WB_CACHE=/tmp/cw WB_LIMIT=120
for r in 1 2; do
  { gc_whole_bare main$r $R/kernel_src build/libkdart.so packed32768
    KDART_LAB_DHU_FUSED=1 gc_whole_bare dhuf$r $R/kernel_src build-x/libkdart.so packed32768
    [ $r = 1 ] && gc_whole_bare text1 $R/build-t/k1 build/libkdart.so packed32768; } | cut -c1-400 | tee -a $O/ab.txt; el
done
gc_pack
