"""kdart.fla without a GPU: patching and restoring fla's names, the signature guard, acceptance checks."""
import os

import pytest

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
    """Issue 15: both stages at D = 60, 100, 256 pass every Python check (meta tensors: the device check),
    whatever the session-9 gate variable says, in either state layout; V past 512 falls back."""
    q = torch.empty(1, 128, 2, D, dtype=torch.bfloat16, device="meta")
    gk = torch.empty(1, 128, 2, D, device="meta")
    do = torch.empty(1, 128, 2, D, dtype=torch.bfloat16, device="meta")
    monkeypatch.setenv("KDART_EXPERIMENTAL", "0")
    assert kf.intra_refusal(*_intra(K=D)) == "not a CUDA tensor"
    assert kf.dhu_refusal(q, q, q, do, do, gk=gk) == "not a CUDA tensor"
    assert kf.dhu_refusal(q, q, q, do, do, gk=gk, state_v_first=True) == "not a CUDA tensor"
    big = torch.empty(1, 128, 2, 513, dtype=torch.bfloat16, device="meta")
    assert kf.dhu_refusal(q, q, q, big, big, gk=gk) == "V=513 (V > 512)"


def test_wrappers_route_fold_and_fall_back(monkeypatch):
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
            with pytest.warns(RuntimeWarning, match="kdart refused: ESHAPE"):
                chunk_bwd.chunk_kda_bwd_intra(*a, chunk_size=64)
            assert calls[-1] == ("fla", {"cu_seqlens": None, "chunk_indices": None, "chunk_size": 64,
                                         "safe_gate": False, "lower_bound": None, "use_graph": False})
        finally:
            orig.update(saved)
        st = kf.stats()
    assert st["served"] == {"bwd_intra": 4, "bwd_dhu": 0, "dg_cumsum_folded": 3}
    assert st["fallbacks"] == {"bwd_intra: kdart refused: ESHAPE": 1}
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
