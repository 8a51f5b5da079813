"""kdart's whole backward on the GPU: bwd_post against a float64 reference, and kdart.torch.chunk_kda_bwd
against fla's chunk_kda_bwd and fla's epilogue (l2norm_bwd, kda_gate_bwd, the beta-sigmoid backward) on the
same saved tensors.

bwd_post: fresh random inputs (raw gates of both signs and magnitudes up to 20, GVA, head dims with and
without a tail), outputs poisoned by the allocator's previous contents (every run allocates afresh after a
NaN-filled block is freed), every output against float64 math written here from the definitions; two runs
bitwise equal (the A_log and dt_bias reductions are a fixed order).  The whole backward: every gradient of
kdart.torch.chunk_kda_bwd within fla's own distance of the float64 recurrence is the production test's job
(test_production_gpu.py, route "whole"); here its gradients are compared with fla's pipeline on identical
saved tensors, in both recompute modes.  Skips without CUDA (and the second part without fla)."""
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import kdart.torch as kt  # noqa: E402
from kda_ref import chunk_indices, whole_inputs  # noqa: E402


def _same(name, got, want):
    """The C call's gradient against the stages' one: bit for bit, but where the C call runs the last step
    inside wy_dqkg's launch (native K tiles): dA_log and ddt_bias, summed there from a partial row per chunk
    and in bwd_post from a partial row per block of tokens (both fixed orders), within 1e-5 of each other;
    dq and dk (HV == H), whose l2norm row sums add the 64-column passes in turn, within 1e-4 (a rounding to
    the io dtype now and then on the other side of its boundary)."""
    got, want = torch.nan_to_num(got.view(want.shape), nan=7.0), torch.nan_to_num(want, nan=7.0)
    tol = {"dA_log": 1e-5, "ddt_bias": 1e-5, "dq": 1e-4, "dk": 1e-4}.get(name)
    if tol is not None:
        err = (got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30)
        assert err <= tol, f"{name}: rel RMS {err:.3e}"
    else:
        assert torch.equal(got, want), name


def _poison():
    """Leaves NaN in the caching allocator's free blocks, so that an output the kernel fails to write shows."""
    x = torch.full((64 << 20,), float("nan"), device="cuda")
    del x


def _post64(dq, dk, dg, db, q, k, q_rstd, k_rstd, g, A_log, dt_bias, beta, lower_bound, scale, H):
    """bwd_post's definition in float64."""
    d = lambda x: None if x is None else x.double()  # noqa: E731
    dq, dk, dg, db = d(dq), d(dk), d(dg), d(db)
    B, T, HV, K = dq.shape
    G = HV // H
    out = []
    for dx, y, r in ((dq, q, q_rstd), (dk, k, k_rstd)):
        s = dx.view(B, T, H, G, K).sum(3)
        if r is not None:
            y = d(y)
            s = s * d(r)[..., None] - (s * y).sum(-1, keepdim=True) * y * d(r)[..., None]
        out.append(s)
    dA = dbias = None
    if g is not None:
        x = d(g) + (d(dt_bias).view(HV, K) if dt_bias is not None else 0)
        a = d(A_log).exp()[:, None]
        if lower_bound is not None:
            s = torch.sigmoid(a * x)
            dgo = dg * lower_bound * s * (1 - s) * a
            dA = (dgo * x).sum((0, 1, 3))
        else:
            dgo = -a * dg * torch.sigmoid(x)
            dA = (dg * -a * torch.nn.functional.softplus(x)).sum((0, 1, 3))
        dbias = dgo.sum((0, 1)) if dt_bias is not None else None
        dg = dgo
    out.append(dg)
    if beta is not None:
        s = torch.sigmoid(d(beta))
        db = db * scale * s * (1 - s)
    out += [db, dA, dbias]
    return out


def _rel(x, ref):
    return (x.double() - ref).norm().item() / max(ref.norm().item(), 1e-30)


# B, T, H, HV, K, l2norm, gate form (None, "softplus", "safe"), dt_bias, g dtype, sigmoid, allow_neg_eigval
POST_CASES = [
    (2, 300, 4, 4, 128, True, "safe", True, torch.bfloat16, True, False),
    (1, 1000, 2, 4, 64, True, "softplus", True, torch.float32, True, True),
    (2, 77, 2, 2, 100, True, "softplus", False, torch.bfloat16, False, False),
    (1, 513, 1, 3, 256, False, "safe", True, torch.float32, True, False),
    (2, 64, 2, 2, 63, True, None, False, torch.float32, False, False),
    (1, 4099, 3, 6, 60, True, "safe", True, torch.bfloat16, True, True),
    (16, 512, 16, 16, 128, True, "safe", True, torch.bfloat16, True, False),  # 8192 tokens: 32 per CTA
]


@pytest.mark.parametrize("io", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", POST_CASES, ids=lambda c: "B{}-T{}-H{}-HV{}-K{}-l2{}-{}-bias{}-{}-sig{}-neg{}".format(
    *c[:8], str(c[8])[6:], *c[9:]))
