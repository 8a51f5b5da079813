#!/usr/bin/env bash
# tools/setup.sh [ARCHS]: the main job on a fresh machine.  Installs what is
# missing, builds, prewarms the default cache for ARCHS (comma-separated; else
# $KDART_ARCHS; else the local GPU's arch, or sm_90a and sm_100a without one),
# through both doors when torch is importable: the shell's `kdart` (the
# toolkit's NVRTC) and `python -m kdart` (the NVRTC a PyTorch process loads,
# torch's own; cache keys name the NVRTC, docs/design.md "One NVRTC per
# door"), prints `kdart ls`, and on a GPU machine prewarms every specialization
# for the local GPU and runs `kdart selftest`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bdir="${KDART_BUILD_DIR:-$root/build}"
"$root/tools/build.sh"
export LD_LIBRARY_PATH="${CUDA_HOME:-/usr/local/cuda}/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
kdart="$bdir/kdart"
archs="${1:-${KDART_ARCHS:-}}"
arch_opt=()
[ -n "$archs" ] && arch_opt=(--arch "$archs")
gpu=0
stats="$("$kdart" stats 2>/dev/null || true)"
printf '%s\n' "$stats" | grep -q '^CUDA *available' && gpu=1
"$kdart" prewarm "${arch_opt[@]}" --jobs "$(nproc)"
py="${PYTHON:-python3}"
if "$py" -c "import torch" 2>/dev/null; then
  PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" KDART_LIBRARY="$bdir/libkdart.so" \
    "$py" -m kdart prewarm "${arch_opt[@]}" --jobs "$(nproc)"
fi
"$kdart" ls
if [ "$gpu" = 1 ]; then
  # selftest runs every specialization, most of them outside the default set: compile them first on
  # every core (the selftest itself would compile each on first use, one at a time: minutes)
  "$kdart" prewarm --all --jobs "$(nproc)"
  "$kdart" selftest
fi
