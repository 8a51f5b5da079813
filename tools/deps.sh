#!/usr/bin/env bash
# tools/deps.sh: installs the Debian packages kdart builds against, when
# missing.  The CUDA 13 toolkit (NVRTC, nvJitLink, cuda.h) is expected at
# /usr/local/cuda (or CUDA_HOME); it is not an apt package here.
set -euo pipefail
need=()
# (g++ and python3: the emulated device of tests/emu, which runs the GPU suite on the CPU)
for p in cmake make gcc g++ python3 pkg-config libsqlite3-dev check libsubunit-dev libuv1-dev libdlpack-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if ((${#need[@]})); then
  echo "kdart: installing ${need[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
cuda="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -e "$cuda/include/nvrtc.h" ] || [ ! -e "$cuda/include/nvJitLink.h" ]; then
  echo "kdart: the CUDA toolkit (NVRTC, nvJitLink) was not found at $cuda; set CUDA_HOME" >&2
  exit 1
fi