def test_bwd_post(case, io):
    B, T, H, HV, K, l2, form, bias, gdt, sig, neg = case
    gdt = io if gdt != torch.float32 else gdt
    torch.manual_seed(T * 31 + K)
    dev = "cuda"
    dq, dk, dg = (torch.randn(B, T, HV, K, device=dev) for _ in range(3))
    db = torch.randn(B, T, HV, device=dev)
    q = torch.nn.functional.normalize(torch.randn(B, T, H, K, device=dev), dim=-1).to(io) if l2 else None
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, device=dev), dim=-1).to(io) if l2 else None
    q_rstd = torch.rand(B, T, H, device=dev) * 2 + 0.1 if l2 else None
    k_rstd = torch.rand(B, T, H, device=dev) * 2 + 0.1 if l2 else None
    g = (torch.randn(B, T, HV, K, device=dev) * 5).clamp(-20, 20).to(gdt) if form else None
    A_log = torch.log(torch.empty(HV, device=dev).uniform_(1, 16)) if form else None
    dt_bias = torch.randn(HV * K, device=dev) if form and bias else None
    beta = (torch.randn(B, T, HV, device=dev) * 3).to(io) if sig else None
    lb = -5.0 if form == "safe" else None
    args = (dq, dk, dg, db, q, k, q_rstd, k_rstd, g, A_log, dt_bias, beta, lb)
    kw = dict(allow_neg_eigval=neg, io_dtype=io, g_dtype=torch.float32, beta_dtype=torch.float32, heads=H)
    _poison()
    out1 = kt.bwd_post(*args, **kw)
    _poison()
    out2 = kt.bwd_post(*args, **kw)
    torch.cuda.synchronize()
    ref = _post64(*args, 2.0 if neg else 1.0, H)
    names = ("dq", "dk", "dg", "dbeta", "dA_log", "ddt_bias")
    want_dt = (io, io, gdt if form else torch.float32, io if sig else torch.float32, torch.float32, torch.float32)
    for n, a, b, r, dt in zip(names, out1, out2, ref, want_dt):
        if r is None:
            assert a is None, n
            continue
        assert a.dtype == dt, (n, a.dtype, dt)
        assert torch.isfinite(a).all(), n
        assert torch.equal(a, b), f"{n} differs between two runs"
        e = _rel(a, r.reshape(a.shape))
        tol = 1e-5 if a.dtype == torch.float32 else (8e-3 if a.dtype == torch.bfloat16 else 1e-3)
        assert e < tol, f"{n}: relative error {e:.2e} >= {tol}"
    if A_log is not None:
        assert out1[4].shape == A_log.shape
    if dt_bias is not None:
        assert out1[5].shape == dt_bias.shape


def test_bwd_post_both_gate_forms_on_the_same_tensors():
    """The safe gate and the softplus gate one after the other on the same tensors: each call gets its own form
    (a plan reused across the two would apply the first form's derivative to the second call)."""
    torch.manual_seed(11)
    dev, io, B, T, H, K = "cuda", torch.bfloat16, 2, 200, 2, 64
    dq, dk, dg = (torch.randn(B, T, H, K, device=dev) for _ in range(3))
    db = torch.randn(B, T, H, device=dev)
    q, k = (torch.nn.functional.normalize(torch.randn(B, T, H, K, device=dev), dim=-1).to(io) for _ in range(2))
    q_rstd, k_rstd = (torch.rand(B, T, H, device=dev) * 2 + 0.1 for _ in range(2))
    g = torch.randn(B, T, H, K, device=dev).to(io)
    A_log = torch.log(torch.empty(H, device=dev).uniform_(1, 16))
    dt_bias = torch.randn(H * K, device=dev)
    beta = torch.randn(B, T, H, device=dev).to(io)
    kw = dict(io_dtype=io, g_dtype=torch.float32, beta_dtype=torch.float32, heads=H)
    for lb in (-5.0, None, -5.0):
        args = (dq, dk, dg, db, q, k, q_rstd, k_rstd, g, A_log, dt_bias, beta, lb)
        _poison()
        out = kt.bwd_post(*args, **kw)
        ref = _post64(*args, 1.0, H)
        for n, a, r in zip(("dq", "dk", "dg", "dbeta", "dA_log", "ddt_bias"), out, ref):
            e = _rel(a, r.reshape(a.shape))
            assert e < (5e-5 if a.dtype == torch.float32 else 8e-3), f"lower_bound {lb}: {n} relative error {e:.2e}"


def test_bwd_post_refuses():
    dq = torch.randn(1, 64, 2, 64, device="cuda")
    db = torch.randn(1, 64, 2, device="cuda")
    g = torch.randn(1, 64, 2, 64, device="cuda")
    with pytest.raises(ValueError, match="A_log"):
        kt.bwd_post(dq, dq, dq, db, g=g, io_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="EDTYPE"):
        kt.bwd_post(dq, dq, dq, db, io_dtype=torch.float32)
    with pytest.raises(ValueError, match="q_rstd"):
        kt.bwd_post(dq, dq, dq, db, q=dq.to(torch.bfloat16), io_dtype=torch.bfloat16)


