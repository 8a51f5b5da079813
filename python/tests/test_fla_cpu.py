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

NAMES = ("chunk_kda_bwd_intra", "chunk_gated_delta_rule_bwd_dhu", "chunk_local_cumsum", "chunk_kda_bwd_wy_dqkg_fused",
         "chunk_kda_bwd_dAv", "chunk_gated_delta_rule_bwd_dhu_pre_process", "chunk_gated_delta_rule_fwd_h")
REGISTRY = os.environ.get("KDART_FLA_VIA") == "registry"  # (the dAv fusion is the names route's only)


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


def test_fwd_h_wrapped_in_both_modules(monkeypatch):
    """fla's chunk_gated_delta_rule_fwd_h is wrapped where chunk_kda_bwd calls it (the recompute) and where
    chunk_kda's forward does (the same contract), and put back in both; what kdart does not take falls back to
    fla's function with every argument (counted), the rest is kdart's."""
    import kdart.torch as kt
    chunk_fwd = pytest.importorskip("fla.ops.kda.chunk_fwd")
    orig = chunk_fwd.chunk_gated_delta_rule_fwd_h
    with kf.enabled():
        assert chunk_fwd.chunk_gated_delta_rule_fwd_h is not orig
        assert chunk_bwd.chunk_gated_delta_rule_fwd_h is chunk_fwd.chunk_gated_delta_rule_fwd_h
    assert chunk_fwd.chunk_gated_delta_rule_fwd_h is orig and chunk_bwd.chunk_gated_delta_rule_fwd_h is orig
    m = lambda *s, dt=torch.bfloat16: _meta(*s, dt=dt)  # noqa: E731
    k, w, u, gk = m(1, 128, 2, 128), m(1, 128, 4, 128), m(1, 128, 4, 64), m(1, 128, 4, 128, dt=torch.float32)
    monkeypatch.setattr(kf, "_is_cuda", lambda t: True)
    assert kf.fwdh_refusal(k, w, u, gk=gk) is None
    assert kf.fwdh_refusal(k, w, u, g=m(1, 128, 4, dt=torch.float32), gk=gk) == "the scalar gate g"
    assert kf.fwdh_refusal(k, w, u) == "no gate gk"
    assert kf.fwdh_refusal(k, w, u, gk=gk, chunk_size=32) == "chunk_size=32"
    assert kf.fwdh_refusal(m(1, 128, 2, 300), w, u, gk=gk) == "head dim K=300"
    assert kf.fwdh_refusal(k, w, m(1, 128, 4, 600), gk=gk) == "value dim V=600"
    assert kf.fwdh_refusal(k, w, m(1, 128, 3, 64), gk=gk) == "shape"
    assert kf.fwdh_refusal(k.float(), w, u, gk=gk) == "io dtype torch.float32"
    assert kf.fwdh_refusal(k, w, u, gk=gk.to(torch.bfloat16)) == "torch.bfloat16 where kdart takes float32"
    calls = []
    monkeypatch.setattr(kt, "chunk_gated_delta_rule_fwd_h", lambda *a, **kw: calls.append(("kdart", kw)) or "kd")
    for asked in (False, True):  # off by default: every call passes to fla, uncounted
        kf.reset_stats()
        calls.clear()
        with kf.enabled(fwd_h=asked):
            saved = dict(kf._state["orig"])
            try:
                kf._state["orig"]["chunk_gated_delta_rule_fwd_h"] = lambda *a, **kw: calls.append(("fla", kw)) or "fla"
                assert chunk_fwd.chunk_gated_delta_rule_fwd_h(k, w, u, gk=gk, output_final_state=True) == \
                    ("kd" if asked else "fla")
                assert chunk_bwd.chunk_gated_delta_rule_fwd_h(k, w, u, g=gk[..., 0], state_v_first=True) == "fla"
            finally:
                kf._state["orig"].update(saved)
            st = kf.stats()
        assert calls[0] == ("kdart" if asked else "fla", calls[0][1])
        assert calls[0][1]["output_final_state"] and calls[0][1]["gk"] is gk
        assert calls[1][0] == "fla" and calls[1][1]["state_v_first"] and calls[1][1]["g"] is not None
        assert st["served"]["fwd_h"] == int(asked)
        assert st["fallbacks"] == ({"fwd_h: the scalar gate g": 1} if asked else {})


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
    assert st["served"] == {"bwd_intra": 4, "bwd_dhu": 0, "dg_cumsum_folded": 3, "wy_dqkg": 0, "bwd_dAv": 0,
        "recompute_w_u": 0, "gate_cumsum": 0, "fwd_h": 0, "whole_backward": 0}
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




def kf_value_error(name="ESHAPE"):
    from kdart import KdartValueError, _lib
    return KdartValueError(_lib.status_of(name), name, f"{name}: test")


# ------------------------------------------------- the configuration people train with, routed

def _meta(*shape, dt=torch.float32):
    return torch.empty(*shape, dtype=dt, device="meta")


