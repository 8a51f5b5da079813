# lab/calls/fused_ncu.py: one wy_dqkg launch with dAqk and bwd_intra's terms (the whole route's largest kernel)
# at B2 T8192 H32 K = V = 128 bf16, after two warm-up calls, for ncu (--launch-skip 2 --launch-count 1).
import torch
import kdart.torch as kt
from kda_ref import wy_inputs

torch.manual_seed(0)
a = wy_inputs(2, 8192, 32, 32, 128, 128, torch.bfloat16, "cuda")
for _ in range(3):
    kt.wy_dqkg(*a, dAqk=True, intra=True, scale=128 ** -0.5)
torch.cuda.synchronize()
