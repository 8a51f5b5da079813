"""Float64 torch references of the stages (docs/kernels.md), vectorized
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


# ------------------------------------------------------------- variable length
# Sequence n is tokens [cu[n], cu[n+1]) of one packed row (B = 1); its last chunk may be partial.  The
# references below run the fixed-length ones per sequence, padded to whole chunks so that the padding adds
# nothing: zero rows of every operand, and the gate's last valid row repeated (dhu's decay of a partial
# chunk is g at its last valid row; bwd_intra's exp2 differences stay finite).

def _pad(x, n, edge=False):
    """x [1, L, ...] -> [1, n, ...]: zero rows, or (edge) copies of the last row."""
    L = x.shape[1]
    if n == L:
        return x
    fill = x[:, L - 1:L].expand(1, n - L, *x.shape[2:]) if edge else x.new_zeros(1, n - L, *x.shape[2:])
    return torch.cat([x, fill], 1)


def seq_bounds(cu):
    cu = [int(v) for v in cu]
    return [(cu[n], cu[n + 1]) for n in range(len(cu) - 1)]


def chunk_offsets(cu):
    """fla's prepare_chunk_offsets: [N+1], exclusive prefix sum of ceil(T_n / 64)."""
    out = [0]
    for a, b in seq_bounds(cu):
        out.append(out[-1] + (b - a + CHUNK - 1) // CHUNK)
    return out


def chunk_indices(cu):
    """fla's prepare_chunk_indices: [NT, 2] rows (n, c), the dtype of cu."""
    rows = [(n, c) for n, (a, b) in enumerate(seq_bounds(cu)) for c in range((b - a + CHUNK - 1) // CHUNK)]
    return torch.tensor(rows, dtype=cu.dtype, device=cu.device).reshape(-1, 2)


def _padded_seq(ts, a, b, edge_at=()):
    P = -(-(b - a) // CHUNK) * CHUNK
    return [None if t is None else _pad(t[:, a:b], P, i in edge_at) for i, t in enumerate(ts)]


def bwd_intra_ref_varlen(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, cu, fold_dg=False):
    """bwd_intra_ref per sequence of cu; tokens past cu[N] come back as zeros."""
    outs = None
    for a, b in seq_bounds(cu):
        if b == a:
            continue
        r = bwd_intra_ref(*_padded_seq((q, k, g, beta, dAqk, dAkk, dq, dk, db, dg), a, b, edge_at=(2,)),
                          fold_dg=fold_dg)
        if outs is None:
            outs = [x.new_zeros(1, q.shape[1], *x.shape[2:]) for x in r]
        for o, x in zip(outs, r):
            o[:, a:b] = x[:, :b - a]
    return outs


def bwd_dhu_ref_varlen(qg, kg, w, do, dv, gk, cu, h0=None, dht=None, scale=1.0):
    """bwd_dhu_ref per sequence: dh [1, NT, HV, K, V] with chunk (n, c) at row chunk_offsets[n] + c (NT the
    total), dh0 [N, HV, K, V] (None without h0; dht of a zero-length sequence), dv2 zero past cu[N]."""
    co = chunk_offsets(cu)
    HV, K, V = qg.shape[2], qg.shape[3], do.shape[3]
    dh = torch.zeros(1, co[-1], HV, K, V, dtype=torch.float64, device=qg.device)
    dv2 = torch.zeros(do.shape, dtype=torch.float64, device=qg.device)
    dh0 = torch.zeros(len(co) - 1, HV, K, V, dtype=torch.float64, device=qg.device)
    for n, (a, b) in enumerate(seq_bounds(cu)):
        d_n = None if dht is None else dht[n:n + 1]
        if b == a:
            if d_n is not None:
                dh0[n] = d_n[0].double()
            continue
        rdh, rdh0, rdv2 = bwd_dhu_ref(*_padded_seq((qg, kg, w, do, dv, gk), a, b, edge_at=(5,)),
                                      h0=True, dht=d_n, scale=scale)
        dh[0, co[n]:co[n + 1]] = rdh[0]
        dv2[:, a:b] = rdv2[:, :b - a]
        dh0[n] = rdh0[0]
    return dh, (dh0 if h0 is not None else None), dv2


def varlen_gate(cu, T, HV, K, device):
    """g [1, T, HV, K]: the chunk-local cumsum restarting at every chunk of every sequence; zero past cu[N]."""
    a = F.logsigmoid(torch.randn(1, T, HV, K, device=device) * 1.5 + 2.0)
    g = torch.zeros_like(a)
    for s, e in seq_bounds(cu):
        for c0 in range(s, e, CHUNK):
            c1 = min(c0 + CHUNK, e)
            g[:, c0:c1] = a[:, c0:c1].cumsum(1) * RCP_LN2
    return g.contiguous()


def varlen_intra_inputs(cu, T, H, HV, K, io, device):
    """intra_inputs on one packed row of T tokens, with dA's triangles and g's cumsum per sequence chunk."""
    a = intra_inputs(1, -(-T // CHUNK) * CHUNK, H, HV, K, io, device)
    a = [t[:, :T].contiguous() for t in a]
    a[2] = varlen_gate(cu, T, HV, K, device)
    r = torch.zeros(T, dtype=torch.long, device=device)  # each token's row within its chunk
    for s, e in seq_bounds(cu):
        r[s:e] = torch.arange(e - s, device=device) % CHUNK
    col = torch.arange(CHUNK, device=device)
    a[4] = torch.randn_like(a[4]) * 0.1 * (col[None, :] <= r[:, None]).float()[None, :, None, :]
    a[5] = torch.randn_like(a[5]) * 0.1 * (col[None, :] < r[:, None]).float()[None, :, None, :]
    return a


def varlen_dhu_inputs(cu, T, HV, K, V, io, device):
    a, _, _ = dhu_inputs(1, -(-T // CHUNK) * CHUNK, HV, K, V, io, device)
    a = [t[:, :T].contiguous() for t in a]
    a[5] = varlen_gate(cu, T, HV, K, device)
    N = len(cu) - 1
    return a, torch.randn(N, HV, K, V, device=device), torch.randn(N, HV, K, V, device=device)


# ------------------------------------------------------------------- wy_dqkg

def wy_dqkg_ref(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale, state_v_first=False, last_rows=CHUNK):
    """fla's chunk_kda_bwd_wy_dqkg_fused in float64, exact (no intermediate roundings; docs/kernels.md), T a
    multiple of 64: (dq, dk, dv2, db, dg, dA), dq and dk at HV heads.  h, dh [B, NT, HV, K, V] ([.., V, K]
    with state_v_first).  A partial chunk is a padded one: zero rows, g's last valid row repeated; last_rows:
    the valid rows of the last chunk (the per-column term of dg lands on its last valid row)."""
    G = v.shape[2] // q.shape[2]
    d = lambda t: t.double()  # noqa: E731
    q, k = (chunks(d(t).repeat_interleave(G, dim=2)) for t in (q, k))     # [B,NT,HV,64,K]
    v, vn, do, dv = (chunks(d(t)) for t in (v, v_new, do, dv))             # [B,NT,HV,64,V]
    g = chunks(d(g))
    beta = chunks(d(beta)[..., None])[..., 0]                              # [B,NT,HV,64]
    A = chunks(d(A))                                                       # [B,NT,HV,s,t]: row s = token
    h, dh = d(h), d(dh)
    if state_v_first:
        h, dh = h.transpose(-1, -2), dh.transpose(-1, -2)                  # [B,NT,HV,K,V]
    ge, gn = torch.exp2(g), g[..., -1:, :]
    Sq = torch.einsum("bnhtv,bnhkv->bnhtk", do, h)
    Sk = torch.einsum("bnhtv,bnhkv->bnhtk", vn, dh)
    Sw = torch.einsum("bnhtv,bnhkv->bnhtk", dv, h)
    dq = Sq * ge * scale
    dk0 = Sk * torch.exp2(gn - g)
    kg, dw = k * ge, -Sw
    dvb = torch.einsum("bnhst,bnhsv->bnhtv", A, dv)
    dv2 = dvb * beta[..., None]
    dkgb = torch.einsum("bnhst,bnhsk->bnhtk", A, dw)
    db = (dvb * v).sum(-1) + (dkgb * kg).sum(-1)
    dgk = torch.exp2(gn[..., 0, :]) * (h * dh).sum(-1) + (k * dk0).sum(-2)
    dk = dk0 + dkgb * ge * beta[..., None]
    dg = q * dq - k * dk0 + kg * dkgb * beta[..., None]
    dg[:, :-1, :, -1, :] += dgk[:, :-1]
    dg[:, -1, :, last_rows - 1, :] += dgk[:, -1]
    ar = torch.arange(CHUNK, device=q.device)
    strict = (ar[:, None] > ar[None, :]).double()
    dAp = (torch.einsum("bnhiv,bnhjv->bnhij", dv, v) + torch.einsum("bnhik,bnhjk->bnhij", dw, kg)) * strict
    X = dAp * beta[..., None, :]
    Y = torch.einsum("bnhij,bnhuj->bnhiu", X, A)
    dA = -torch.einsum("bnhrt,bnhru->bnhtu", A, Y) * strict
    return tuple(unchunk(x) for x in (dq, dk, dv2)) + (unchunk(db[..., None])[..., 0],) + \
        tuple(unchunk(x) for x in (dg, dA))


def wy_dqkg_ref_varlen(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale, cu, state_v_first=False):
    """wy_dqkg_ref per sequence of cu (h, dh [1, NT, ..] with chunk (n, c) at row chunk_offsets[n] + c);
    tokens past cu[N] come back as zeros."""
    co = chunk_offsets(cu)
    outs = None
    for n, (a, b) in enumerate(seq_bounds(cu)):
        if b == a:
            continue
        ts = _padded_seq((q, k, v, v_new, g, beta, A, do, dv), a, b, edge_at=(4,))
        r = wy_dqkg_ref(*ts[:7], h[:, co[n]:co[n + 1]], ts[7], dh[:, co[n]:co[n + 1]], ts[8], scale,
                        state_v_first, (b - a - 1) % CHUNK + 1)
        if outs is None:
            outs = [x.new_zeros(1, q.shape[1], *x.shape[2:]) for x in r]
        for o, x in zip(outs, r):
            o[:, a:b] = x[:, :b - a]
    return outs


def wy_inputs(B, T, H, HV, K, V, io, device, beta_f32=True, state_v_first=False, cu=None):
    """wy_dqkg's inputs as chunk_kda's backward hands them over: q, k, v, v_new, g, beta, A, h, do, dh, dv
    (A unit lower triangular per chunk of each sequence; h, dh one row per chunk)."""
    if cu is None:
        g = gate(B, T, HV, K, device)
        pos = (torch.arange(T, device=device) % CHUNK)
        NT = B * (-(-T // CHUNK))
        Bh = B
    else:
        g = varlen_gate(cu, T, HV, K, device)
        pos = torch.zeros(T, dtype=torch.long, device=device)
        for s, e in seq_bounds(cu):
            pos[s:e] = torch.arange(e - s, device=device) % CHUNK
        NT, Bh = chunk_offsets(cu)[-1], 1
    q = F.normalize(torch.randn(B, T, H, K, device=device), dim=-1).to(io)
    k = F.normalize(torch.randn(B, T, H, K, device=device), dim=-1).to(io)
    v, v_new, do, dv = (torch.randn(B, T, HV, V, device=device).to(io) for _ in range(4))
    beta = torch.sigmoid(torch.randn(B, T, HV, device=device))
    beta = beta if beta_f32 else beta.to(io)
    col = torch.arange(CHUNK, device=device)
    A = torch.randn(B, T, HV, CHUNK, device=device) * 0.2 * (col[None, :] < pos[:, None]).float()[None, :, None, :]
    A = (A + (col[None, :] == pos[:, None]).float()[None, :, None, :]).to(io)
    S = (V, K) if state_v_first else (K, V)
    h = (torch.randn(Bh, NT // Bh, HV, *S, device=device) * 0.5).to(io)
    dh = (torch.randn(Bh, NT // Bh, HV, *S, device=device) * 0.5).to(io)
    return [q, k, v, v_new, g, beta, A, h, do, dh, dv]


def whole_inputs(B, T, H, HV, K, V, N, io, device):
    """What chunk_kda's forward saves in the production configuration, drawn at random (not a forward's: Aqk,
    Akk are noise), with do and dht: the keys of kdart_chunk_bwd_args (q, k, v, g, beta, Aqk, Akk, d_o, dht,
    h0, q_rstd, k_rstd, beta_raw, A_log, dt_bias; dt_bias flat [HV K]); N: the initial states (sequences)."""
    q = F.normalize(torch.randn(B, T, H, K, device=device), dim=-1).to(io)
    k = F.normalize(torch.randn(B, T, H, K, device=device), dim=-1).to(io)
    qr, kr = torch.rand(B, T, H, device=device) + 0.5, torch.rand(B, T, H, device=device) + 0.5
    v = torch.randn(B, T, HV, V, device=device).to(io)
    g = torch.randn(B, T, HV, K, device=device).to(io)
    beta_raw = torch.randn(B, T, HV, device=device).to(io)
    beta = torch.sigmoid(beta_raw.float())
    A_log = torch.log(torch.empty(HV, device=device).uniform_(1, 16))
    dt_bias = torch.randn(HV * K, device=device)
    h0 = torch.randn(N, HV, K, V, device=device)
    Aqk = (torch.randn(B, T, HV, 64, device=device) * 0.1).to(io)
    Akk = (torch.randn(B, T, HV, 64, device=device) * 0.1).to(io)
    do, dht = torch.randn_like(v), torch.randn(N, HV, K, V, device=device)
    return dict(q=q, k=k, v=v, g=g, beta=beta, Aqk=Aqk, Akk=Akk, d_o=do, dht=dht, h0=h0, q_rstd=qr, k_rstd=kr,
                beta_raw=beta_raw, A_log=A_log, dt_bias=dt_bias)


# ------------------------------------------------------------------- chunk_kda_bwd_dAv

def _chunk_spans(B, T, cu=None):
    """(row, start, end) of every chunk: of each row at fixed length, of each sequence of cu (B = 1)."""
    if cu is None:
        return [(b, c, min(c + CHUNK, T)) for b in range(B) for c in range(0, T, CHUNK)]
    return [(0, c, min(c + CHUNK, e)) for s, e in seq_bounds(cu) for c in range(s, e, CHUNK)]


def dav_ref(do, v_new, Aqk, scale, cu=None):
    """fla's chunk_kda_bwd_dAv in float64 from the given inputs, unrounded: (dA [B,T,HV,64], dv [B,T,HV,V]).
    Within each chunk (t, s its rows): dA[t, s] = scale * do[t] . v_new[s] for s <= t, zero above the diagonal
    (and past the chunk's rows); dv[s] = sum over t >= s of Aqk[t, s] do[t] (Aqk's lower triangle, diagonal
    included, whatever lies above it).  Chunks per row, or per sequence of cu; tokens past cu[N] are zero."""
    B, T, HV, V = do.shape
    do, vn, A = do.double(), v_new.double(), Aqk.double()
    dA = do.new_zeros(B, T, HV, CHUNK)
    dv = torch.zeros_like(do)
    for b, s, e in _chunk_spans(B, T, cu):
        n = e - s
        lower = torch.tril(torch.ones(n, n, dtype=torch.float64, device=do.device))  # [t, s]: s <= t
        dA[b, s:e, :, :n] = scale * torch.einsum("thv,shv->ths", do[b, s:e], vn[b, s:e]) * lower[:, None, :]
        dv[b, s:e] = torch.einsum("ths,thv->shv", A[b, s:e, :, :n] * lower[:, None, :], do[b, s:e])
    return dA, dv


def aqk_input(B, T, HV, io, device, cu=None, above=100.0):
    """chunk_kda's Aqk [B,T,HV,64] (io dtype): random on and below each chunk's diagonal, and garbage of size
    `above` above it (and past a partial chunk's rows), which fla's kernel and kdart's never read."""
    A = torch.randn(B, T, HV, CHUNK, device=device) * above
    for b, s, e in _chunk_spans(B, T, cu):
        n = e - s
        lower = torch.tril(torch.ones(n, CHUNK, device=device))
        A[b, s:e] = torch.where(lower[:, None, :] > 0, torch.randn(n, HV, CHUNK, device=device) * 0.2, A[b, s:e])
    return A.to(io)
