"""Float64 torch references of the two stages (shared/spec/kda_backward.md sections 5.1 and 5.2), vectorized
over batch, heads and chunks; small shapes only (bwd_intra builds [B, NT, HV, 64, 64, K] tensors)."""
import torch
import torch.nn.functional as F

CHUNK = 64
RCP_LN2 = 1.4426950216


def chunks(x):
    """[B, T, Hn, X] -> [B, NT, Hn, 64, X]."""
    B, T = x.shape[:2]
    return x.reshape(B, T // CHUNK, CHUNK, *x.shape[2:]).movedim(2, 3)


def unchunk(x):
    B, NT, Hn, C = x.shape[:4]
    return x.movedim(3, 2).reshape(B, NT * C, Hn, *x.shape[4:])


def bwd_intra_ref(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg=False):
    """Returns (dq, dk, db, dg) in float64; dq, dk at HV heads (fla's order)."""
    G = g.shape[2] // q.shape[2]
    d = lambda t: t.double()  # noqa: E731
    q, k = (chunks(d(t).repeat_interleave(G, dim=2)) for t in (q, k))   # [B,NT,HV,64,K]
    g = chunks(d(g))
    beta = chunks(d(beta)[..., None])[..., 0]                            # [B,NT,HV,64]
    dAqk, dAkk = chunks(d(dAqk)), chunks(d(dAkk))                        # [B,NT,HV,r,s]
    ar = torch.arange(CHUNK, device=q.device)
    lower = (ar[:, None] >= ar[None, :])                                 # s <= r
    diff = g[..., :, None, :] - g[..., None, :, :]                       # [.., r, s, K]
    E = torch.exp2(diff.masked_fill(~lower[..., None], float("-inf")))
    Aq = torch.einsum("...rs,...sd,...rsd->...rd", dAqk, k, E)
    Ak = torch.einsum("...rs,...sd,...rsd->...rd", dAkk, k, E)
    Ct = torch.einsum("...rs,...rd,...rsd->...sd", dAqk, q, E) + \
        torch.einsum("...rs,...r,...rd,...rsd->...sd", dAkk, beta, k, E)
    b = beta[..., None]
    oq = chunks(d(dq)) + Aq
    ok = chunks(d(dk)) + b * Ak + Ct
    ob = chunks(d(db)[..., None])[..., 0] + (k * Ak).sum(-1)
    og = chunks(d(dg)) + q * Aq + (b * Ak - Ct) * k
    if fold_dg:
        og = og.flip(-2).cumsum(-2).flip(-2)
    return unchunk(oq), unchunk(ok), unchunk(ob[..., None])[..., 0], unchunk(og)


def bwd_dhu_ref(qg, kg, w, do, dv, gk, h0=None, dht=None, scale=1.0):
    """Returns (dh, dh0, dv2) in float64 (dh0 None without h0)."""
    d = lambda t: t.double()  # noqa: E731
    qg, kg, w, do, dv, gk = map(d, (qg, kg, w, do, dv, gk))
    B, T, HV, K = qg.shape
    V, NT = do.shape[3], T // CHUNK
    dH = d(dht).clone() if dht is not None else qg.new_zeros(B, HV, K, V)
    dh = qg.new_empty(B, NT, HV, K, V)
    dv2 = torch.empty_like(dv)
    for c in range(NT - 1, -1, -1):
        s = slice(c * CHUNK, (c + 1) * CHUNK)
        dh[:, c] = dH
        dv2[:, s] = dv[:, s] + torch.einsum("bthk,bhkv->bthv", kg[:, s], dH)
        decay = torch.exp2(gk[:, c * CHUNK + CHUNK - 1])[..., None]     # [B,HV,K,1]
        dH = decay * dH + scale * torch.einsum("bthk,bthv->bhkv", qg[:, s], do[:, s]) \
            - torch.einsum("bthk,bthv->bhkv", w[:, s], dv2[:, s])
    return dh, (dH if h0 is not None else None), dv2


def rel_rms(a, ref):
    a, ref = a.double(), ref.double()
    den = ref.square().mean().sqrt().item()
    return (a - ref).square().mean().sqrt().item() / (den if den > 0 else 1.0)


def gate(B, T, HV, K, device):
    """g: chunk-local inclusive cumsum (log2 units) of logsigmoid(1.5 randn + 2), fp32."""
    a = F.logsigmoid(torch.randn(B, T // CHUNK, CHUNK, HV, K, device=device) * 1.5 + 2.0)
    return (a.cumsum(2) * RCP_LN2).reshape(B, T, HV, K).contiguous()


def intra_inputs(B, T, H, HV, K, io, device):
    q = torch.randn(B, T, H, K, device=device).to(io)
    k = F.normalize(torch.randn(B, T, H, K, device=device), dim=-1).to(io)
    g = gate(B, T, HV, K, device)
    beta = torch.rand(B, T, HV, device=device).to(io)
    ar = torch.arange(CHUNK, device=device)
    lower = (ar[:, None] >= ar[None, :]).float()
    strict = (ar[:, None] > ar[None, :]).float()
    dAqk = (torch.randn(B, T // CHUNK, CHUNK, HV, CHUNK, device=device) * 0.1) * lower[:, None, :]
    dAkk = (torch.randn(B, T // CHUNK, CHUNK, HV, CHUNK, device=device) * 0.1) * strict[:, None, :]
    dAqk, dAkk = (t.reshape(B, T, HV, CHUNK).contiguous() for t in (dAqk, dAkk))
    dq, dk, dg = (torch.randn(B, T, HV, K, device=device) for _ in range(3))
    db = torch.randn(B, T, HV, device=device)
    return [q, k, g, beta, dAqk, dAkk, dq, dk, db, dg]


def dhu_inputs(B, T, HV, K, V, io, device):
    r = lambda *s: (torch.randn(*s, device=device) * 0.1).to(io)  # noqa: E731
    qg, kg, w = r(B, T, HV, K), r(B, T, HV, K), r(B, T, HV, K)
    do, dv = torch.randn(B, T, HV, V, device=device).to(io), torch.randn(B, T, HV, V, device=device).to(io)
    gk = gate(B, T, HV, K, device)
    h0 = torch.randn(B, HV, K, V, device=device)
    dht = torch.randn(B, HV, K, V, device=device)
    return [qg, kg, w, do, dv, gk], h0, dht
