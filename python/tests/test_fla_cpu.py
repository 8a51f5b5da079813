"""kdart.fla without a GPU: patching and restoring fla's names, the signature guard, acceptance checks."""
import logging
import os

import pytest
from conftest import child_env

# fla's backend dispatch off, as the names route is usually tested; on for the registry route (KDART_FLA_VIA=registry:
# test_registry_route runs the routing tests again that way, in a process of their own)
if os.environ.get("KDART_FLA_VIA") != "registry":
    os.environ.setdefault("FLA_DISABLE_BACKEND_DISPATCH", "1")
torch = pytest.importorskip("torch")
chunk_bwd = pytest.importorskip("fla.ops.kda.chunk_bwd")
import kdart.fla as kf  # noqa: E402

NAMES = ("chunk_kda_bwd_intra", "chunk_gated_delta_rule_bwd_dhu", "chunk_local_cumsum")


def test_enable_disable_restores():
    orig = {n: getattr(chunk_bwd, n) for n in NAMES}
    kf.enable()
    try:
        assert kf.is_enabled() and all(getattr(chunk_bwd, n) is not orig[n] for n in NAMES)
    finally:
        kf.disable()
    assert not kf.is_enabled() and all(getattr(chunk_bwd, n) is orig[n] for n in NAMES)
    with kf.enabled():
        assert kf.is_enabled()
    assert all(getattr(chunk_bwd, n) is orig[n] for n in NAMES)


def test_signature_guard(monkeypatch):
    def other(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, cu_seqlens=None, chunk_size=32):
        pass
    monkeypatch.setattr(chunk_bwd, "chunk_kda_bwd_intra", other)
    with pytest.raises(RuntimeError, match="fla-core 0.6.0"):
        kf.enable()
    assert not kf.is_enabled() and chunk_bwd.chunk_kda_bwd_intra is other


def _intra(B=1, T=128, H=2, HV=2, K=64, io=torch.bfloat16):
    r = lambda *s, dt=torch.float32: torch.empty(*s, dtype=dt, device="meta")  # noqa: E731
    return [r(B, T, H, K, dt=io), r(B, T, H, K, dt=io), r(B, T, HV, K), r(B, T, HV, dt=io),
            r(B, T, HV, 64), r(B, T, HV, 64), r(B, T, HV, K), r(B, T, HV, K), r(B, T, HV), r(B, T, HV, K)]


def test_refusal_reasons():
    # any T and varlen are kdart's now: these meta tensors stop at the device check
    assert kf.intra_refusal(*_intra(T=1000)) == "not a CUDA tensor"
    cu = torch.empty(3, dtype=torch.int64, device="meta")
    assert kf.intra_refusal(*_intra(), cu_seqlens=cu) == "not a CUDA tensor"
    assert kf.intra_refusal(*_intra(B=2), cu_seqlens=cu) == "cu_seqlens not on q's device or B != 1"
    assert kf.intra_refusal(*_intra(), cu_seqlens=torch.tensor([0, 128])) == "cu_seqlens not on q's device or B != 1"
    assert kf.intra_refusal(*_intra(), chunk_indices=cu) == "chunk_indices without cu_seqlens"
    assert kf.intra_refusal(*_intra(K=96)) == "not a CUDA tensor"  # every K in 1..256 is kdart's
    assert kf.intra_refusal(*_intra(K=257)) == "head dim K=257"
    assert kf.intra_refusal(*_intra(), chunk_size=32) == "chunk_size=32"
    # fla's use_graph mode is served (the meta tensors stop at the device check, not at use_graph)
    assert kf.intra_refusal(*_intra(), cu_seqlens=cu, chunk_indices=torch.empty(5, 2, dtype=torch.int64,
                                                                                device="meta"),
                            use_graph=True) == "not a CUDA tensor"
    assert kf.intra_refusal(*_intra()) == "not a CUDA tensor"
    q = torch.empty(1, 128, 2, 64, dtype=torch.bfloat16, device="meta")
    do = torch.empty(1, 128, 2, 96, dtype=torch.bfloat16, device="meta")
    # V = 96 passes every Python check (meta tensors: the device check), in either state layout
    assert kf.dhu_refusal(q, q, q, do, do, gk=torch.empty(1, 128, 2, 64, device="meta")) == "not a CUDA tensor"
    assert kf.dhu_refusal(q, q, q, do, do, gk=q, state_v_first=True) == "not a CUDA tensor"
    assert kf.dhu_refusal(q, q, q, do, do, g=q[..., 0], gk=None) == "scalar gate g"
    do64 = torch.empty(1, 100, 2, 64, dtype=torch.bfloat16, device="meta")
    q100 = torch.empty(1, 100, 2, 64, dtype=torch.bfloat16, device="meta")
    gk = torch.empty(1, 100, 2, 64, device="meta")
    assert kf.dhu_refusal(q100, q100, q100, do64, do64, gk=gk, cu_seqlens=cu) == "not a CUDA tensor"
    assert kf.dhu_refusal(q100, q100, q100, do64, do64, gk=gk, chunk_offsets=cu) == \
        "chunk_indices/chunk_offsets without cu_seqlens"


