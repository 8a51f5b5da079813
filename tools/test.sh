#!/usr/bin/env bash
# tools/test.sh: builds kdart, runs every test suite through ctest, then the
# Python tests (python/tests, pytest) against the build's libkdart.so.
# GPU suites report "Skipped" (exit 77) on machines without a CUDA device;
# Python tests that need torch, CUDA or fla skip when those are missing
# (this script never installs torch; it installs pytest if it is missing).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bdir="${KDART_BUILD_DIR:-$root/build}"
"$root/tools/build.sh"
export LD_LIBRARY_PATH="${CUDA_HOME:-/usr/local/cuda}/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
(cd "$bdir" && ctest --output-on-failure --timeout 3000 -j2 "$@")

py="${PYTHON:-python3}"
if ! "$py" -c "import pytest" 2>/dev/null; then
  "$py" -m pip install --quiet pytest
fi
if "$py" -c "import torch" 2>/dev/null; then
  echo "tools/test.sh: Python tests with $py (torch $("$py" -c 'import torch; print(torch.__version__)'))"
else
  echo "tools/test.sh: Python tests with $py; torch is not importable there, so the torch tests skip" \
       "(PYTHON=/path/to/python picks another interpreter)"
fi
rc=0
KDART_LIBRARY="$bdir/libkdart.so" "$py" -m pytest "$root/python/tests" -q -p no:cacheprovider || rc=$?
# 5: no tests collected; not a failure here.
if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then exit "$rc"; fi
