#!/usr/bin/env bash
# lab/calls/next-s12c.sh (OUT set; carry .whl-cudnn; no build needed): cuDNN frontend 1.32's sm_90 KDA
# backward profiled kernel by kernel in its own configuration (lab/calls/cudnn_profile.py), about a minute
# of GPU time, most of it its NVRTC compiles.  Before the call, on this machine: `pip download --no-deps
# --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 nvidia-cudnn-frontend==1.32.0
# "cuda-bindings==13.0.*" cuda-pathfinder apache-tvm-ffi -d .whl-cudnn`.  lab/peers/cudnn-hopper-bwd.md says
# what the numbers decide.
set -u
O=$OUT; t0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/cudnn-site .whl-cudnn/*.whl
PYTHONPATH=/tmp/cudnn-site timeout 400 python3 lab/calls/cudnn_profile.py 5 > $O/cudnn_profile.txt 2>&1
echo "cudnn_profile rc=$? t=$(( $(date +%s) - t0 ))"
grep -v "nanobind\|leaked" $O/cudnn_profile.txt | head -60