def _standins(monkeypatch, log):
    """fla's other stages in chunk_kda_bwd replaced by recorders that return meta tensors of the shapes and dtypes
    fla 0.6.0's kernels return (docs/chunk_kda_flags.md), so chunk_kda_bwd runs on a CPU machine."""
    def gate_cumsum(g, A_log, chunk_size, scale=None, dt_bias=None, cu_seqlens=None, output_dtype=torch.float,
                    chunk_indices=None, lower_bound=None, use_graph=False, **kwargs):  # fla's signature
        log.append("gate_cumsum")
        return torch.empty_like(g, dtype=torch.float32)

    def recompute_w_u(k, v, beta, A, gk, q=None, cu_seqlens=None, chunk_indices=None,
                      use_graph=False):  # fla's signature
        log.append("recompute_w_u")
        B, T, HV = v.shape[:3]
        kk = _meta(B, T, HV, k.shape[3], dt=k.dtype)
        return kk, torch.empty_like(v), kk.clone(), kk.clone()

    def fwd_h(k, w, u, g=None, gk=None, initial_state=None, output_final_state=False, chunk_size=64,
              save_new_value=True, state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, chunk_indices=None,
              chunk_offsets=None):  # fla's signature
        log.append("fwd_h")
        B, T, HV, K = k.shape
        V, NT = u.shape[3], (T + 63) // 64
        return _meta(B, NT, HV, *((V, K) if state_v_first else (K, V)), dt=k.dtype), torch.empty_like(u), None

    def dAv(q, k, v, do, A=None, scale=None, cu_seqlens=None, chunk_size=64, chunk_indices=None,
            use_graph=False):  # fla's signature
        out = _meta(*v.shape[:3], 64), torch.empty_like(do)
        log.append(("dAv", out))
        return out

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
        recompute_w_u.__name__ = "recompute_w_u_fwd"
        recompute_w_u = backends.dispatch("kda")(recompute_w_u)
        fwd_h.__name__ = "chunk_gated_delta_rule_fwd_h"
        fwd_h = backends.dispatch("common")(fwd_h)
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
    chunk size 64, and wy_dqkg (fla's 32 stays fla's, counted).  On the names route fla's chunk_kda_bwd_dAv is
    fused where it can be (K 64 or 128, V a multiple of 64): fla's never runs, bwd_dhu takes Aqk and bwd_intra
    wy_dqkg's dAqk; elsewhere kdart's own dAv kernel runs (on the registry route fla's), and its outputs reach
    both stages."""
    io, H, HV, K, V, varlen, svf, gate_in, beta_dt, norec, C = case
    log = []
    _standins(monkeypatch, log)
    monkeypatch.setattr(kf, "_is_cuda", lambda t: True)  # meta tensors stand in for CUDA ones

    _fakes(monkeypatch, log, K, V, HV)
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
    with kf.enabled(fwd_h=True):
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
    fla_dav = [x for x in log if x[0] == "dAv"]  # fla's chunk_kda_bwd_dAv (the stand-in) ran
    if C != 64:
        stages = ("bwd_dhu", "bwd_intra", "fwd_h", "recompute_w_u", "wy_dqkg") if REGISTRY else \
            ("bwd_dAv", "bwd_dhu", "bwd_intra", "fwd_h", "gate_cumsum", "recompute_w_u", "wy_dqkg")
        assert sorted(said) == [f"{s} falls back to fla (chunk_size=32)" for s in stages]
        assert "fla bwd_intra" in log and "fla bwd_dhu" in log and "fla cumsum" in log and len(fla_dav) == 1
        assert st["served"] == {"bwd_intra": 0, "bwd_dhu": 0, "dg_cumsum_folded": 0, "wy_dqkg": 0, "bwd_dAv": 0,
        "recompute_w_u": 0, "gate_cumsum": 0, "fwd_h": 0, "whole_backward": 0}
        assert set(st["fallbacks"]) == {f"{s}: chunk_size=32" for s in stages}
        return
    assert not [x for x in log if isinstance(x, str) and x.startswith("fla ")], log
    assert [x[:3] for x in log if x[0] == "kdart bwd_intra"] == [("kdart bwd_intra", beta_dt, True)]
    assert ("kdart bwd_dhu", svf) in log
    assert [x[:3] for x in log if x[0] == "kdart wy_dqkg"] == [("kdart wy_dqkg", beta_dt, svf)]
    assert "wy_dqkg" not in log  # (the stand-in: fla's)
    fused = not REGISTRY and K in (64, 128) and V % 64 == 0
    gate_fused = gate_in and not norec and not REGISTRY  # fla's gate cumsum in kdart's recompute launch
    assert st["served"] == {"bwd_intra": 1, "bwd_dhu": 1, "dg_cumsum_folded": 1, "wy_dqkg": 1,
                            "bwd_dAv": int(not REGISTRY),
                            "recompute_w_u": int(not norec), "gate_cumsum": int(gate_fused),
                            "fwd_h": int(not norec), "whole_backward": 0}
    assert [x[1] for x in log if x[0] == "kdart recompute_w_u"] == ([] if norec else [gate_fused])
    # the recompute of h and v_new: kdart's scan with chunk_kda_bwd's arguments (fla's stand-in never ran)
    assert "fwd_h" not in log
    assert [x[1:] for x in log if x[0] == "kdart fwd_h"] == ([] if norec else [(svf, h0, cu, ci, co)])
    assert "recompute_w_u" not in log and ("gate_cumsum" in log) == (gate_in and not norec and REGISTRY)
    assert ("gate_bwd" in log) == gate_in
    intra_dAqk = [x[3] for x in log if x[0] == "kdart bwd_intra"]
    dhu_dv = [x[1:] for x in log if x[0] == "dhu dv"]
    if fused:  # fla's dAv never ran: bwd_dhu took Aqk (no dv), bwd_intra wy_dqkg's dAqk
        assert not fla_dav and dhu_dv == [("Aqk", Aqk)], log
        assert [x[3] for x in log if x[0] == "kdart wy_dqkg"] == [True]
        assert intra_dAqk == [x[2] for x in log if x[0] == "wy dAqk"] and intra_dAqk[0].device.type == "meta"
        assert st["fallbacks"] == {} and said == []
    elif REGISTRY:  # fla's dAv ran, and its outputs went to bwd_dhu and bwd_intra
        (_, (dA, dv)), = fla_dav
        assert dhu_dv == [("dv", dv)] and intra_dAqk == [dA]
        assert st["fallbacks"] == {} and said == []
    else:  # not fusable (K = 100): kdart's own dAv kernel ran, and its outputs went to bwd_dhu and bwd_intra
        (dA, dv), = [x[1] for x in log if x[0] == "kdart bwd_dAv"]
        assert not fla_dav and dhu_dv == [("dv", dv)] and intra_dAqk == [dA]
        assert st["fallbacks"] == {} and said == []
    assert getattr(kf._tls, "dav", None) is None  # the record is gone once bwd_intra had its dAqk


def _fakes(monkeypatch, log, K, V, HV, refuse=()):
    """kdart.torch's stages replaced by recorders returning meta tensors of their outputs' shapes; the
    stages named in refuse raise kdart's ValueError ("dhu Aqk": only the fused bwd_dhu, "wy dAqk": only
    wy_dqkg with dAqk, "dav": kdart's own dAv kernel)."""
    import kdart.torch as kt

    def fake_intra(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg=False, emit_bf16=False, cu_seqlens=None,
                   chunk_indices=None):
        log.append(("kdart bwd_intra", beta.dtype, fold_dg, dAqk))
        return torch.empty_like(dq), torch.empty_like(dk), torch.empty_like(db), torch.empty_like(dg)

    def fake_dhu(q, k, w, do, dv, gk, h0=None, dht=None, scale=None, cu_seqlens=None, chunk_indices=None,
                 chunk_offsets=None, state_v_first=False, Aqk=None):
        assert (dv is None) != (Aqk is None)
        if "dhu Aqk" in refuse and Aqk is not None:
            raise kf_value_error("EUNSUPPORTED")
        log.append(("kdart bwd_dhu", state_v_first))
        log.append(("dhu dv", ) + (("Aqk", Aqk) if dv is None else ("dv", dv)))
        B, T = q.shape[:2]
        S = (V, K) if state_v_first else (K, V)
        return (_meta(B, (T + 63) // 64, HV, *S, dt=q.dtype), None if h0 is None else torch.empty_like(h0),
                torch.empty_like(do))

    def fake_wy(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale=None, state_v_first=False, cu_seqlens=None,
                chunk_indices=None, chunk_offsets=None, dAqk=False):
        if "wy dAqk" in refuse and dAqk:
            raise kf_value_error()
        if "wy boom" in refuse:
            raise RuntimeError("boom")
        log.append(("kdart wy_dqkg", beta.dtype, state_v_first, dAqk))
        out = (torch.empty_like(g), torch.empty_like(g), torch.empty_like(v), torch.empty_like(beta, dtype=g.dtype),
               torch.empty_like(g), torch.empty_like(A, dtype=g.dtype))
        if dAqk:
            out += (torch.empty_like(A, dtype=torch.float32),)
            log.append(("wy dAqk", None, out[6]))
        return out
    def fake_rwu(k, v, beta, A, gk=None, q=None, g_raw=None, A_log=None, dt_bias=None, lower_bound=None,
                 cu_seqlens=None, chunk_indices=None, g_out=None):
        log.append(("kdart recompute_w_u", g_raw is not None, lower_bound))
        B, T, HV = v.shape[:3]
        kk = _meta(B, T, HV, k.shape[3], dt=k.dtype)
        return g_out, kk, torch.empty_like(v), kk.clone(), kk.clone()

    def fake_dav(q, k, v, do, A=None, scale=None, cu_seqlens=None, chunk_size=64, chunk_indices=None,
                 use_graph=False):  # kdart.torch.bwd_dAv's signature (fla's)
        if "dav" in refuse:
            raise kf_value_error("EUNSUPPORTED")
        out = _meta(*do.shape[:3], 64), torch.empty_like(do)
        log.append(("kdart bwd_dAv", out))
        return out

    monkeypatch.setattr(kt, "bwd_intra", fake_intra)
    monkeypatch.setattr(kt, "bwd_dhu", fake_dhu)
    monkeypatch.setattr(kt, "wy_dqkg", fake_wy)
    def fake_fwdh(k, w, u, g=None, gk=None, initial_state=None, output_final_state=False, chunk_size=64,
                  save_new_value=True, state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, chunk_indices=None,
                  chunk_offsets=None):  # kdart.torch.chunk_gated_delta_rule_fwd_h's signature (fla's)
        if "fwd_h" in refuse:
            raise kf_value_error("EUNSUPPORTED")
        assert g is None and gk is not None and not output_final_state
        log.append(("kdart fwd_h", state_v_first, initial_state, cu_seqlens, chunk_indices, chunk_offsets))
        B, T = u.shape[:2]
        S = (V, K) if state_v_first else (K, V)
        NT = chunk_indices.shape[0] if chunk_indices is not None else (T + 63) // 64
        return _meta(B, NT, HV, *S, dt=u.dtype), torch.empty_like(u), None

    monkeypatch.setattr(kt, "bwd_dAv", fake_dav)
    monkeypatch.setattr(kt, "chunk_gated_delta_rule_fwd_h", fake_fwdh)
    # the dAv grid rule accepts these grids, as where no CUDA device can answer it; on a GPU machine the
    # device's answer for these small grids would keep the dAv unfused (test_dav_grid_refusal covers the rule)
    monkeypatch.setattr(kt, "dav_grid_refusal", lambda N, HV, K, V, packed, device=None: None)
    monkeypatch.setattr(kt, "_rwu_impl", fake_rwu)
    monkeypatch.setattr(kt, "_eager", lambda t: True)
    monkeypatch.setattr(kt, "recompute_w_u", lambda k, v, beta, A, gk, q=None, cu_seqlens=None, chunk_indices=None:
                        fake_rwu(k, v, beta, A, gk, q, cu_seqlens=cu_seqlens)[1:])


# ------------------------------------------------- fla's chunk_kda_bwd_dAv, fused (names route)

def _dav_backward(monkeypatch, log, times=1, **kw):
    """fla's chunk_kda_bwd (varlen, bf16, the gate and beta sigmoid in chunk_kda) with fla's other stages as
    stand-ins and kdart's as recorders (_dav_setup), run times with kdart.fla enabled -> the stats, the log."""
    run = _dav_setup(monkeypatch, log, **kw)
    kf.reset_stats()
    with kf.enabled(fwd_h=True):
        for _ in range(times):
            run()
            assert getattr(kf._tls, "dav", None) is None  # cleaned once bwd_intra had its dAqk
        st = kf.stats()
    return st, log


def _dav_setup(monkeypatch, log, refuse=(), cp=False, K=128, V=128, fla_dhu=False, fla_wy=False):
    """fla's stages as stand-ins and kdart's as recorders (_fakes); refuse: kdart refusals (_fakes), fla_dhu /
    fla_wy: kdart.fla's Python checks refuse bwd_dhu / wy_dqkg (reason "test"); cp: a cp_context (fla's pre-pass
    a recorder).  The fla stages the wrappers fall back to log ("fla <stage>", the dv or dA they got).  -> a
    function running chunk_kda_bwd once (kdart.fla enabled)."""
    H = HV = 4
    T, N = 300, 3
    _standins(monkeypatch, log)
    _fakes(monkeypatch, log, K, V, HV, refuse)
    monkeypatch.setattr(kf, "_is_cuda", lambda t: True)
    if fla_dhu:
        monkeypatch.setattr(kf, "dhu_refusal", lambda *a, **k: "test")
    if fla_wy:
        monkeypatch.setattr(kf, "wy_refusal", lambda *a, **k: "test")

    def pre_process(q, k, w, do, dv, g=None, gk=None, bg=None, scale=None, state_v_first=False, cu_seqlens=None,
                    dht=None, initial_state=None, context=None, chunk_size=64, use_graph=False):  # fla's signature
        log.append(("fla pre_process", dv))
        return dht, initial_state
    monkeypatch.setattr(chunk_bwd, "chunk_gated_delta_rule_bwd_dhu_pre_process", pre_process)
    monkeypatch.setattr(chunk_bwd, "expand_h0", lambda h0, context: h0)
    io = torch.bfloat16
    q, k = _meta(1, T, H, K, dt=io), _meta(1, T, H, K, dt=io)
    v, do = _meta(1, T, HV, V, dt=io), _meta(1, T, HV, V, dt=io)
    h0, dht = _meta(N, HV, K, V), _meta(N, HV, K, V)
    args = dict(q=q, k=k, v=v, beta=_meta(1, T, HV), Aqk=_meta(1, T, HV, 64, dt=io), Akk=_meta(1, T, HV, 64, dt=io),
                scale=K ** -0.5, initial_state=h0, do=do, dht=dht, g=None, g_org=_meta(1, T, HV, K, dt=io),
                cu_seqlens=_meta(N + 1, dt=torch.int64), chunk_indices=_meta(7, 2, dt=torch.int64), safe_gate=True,
                lower_bound=-5.0, use_gate_in_kernel=True, A_log=_meta(HV), dt_bias=_meta(HV * K),
                chunk_offsets=_meta(N + 1, dt=torch.int64), cp_context=object() if cp else None)

    def run():
        orig = kf._state["orig"]
        keep = dict(orig)
        try:
            orig["chunk_kda_bwd_intra"] = lambda *x, **y: log.append(("fla bwd_intra", x[4])) or x[6:10]
            orig["chunk_gated_delta_rule_bwd_dhu"] = lambda *x, **y: log.append(("fla bwd_dhu", x[4])) or (
                _meta(1, 5, HV, K, V, dt=io), y["h0"], torch.empty_like(x[4]))
            return chunk_bwd.chunk_kda_bwd(**args)
        finally:
            orig.update(keep)
    return run


def _fla_dav(log):
    """The outputs of each run of fla's chunk_kda_bwd_dAv (the stand-in)."""
    return [x[1] for x in log if x[0] == "dAv"]


def _got(log, stage):
    return [x[1:] for x in log if x[0] == stage]


@pytest.mark.skipif(REGISTRY, reason="the dAv fusion is the names route's")
def test_dav_fused_twice(monkeypatch):
    """Two backward calls, both fused: fla's dAv never runs, bwd_dhu takes Aqk, bwd_intra gets wy_dqkg's dAqk,
    the record is gone after each call; two bwd_dAv served, no fallback."""
    st, log = _dav_backward(monkeypatch, [], times=2)
    assert not _fla_dav(log) and [x[0] for x in _got(log, "dhu dv")] == ["Aqk", "Aqk"]
    assert [x[3] for x in log if x[0] == "kdart bwd_intra"] == [x[1] for x in _got(log, "wy dAqk")]
    assert st["served"] == {"bwd_intra": 2, "bwd_dhu": 2, "dg_cumsum_folded": 2, "wy_dqkg": 2, "bwd_dAv": 2,
        "recompute_w_u": 2, "gate_cumsum": 2, "fwd_h": 2, "whole_backward": 0}
    assert st["fallbacks"] == {}


@pytest.mark.skipif(REGISTRY, reason="the dAv fusion is the names route's")
@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "kernel-refuses"])
@pytest.mark.parametrize("case", ["fla_dhu", "dhu Aqk", "fla_wy", "wy dAqk", "cp"])
def test_dav_materialized_on_fallback(monkeypatch, caplog, case, kernel):
    """Where a half of the fused dAv cannot be fused, the deferred chunk_kda_bwd_dAv runs once on the same
    inputs and each later consumer gets its outputs in the stand-ins' place: bwd_dhu falls back to fla
    (dhu_refusal) or kdart refuses its fused form (then kdart's unfused bwd_dhu serves it); wy_dqkg falls back
    (wy_refusal, or kdart refuses it); fla's context-parallel pre-pass (cp_context) reads dv first.  kdart's own
    dAv kernel runs it (one bwd_dAv served, no fallback); where kdart refuses that too, fla's runs: one bwd_dAv
    fallback, counted with both reasons and warned once."""
    refuse = (case,) if kernel else (case, "dav")
    with caplog.at_level(logging.WARNING, logger="kdart"):
        st, log = _dav_backward(monkeypatch, [], refuse=refuse, cp=case == "cp", fla_dhu=case == "fla_dhu",
                                fla_wy=case == "fla_wy")
    ran = [x[1] for x in log if x[0] == "kdart bwd_dAv"]
    assert len(ran) == int(kernel) and len(_fla_dav(log)) == int(not kernel), log
    (dA, dv), = ran if kernel else _fla_dav(log)
    intra = [x[3] for x in log if x[0] == "kdart bwd_intra"]
    assert intra == [dA]  # bwd_intra got the materialized dA, whoever computed the rest
    reason = {"fla_dhu": "bwd_dhu not served (test)", "dhu Aqk": "kdart refused the fused bwd_dhu: EUNSUPPORTED",
              "fla_wy": "wy_dqkg not served", "wy dAqk": "wy_dqkg not served",
              "cp": "context parallel (cp_context)"}[case] + "; kdart refused: EUNSUPPORTED"
    said = [r.getMessage() for r in caplog.records if r.name == "kdart.fla"]
    if kernel:
        assert st["served"]["bwd_dAv"] == 1 and not [r for r in st["fallbacks"] if r.startswith("bwd_dAv")], st
        assert not [m for m in said if m.startswith("bwd_dAv")]
    else:
        assert st["fallbacks"].get(f"bwd_dAv: {reason}") == 1 and st["served"]["bwd_dAv"] == 0, st
        assert f"bwd_dAv falls back to fla ({reason})" in said
    if case in ("fla_wy", "wy dAqk"):  # bwd_dhu was fused; wy_dqkg fell back to fla's (the stand-in)
        assert [x[0] for x in _got(log, "dhu dv")] == ["Aqk"]
        assert "wy_dqkg" in log and st["served"]["bwd_dhu"] == 1
        wy_why = "wy_dqkg: " + ("test" if case == "fla_wy" else "kdart refused: ESHAPE")
        assert st["fallbacks"] == ({wy_why: 1} if kernel else {f"bwd_dAv: {reason}": 1, wy_why: 1})
    elif case == "fla_dhu":
        assert _got(log, "fla bwd_dhu") == [(dv,)] and not _got(log, "dhu dv")
    else:  # kdart's unfused bwd_dhu took the materialized dv (after fla's pre-pass, which got it too)
        assert _got(log, "dhu dv") == [("dv", dv)] and st["served"]["bwd_dhu"] == 1
        assert _got(log, "fla pre_process") == ([(dv,)] if case == "cp" else [])
    if case not in ("fla_wy", "wy dAqk"):  # wy_dqkg: kdart's, without dAqk
        assert [x[3] for x in log if x[0] == "kdart wy_dqkg"] == [False]


