#!/usr/bin/env bash
# lab/calls/2026-12-03-k0.sh (as run, 7 s): which NVRTC and nvJitLink a torch process has loaded, at import,
# after CUDA init and after a kernel.  Result on the H200 image (torch 2.11): nvidia/cu13/lib's
# libnvrtc.so.13, libnvrtc-builtins.so.13.0 and libnvJitLink.so.13, already at `import torch`.
python3 - <<'PY'
def maps(tag):
    print(tag, sorted({l.split()[-1] for l in open('/proc/self/maps') if 'nvrtc' in l or 'nvJitLink' in l}))
maps("start")
import torch
maps("import torch")
torch.zeros(1, device="cuda")
maps("cuda init")
(torch.ones(4, device="cuda") * 2).sum().item()
maps("kernels")
PY
