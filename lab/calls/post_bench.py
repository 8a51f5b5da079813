"""bwd_post alone at B2 T8192 H32 K128 (or the rows packed, prod8192) in the production configuration (l2norm, safe gate with dt_bias, bf16
raw gate, beta sigmoid) against fla's epilogue kernels on the same tensors (l2norm_bwd of q and k,
kda_gate_bwd with its two torch reductions, fused_beta_sigmoid_bwd): CUDA events, median of 20, and the
share of the bytes-once floor at 4.25 TB/s."""
import os
import sys

import torch

import kdart.torch as kt
from labtime import timed as ms


# usage: post_bench.py [b2 | packed | prod8192]: B2 T8192 H32, 32768 tokens (one row of the batch) at H32, or
# B16 T8192 H16
B, T, H, K = {"packed": (1, 32768, 32, 128), "prod8192": (16, 8192, 16, 128)}.get((sys.argv[1:] or ["b2"])[0],
                                                                                (2, 8192, 32, 128))
dev, bf = "cuda", torch.bfloat16
dq, dk, dg = (torch.randn(B, T, H, K, device=dev) for _ in range(3))
db = torch.randn(B, T, H, device=dev)
q, k = (torch.nn.functional.normalize(torch.randn(B, T, H, K, device=dev), dim=-1).to(bf) for _ in range(2))
qr, kr = (torch.rand(B, T, H, device=dev) + 0.5 for _ in range(2))
g = torch.randn(B, T, H, K, device=dev).to(bf)
A_log, dt_bias = torch.randn(H, device=dev), torch.randn(H * K, device=dev)
beta = torch.randn(B, T, H, device=dev).to(bf)
kd = ms(lambda: kt.bwd_post(dq, dk, dg, db, q, k, qr, kr, g, A_log, dt_bias, beta, -5.0))
nbytes = 2 * (dq.numel() * 4 + q.numel() * 2 * 2) + dg.numel() * (4 + 2 + 2) + db.numel() * (4 + 2 + 2)
print(f"bwd_post B{B} T{T} H{H} K{K}: {kd:.3f} ms, {nbytes / kd / 1e9:.2f} TB/s, floor {nbytes / 4.25e9:.3f} ms")
try:
    if os.environ.get("POST_NO_FLA"):
        raise ImportError("POST_NO_FLA set")
    from fla.modules.norm.l2norm import l2norm_bwd
    from fla.ops.common.gate import fused_beta_sigmoid_bwd
    from fla.ops.kda.gate import kda_gate_bwd

    def fla():
        l2norm_bwd(q, qr, dq)
        l2norm_bwd(k, kr, dk)
        kda_gate_bwd(g, A_log, dt_bias, dg, lower_bound=-5.0)
        fused_beta_sigmoid_bwd(beta, db)
    fl = ms(fla)
    print(f"fla l2norm_bwd x2 + kda_gate_bwd + sigmoid bwd: {fl:.3f} ms; kdart / fla = {fl / kd:.2f}x")
except Exception as e:  # noqa: BLE001
    print("fla:", type(e).__name__, e)