@pytest.mark.skipif(REGISTRY, reason="the dAv fusion is the names route's")
def test_dav_unfused_by_kernel(monkeypatch, caplog):
    """A backward whose dAv cannot be fused (K = 100; V = 96) runs kdart's own dAv kernel where fla's would run:
    fla's never runs, bwd_dhu gets the kernel's dv and bwd_intra its dA; served, no fallback, nothing warned."""
    for K, V in ((100, 128), (128, 96)):
        with caplog.at_level(logging.WARNING, logger="kdart"):
            st, log = _dav_backward(monkeypatch, [], K=K, V=V)
        (dA, dv), = [x[1] for x in log if x[0] == "kdart bwd_dAv"]
        assert not _fla_dav(log) and _got(log, "dhu dv") == [("dv", dv)]
        assert [x[3] for x in log if x[0] == "kdart bwd_intra"] == [dA]
        assert st["served"]["bwd_dAv"] == 1 and st["fallbacks"] == {}, st
        assert not [r for r in caplog.records if r.name == "kdart.fla"]


@pytest.mark.skipif(REGISTRY, reason="the dAv fusion is the names route's")
def test_dav_stale_record_and_direct_call(monkeypatch):
    """A backward that raises between the deferred dAv and bwd_intra leaves a record that holds nothing (weak
    references; its outputs go with its stand-ins) and the next backward replaces it; a call of
    chunk_kda_bwd_dAv from anywhere but chunk_kda_bwd is not deferred: kdart's own dAv kernel runs it (served),
    or, where that does not take it (chunk size 32), fla's function (counted)."""
    import gc
    with monkeypatch.context() as m:
        broken = _dav_setup(m, [], refuse=("wy boom",))  # kdart's wy_dqkg raises, after bwd_dhu took Aqk
        with kf.enabled():
            with pytest.raises(RuntimeError, match="boom"):
                broken()
            rec = kf._tls.dav
            assert rec is not None and rec.dv_fused and rec.dA_out is None
            gc.collect()
            assert rec.dA() is None and rec.inputs[2]() is None  # v_new (chunk_kda_bwd's own) is gone, not kept
            # the next backward replaces the stale record
            kf.reset_stats()
            with pytest.raises(RuntimeError, match="boom"):
                broken()
            assert kf._tls.dav is not rec and kf.stats()["served"]["bwd_dhu"] == 1
        assert getattr(kf._tls, "dav", None) is None  # disable() dropped the thread's record
    st, log = _dav_backward(monkeypatch, [])
    assert st["served"]["bwd_dAv"] == 1 and st["fallbacks"] == {}
    # direct calls: kdart's kernel, then fla's at chunk size 32
    log = []
    _standins(monkeypatch, log)
    _fakes(monkeypatch, log, 128, 128, 4)
    monkeypatch.setattr(kf, "_is_cuda", lambda t: True)
    io = torch.bfloat16
    q, do = _meta(1, 128, 4, 128, dt=io), _meta(1, 128, 4, 128, dt=io)
    kf.reset_stats()
    with kf.enabled():
        got = chunk_bwd.chunk_kda_bwd_dAv(q, q.clone(), do.clone(), do, A=_meta(1, 128, 4, 64, dt=io), scale=0.1)
        fla = chunk_bwd.chunk_kda_bwd_dAv(q, q.clone(), do.clone(), do, A=_meta(1, 128, 4, 32, dt=io), scale=0.1,
                                          chunk_size=32)
        st = kf.stats()
    assert [x[1] for x in log if x[0] == "kdart bwd_dAv"] == [got] and _fla_dav(log) == [fla]
    assert getattr(kf._tls, "dav", None) is None
    assert st["served"]["bwd_dAv"] == 1 and st["fallbacks"] == {"bwd_dAv: chunk_size=32": 1}


