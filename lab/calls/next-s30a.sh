# call s30a (carry build-gpu: main's build; .whl): main after u moved into fwd_h's scan, whose uv=1 kernels
# then took a parameter struct of their own (kdart_fwd_h_uv_params; GPU-run before that change: calls
# s29a/b).  Side by side: test_gpu chunk_bwd_whole, fwdh_production, rwu_production, and the Python whole
# tests (test_whole_gpu.py; fla's part with the carried wheel).  LIMIT (default 200) bounds each.
set -u
. lab/calls/common.sh
gc_fla_site
gc_gpu_tests ${LIMIT:-200} chunk_bwd_whole,fwdh_production,rwu_production M
gc_pytest whole ${LIMIT:-200} "-n 4 python/tests/test_whole_gpu.py"
wait; el
grep -E "Checks|F:|rc=" $O/test_gpu_M.txt | cut -c1-200 | head -6; gpu_whole_report; gc_pack
