#!/usr/bin/env bash
# tools/build.sh: configures and builds kdart in build/ (or $KDART_BUILD_DIR).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bdir="${KDART_BUILD_DIR:-$root/build}"
"$root/tools/deps.sh"
cuda="${CUDA_HOME:-/usr/local/cuda}"
cmake -S "$root" -B "$bdir" -DCUDAToolkit_ROOT="$cuda" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${KDART_CMAKE_ARGS:-} >/dev/null
cmake --build "$bdir" -j"$(nproc)"