def test_dav_refusal_reasons():
    """dav_refusal: what the fused dAv takes; dav_standalone_refusal: what kdart's own dAv kernel takes (meta
    tensors stop at the device check)."""
    io = torch.bfloat16
    q, v, A = _meta(1, 128, 2, 128, dt=io), _meta(1, 128, 4, 128, dt=io), _meta(1, 128, 4, 64, dt=io)
    assert kf.dav_refusal(q, q, v, v, A, 0.1) == "not a CUDA tensor"
    assert kf.dav_refusal(q, q, v, v, None, 0.1) == "no A or no scale"
    assert kf.dav_refusal(q, q, v, v, A, 0.1, chunk_size=32) == "chunk_size=32"
    q100 = _meta(1, 128, 2, 100, dt=io)
    assert kf.dav_refusal(q100, q100, v, v, A, 0.1) == "head dim K=100 (the fused dAv takes K 64 or 128)"
    v96 = _meta(1, 128, 4, 96, dt=io)
    assert kf.dav_refusal(q, q, v96, v96, A, 0.1) == "V=96 (the fused dAv takes V a multiple of 64, up to 512)"
    assert kf.dav_refusal(q, q, v, v, A[..., :32], 0.1) == "shape"
    # kdart's own dAv kernel: any K (q, k only size the call), any V up to 512, packed sequences
    sr = kf.dav_standalone_refusal
    assert sr(q100, q100, v96, v96, A, 0.1) == "not a CUDA tensor"
    assert sr(_meta(1, 128, 2, 300, dt=io), q, v, v, A, 0.1) == "not a CUDA tensor"
    cu = _meta(3, dt=torch.int64)
    assert sr(q, q, v, v, A, 0.1, cu_seqlens=cu, chunk_indices=_meta(4, 2, dt=torch.int64), use_graph=True) == \
        "not a CUDA tensor"
    assert sr(q, q, v, v, None, 0.1) == "no A or no scale"
    assert sr(q, q, v, v, A, None) == "no A or no scale"
    assert sr(q, q, v, v, A, 0.1, chunk_size=32) == "chunk_size=32"
    assert sr(q, q, v, v, A, 0.1, chunk_indices=cu) == "chunk_indices without cu_seqlens"
    assert sr(q, q, v, v, A[..., :32], 0.1) == "shape"
    assert sr(q, q, v, v96, A, 0.1) == "shape"
    v513 = _meta(1, 128, 4, 513, dt=io)
    assert sr(q, q, v513, v513, A, 0.1) == "V=513 (V > 512)"
    v2 = _meta(2, 128, 4, 128, dt=io)
    assert sr(q, q, v2, v2, _meta(2, 128, 4, 64, dt=io), 0.1, cu_seqlens=cu) == \
        "cu_seqlens not on do's device or B != 1"
    old = kf._is_cuda
    kf._is_cuda = lambda t: True
    try:
        assert sr(q, q, v, v, A, 0.1) is None
        assert sr(q, q, v.float(), v.float(), A.float(), 0.1) == "io dtype torch.float32"
        assert sr(q, q, v.half(), v, A, 0.1) == "mixed io dtypes (torch.bfloat16, torch.float16)"
    finally:
        kf._is_cuda = old


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