# ------------------------------------------------------------- the whole backward against fla's pipeline

def _fla_pipeline(s, do, dht, flags):
    """fla 0.6.0's ChunkKDAFunction.backward on saved tensors s (its own functions, no kdart)."""
    from fla.modules.norm.l2norm import l2norm_bwd
    from fla.ops.common.gate import fused_beta_sigmoid_bwd
    from fla.ops.kda.chunk_bwd import chunk_kda_bwd
    gate = flags["gate"]
    dq, dk, dv, db, dg, dh0, dA, dbias = chunk_kda_bwd(
        q=s["q"], k=s["k"], v=s["v"], beta=s["beta"], Aqk=s["Aqk"], Akk=s["Akk"], scale=flags["scale"],
        initial_state=s["h0"], do=do, dht=dht, g=s["g_cumsum"], g_org=s["g"] if gate else None,
        lower_bound=flags["lb"], use_gate_in_kernel=gate, A_log=s["A_log"], dt_bias=s["dt_bias"],
        safe_gate=flags["lb"] is not None)
    dq = l2norm_bwd(s["q"], s["q_rstd"], dq)
    dk = l2norm_bwd(s["k"], s["k_rstd"], dk)
    db = fused_beta_sigmoid_bwd(x=s["beta_raw"], dy=db, scale=1.0)
    return dq.to(s["q"]), dk.to(s["k"]), dv, dg.to(s["g"]), db.to(s["beta_raw"]), dA, dbias, dh0


def _fla_saved(shape, seed, safe):
    """What fla's chunk_kda forward saves in the production configuration (l2norm, the gate with A_log and
    dt_bias, safe or not, the beta sigmoid, an initial state) on drawn inputs, with do and dht: a dict, the
    lower bound (None: the softplus gate) and the scale."""
    pytest.importorskip("fla")
    from fla.modules.norm.l2norm import l2norm_fwd
    from fla.ops.common.gate import fused_beta_sigmoid_fwd
    from fla.ops.kda.chunk_fwd import chunk_kda_fwd
    B, T, H, HV, K, V = shape
    torch.manual_seed(seed)
    dev, io = "cuda", torch.bfloat16
    q, qr = l2norm_fwd(torch.randn(B, T, H, K, device=dev).to(io))
    k, kr = l2norm_fwd(torch.randn(B, T, H, K, device=dev).to(io))
    v = torch.randn(B, T, HV, V, device=dev).to(io)
    g = torch.randn(B, T, HV, K, device=dev).to(io)
    beta_raw = torch.randn(B, T, HV, device=dev).to(io)
    beta = fused_beta_sigmoid_fwd(beta_raw)
    A_log = torch.log(torch.empty(HV, device=dev).uniform_(1, 16))
    dt_bias = torch.randn(HV * K, device=dev)
    h0 = torch.randn(B, HV, K, V, device=dev)
    lb = -5.0 if safe else None
    scale = K ** -0.5
    fwd = chunk_kda_fwd(q=q, k=k, v=v, g=g, beta=beta, scale=scale, initial_state=h0, output_final_state=True,
                        safe_gate=safe, lower_bound=lb, use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias)
    do, dht = torch.randn_like(v), torch.randn(B, HV, K, V, device=dev)
    return (dict(q=q, k=k, v=v, g=g, beta=beta, beta_raw=beta_raw, A_log=A_log, dt_bias=dt_bias, h0=h0, Aqk=fwd[3],
                 Akk=fwd[4], g_cumsum=fwd[2], q_rstd=qr, k_rstd=kr, do=do, dht=dht), lb, scale)


