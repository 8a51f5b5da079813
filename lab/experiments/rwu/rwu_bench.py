"""Lab: kdart's recompute_wu against fla's kda_gate_chunk_cumsum + recompute_w_u_fwd in one process
(the production gate: safe, lower_bound -5, raw gate bf16, beta fp32; and the plain recompute with the
cumsummed gate), with the agreement of every output and the copy-floor share.  Not product."""
import os
import sys
import torch

from fla.ops.kda.gate import kda_gate_chunk_cumsum
from fla.ops.kda.wy_fast import recompute_w_u_fwd
import kdart.torch as kt

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "calls"))
from labtime import timed  # noqa: E402

RCP_LN2 = 1.4426950216


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def row(name, B, T, H, HV, K, V):
    dev, bf = "cuda", torch.bfloat16
    torch.manual_seed(0)
    q = torch.nn.functional.normalize(torch.randn(B, T, H, K, device=dev), dim=-1).to(bf)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, device=dev), dim=-1).to(bf)
    v = torch.randn(B, T, HV, V, device=dev).to(bf)
    beta = torch.rand(B, T, HV, device=dev)
    A = (torch.randn(B, T, HV, 64, device=dev) * 0.1).to(bf)
    g_raw = torch.randn(B, T, HV, K, device=dev).to(bf)
    A_log = torch.log(torch.empty(HV, device=dev).uniform_(1, 16))
    dt_bias = torch.randn(HV * K, device=dev)

    def fla_gate():
        return kda_gate_chunk_cumsum(g=g_raw, A_log=A_log, dt_bias=dt_bias, scale=RCP_LN2, chunk_size=64,
                                     lower_bound=-5.0)

    def fla_pair():
        gk = fla_gate()
        return (gk,) + tuple(recompute_w_u_fwd(q=q, k=k, v=v, beta=beta, A=A, gk=gk))

    def kd_pair():
        return kt.gate_recompute_w_u(g_raw, A_log, k, v, beta, A, q=q, dt_bias=dt_bias, lower_bound=-5.0)

    gk = fla_gate()

    def fla_plain():
        return recompute_w_u_fwd(q=q, k=k, v=v, beta=beta, A=A, gk=gk)

    def kd_plain():
        return kt.recompute_w_u(k, v, beta, A, gk, q=q)

    f, d = fla_pair(), kd_pair()
    agree = " ".join(f"{n} {rel(x, y):.1e}" for n, x, y in zip(("g", "w", "u", "qg", "kg"), d, f))
    fp, dp = fla_plain(), kd_plain()
    agree_p = " ".join(f"{n} {rel(x, y):.1e}" for n, x, y in zip(("w", "u", "qg", "kg"), dp, fp))
    nk, nv, nqk = B * T * HV * K, B * T * HV * V, B * T * H * K
    io = 2
    plain_bytes = 2 * nqk * io + nv * io + B * T * HV * 4 + B * T * HV * 64 * io + nk * 4 + 3 * nk * io + nv * io
    pair_bytes = plain_bytes - nk * 4 + nk * io + nk * 4  # the raw gate read instead of gk, gk written
    tf_g, tf_r, tk = timed(fla_gate), timed(fla_plain), timed(kd_pair)
    tfp, tkp = timed(fla_plain), timed(kd_plain)
    bw = 4.25e9  # bytes per ms
    print(f"| {name} gate+recompute | fla {tf_g:.3f} + {tf_r:.3f} = {tf_g + tf_r:.3f} | kdart {tk:.3f} | "
          f"{(tf_g + tf_r) / tk:.2f}x | floor {pair_bytes / bw:.3f} ({pair_bytes / bw / tk:.0%}) | {agree} |")
    print(f"| {name} recompute | fla {tfp:.3f} | kdart {tkp:.3f} | {tfp / tkp:.2f}x | floor {plain_bytes / bw:.3f} "
          f"({plain_bytes / bw / tkp:.0%}) | {agree_p} |")
    sys.stdout.flush()


if __name__ == "__main__":
    rows = {"b2_t8192_h32": (2, 8192, 32, 32, 128, 128), "prod8192": (16, 8192, 16, 16, 128, 256),
            "k256": (2, 8192, 16, 16, 256, 256), "d100": (2, 8192, 32, 32, 100, 100)}
    for n in (sys.argv[1].split(",") if len(sys.argv) > 1 else rows):
        row(n, *rows[n])
