#!/usr/bin/env bash
# tools/gpu_check.sh BUILD_DIR OUT_DIR: the whole GPU verification in one
# go, for a lent GPU machine (see docs/perf.md): the GPU test suite, the
# selftest, compute-sanitizer memcheck and racecheck on small shapes,
# `kdart bench` (standard table, launch overhead), tensor-core and spill
# evidence from the SASS, and, when a fla wheel is in .whl/, the side-by-side
# against fla.  Carry BUILD_DIR (prewarmed: BUILD_DIR/devcache) and .whl.
set -u
b="${1:-build}"; out="${2:-${OUT:-/tmp/kdart-gpu-check}}"; mkdir -p "$out"
root="$(cd "$(dirname "$0")/.." && pwd)"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export KDART_CACHE_DIR="${KDART_CACHE_DIR:-$root/$b/devcache}" KDART_KERNEL_DIR="$root/kernel_src"
cd "$root"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > "$out/smi.txt" 2>&1
timeout 300 "$b/tests/test_gpu" > "$out/test_gpu.txt" 2>&1; echo "test_gpu rc=$?"
timeout 120 "$b/kdart" selftest > "$out/selftest.txt" 2>&1; echo "selftest rc=$?"
for tool in memcheck racecheck; do
  KDART_GPU_SMALL=1 timeout 200 compute-sanitizer --tool $tool "$b/tests/test_gpu" > "$out/$tool.txt" 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$tool.txt")"
done
timeout 200 "$b/kdart" bench > "$out/bench.txt" 2>&1; echo "bench rc=$?"
"$b/kdart" ls | awk 'NR>1 && $2!="chunk_rcumsum" && $4=="sm_90a" {print $1, $2, $3}' | while read -r k name spec; do
  sass=$("$b/kdart" sass $k)
  echo "$k $name $spec HMMA=$(grep -c HMMA <<<"$sass") HGMMA=$(grep -c HGMMA <<<"$sass") LDL/STL=$(grep -cE '(LDL|STL)[. ]' <<<"$sass") $("$b/kdart" show $k | grep -E '^ *(registers|spill_store_bytes)' | tr -s ' \n' ' ')"
done > "$out/sass.txt" 2>&1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 FLA_DISABLE_BACKEND_DISPATCH=1 timeout "${SBS_TIMEOUT:-260}" \
    python3 bench/side_by_side.py --lib "$b/libkdart.so" --budget-s "${SBS_BUDGET:-200}" \
    --json "$out/side_by_side.json" > "$out/side_by_side.txt" 2>&1
  echo "side_by_side rc=$?"
fi