@pytest.mark.parametrize("shape", [(2, 256, 2, 2, 64, 64), (1, 300, 2, 4, 128, 128), (2, 128, 4, 4, 100, 100)])
@pytest.mark.parametrize("safe", [True, False])
def test_whole_backward_matches_fla_pipeline(shape, safe):
    s, lb, scale = _fla_saved(shape, sum(shape) + safe, safe)
    q, k, v, g, beta, beta_raw, A_log, dt_bias, h0, Aqk, Akk, qr, kr, do, dht = (
        s[n] for n in ("q", "k", "v", "g", "beta", "beta_raw", "A_log", "dt_bias", "h0", "Aqk", "Akk", "q_rstd",
                       "k_rstd", "do", "dht"))
    want = _fla_pipeline(s, do, dht, dict(gate=True, scale=scale, lb=lb))
    _poison()
    got = kt.chunk_kda_bwd(q, k, v, g, beta, Aqk, Akk, do, dht, scale=scale, initial_state=h0, q_rstd=qr,
                           k_rstd=kr, beta_raw=beta_raw, A_log=A_log, dt_bias=dt_bias, use_gate_in_kernel=True,
                           lower_bound=lb, use_beta_sigmoid_in_kernel=True)
    again = kt.chunk_kda_bwd(q, k, v, g, beta, Aqk, Akk, do, dht, scale=scale, initial_state=h0, q_rstd=qr,
                             k_rstd=kr, beta_raw=beta_raw, A_log=A_log, dt_bias=dt_bias, use_gate_in_kernel=True,
                             lower_bound=lb, use_beta_sigmoid_in_kernel=True)
    names = ("dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dh0")
    line = []
    for n, a, b, w in zip(names, got, again, want):
        assert a.shape == w.shape and a.dtype == w.dtype, (n, a.shape, w.shape, a.dtype, w.dtype)
        assert torch.isfinite(a).all(), n
        assert torch.equal(a, b), f"{n} differs between two kdart runs"
        line.append((n, _rel(a, w.double())))
    report = " ".join(f"{n} {e:.1e}" for n, e in line)
    print("\nkdart vs fla pipeline: " + report)
    bad = [n for n, e in line if not e < 2e-2]
    assert not bad, f"{', '.join(bad)}: kdart and fla's pipeline differ ({report})"


def _c_chunk_bwd(t, scale, lower_bound):
    """kdart_kda_chunk_bwd through kdart.torch's plan of its args (the ctypes image of kdart_chunk_bwd_args,
    whose layout test_torch_cpu checks) on the tensors of t (the struct's names; outputs included) and a
    workspace of 0xff bytes, on torch's current stream; returns kdart's status."""
    outs = {n: t[n] for n in kt._CB_OUTS if t.get(n) is not None}
    ins = {n: x for n, x in t.items() if n not in outs}
    sc = dict(scale=scale, lower_bound=lower_bound or 0.0, safe_gate=int(lower_bound is not None))
    plan = kt._CBPlan(ins, [(n, tuple(x.shape), x.dtype) for n, x in outs.items()], sc, t["q"].device)
    assert plan.ws_bytes > 0, plan.ws_bytes
    # (any contents: the call clears what it needs)
    rc = plan.run(ins, outs, torch.full((plan.ws_bytes,), 255, dtype=torch.uint8, device=t["q"].device))
    torch.cuda.synchronize()
    return rc


@pytest.mark.parametrize("shape,io", [((2, 256, 2, 2, 64, 64), torch.bfloat16), ((1, 256, 2, 4, 128, 128), torch.bfloat16),
                                      ((1, 0, 2, 2, 64, 64), torch.bfloat16), ((1, 256, 2, 2, 128, 128), torch.float16),
                                      ((1, 192, 2, 2, 256, 128), torch.bfloat16), ((1, 0, 2, 2, 128, 256), torch.bfloat16)],
                         ids=["k64", "k128-gva", "packed-small", "k128-fp16", "k256", "packed-k128-v256"])
def test_c_chunk_bwd_random_saved_tensors(shape, io):
    """The same comparison without fla: random saved tensors (Aqk, Akk drawn, not a forward's), so that only the
    two doors to the same kernels are compared (NaN where both have it counts as equal).  packed-small: three
    documents on a grid where dAv runs as its own kernel (the unfused path)."""
    B, T, H, HV, K, V = shape
    torch.manual_seed(7 + sum(shape))
    dev = "cuda"
    cu = ci = None
    if T == 0:
        cu = torch.tensor([0, 100, 101, 300], dtype=torch.int32, device=dev)
        T = 300
        ci = chunk_indices(cu)
    N = B if cu is None else cu.shape[0] - 1
    t = whole_inputs(B, T, H, HV, K, V, N, io, dev)
    lb, scale = -5.0, K ** -0.5
    want = kt._chunk_kda_bwd_stages(t["q"], t["k"], t["v"], t["g"], t["beta"], t["Aqk"], t["Akk"], t["d_o"], t["dht"],
                                    scale=scale, initial_state=t["h0"], q_rstd=t["q_rstd"], k_rstd=t["k_rstd"],
                                    beta_raw=t["beta_raw"], A_log=t["A_log"], dt_bias=t["dt_bias"],
                                    use_gate_in_kernel=True, lower_bound=lb, use_beta_sigmoid_in_kernel=True,
                                    cu_seqlens=cu, chunk_indices=ci)
    names = ("dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dh0")
    outs = {n: torch.full_like(w, float("nan")) for n, w in zip(names, want)}
    outs["ddt_bias"] = outs["ddt_bias"].view(HV, K)
    t.update(dt_bias=t["dt_bias"].view(HV, K), cu_seqlens=cu, chunk_indices=ci, **outs)
    rc = _c_chunk_bwd(t, scale, lb)
    assert rc == 0, rc
    for name, w in zip(names, want):
        _same(name, outs[name], w)


