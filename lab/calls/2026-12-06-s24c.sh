# call s24c (carry build-gpu = the packed-qk tree's build, build-L1 = main d85f5a4's library with its kernels in
# build-L1/k, build-L1u/k = those kernels with the packed non-qk row loop unrolled again, build-L0/k = 5bdb272's
# kernels (before the fused body took its location from the wy part), .whl): on an H200, bench/e2e.py's B2
# production row (fla autotunes it: about 300 s; the results saved); on an H100, where the packed fused kernel's
# 0.28 ms since 3bb82fc comes from: L0 / L1 / L1u (main's library) and L2 (this tree) on packed32768, two rounds.
set -u
rm -rf build && mv build-gpu build
. lab/calls/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
if grep -q H200 $O/gpu.txt; then ROWS=b2_t8192_h32 bash lab/calls/2026-12-06-s24b.sh; exit 0; fi
export WB_CACHE=/tmp/cw WB_LIMIT=120
for r in 1 2; do
  { for v in L0 L1 L1u; do gc_whole_bare ${v}_$r $R/build-$v/k build-L1/libkdart.so packed32768; done
    gc_whole_bare L2_$r $R/kernel_src build/libkdart.so packed32768; } | gc_prof | grep profile | cut -c1-200 | tee -a $O/ab.txt; el
done
gc_pack
