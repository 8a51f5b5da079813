#!/usr/bin/env bash
# tools/setup.sh: the main job on a fresh machine.  Installs what is
# missing, builds, prewarms the default cache for sm_100a (the design's
# primary target) and for the local GPU's arch when there is one, prints
# `kdart ls`, and on a GPU machine runs `kdart selftest`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bdir="${KDART_BUILD_DIR:-$root/build}"
"$root/tools/build.sh"
export LD_LIBRARY_PATH="${CUDA_HOME:-/usr/local/cuda}/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
kdart="$bdir/kdart"
archs="sm_100a"
stats="$("$kdart" stats 2>/dev/null || true)"
gpu=0
if printf '%s\n' "$stats" | grep -q '^CUDA *available'; then
  gpu=1
  dev_arch="$(printf '%s\n' "$stats" | awk '/^default arch/ {print $3}')"
  [ -n "$dev_arch" ] && [ "$dev_arch" != sm_100a ] && archs="$archs,$dev_arch"
fi
"$kdart" prewarm --arch "$archs" --jobs "$(nproc)"
"$kdart" ls
if [ "$gpu" = 1 ]; then
  "$kdart" selftest
fi
