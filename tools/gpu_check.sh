#!/usr/bin/env bash
# tools/gpu_check.sh BUILD_DIR OUT_DIR: the whole GPU verification in one
# go, on a GPU machine (see docs/performance.md): the GPU test suite, the
# selftest, compute-sanitizer memcheck and racecheck on small shapes,
# `kdart bench` (standard table, launch overhead), tensor-core and spill
# evidence from the SASS, the Python package's tests on the GPU (python/tests:
# torch ops vs float64, torch.compile, CUDA graphs, fla's recipes through
# kdart.fla), and, when a fla wheel is in .whl/, the side-by-side, the
# end-to-end chunk_kda backward (bench/e2e.py) and the variable-length table
# (bench/varlen.py) against fla.  Carry BUILD_DIR
# (prewarmed: BUILD_DIR/devcache) and .whl.
#
# Together the parts take longer than one device call (fla autotunes each new
# shape for minutes), so GPU_CHECK_PARTS picks them, one call each:
#   core (suite, selftest, sanitizers, SASS: about 3 minutes), bench (`kdart
#   bench`; its timings want the GPU to itself), python (PYTEST_ARGS narrows it,
#   e.g. one test id), e2e (E2E_ARGS: --shapes NAME), sbs (SBS_ARGS: --rows 0,11), varlen (VARLEN_ARGS:
#   --rows 0,1), and warm: tools/triton_warm.py fills Triton's compile cache in
#   parallel for the fla workloads named by WARM_E2E (e2e shapes), WARM_SBS
#   (side_by_side rows), WARM_PYTEST
#   (pytest ids) and WARM_VARLEN (varlen rows), so that the measuring parts'
#   autotuning only benchmarks.  Default: all but warm.
# Triton's cache is .triton-cache/ (ignored, so it survives between calls while
# the machine stays warm); autotune results (small JSON files) come back as
# OUT/triton-autotune.tgz after every call: put it in .triton-carry/ and carry
# that, and a fresh machine starts with them.
set -u
b="${1:-build}"; out="${2:-${OUT:-/tmp/kdart-gpu-check}}"; mkdir -p "$out"
root="$(cd "$(dirname "$0")/.." && pwd)"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export KDART_CACHE_DIR="${KDART_CACHE_DIR:-$root/$b/devcache}" KDART_KERNEL_DIR="$root/kernel_src"
cd "$root"
parts=" ${GPU_CHECK_PARTS:-core bench python e2e sbs varlen} "
want() { [[ "$parts" == *" $1 "* ]]; }
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-$root/.triton-cache}"
mkdir -p "$TRITON_CACHE_DIR"
for f in .triton-carry/*.tgz; do [ -f "$f" ] && tar xzf "$f" -C "$TRITON_CACHE_DIR"; done
save_autotune() {
  (cd "$TRITON_CACHE_DIR" && find . -name '*.autotune.json' | tar czf "$out/triton-autotune.tgz" -T -) 2>/dev/null
}
trap save_autotune EXIT
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > "$out/smi.txt" 2>&1
if want core; then
  # three processes side by side (KDART_GPU_PART=i/3, every test in one of them): with the tail specs
  # the suite outgrew one 300 s run
  for i in 0 1 2; do
    (KDART_GPU_PART=$i/3 CK_FORK=no timeout 300 "$b/tests/test_gpu" > "$out/test_gpu.$i.txt" 2>&1
     echo "test_gpu part $i/3 rc=$?" >> "$out/test_gpu.$i.txt") &
  done
  wait
  cat "$out"/test_gpu.[012].txt > "$out/test_gpu.txt" && rm -f "$out"/test_gpu.[012].txt
  echo "test_gpu: $(grep -E '^test_gpu part|Checks' "$out/test_gpu.txt" | tr '\n' ' ')"
  # the tail specializations run with the shapes that select them (head dims below their K tile;
  # they compile on first use unless prewarmed with --all)
  timeout 240 "$b/kdart" selftest > "$out/selftest.txt" 2>&1
  echo "selftest rc=$? $(tail -1 "$out/selftest.txt")"
  for tool in memcheck racecheck; do
    KDART_GPU_SMALL=1 timeout 200 compute-sanitizer --tool $tool "$b/tests/test_gpu" > "$out/$tool.txt" 2>&1
    echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$tool.txt")"
  done
  "$b/kdart" ls | awk 'NR>1 && $2!="chunk_rcumsum" && $4=="sm_90a" {print $1, $2, $3}' | while read -r k name spec; do
    sass=$("$b/kdart" sass $k)
    echo "$k $name $spec HMMA=$(grep -c HMMA <<<"$sass") HGMMA=$(grep -c HGMMA <<<"$sass") LDL/STL=$(grep -cE '(LDL|STL)[. ]' <<<"$sass") $("$b/kdart" show $k | grep -E '^ *(registers|spill_store_bytes)' | tr -s ' \n' ' ')"
  done > "$out/sass.txt" 2>&1
fi
if want bench; then
  timeout 200 "$b/kdart" bench > "$out/bench.txt" 2>&1; echo "bench rc=$?"
fi
if ls .whl/*.whl >/dev/null 2>&1 && { want python || want warm || want e2e || want sbs || want varlen; }; then
  # once per machine: calls running side by side must not rewrite a package another one is importing
  [ -d /tmp/site/fla ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
fi
if ls .whl/*.whl >/dev/null 2>&1 && want warm; then
  w() { PYTHONPATH="/tmp/site:$root/python" KDART_LIBRARY="$b/libkdart.so" KDART_SKIP_WHEEL_TEST=1 \
        FLA_DISABLE_BACKEND_DISPATCH=1 python3 tools/triton_warm.py -j "$2" --timeout "${WARM_TIMEOUT:-400}" \
        --log "/tmp/warm-$1" -- "${@:3}"; }
  # (varlen rows are full size, about 10 GB a worker: fewer of them)
  [ -n "${WARM_E2E:-}" ] && w e2e "${WARM_JOBS:-12}" python3 bench/e2e.py --warm-only --shapes "$WARM_E2E"
  [ -n "${WARM_SBS:-}" ] && w sbs "${WARM_JOBS:-12}" python3 bench/side_by_side.py --warm-only --rows "$WARM_SBS" ${WARM_SBS_ARGS:-}
  [ -n "${WARM_PYTEST:-}" ] && w pytest "${WARM_JOBS:-12}" python3 -m pytest $WARM_PYTEST -q -p no:cacheprovider
  [ -n "${WARM_VARLEN:-}" ] && w varlen "${WARM_VARLEN_JOBS:-5}" python3 bench/varlen.py --lib "$b/libkdart.so" \
    --rows "$WARM_VARLEN" --iters 1
  tail -n 3 /tmp/warm-*/warm0.txt > "$out/warm.txt" 2>&1
