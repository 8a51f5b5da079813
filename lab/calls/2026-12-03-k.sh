#!/usr/bin/env bash
# lab/calls/2026-12-03-k.sh: one cache for the shell and for PyTorch, on the H200 image (torch 2.11's CUDA 13
# wheels bring their own NVRTC): prewarm one wy_dqkg specialization through the Python door (python -m kdart),
# then in a fresh process that imports torch, prepare it through the library (expect a cache hit), and ask
# `why` through both doors (the shell's kdart uses the toolkit's NVRTC: expect a miss naming the NVRTC).
set -u
. lab/calls/common.sh
export PYTHONPATH=$R/python KDART_LIBRARY=$R/build/libkdart.so KDART_CACHE_DIR=/tmp/twodoors KDART_ARCH=sm_90a
SPEC="io=bf16,K=128,varlen=0,tail=0,beta=f32,svf=0"
timeout 60 python3 -m kdart prewarm --kernel wy_dqkg --spec "$SPEC" 2>&1 | tail -2
timeout 60 python3 -m kdart stats 2>&1 | grep -E "NVRTC|nvJitLink|entries"
timeout 60 python3 - <<PY
import torch, kdart
rt = kdart.runtime()
info = rt.info()
print("torch process:", info["nvrtc"], info["nvrtc_build"], "nvJitLink", info["nvjitlink"])
print("prepare:", rt.prepare("wy_dqkg", "$SPEC", "sm_90a")["source"], "entries", len(rt.cache_list()))
PY
echo "--- why through the Python door"; timeout 60 python3 -m kdart why wy_dqkg "$SPEC" 2>&1 | head -4
echo "--- why through the shell's kdart"; timeout 60 build/kdart why wy_dqkg "$SPEC" 2>&1 | head -8
el