@pytest.mark.parametrize("D", [60, 100, 256])
def test_head_dims_served(monkeypatch, D):
    """Both stages at D = 60, 100, 256 pass every Python check (meta tensors: the device check), whatever
    KDART_EXPERIMENTAL (a gate of earlier versions, now without effect) says, in either state layout; V past
    512 falls back."""
    q = torch.empty(1, 128, 2, D, dtype=torch.bfloat16, device="meta")
    gk = torch.empty(1, 128, 2, D, device="meta")
    do = torch.empty(1, 128, 2, D, dtype=torch.bfloat16, device="meta")
    monkeypatch.setenv("KDART_EXPERIMENTAL", "0")
    assert kf.intra_refusal(*_intra(K=D)) == "not a CUDA tensor"
    assert kf.dhu_refusal(q, q, q, do, do, gk=gk) == "not a CUDA tensor"
    assert kf.dhu_refusal(q, q, q, do, do, gk=gk, state_v_first=True) == "not a CUDA tensor"
    big = torch.empty(1, 128, 2, 513, dtype=torch.bfloat16, device="meta")
    assert kf.dhu_refusal(q, q, q, big, big, gk=gk) == "V=513 (V > 512)"


def test_wrappers_route_fold_and_fall_back(monkeypatch, caplog):
    """The wrappers' plumbing with kdart's op and fla's functions replaced by recorders (no GPU): a served
    bwd_intra folds dg and the chunk_local_cumsum of exactly that tensor is skipped; refused calls go to
    fla's function with every argument; kdart's ValueError is a counted fallback."""
    import kdart.torch as kt
    calls = []
    a = _intra()
    outs = tuple(torch.empty(1, device="meta") for _ in range(4))

    def fake_intra(*args, fold_dg=False, emit_bf16=False, cu_seqlens=None, chunk_indices=None):
        calls.append(("kdart", fold_dg) if cu_seqlens is None else ("kdart varlen", fold_dg))
        return outs
    monkeypatch.setattr(kt, "bwd_intra", fake_intra)
    monkeypatch.setattr(kf, "intra_refusal", lambda *x, **y: None)
    kf.reset_stats()
    with kf.enabled():
        orig = kf._state["orig"]
        saved = dict(orig)  # put back before disable() restores fla's names from it
        try:
            orig["chunk_kda_bwd_intra"] = lambda *x, **y: calls.append(("fla", y)) or outs
            orig["chunk_local_cumsum"] = lambda *x, **y: calls.append(("cumsum", y)) or x[0]
            dq, dk, db, dg = chunk_bwd.chunk_kda_bwd_intra(*a, chunk_size=64, safe_gate=True)
            assert dg is outs[3] and calls == [("kdart", True)]
            assert chunk_bwd.chunk_local_cumsum(dg, chunk_size=64, reverse=True, cu_seqlens=None,
                                                chunk_indices=None, use_graph=False) is dg
            assert calls == [("kdart", True)]  # skipped: already folded
            chunk_bwd.chunk_local_cumsum(dg, chunk_size=64, reverse=True)  # the next one is fla's
            assert calls[-1][0] == "cumsum" and calls[-1][1]["output_dtype"] == torch.float32
            # varlen: folded per sequence chunk, so only the cumsum with the same cu_seqlens is skipped
            cu, other = torch.tensor([0, 50, 128]), torch.tensor([0, 64, 128])
            n = len(calls)
            dg = chunk_bwd.chunk_kda_bwd_intra(*a, cu_seqlens=cu, chunk_size=64)[3]
            assert calls[n:] == [("kdart varlen", True)]
            assert chunk_bwd.chunk_local_cumsum(dg, chunk_size=64, reverse=True, cu_seqlens=cu) is dg
            assert calls[n:] == [("kdart varlen", True)]
            # fla's use_graph mode: folded just the same (running fla's cumsum on it would sum twice)
            ci = torch.empty(4, 2, dtype=torch.int64)
            dg = chunk_bwd.chunk_kda_bwd_intra(*a, cu_seqlens=cu, chunk_indices=ci, chunk_size=64, use_graph=True)[3]
            assert chunk_bwd.chunk_local_cumsum(dg, chunk_size=64, reverse=True, cu_seqlens=cu, chunk_indices=ci,
                                                use_graph=True) is dg
            assert calls[n:] == [("kdart varlen", True)] * 2
            dg = chunk_bwd.chunk_kda_bwd_intra(*a, cu_seqlens=cu, chunk_size=64)[3]
            chunk_bwd.chunk_local_cumsum(dg, chunk_size=64, reverse=True, cu_seqlens=other)  # not that fold
            assert calls[-1][0] == "cumsum" and calls[-1][1]["cu_seqlens"] is other

            def refuse(*args, **kw):
                raise kf_value_error()
            monkeypatch.setattr(kt, "bwd_intra", refuse)
            with caplog.at_level(logging.WARNING, logger="kdart"):  # once, through the "kdart" logger
                chunk_bwd.chunk_kda_bwd_intra(*a, chunk_size=64)
                chunk_bwd.chunk_kda_bwd_intra(*a, chunk_size=64)
            said = [r.getMessage() for r in caplog.records if r.name == "kdart.fla"]
            assert said == ["bwd_intra falls back to fla (kdart refused: ESHAPE)"], said
            assert calls[-1] == ("fla", {"cu_seqlens": None, "chunk_indices": None, "chunk_size": 64,
                                         "safe_gate": False, "lower_bound": None, "use_graph": False})
        finally:
            orig.update(saved)
        st = kf.stats()
    assert st["served"] == {"bwd_intra": 4, "bwd_dhu": 0, "dg_cumsum_folded": 3, "wy_dqkg": 0}
    assert st["fallbacks"] == {"bwd_intra: kdart refused: ESHAPE": 2}  # (counted every time)
    assert chunk_bwd.chunk_kda_bwd_intra.__module__ == "fla.ops.kda.chunk_intra"  # fla's own again


