# call s34a (carry build-gpu = main's build, build-WF, build-WFB, .whl, .whl-cudnn, .triton-carry):
# experiments/wy-full-chunks: the packed fused wy_dqkg kernel with a second copy of its body (WF) or of
# its intra part only (WFB) for full chunks (nv the constant 64: the row guards fold away; the
# fixed-length kernels' SASS is unchanged).
# Make build-WF and build-WFB here first, from the landing forms (lab/experiments/wy-full-chunks):
#   D=$PWD/lab/experiments/wy-full-chunks; for v in WF:landf WFB:landb; do rm -rf build-${v%:*}/k &&
#   mkdir -p build-${v%:*} && cp -r kernel_src build-${v%:*}/k && (cd build-${v%:*}/k &&
#   git apply -p2 --include=wy_dqkg.cuh $D/${v#*:}.diff); done
# 1. the bare whole call, main's kernels (A) against build-WF/k (WF) and build-WFB/k, timed alone, two rounds on the
#    packed row, one at B2 (a control: the same fixed-length kernels);
# 2. test_gpu chunk_bwd_whole and wy_production with WF's kernels (LIMIT, default 150 s; WV=WFB: WFB's);
# 3. with what is left: on an H200 the official B2 production row (fla's autotune saved); on an H100
#    bench/e2e.py's packed production row with WF's kernels, side by side with fla (autotune carried).
set -u
. lab/calls/common.sh
gc_fla_site
export WB_CACHE=/tmp/cw WB_LIMIT=${WB_LIMIT:-150}
gc_bare_rounds 2 packed32768 wf A=$R/kernel_src WF=$R/build-WF/k WFB=$R/build-WFB/k
gc_bare_rounds 1 b2_t8192_h32 wf A_b2=$R/kernel_src WF_b2=$R/build-WF/k
el; gc_pack
WV=${WV:-WF}; export KDART_KERNEL_DIR=$R/build-$WV/k; gc_gpu_tests ${LIMIT:-150} chunk_bwd_whole,wy_production $WV
wait; export KDART_KERNEL_DIR=$R/kernel_src; grep -E "Checks|F:|rc=" $O/test_gpu_$WV.txt | cut -c1-200 | head -6; el; gc_pack
gc_peers_setup
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  LIMIT=${CALL_END:-585} E2E_SAVE=1 gpu_e2e_rows b2_t8192_h32
else
  KDART_KERNEL_DIR=$R/build-$WV/k LIMIT=${CALL_END:-585} gpu_e2e_rows packed_t32768_hv32
fi
gc_pack