def test_dav_grid_refusal(monkeypatch):
    """The fused dAv only where bwd_dhu picks its V tile 64 anyway (kdart_dhu_v_tile), and on packed
    sequences only on grids of more than 4 waves of 64-column scans (where bwd_dhu does not split tiles)."""
    picks = {}

    class Rt:
        def dhu_v_tile(self, N, HV, K, V):
            picks[(N, HV, K, V)] = True
            return 64 if N * HV * (V // 64) >= 128 else 16

    import kdart.torch as kt
    monkeypatch.setattr(kf._lib, "runtime", lambda: Rt())
    monkeypatch.setattr(kt, "_tiles", {})
    monkeypatch.setattr(kt, "_sms", {None: 132})
    assert kf.dav_grid_refusal(2, 32, 128, 128, False) is None
    assert kf.dav_grid_refusal(2, 4, 128, 128, False) == \
        "bwd_dhu runs a V tile of 16 on this grid (the fused dAv runs it at 64)"
    assert kf.dav_grid_refusal(7, 32, 128, 128, True) == kt.PACKED_SMALL  # 448 scans: at most 4 waves
    assert kf.dav_grid_refusal(63, 32, 128, 128, True) is None            # 4032 scans
    assert (2, 32, 128, 128) in picks

    class NoCuda:
        def dhu_v_tile(self, *a):
            raise RuntimeError("ENOCUDA")

    monkeypatch.setattr(kf._lib, "runtime", lambda: NoCuda())
    monkeypatch.setattr(kt, "_tiles", {})
    monkeypatch.setattr(kt, "_sms", {})
    assert kf.dav_grid_refusal(1, 1, 64, 64, False) is None  # unknown here: bwd_dhu decides by itself


def test_whole_backward_route(monkeypatch):
    """enable(whole=True) puts kdart's whole backward on fla's ChunkKDAFunction (and disable() puts fla's back);
    a backward kdart takes goes to kdart.torch.chunk_kda_bwd with what the forward saved and the flags, and
    returns fla's 25 gradients; one it refuses (context parallelism) goes to fla's own, counted."""
    import types
    import kdart.torch as kt
    chunk = pytest.importorskip("fla.ops.kda.chunk")
    orig = chunk.ChunkKDAFunction.backward
    with kf.enabled(whole=True):
        assert chunk.ChunkKDAFunction.backward is not orig
    assert chunk.ChunkKDAFunction.backward is orig
    B, T, H, HV, K, V = 1, 128, 2, 4, 64, 64
    m = lambda *s, dt=torch.bfloat16: _meta(*s, dt=dt)  # noqa: E731
    saved = dict(q=m(B, T, H, K), q_rstd=m(B, T, H, dt=torch.float32), k=m(B, T, H, K),
                 k_rstd=m(B, T, H, dt=torch.float32), v=m(B, T, HV, V), g_cumsum=None, g_input=m(B, T, HV, K),
                 beta_raw=m(B, T, HV), beta=m(B, T, HV, dt=torch.float32), A_log=m(HV, dt=torch.float32),
                 dt_bias=m(HV * K, dt=torch.float32), Aqk=m(B, T, HV, 64), Akk=m(B, T, HV, 64), w=None, u=None,
                 qg=None, kg=None, v_new=None, h=None, initial_state=m(B, HV, K, V, dt=torch.float32),
                 cu_seqlens=None, chunk_indices=None, chunk_offsets=None)
    ctx = types.SimpleNamespace(saved_tensors=tuple(saved[n] for n in kf._SAVED), chunk_size=64, scale=0.125,
                                use_gate_in_kernel=True, lower_bound=-5.0, use_beta_sigmoid_in_kernel=True,
                                allow_neg_eigval=True, state_v_first=False, disable_recompute=False, cp_context=None,
                                use_qk_l2norm_in_kernel=True)
    do, dht = m(B, T, HV, V), m(B, HV, K, V, dt=torch.float32)
    calls = []
    monkeypatch.setattr(kf, "_is_cuda", lambda t: True)
    monkeypatch.setattr(kt, "chunk_kda_bwd", lambda *a, **kw: calls.append((a, kw)) or tuple(range(8)))
    kf.reset_stats()
    with kf.enabled(whole=True):
        fla_calls = []
        kf._state["whole"] = (kf._state["whole"][0], lambda *a: fla_calls.append(a) or "fla")
        try:
            out = kf._whole_backward(ctx, do, dht)
            assert out[:9] == (0, 1, 2, 3, 4, 5, 6, None, 7) and out[9:] == (None,) * 16
            a, kw = calls[0]
            assert a[0] is saved["q"] and a[3] is saved["g_input"] and a[7] is do and a[8] is dht
            assert kw["q_rstd"] is saved["q_rstd"] and kw["A_log"] is saved["A_log"] and kw["lower_bound"] == -5.0
            assert kw["use_gate_in_kernel"] and kw["allow_neg_eigval"] and kw["beta_raw"] is saved["beta_raw"]
            assert "w" not in kw  # the recompute runs in kdart
            ctx.cp_context = object()
            assert kf._whole_backward(ctx, do, dht) == "fla" and len(fla_calls) == 1
        finally:
            kf._state["whole"] = (kf._state["whole"][0], orig)
        st = kf.stats()
    assert chunk.ChunkKDAFunction.backward is orig
    assert st["served"]["whole_backward"] == 1
    assert st["fallbacks"] == {"whole_backward: context parallelism (cp_context)": 1}


def test_whole_backward_auto(monkeypatch):
    """enable()'s default whole="auto": kdart's whole backward whether chunk_kda runs an epilogue in the
    kernel (here the l2norm: q_rstd saved) or none; whole=False leaves fla's backward alone."""
    import types
    import kdart.torch as kt
    chunk = pytest.importorskip("fla.ops.kda.chunk")
    orig = chunk.ChunkKDAFunction.backward
    with kf.enabled(whole=False):
        assert chunk.ChunkKDAFunction.backward is orig
    B, T, H, HV, K, V = 1, 128, 2, 2, 64, 64
    m = lambda *s, dt=torch.bfloat16: _meta(*s, dt=dt)  # noqa: E731
    saved = {n: None for n in kf._SAVED}
    saved.update(q=m(B, T, H, K), k=m(B, T, H, K), v=m(B, T, HV, V), g_cumsum=m(B, T, HV, K, dt=torch.float32),
                 g_input=m(B, T, HV, K, dt=torch.float32), beta=m(B, T, HV), Aqk=m(B, T, HV, 64),
                 Akk=m(B, T, HV, 64))
    flags = dict(chunk_size=64, scale=0.125, use_gate_in_kernel=False, lower_bound=None,
                 use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, state_v_first=False,
                 disable_recompute=False, cp_context=None)
    do = m(B, T, HV, V)
    calls = []
    monkeypatch.setattr(kf, "_is_cuda", lambda t: True)
    monkeypatch.setattr(kt, "chunk_kda_bwd", lambda *a, **kw: calls.append((a, kw)) or tuple(range(8)))
    kf.reset_stats()
    with kf.enabled():
        assert chunk.ChunkKDAFunction.backward is not orig
        fla_calls = []
        kf._state["whole"] = (kf._state["whole"][0], lambda *a: fla_calls.append(a) or "fla")
        try:
            ctx = types.SimpleNamespace(saved_tensors=tuple(saved[n] for n in kf._SAVED), **flags)
            out = kf._whole_backward(ctx, do, None)
            assert out[:9] == (0, 1, 2, 3, 4, 5, 6, None, 7) and len(calls) == 1 and not fla_calls
            saved.update(q_rstd=m(B, T, H, dt=torch.float32), k_rstd=m(B, T, H, dt=torch.float32))
            ctx = types.SimpleNamespace(saved_tensors=tuple(saved[n] for n in kf._SAVED), **flags)
            out = kf._whole_backward(ctx, do, None)
            assert out[:9] == (0, 1, 2, 3, 4, 5, 6, None, 7) and len(calls) == 2 and not fla_calls
        finally:
            kf._state["whole"] = (kf._state["whole"][0], orig)
        st = kf.stats()
    assert chunk.ChunkKDAFunction.backward is orig
    assert st["served"]["whole_backward"] == 2 and st["fallbacks"] == {}
    with pytest.raises(ValueError, match="whole"):
        kf.enable(whole="sometimes")
    kf.disable()