def test_every_dhu_head_dim_is_served():
    """bwd_dhu at every head dim (the native ones, the masked ones in 129..191 and 193..255, both state layouts,
    partial V tiles, odd K or V: padded by kdart.torch) gets no fallback reason from dhu_refusal."""
    for D, Dv, f in ((64, 64, False), (128, 128, False), (256, 256, False), (18, 18, False), (60, 60, False),
                     (100, 100, False), (200, 200, False), (196, 196, False), (256, 100, False), (128, 128, True),
                     (64, 64, True), (100, 100, True), (256, 256, True), (192, 192, False), (192, 192, True),
                     (192, 100, False), (160, 160, False), (130, 128, False), (160, 160, True), (200, 200, True),
                     (256, 96, True), (192, 96, True), (250, 250, True), (144, 144, False), (63, 64, False),
                     (64, 63, False), (101, 101, False), (63, 63, True), (255, 511, True), (1, 1, False)):
        # these stop at the device check (meta)
        qq = torch.empty(1, 128, 2, D, dtype=torch.bfloat16, device="meta")
        vq = torch.empty(1, 128, 2, Dv, dtype=torch.bfloat16, device="meta")
        assert kf.dhu_refusal(qq, qq, qq, vq, vq, gk=torch.empty(1, 128, 2, D, device="meta"),
                              state_v_first=f) == "not a CUDA tensor"




def kf_value_error():
    from kdart import KdartValueError
    return KdartValueError(-20, "ESHAPE", "ESHAPE: test")


# ------------------------------------------------- the configuration people train with, routed

def _meta(*shape, dt=torch.float32):
    return torch.empty(*shape, dtype=dt, device="meta")