@pytest.mark.parametrize("config", ["log-gate", "svf-neg-eig", "no-recompute", "fp32-beta-gva"])
def test_whole_backward_is_the_stages(config):
    """kdart.torch.chunk_kda_bwd (one C call on CUDA) returns what its stages' calls return, bit for bit (_same) and in
    the same dtypes, across chunk_kda's other configurations: the log gate without the gate in the kernel (no
    l2norm, no beta sigmoid), the V-first state with allow_neg_eigval, fla's disable_recompute (w, u, qg, kg,
    v_new, h given), beta in fp32 without its sigmoid at GVA."""
    B, T, H, HV, K, V = (1, 320, 2, 4, 64, 64) if config == "fp32-beta-gva" else (2, 200, 2, 2, 128, 64)
    torch.manual_seed(hash(config) % 1000)
    dev, io = "cuda", torch.bfloat16
    gate = config != "log-gate"
    svf = config == "svf-neg-eig"
    q = torch.nn.functional.normalize(torch.randn(B, T, H, K, device=dev), dim=-1).to(io)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, device=dev), dim=-1).to(io)
    v = torch.randn(B, T, HV, V, device=dev).to(io)
    g = torch.randn(B, T, HV, K, device=dev).to(io) if gate else None
    beta_raw = torch.randn(B, T, HV, device=dev).to(io)
    beta = torch.sigmoid(beta_raw.float())
    if config != "fp32-beta-gva":
        beta = beta.to(io)
    A_log = torch.log(torch.empty(HV, device=dev).uniform_(1, 16)) if gate else None
    dt_bias = torch.randn(HV * K, device=dev) if gate else None
    st = (B, HV, V, K) if svf else (B, HV, K, V)
    h0, dht = torch.randn(*st, device=dev), torch.randn(*st, device=dev)
    Aqk = (torch.randn(B, T, HV, 64, device=dev) * 0.1).to(io)
    Akk = (torch.randn(B, T, HV, 64, device=dev) * 0.1).to(io)
    do = torch.randn_like(v)
    kw = dict(scale=K ** -0.5, initial_state=h0, state_v_first=svf, allow_neg_eigval=svf)
    if gate:
        kw.update(A_log=A_log, dt_bias=dt_bias, use_gate_in_kernel=True, lower_bound=-5.0)
    else:
        gc = -torch.rand(B, T, HV, K, device=dev).cumsum(1) * 0.1  # (a log2 gate's chunk cumsum stand-in)
        g = torch.randn(B, T, HV, K, device=dev)
        kw.update(g_cumsum=gc)
    if config in ("svf-neg-eig", "no-recompute"):
        kw.update(q_rstd=torch.rand(B, T, H, device=dev) + 0.5, k_rstd=torch.rand(B, T, H, device=dev) + 0.5,
                  beta_raw=beta_raw, use_beta_sigmoid_in_kernel=True)
    if config == "no-recompute":
        gk, w, u, qg, kg = kt.gate_recompute_w_u(g, A_log, k, v, beta, Akk, q=q, dt_bias=dt_bias, lower_bound=-5.0)
        h, v_new, _ = kt.chunk_gated_delta_rule_fwd_h(kg, w, u, gk=gk, initial_state=h0)
        kw.update(g_cumsum=gk, w=w, u=u, qg=qg, kg=kg, v_new=v_new, h=h)
    want = kt._chunk_kda_bwd_stages(q, k, v, g, beta, Aqk, Akk, do, dht, **kw)
    got = kt.chunk_kda_bwd(q, k, v, g, beta, Aqk, Akk, do, dht, **kw)
    names = ("dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dh0")
    for name, w_, g_ in zip(names, want, got):
        assert (w_ is None) == (g_ is None), name
        if w_ is None:
            continue
        assert (g_.shape, g_.dtype) == (w_.shape, w_.dtype), name
        _same(name, g_, w_)


def test_whole_backward_compiled_is_eager():
    """torch.compile(fullgraph=True) of a function calling kdart.torch.chunk_kda_bwd (one op in the graph, the
    one C call at run time) gives the eager call's gradients bit for bit, Nones included."""
    B, T, H, HV, K, V = 1, 300, 2, 2, 128, 128
    torch.manual_seed(11)
    dev, io = "cuda", torch.bfloat16
    q = torch.nn.functional.normalize(torch.randn(B, T, H, K, device=dev), dim=-1).to(io)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, device=dev), dim=-1).to(io)
    v = torch.randn(B, T, HV, V, device=dev).to(io)
    g = torch.randn(B, T, HV, K, device=dev).to(io)
    beta_raw = torch.randn(B, T, HV, device=dev).to(io)
    beta = torch.sigmoid(beta_raw.float())
    Aqk = (torch.randn(B, T, HV, 64, device=dev) * 0.1).to(io)
    Akk = (torch.randn(B, T, HV, 64, device=dev) * 0.1).to(io)
    do = torch.randn_like(v)
    kw = dict(scale=K ** -0.5, q_rstd=torch.rand(B, T, H, device=dev) + 0.5,
              k_rstd=torch.rand(B, T, H, device=dev) + 0.5, beta_raw=beta_raw, use_beta_sigmoid_in_kernel=True,
              A_log=torch.log(torch.empty(HV, device=dev).uniform_(1, 16)), dt_bias=torch.randn(HV * K, device=dev),
              use_gate_in_kernel=True, lower_bound=-5.0)

    def f(q, k, v, g, beta, Aqk, Akk, do):
        return kt.chunk_kda_bwd(q, k, v, g, beta, Aqk, Akk, do, None, **kw)
    want = f(q, k, v, g, beta, Aqk, Akk, do)
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v, g, beta, Aqk, Akk, do)
    for i, (w_, g_) in enumerate(zip(want, got)):
        assert (w_ is None) == (g_ is None), i
        if w_ is not None:
            assert g_.dtype == w_.dtype and torch.equal(torch.nan_to_num(g_, nan=7.0), torch.nan_to_num(w_, nan=7.0)), i


