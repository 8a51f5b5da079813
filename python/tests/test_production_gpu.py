"""chunk_kda in the configuration people train with, forward + backward, against a float64 recurrence.

The configuration: q, k l2-normalised inside chunk_kda (use_qk_l2norm_in_kernel), the gate computed inside
from the raw gate with A_log and dt_bias (use_gate_in_kernel; the safe form lower_bound * sigmoid(...) with
safe_gate and lower_bound = -5, or -exp(A_log) * softplus(...)), beta a logit with the sigmoid inside
(use_beta_sigmoid_in_kernel, so fla hands bwd_intra beta in fp32; allow_neg_eigval doubles it), initial and
final state, packed documents.  Each case runs three times on the same inputs:

  - a float64 token-by-token recurrence of the whole function (l2norm, gate activation, beta sigmoid
    included; written here from the math, not fla's naive code, which runs in fp32), differentiated by
    autograd: the reference for every gradient (q, k, v, raw g, beta, A_log, dt_bias, h0);
  - fla alone;
  - fla with kdart.fla, twice.

Every gradient of the kdart run is within 1.5 times fla's own relative error + 1e-3 of the reference;
kdart.fla.stats() shows every bwd_intra, bwd_dhu, wy_dqkg and folded dg cumsum served, and fla's chunk_kda_bwd_dAv
too (fused into bwd_dhu and wy_dqkg at K 64 or 128 on wide grids, by kdart's own dAv kernel elsewhere), with no
fallback; a gradient
that fla's own two runs give bitwise-equal is bitwise-equal in kdart's two runs too (kdart's stages are
deterministic; fla's reductions are where they are).  No NaN with gates at the lower bound or raw gates
of +-20.  Skips without CUDA or fla.

fla autotunes every kernel at each new shape (minutes); run with KDART_TRITON_WARM=first
(tools/triton_warm/sitecustomize.py on PYTHONPATH), which makes each autotuner take its first config:
every config is one of fla's valid kernels, so the checks mean the same."""
import math
import os

import pytest

os.environ.setdefault("FLA_DISABLE_BACKEND_DISPATCH", "1")
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
pytest.importorskip("fla")
from fla.ops.kda import chunk_kda  # noqa: E402

import kdart.fla as kf  # noqa: E402

LOWER = -5.0
NAMES = ("dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dh0")