def _standins(monkeypatch, log):
    """fla's other stages in chunk_kda_bwd replaced by recorders that return meta tensors of the shapes and dtypes
    fla 0.6.0's kernels return (docs/chunk_kda_flags.md), so chunk_kda_bwd runs on a CPU machine."""
    def gate_cumsum(g, **kw):
        log.append("gate_cumsum")
        return torch.empty_like(g, dtype=torch.float32)

    def recompute_w_u(q, k, v, beta, A, gk, **kw):
        log.append("recompute_w_u")
        B, T, HV = v.shape[:3]
        kk = _meta(B, T, HV, k.shape[3], dt=k.dtype)
        return kk, torch.empty_like(v), kk.clone(), kk.clone()

    def fwd_h(k, w, u, gk, state_v_first=False, **kw):
        log.append("fwd_h")
        B, T, HV, K = k.shape
        V, NT = u.shape[3], (T + 63) // 64
        return _meta(B, NT, HV, *((V, K) if state_v_first else (K, V)), dt=k.dtype), torch.empty_like(u), None

    def dAv(q, k, v, do, A, scale, **kw):
        log.append("dAv")
        return _meta(*v.shape[:3], 64), torch.empty_like(do)

    def wy_dqkg(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale=None, state_v_first=False, cu_seqlens=None,
                chunk_size=64, chunk_indices=None, chunk_offsets=None, use_graph=False):  # fla's signature
        log.append("wy_dqkg")
        f = torch.empty_like(g, dtype=torch.float32)
        return f, f.clone(), torch.empty_like(v), torch.empty_like(beta, dtype=torch.float32), f.clone(), \
            _meta(*v.shape[:3], 64)

    def gate_bwd(g, A_log=None, dt_bias=None, dyg=None, lower_bound=None):
        log.append("gate_bwd")
        return torch.empty_like(g), None if A_log is None else torch.empty_like(A_log), \
            None if dt_bias is None else torch.empty_like(dt_bias)
    if os.environ.get("KDART_FLA_VIA") == "registry":  # fla's stand-in dispatched as fla's own is
        from fla import backends
        wy_dqkg.__name__ = "chunk_kda_bwd_wy_dqkg_fused"
        wy_dqkg = backends.dispatch("kda")(wy_dqkg)
    for name, fn in (("kda_gate_chunk_cumsum", gate_cumsum), ("recompute_w_u_fwd", recompute_w_u),
                     ("chunk_gated_delta_rule_fwd_h", fwd_h), ("chunk_kda_bwd_dAv", dAv),
                     ("chunk_kda_bwd_wy_dqkg_fused", wy_dqkg), ("kda_gate_bwd", gate_bwd)):
        monkeypatch.setattr(chunk_bwd, name, fn)


# (io dtype, H, HV, K, V, varlen, state_v_first, use_gate_in_kernel, beta dtype, disable_recompute, chunk_size)
PROD = [
    (torch.bfloat16, 4, 4, 128, 128, True, False, True, torch.float32, False, 64),   # the production flags
    (torch.bfloat16, 4, 4, 128, 128, True, True, True, torch.float32, False, 64),    # + the V-first state
    (torch.float16, 2, 4, 128, 256, False, False, True, torch.float32, False, 64),   # fp16, GVA, K128 V256
    (torch.bfloat16, 4, 4, 100, 100, True, True, True, torch.float32, True, 64),     # D = 100, saved activations
    (torch.bfloat16, 4, 4, 128, 128, False, False, False, torch.bfloat16, False, 64),  # fla's test recipe
    (torch.bfloat16, 4, 4, 64, 64, False, False, False, torch.float32, False, 64),   # fp32 beta, log-space gate
    (torch.bfloat16, 4, 4, 128, 128, True, False, True, torch.float32, False, 32),   # chunk 32: fla's
]


@pytest.mark.parametrize("case", PROD, ids=lambda c: "{}-H{}-HV{}-K{}-V{}-{}{}-gate{}-beta{}-norec{}-C{}".format(
    str(c[0])[6:], c[1], c[2], c[3], c[4], "varlen" if c[5] else "fixed", "-vfirst" if c[6] else "", int(c[7]),
    str(c[8])[6:], int(c[9]), c[10]))