def test_whole_backward_refuses_before_launching():
    """A bad call through the C door: kdart's checks refuse it (ValueError) before anything launches."""
    dev, io = "cuda", torch.bfloat16
    B, T, H, HV, K, V = 1, 128, 2, 2, 64, 64
    q = torch.randn(B, T, H, K, device=dev).to(io)
    v = torch.randn(B, T, HV, V, device=dev).to(io)
    g = torch.randn(B, T, HV, K, device=dev).to(io)
    beta = torch.rand(B, T, HV, device=dev)
    A = torch.randn(B, T, HV, 64, device=dev).to(io)
    kw = dict(A_log=torch.zeros(HV, device=dev), use_gate_in_kernel=True)
    with pytest.raises(ValueError):
        kt.chunk_kda_bwd(q, q, v, g, beta, A, A[:, :64], v, None, **kw)
    with pytest.raises(ValueError, match="ESTRIDE"):
        kt.chunk_kda_bwd(q.transpose(1, 2).contiguous().transpose(1, 2), q, v, g, beta, A, A, v, None, **kw)
    with pytest.raises(ValueError):
        kt.chunk_kda_bwd(q, q, v, g, beta.to(torch.float64), A, A, v, None, **kw)


@pytest.mark.parametrize("shape", [(2, 256, 2, 2, 64, 64), (1, 300, 2, 4, 128, 128), (2, 128, 4, 4, 100, 100)])
def test_c_chunk_bwd_is_chunk_kda_bwd(shape):
    """kdart_kda_chunk_bwd (the C call) gives kdart.torch's stages' gradients bit for bit (_same), in the
    production configuration (dAv fused into bwd_dhu at K 64 and 128, bwd_dav as a launch of its own at K 100;
    wy_dqkg with bwd_intra's terms everywhere), outputs poisoned first."""
    B, T, H, HV, K, V = shape
    s, lb, scale = _fla_saved(shape, sum(shape), True)
    q, k, v, g, beta, beta_raw, A_log, dt_bias, h0, Aqk, Akk, qr, kr, do, dht = (
        s[n] for n in ("q", "k", "v", "g", "beta", "beta_raw", "A_log", "dt_bias", "h0", "Aqk", "Akk", "q_rstd",
                       "k_rstd", "do", "dht"))
    want = kt._chunk_kda_bwd_stages(q, k, v, g, beta, Aqk, Akk, do, dht, scale=scale, initial_state=h0, q_rstd=qr,
                            k_rstd=kr, beta_raw=beta_raw, A_log=A_log, dt_bias=dt_bias, use_gate_in_kernel=True,
                            lower_bound=lb, use_beta_sigmoid_in_kernel=True)
    outs = {n: torch.full_like(w, float("nan")) for n, w in
            zip(("dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dh0"), want)}
    outs["ddt_bias"] = outs["ddt_bias"].view(HV, K)
    t = dict(q=q, k=k, v=v, g=g, beta=beta, Aqk=Aqk, Akk=Akk, d_o=do, dht=dht, h0=h0, q_rstd=qr, k_rstd=kr,
             beta_raw=beta_raw, A_log=A_log, dt_bias=dt_bias.view(HV, K), **outs)
    rc = _c_chunk_bwd(t, scale, lb)
    assert rc == 0, rc
    for n, w in zip(("dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dh0"), want):
        _same(n, outs[n], w)


