"""lab/experiments/intra-diag-mma/precision.py: what precision the diagonal 16 x 16 blocks of bwd_intra need if
they move from SIMT (one exp2 per (r, s, d)) to tensor-core products with the gate folded through a pivot, as
fla 0.6.0 does under safe_gate (its dots use bf16x3).  CPU only (torch, float64 reference).

Aq[r, d] = sum_{s <= r} dA[r, s] k[s, d] exp2(g[r, d] - g[s, d]) over one 16-row block, the gate g the
log2 cumsum of per-step gates in [lb / ln 2, 0] (safe gate, lower bound lb), pivot row n = 8 (the middle):
  Aq[r, d] = exp2(g[r, d] - g[n, d]) * sum_s dA[r, s] (k[s, d] exp2(g[n, d] - g[s, d]))
Modes: direct (fp32 SIMT, what kdart does now), tf32 (one product, operands rounded to tf32), 3xtf32 (each
operand split in a tf32 big part and a tf32 remainder: three products), bf16x3 (fla's).  Prints the
relative error against float64 (max |err| / max |ref|) per mode and lower bound.  Usage: precision.py"""
import math

import torch

torch.manual_seed(0)


def rnd_tf32(x):
    """round fp32 to tf32 (10 mantissa bits, nearest even)"""
    i = x.float().view(torch.int32)
    i = (i + 0xFFF + ((i >> 13) & 1)) & ~0x1FFF
    return i.view(torch.float32)


def rnd_bf16(x):
    return x.float().to(torch.bfloat16).float()


def split(x, rnd):
    hi = rnd(x)
    return hi, rnd(x.float() - hi)


def mm(a, b, mode):
    """a [16, 16] @ b [16, D] with fp32 accumulation, operands per mode"""
    a, b = a.float(), b.float()
    if mode == "tf32":
        return rnd_tf32(a) @ rnd_tf32(b)
    if mode in ("3xtf32", "bf16x3"):
        r = rnd_tf32 if mode == "3xtf32" else rnd_bf16
        ah, al = split(a, r)
        bh, bl = split(b, r)
        return ah @ bl + al @ bh + ah @ bh
    raise ValueError(mode)


def block(lb, D=64):
    step = lb / math.log(2) * torch.rand(16, D, dtype=torch.float64)        # per-step log2 gates in [lb/ln2, 0]
    g = torch.cumsum(step, 0) + lb / math.log(2) * 16 * torch.rand(1, D, dtype=torch.float64)  # block not at row 0
    g = g.float().double()                                                   # the gate as fp32 holds it
    k = rnd_bf16(torch.randn(16, D)).double()
    dA = torch.tril(torch.randn(16, 16, dtype=torch.float64)).float().double()
    E = torch.exp2(g[:, None, :] - g[None, :, :])                            # [r, s, d]
    mask = torch.tril(torch.ones(16, 16, dtype=torch.bool))[:, :, None]
    ref = (dA[:, :, None] * k[None, :, :] * torch.where(mask, E, 0)).sum(1)
    # direct fp32 SIMT: one exp2 per pair, fp32 products and sums
    gf, kf, dAf = g.float(), k.float(), dA.float()
    Ef = torch.exp2(gf[:, None, :] - gf[None, :, :])
    direct = (dAf[:, :, None] * kf[None, :, :] * torch.where(mask, Ef, 0)).sum(1).double()
    out = {"direct": direct}
    n = 8
    for mode in ("tf32", "3xtf32", "bf16x3"):
        kb = kf * torch.exp2(gf[n:n + 1] - gf)          # k[s] exp2(g_n - g_s): |exponent| <= 8 steps
        out[mode] = (mm(dAf, kb, mode) * torch.exp2(gf - gf[n:n + 1])).double()
    return ref, out


for lb in (-1.0, -5.0, -10.0):
    worst = {}
    for _ in range(200):
        ref, out = block(lb)
        den = ref.abs().max().item()
        for m, x in out.items():
            worst[m] = max(worst.get(m, 0.0), (x - ref).abs().max().item() / den)
    print(f"lower bound {lb:5.1f}: " + ", ".join(f"{m} {e:.2e}" for m, e in worst.items()))