def l2norm64(x):
    """fla's l2norm: x / sqrt(sum x^2 + 1e-6) over the head dim."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def gate64(g, A_log, dt_bias, safe):
    """The per-step natural-log decay from the raw gate: lower_bound * sigmoid(exp(A_log) * (g + dt_bias))
    with the safe gate, else -exp(A_log) * softplus(g + dt_bias)."""
    HV, K = g.shape[-2:]
    x = g + dt_bias.view(HV, K)
    a = A_log.exp()[:, None]
    if safe:
        return LOWER * torch.sigmoid(a * x)
    return -a * torch.nn.functional.softplus(x)


def recurrence64(q, k, v, a, beta, h0, scale):
    """One sequence, float64: q, k [T, H, K] (normalised), v [T, HV, V], a [T, HV, K] (natural-log decay),
    beta [T, HV], h0 [HV, K, V] -> o [T, HV, V], final state [HV, K, V].  Per token: decay the state's
    rows, the delta-rule update with beta, the output read with q."""
    G = v.shape[1] // q.shape[1]
    q, k = q.repeat_interleave(G, 1) * scale, k.repeat_interleave(G, 1)
    S, out = h0, []
    for t in range(q.shape[0]):
        S = S * a[t].exp()[..., None]
        kt = k[t]
        S = S + (beta[t][:, None] * kt)[..., None] * (v[t] - torch.einsum("hk,hkv->hv", kt, S))[:, None, :]
        out.append(torch.einsum("hk,hkv->hv", q[t], S))
    return torch.stack(out), S


def reference(leaves, do, dht, cu, safe, neg, scale, svf):
    """Every gradient of the float64 recurrence (None where a leaf is absent)."""
    d64 = [x.detach().double().requires_grad_(True) for x in leaves]
    q, k, v, g, beta, A_log, dt_bias, h0 = d64
    qn, kn = l2norm64(q), l2norm64(k)
    a = gate64(g, A_log, dt_bias, safe)
    b = torch.sigmoid(beta) * (2.0 if neg else 1.0)
    h0k = h0.transpose(-1, -2) if svf else h0  # [N, HV, K, V]
    loss = 0
    B = q.shape[0]
    bounds = [(0, i, cu[i], cu[i + 1]) for i in range(len(cu) - 1)] if cu else \
        [(i, i, 0, q.shape[1]) for i in range(B)]
    dhtk = (dht.transpose(-1, -2) if svf else dht).double()
    for row, n, s, e in bounds:
        if e > s:
            o, ht = recurrence64(qn[row, s:e], kn[row, s:e], v[row, s:e], a[row, s:e], b[row, s:e], h0k[n], scale)
            loss = loss + (o * do[row, s:e].double()).sum()
        else:
            ht = h0k[n]
        loss = loss + (ht * dhtk[n]).sum()
    loss.backward()
    return [x.grad for x in d64]


def run_fla(leaves, do, dht, cu_t, safe, neg, scale, svf, norec):
    for x in leaves:
        x.grad = None
    q, k, v, g, beta, A_log, dt_bias, h0 = leaves
    o, ht = chunk_kda(q, k, v, g, beta, scale=scale, initial_state=h0, output_final_state=True,
                      use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias,
                      use_beta_sigmoid_in_kernel=True, allow_neg_eigval=neg, safe_gate=safe,
                      lower_bound=LOWER if safe else None, state_v_first=svf, cu_seqlens=cu_t,
                      disable_recompute=norec)
    ((o * do).sum() + (ht * dht).sum()).backward()
    return [x.grad.clone() for x in leaves]


def rel(x, ref):
    return (x.double() - ref).norm().item() / max(ref.norm().item(), 1e-30)


# name: io dtype, H, HV, K, V, cu_seqlens (None: fixed length B rows of T), B, T, safe gate, allow_neg_eigval,
# state_v_first, disable_recompute, raw-gate scale (20: raw gates of +-20)
CASES = {
    "packed-bf16": (torch.bfloat16, 4, 4, 128, 128, [0, 1, 63, 64, 200, 1000, 1001, 1500], 1, 1500, True, False,
                    False, False, 1.0),
    "packed-fp16-vfirst": (torch.float16, 4, 4, 128, 128, [0, 1, 63, 64, 200, 1000, 1001, 1500], 1, 1500, True,
                           False, True, False, 1.0),
    "fixed-gva-softplus-raw20": (torch.bfloat16, 2, 4, 64, 64, None, 2, 300, False, False, False, False, 20.0),
    "fixed-lower-bound-negeig": (torch.float16, 2, 2, 64, 128, None, 2, 256, True, True, False, False, 20.0),
    "packed-d100-vfirst-norec": (torch.bfloat16, 2, 2, 100, 100, [0, 1, 130, 700], 1, 700, True, False, True,
                                 True, 1.0),
    # a grid where bwd_dhu picks its V tile 64 (B * HV * V / 64 = 128 scans: one wave): dAv fused
    "fixed-wide": (torch.bfloat16, 16, 32, 128, 128, None, 2, 200, True, False, False, False, 1.0),
}


@pytest.mark.parametrize("whole", [False, True], ids=["stages", "whole"])
@pytest.mark.parametrize("name", list(CASES))
def test_production_flags(name, whole):
    io, H, HV, K, V, cu, B, T, safe, neg, svf, norec, graw = CASES[name]
    torch.manual_seed(1234 + sum(map(ord, name)))
    dev = "cuda"
    N = len(cu) - 1 if cu else B
    q = torch.randn(B, T, H, K, device=dev).to(io)
    k = torch.randn(B, T, H, K, device=dev).to(io)
    v = torch.randn(B, T, HV, V, device=dev).to(io)
    g = (torch.randn(B, T, HV, K, device=dev) * graw).to(io)
    if graw > 1:
        g = (torch.sign(g.float()) * graw).to(io)  # raw gates of exactly +-20: the bound and no decay at all
    beta = torch.randn(B, T, HV, device=dev).to(io)
    A_log = torch.log(torch.empty(HV, device=dev).uniform_(1, 16))
    dt_bias = torch.randn(HV * K, device=dev)
    S = (V, K) if svf else (K, V)
    h0 = torch.randn(N, HV, *S, device=dev)
    leaves = [x.requires_grad_(True) for x in (q, k, v, g, beta, A_log, dt_bias, h0)]
    do = torch.randn(B, T, HV, V, device=dev).to(io)
    dht = torch.randn(N, HV, *S, device=dev)
    cu_t = torch.tensor(cu, dtype=torch.long, device=dev) if cu else None
    scale = K ** -0.5

    ref = reference(leaves, do, dht, cu, safe, neg, scale, svf)
    fla1 = run_fla(leaves, do, dht, cu_t, safe, neg, scale, svf, norec)
    fla2 = run_fla(leaves, do, dht, cu_t, safe, neg, scale, svf, norec)
    kf.reset_stats()
    with kf.enabled(fwd_h=True, whole=whole):
        kd1 = run_fla(leaves, do, dht, cu_t, safe, neg, scale, svf, norec)
        kd2 = run_fla(leaves, do, dht, cu_t, safe, neg, scale, svf, norec)
        st = kf.stats()
    line = []
    for n, r, f1, f2, k1, k2 in zip(NAMES, ref, fla1, fla2, kd1, kd2):
        assert torch.isfinite(k1).all(), f"{name}: {n} has NaN/inf"
        ef, ek = rel(f1, r), rel(k1, r)
        line.append(f"{n} {ek:.2e}/{ef:.2e}")
        assert ek <= 1.5 * ef + 1e-3, f"{name}: {n} error {ek:.3e} > 1.5 x fla's {ef:.3e} + 1e-3"
        if torch.equal(f1, f2):
            assert torch.equal(k1, k2), f"{name}: {n} differs between two kdart runs (fla's two runs agree)"
    route = "whole" if whole else "stages"
    print(f"\n{name} ({route}): error vs float64 (kdart/fla): " + " ".join(line))
    if os.environ.get("KDART_ERR_LOG"):  # (pytest-xdist keeps workers' prints to itself)
        with open(os.environ["KDART_ERR_LOG"], "a") as f:
            f.write(f"{name} ({route}): error vs float64 (kdart/fla): " + " ".join(line) + "\n")
    # fla's chunk_kda_bwd_dAv fused into bwd_dhu and wy_dqkg where it can be (K 64 or 128, V a multiple of 64)
    # and pays (grids where bwd_dhu picks its V tile 64 anyway: "fixed-wide" here), else kdart's own dAv kernel
    rec = 0 if norec else 2  # the recompute, with the gate's cumsum in its launch (the gate is in chunk_kda)
    # fla's state scan: in both forwards, and in the backward's recompute where it runs
    if whole:  # ChunkKDAFunction.backward is kdart's: no fla stage is called at all
        assert st["served"] == {"bwd_intra": 0, "bwd_dhu": 0, "dg_cumsum_folded": 0, "wy_dqkg": 0, "bwd_dAv": 0,
                                "recompute_w_u": 0, "gate_cumsum": 0, "fwd_h": 2, "whole_backward": 2}, st
    else:
        assert st["served"] == {"bwd_intra": 2, "bwd_dhu": 2, "dg_cumsum_folded": 2, "wy_dqkg": 2, "bwd_dAv": 2,
                                "recompute_w_u": rec, "gate_cumsum": rec, "fwd_h": 2 + rec,
                                "whole_backward": 0}, st
    assert st["fallbacks"] == {}, st
    assert not math.isnan(sum(rel(k1, r) for k1, r in zip(kd1, ref)))