def test_whole_backward_cuda_graph_replay():
    """kdart.torch.chunk_kda_bwd captured in a CUDA graph on a packed step at a fixed capacity (fla's
    use_graph contract: cu_seqlens padded with zero-length sequences, chunk_indices of nt_max rows), then
    replayed after cu_seqlens and every input changed in place: the replay's gradients of every token of the
    new sequences equal an eager call's on the new inputs, bitwise (every stage is deterministic and reads the
    sequence split on the device)."""
    pytest.importorskip("fla")
    from fla.modules.norm.l2norm import l2norm_fwd
    from fla.ops.common.gate import fused_beta_sigmoid_fwd
    from fla.ops.kda.chunk_fwd import chunk_kda_fwd
    from fla.ops.utils.index import prepare_chunk_indices_static
    torch.manual_seed(7)
    dev, io = "cuda", torch.bfloat16
    T, H, K, V, NMAX = 1024, 2, 128, 128, 6
    nt_max = (T + 63) // 64 + NMAX - 1
    cu = torch.zeros(NMAX + 1, dtype=torch.long, device=dev)
    bufs = {}

    def load(split):
        """New inputs (and the forward's saved tensors) for this sequence split, written in place."""
        cu.copy_(torch.tensor(split + [split[-1]] * (NMAX + 1 - len(split)), device=dev))
        ci, co = prepare_chunk_indices_static(cu, 64, nt_max)
        q, qr = l2norm_fwd(torch.randn(1, T, H, K, device=dev).to(io))
        k, kr = l2norm_fwd(torch.randn(1, T, H, K, device=dev).to(io))
        v = torch.randn(1, T, H, V, device=dev).to(io)
        g = torch.randn(1, T, H, K, device=dev).to(io)
        beta_raw = torch.randn(1, T, H, device=dev).to(io)
        beta = fused_beta_sigmoid_fwd(beta_raw)
        A_log = torch.log(torch.empty(H, device=dev).uniform_(1, 16))
        dt_bias = torch.randn(H * K, device=dev)
        h0 = torch.randn(NMAX, H, K, V, device=dev)
        fwd = chunk_kda_fwd(q=q, k=k, v=v, g=g, beta=beta, scale=K ** -0.5, initial_state=h0,
                            output_final_state=True, cu_seqlens=cu, chunk_indices=ci, safe_gate=True,
                            lower_bound=-5.0, use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias,
                            use_graph=True, chunk_offsets=co)
        new = dict(q=q, k=k, v=v, g=g, beta=beta, beta_raw=beta_raw, A_log=A_log, dt_bias=dt_bias, h0=h0,
                   Aqk=fwd[3], Akk=fwd[4], q_rstd=qr, k_rstd=kr, ci=ci, co=co, do=torch.randn_like(v),
                   dht=torch.randn_like(h0))
        for n, x in new.items():
            if n in bufs:
                bufs[n].copy_(x)
            else:
                bufs[n] = x.clone()

    def bwd():
        b = bufs
        return kt.chunk_kda_bwd(b["q"], b["k"], b["v"], b["g"], b["beta"], b["Aqk"], b["Akk"], b["do"], b["dht"],
                                scale=K ** -0.5, initial_state=b["h0"], q_rstd=b["q_rstd"], k_rstd=b["k_rstd"],
                                beta_raw=b["beta_raw"], A_log=b["A_log"], dt_bias=b["dt_bias"],
                                use_gate_in_kernel=True, lower_bound=-5.0, use_beta_sigmoid_in_kernel=True,
                                cu_seqlens=cu, chunk_indices=b["ci"], chunk_offsets=b["co"])

    load([0, 1, 63, 64, 500, 1024])
    bwd()  # eager: prepares every stage's specialization before capture
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s), torch.cuda.graph(graph, stream=s):
        out = bwd()
    torch.cuda.current_stream().wait_stream(s)
    end = 700
    load([0, 200, 201, end])  # another split, fewer sequences (the rest zero-length), new inputs
    _poison()
    graph.replay()
    torch.cuda.synchronize()
    want = bwd()
    torch.cuda.synchronize()
    for i, (n, a, w) in enumerate(zip(("dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dh0"), out, want)):
        if i < 5:  # per-token outputs: the tokens of the sequences (rows past cu_seqlens[-1] are undefined, as fla's)
            a, w = a[:, :end], w[:, :end]
        assert torch.isfinite(a).all(), n
        assert torch.equal(a, w), f"{n}: the graph's replay differs from an eager call on the same inputs"


class _Layer(torch.nn.Module):
    """A KDA layer as models use it: projections of x to q, k, v, the raw gate and the beta logits, fla's
    chunk_kda in the production configuration (l2norm, the safe gate and the beta sigmoid in the kernel), and
    the output projection.  fn: kdart.fla.chunk_kda, or fla's chunk_kda."""

    def __init__(self, fn, D=96, H=2, K=64, V=64, cu=None):
        super().__init__()
        self.fn, self.H, self.K, self.V, self.cu = fn, H, K, V, cu
        def p(*s, a=0.1, dt=torch.float32):
            return torch.nn.Parameter((torch.randn(*s, device="cuda") * a).to(dt))
        self.W = torch.nn.ParameterDict({n: p(D, H * s, dt=torch.bfloat16) for n, s in
                                         (("q", K), ("k", K), ("v", V), ("g", K), ("b", 1))})
        self.Wo = p(H * V, D, dt=torch.bfloat16)
        self.A_log = torch.nn.Parameter(torch.log(torch.empty(H, device="cuda").uniform_(1, 16)))
        self.dt_bias = p(H * K, a=1.0)

    def forward(self, x, h0):
        B, T, _ = x.shape
        p = {n: (x @ w).view(B, T, self.H, -1) for n, w in self.W.items()}
        o, ht = self.fn(p["q"], p["k"], p["v"], p["g"], p["b"].squeeze(-1), initial_state=h0,
                        output_final_state=True, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                        use_beta_sigmoid_in_kernel=True, safe_gate=True, lower_bound=-5.0, A_log=self.A_log,
                        dt_bias=self.dt_bias, cu_seqlens=self.cu)
        return (o.reshape(B, T, -1) @ self.Wo).float().square().mean() + ht.square().mean()


