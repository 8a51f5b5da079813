#!/usr/bin/env bash
# tools/test.sh: builds kdart and runs every test suite through ctest.
# GPU suites report "Skipped" (exit 77) on machines without a CUDA device.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bdir="${KDART_BUILD_DIR:-$root/build}"
"$root/tools/build.sh"
export LD_LIBRARY_PATH="${CUDA_HOME:-/usr/local/cuda}/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cd "$bdir"
ctest --output-on-failure --timeout 3000 -j2 "$@"
