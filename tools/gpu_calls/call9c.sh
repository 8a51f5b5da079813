#!/usr/bin/env bash
# tools/gpu_calls/call9c.sh (session 9, branch issue15, after call9b ran out of time in its C suite): side by
# side, test_gpu in three processes (KDART_GPU_TESTS; the tail specs made it longer than one 300 s run), the
# torch tests on the Python path and then through the C++ fast path, and fla's recipes.
set -u
O=$OUT; t0=$(date +%s); R=$PWD
export KDART_EXPERIMENTAL=1 KDART_TORCH_EXT_DIR=/tmp/kext LD_LIBRARY_PATH=/usr/local/cuda/lib64
export KDART_CACHE_DIR=$R/build/devcache KDART_KERNEL_DIR=$R/kernel_src
P1=intra_every_spec,intra_gate_families,warm_load_times
P2=dhu_every_spec,intra_k64_equal_heads,intra_graph_capture,dhu_graph_capture_and_mixed,bad_arguments_write_nothing,second_context
P3=intra_fixed_any_t,dhu_fixed_any_t,intra_varlen_lists,dhu_varlen_lists,varlen_thousand_sequences,intra_varlen_short_sequences,varlen_garbage_writes_nothing,intra_head_dims,dhu_head_dims,spec_choice
i=0; pids=""
for P in $P1 $P2 $P3; do i=$((i+1))
  (KDART_GPU_TESTS=$P CK_FORK=no timeout 260 build/tests/test_gpu > $O/test_gpu$i.txt 2>&1; echo "test_gpu part $i rc=$? t=$(( $(date +%s) - t0 ))" >> $O/test_gpu$i.txt) &
  pids="$pids $!"
done
(cd python && timeout 150 python3 -m kdart.torch_ext > $O/ext_build.txt 2>&1; echo "ext build rc=$?" >> $O/ext_build.txt) &
ep=$!
GPU_CHECK_PARTS=python PYTEST_LOG=pytest_fla PYTEST_TRITON=first PYTEST_TIMEOUT=250 PYTEST_ARGS="-n 5 python/tests/test_fla_gpu.py" tools/gpu_check.sh build $O > $O/fla_rc.txt 2>&1 &
fp=$!
KDART_TORCH_EXT=0 GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch_pypath PYTEST_TIMEOUT=120 PYTEST_ARGS="python/tests --ignore=python/tests/test_fla_gpu.py --deselect python/tests/test_torch_gpu.py::test_beyond_32bit_indexing" tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
wait $ep; cat $O/ext_build.txt
GPU_CHECK_PARTS=python PYTEST_LOG=pytest_torch_ext PYTEST_TIMEOUT=90 PYTEST_ARGS="python/tests/test_torch_gpu.py python/tests/test_torch_ext.py" tools/gpu_check.sh build $O; echo "t=$(( $(date +%s) - t0 ))"
wait $fp; cat $O/fla_rc.txt; echo "t=$(( $(date +%s) - t0 ))"
wait $pids; tail -qn 2 $O/test_gpu?.txt
grep -hE "^FAILED|^ERROR" $O/pytest_*.txt | head -20
(cd $O && tar czf 0logs.tgz --exclude=0logs.tgz .)