def _layer_grads(layer, x, h0):
    for t in (x, h0, *layer.parameters()):
        t.grad = None
    loss = layer(x, h0)
    loss.backward()
    return [loss.detach()] + [t.grad.clone() for t in (x, h0, *layer.parameters())]


@pytest.mark.parametrize("packed", [False, True])
def test_kda_layer_compiled_is_eager_is_fla_with_kdart(packed):
    """A KDA layer through kdart.fla.chunk_kda, three ways, bit for bit: eager; torch.compile(fullgraph=True)
    of its forward and backward (aot_eager: the two custom ops and torch's own around them); and fla's own
    chunk_kda with kdart.fla's whole backward (kdart.fla.enabled, same forward kernels, same saved tensors).
    Fresh random weights and inputs; packed: three documents of a 300-token row (fla's fixed-capacity index
    against its dynamic one), an initial state per document."""
    pytest.importorskip("fla")
    import kdart.fla
    from fla.ops.kda import chunk_kda as fla_chunk_kda
    torch.manual_seed(23 + packed)
    B, T, D = (1, 300, 96) if packed else (2, 200, 96)
    cu = torch.tensor([0, 77, 230, 300], device="cuda") if packed else None
    layer = _Layer(kdart.fla.chunk_kda, D=D, cu=cu)
    x = torch.randn(B, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    h0 = torch.randn(3 if packed else B, 2, 64, 64, device="cuda", requires_grad=True)
    eager = _layer_grads(layer, x, h0)
    torch._dynamo.reset()
    compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)
    got = _layer_grads(compiled, x, h0)
    for i, (a, b) in enumerate(zip(eager, got)):
        assert torch.equal(a, b), f"compiled: tensor {i}"
    layer.fn = fla_chunk_kda
    with kdart.fla.enabled(whole=True):
        kdart.fla.reset_stats()
        ref = _layer_grads(layer, x, h0)
        served = kdart.fla.stats()
    assert served["served"].get("whole_backward", 0) == 1 and not served["fallbacks"], served
    for i, (a, b) in enumerate(zip(eager, ref)):
        assert torch.equal(a, b), f"fla with kdart's backward: tensor {i}"


def test_kda_layer_op_check():
    """torch.library.opcheck of kdart::fla_chunk_kda_fwd (schema, fake against real, autograd registration) on
    a small production-flag call, then the op compiled (aot_eager, static and dynamic shapes) against eager.
    fla's forward leaves Aqk and Akk above each chunk's diagonal unwritten (the backward never reads them),
    so those two are compared on and below the diagonal: opcheck's own AOT tests compare every element and
    fail on whatever the allocator's memory held there."""
    pytest.importorskip("fla")
    import kdart._fla_op  # noqa: F401 (registers the op)
    torch.manual_seed(5)
    B, T, H, K, V = 1, 130, 2, 64, 64
    r = lambda *s, dt=torch.bfloat16: torch.randn(*s, device="cuda").to(dt).requires_grad_()  # noqa: E731
    args = (r(B, T, H, K), r(B, T, H, K), r(B, T, H, V), r(B, T, H, K), r(B, T, H),
            torch.log(torch.empty(H, device="cuda").uniform_(1, 16)).requires_grad_(), r(H * K, dt=torch.float32),
            K ** -0.5, r(B, H, K, V, dt=torch.float32), True, True, True, True, False, True, -5.0, False, None)
    op = torch.ops.kdart.fla_chunk_kda_fwd.default
    torch.library.opcheck(op, args, test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))
    t = torch.arange(T, device="cuda")
    tril = (torch.arange(64, device="cuda")[None, :] <= (t % 64)[:, None])[None, :, None, :]  # [1, T, 1, 64]
    want = [x.detach().clone() for x in op(*args)]
    for dynamic in (False, True):
        torch._dynamo.reset()
        got = torch.compile(lambda *a: op(*a), backend="aot_eager", fullgraph=True, dynamic=dynamic)(*args)
        for i, (w, g) in enumerate(zip(want, got)):
            assert w.shape == g.shape and w.dtype == g.dtype, (dynamic, i)
            if i in (8, 9):  # Aqk, Akk
                w, g = w.masked_fill(~tril, 0), g.masked_fill(~tril, 0)
            torch.testing.assert_close(g, w, rtol=0, atol=0, msg=lambda m: f"dynamic={dynamic} output {i}: {m}")