fi
# The package from the checkout against this build's library (fla tests skip without the wheel).
# PYTEST_TRITON=first: fla's autotuners take their first working config untimed (tools/triton_warm/
# sitecustomize.py; correctness runs only: one compile per kernel instead of minutes of autotuning).
if want python; then
  KDART_TRITON_WARM="${PYTEST_TRITON:-}" PYTHONPATH="$root/tools/triton_warm:/tmp/site:$root/python" \
    KDART_LIBRARY="$b/libkdart.so" KDART_SKIP_WHEEL_TEST=1 \
    FLA_DISABLE_BACKEND_DISPATCH=1 PYTHONUNBUFFERED=1 timeout "${PYTEST_TIMEOUT:-400}" \
    python3 -m pytest ${PYTEST_ARGS:-python/tests} -v -s -p no:cacheprovider -rsP > "$out/${PYTEST_LOG:-pytest_gpu}.txt" 2>&1
  echo "pytest rc=$? $(tail -1 "$out/${PYTEST_LOG:-pytest_gpu}.txt")"
fi
if ls .whl/*.whl >/dev/null 2>&1; then
  if want e2e; then
    PYTHONPATH=/tmp/site KDART_LIBRARY="$b/libkdart.so" PYTHONUNBUFFERED=1 timeout "${E2E_TIMEOUT:-500}" \
      python3 bench/e2e.py ${E2E_ARGS:-} > "$out/e2e.txt" 2>&1
    echo "e2e rc=$?"
  fi
  if want sbs; then
    PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 FLA_DISABLE_BACKEND_DISPATCH=1 timeout "${SBS_TIMEOUT:-260}" \
      python3 bench/side_by_side.py --lib "$b/libkdart.so" --budget-s "${SBS_BUDGET:-200}" ${SBS_ARGS:-} \
      --json "$out/side_by_side.json" > "$out/side_by_side.txt" 2>&1
    echo "side_by_side rc=$?"
  fi
  if want varlen; then # cu_seqlens and odd T: fla's varlen path vs kdart.torch (bench/varlen.py)
    PYTHONPATH="/tmp/site:$root/python" KDART_LIBRARY="$b/libkdart.so" PYTHONUNBUFFERED=1 \
      FLA_DISABLE_BACKEND_DISPATCH=1 timeout "${VARLEN_TIMEOUT:-600}" python3 bench/varlen.py --lib "$b/libkdart.so" \
      --budget-s "${VARLEN_BUDGET:-420}" ${VARLEN_ARGS:-} --json "$out/varlen.json" > "$out/varlen.txt" 2>&1
    echo "varlen rc=$?"
  fi
fi