def test_production_config_routing(monkeypatch, case, caplog):
    """fla 0.6.0's chunk_kda_bwd run on a CPU machine with its other stages replaced by stand-ins, kdart's ops by
    recorders, and the tensors as chunk_kda hands them in each configuration (beta in fp32 when chunk_kda
    applies the beta sigmoid): kdart.fla takes bwd_intra, bwd_dhu and the folded dg cumsum with no fallback at
    chunk size 64, and wy_dqkg (fla's 32 stays fla's, counted)."""
    import kdart.torch as kt
    io, H, HV, K, V, varlen, svf, gate_in, beta_dt, norec, C = case
    log = []
    _standins(monkeypatch, log)
    monkeypatch.setattr(kf, "_is_cuda", lambda t: True)  # meta tensors stand in for CUDA ones

    def fake_intra(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg=False, emit_bf16=False, cu_seqlens=None,
                   chunk_indices=None):
        log.append(("kdart bwd_intra", beta.dtype, fold_dg))
        return torch.empty_like(dq), torch.empty_like(dk), torch.empty_like(db), torch.empty_like(dg)

    def fake_dhu(q, k, w, do, dv, gk, h0=None, dht=None, scale=None, cu_seqlens=None, chunk_indices=None,
                 chunk_offsets=None, state_v_first=False):
        log.append(("kdart bwd_dhu", state_v_first))
        B, T = q.shape[:2]
        S = (V, K) if state_v_first else (K, V)
        return _meta(B, (T + 63) // 64, HV, *S, dt=q.dtype), torch.empty_like(h0), torch.empty_like(dv)
    def fake_wy(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale=None, state_v_first=False, cu_seqlens=None,
                chunk_indices=None, chunk_offsets=None):
        log.append(("kdart wy_dqkg", beta.dtype, state_v_first))
        return (torch.empty_like(g), torch.empty_like(g), torch.empty_like(v), torch.empty_like(beta, dtype=g.dtype),
                torch.empty_like(g), torch.empty_like(A, dtype=g.dtype))
    monkeypatch.setattr(kt, "bwd_intra", fake_intra)
    monkeypatch.setattr(kt, "bwd_dhu", fake_dhu)
    monkeypatch.setattr(kt, "wy_dqkg", fake_wy)
    T, N = 300, 3
    B = 1 if varlen else 2
    n_seq = N if varlen else B
    q, k = _meta(B, T, H, K, dt=io), _meta(B, T, H, K, dt=io)
    v, do = _meta(B, T, HV, V, dt=io), _meta(B, T, HV, V, dt=io)
    S = (V, K) if svf else (K, V)
    h0, dht = _meta(n_seq, HV, *S), _meta(n_seq, HV, *S)
    beta = _meta(B, T, HV, dt=beta_dt)
    g_cum = _meta(B, T, HV, K)                     # the forward's g_cumsum (fp32), when the gate is not fused
    g_raw = _meta(B, T, HV, K, dt=io)              # the raw gate, when it is
    A_log, dt_bias = _meta(HV), _meta(HV * K)
    Aqk, Akk = _meta(B, T, HV, C, dt=io), _meta(B, T, HV, C, dt=io)  # (fla: k.dtype)
    cu = _meta(N + 1, dt=torch.int64) if varlen else None  # [0, 1, 100, 300]: on q's device, as fla's
    ci = _meta(1 + 2 + 4, 2, dt=torch.int64) if varlen else None
    co = _meta(N + 1, dt=torch.int64) if varlen else None
    saved = {}
    if norec:
        kk = _meta(B, T, HV, K, dt=io)
        saved = dict(w=kk, u=_meta(B, T, HV, V, dt=io), qg=kk.clone(), kg=kk.clone(), v_new=_meta(B, T, HV, V, dt=io),
                     h=_meta(B, (T + 63) // 64, HV, *S, dt=io))
    kf.reset_stats()
    with kf.enabled():
        orig = kf._state["orig"]
        keep = dict(orig)
        try:
            orig["chunk_kda_bwd_intra"] = lambda *x, **y: log.append("fla bwd_intra") or (x[6], x[7], x[8], x[9])
            orig["chunk_gated_delta_rule_bwd_dhu"] = lambda *x, **y: log.append("fla bwd_dhu") or (
                None, y["h0"], x[4])
            orig["chunk_local_cumsum"] = lambda *x, **y: log.append("fla cumsum") or x[0]
            with caplog.at_level(logging.WARNING, logger="kdart"):
                out = chunk_bwd.chunk_kda_bwd(
                    q=q, k=k, v=v, beta=beta, Aqk=Aqk, Akk=Akk, scale=K ** -0.5, initial_state=h0, do=do, dht=dht,
                    g=None if gate_in and not norec else g_cum, g_org=g_raw if gate_in else None,
                    state_v_first=svf, cu_seqlens=cu, chunk_indices=ci, chunk_size=C, safe_gate=gate_in,
                    lower_bound=-5.0 if gate_in else None, use_gate_in_kernel=gate_in, A_log=A_log if gate_in else None,
                    dt_bias=dt_bias if gate_in else None, disable_recompute=norec, chunk_offsets=co, **saved)
        finally:
            orig.update(keep)
        st = kf.stats()
    dq, dk, dv, db, dg, dh0, dA, dbias = out
    assert dq.shape == (B, T, H, K) and dk.shape == (B, T, H, K) and dg.shape == (B, T, HV, K)
    assert (dA is not None) == gate_in and (dbias is not None) == gate_in
    said = [r.getMessage() for r in caplog.records if r.name == "kdart.fla"]
    if C != 64:
        assert sorted(said) == [f"{s} falls back to fla (chunk_size=32)" for s in ("bwd_dhu", "bwd_intra", "wy_dqkg")]
        assert "fla bwd_intra" in log and "fla bwd_dhu" in log and "fla cumsum" in log
        assert st["served"] == {"bwd_intra": 0, "bwd_dhu": 0, "dg_cumsum_folded": 0, "wy_dqkg": 0}
        assert set(st["fallbacks"]) == {"bwd_intra: chunk_size=32", "bwd_dhu: chunk_size=32",
                                        "wy_dqkg: chunk_size=32"}
        return
    assert not [x for x in log if isinstance(x, str) and x.startswith("fla ")], log
    assert ("kdart bwd_intra", beta_dt, True) in log and ("kdart bwd_dhu", svf) in log
    assert ("kdart wy_dqkg", beta_dt, svf) in log and "wy_dqkg" not in log  # (the stand-in: fla's)
    assert st["served"] == {"bwd_intra": 1, "bwd_dhu": 1, "dg_cumsum_folded": 1, "wy_dqkg": 1}
    assert st["fallbacks"] == {} and said == []
    assert ("recompute_w_u" in log) == (not norec) and ("gate_bwd" in log) == gate_in


def test_beta_dtypes_routed():
    """bwd_intra's beta: the io dtype or fp32 are kdart's (each its own specialization); another dtype is fla's."""
    import kdart.fla as f
    a = _intra()
    old = f._is_cuda
    f._is_cuda = lambda t: True
    try:
        assert kf.intra_refusal(*a) is None
        a[3] = _meta(1, 128, 2)                       # fp32 beta: what chunk_kda's beta sigmoid hands the stage
        assert kf.intra_refusal(*a) is None
        a[3] = _meta(1, 128, 2, dt=torch.float16)     # fp16 beta beside bf16 q
        assert kf.intra_refusal(*a) == "mixed io dtypes (torch.bfloat16, torch.float16)"
        a[3] = _meta(1, 128, 2, dt=torch.float64)
        assert kf.intra_refusal(*a) == "mixed io dtypes (torch.bfloat16, torch.float64)"
    finally:
        f._is_cuda = old


def test_environment_switch():
    """FLA_KDART=1 turns kdart.fla on when a script imports fla's chunk_kda backward, with no code change
    (kdart._autoload, which the wheel's kdart-autoload.pth imports at start-up); FLA_KDART=0 makes
    enable() leave fla alone, and says so once."""
    import subprocess
    import sys
    script = ("import kdart._autoload, kdart.fla\n"  # (what the .pth does at start-up)
              "import fla.ops.kda.chunk_bwd as m\n"
              "print('enabled', kdart.fla.is_enabled(), m.chunk_kda_bwd_intra.__module__)\n")
    env = child_env(FLA_KDART="1")
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "enabled True kdart.fla" in r.stdout, r.stdout + r.stderr[-2000:]
    script0 = ("import logging, kdart.fla\n"
               "logging.basicConfig()\n"
               "kdart.fla.enable(); kdart.fla.enable()\n"
               "print('enabled', kdart.fla.is_enabled())\n")
    r = subprocess.run([sys.executable, "-c", script0], env=dict(env, FLA_KDART="0"), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "enabled False" in r.stdout, r.stdout + r.stderr[-2000:]
    assert r.stderr.count("FLA_KDART=0: kdart.fla.enable() leaves fla's functions in place") == 1, r.stderr


def test_registry_route():
    """kdart.fla.enable(via="registry"): kdart's backends in fla's own backend registry (fla.backends, dispatch
    on) serve the same calls, fold the same dg cumsum and fall back for the same reasons: the routing tests
    above, run again that way in a process of their own (fla reads its dispatch switch once, at import)."""
    import subprocess
    import sys
    env = child_env(KDART_FLA_VIA="registry")
    env.pop("FLA_DISABLE_BACKEND_DISPATCH", None)
    r = subprocess.run([sys.executable, "-m", "pytest", os.path.abspath(__file__), "-q", "-p", "no:cacheprovider",
                        "-k", "route_fold or routing or served or beta_dtypes"],
                       env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    # and, with dispatch off (this process), the registry route is refused with the reason
    with pytest.raises(RuntimeError, match="fla's backend dispatch is off"):
        kf.enable(via="registry")
    assert not kf.is_enabled()
