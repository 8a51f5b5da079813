"""kdart.torch on a GPU: both ops against the float64 references, torch.compile and CUDA-graph replay
bitwise equal to eager, a second device.  Skips without CUDA."""
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import kdart.torch as kt  # noqa: E402
from kda_ref import (bwd_dhu_ref, bwd_dhu_ref_varlen, bwd_intra_ref, bwd_intra_ref_varlen,  # noqa: E402
                     chunk_indices, chunk_offsets, dhu_inputs, intra_inputs, rel_rms, varlen_dhu_inputs,
                     varlen_intra_inputs)

IOS = [torch.bfloat16, torch.float16]


@pytest.mark.parametrize("io", IOS, ids=["bf16", "fp16"])
@pytest.mark.parametrize("K", [64, 128])
@pytest.mark.parametrize("fold,emit,H,HV", [(False, False, 2, 4), (True, False, 2, 4), (True, True, 3, 3)])
def test_bwd_intra_vs_float64(io, K, fold, emit, H, HV):
    torch.manual_seed(0)
    a = intra_inputs(2, 192, H, HV, K, io, "cuda")
    before = [t.clone() for t in a]
    out = kt.bwd_intra(*a, fold_dg=fold, emit_bf16=emit)
    ref = bwd_intra_ref(*a, fold_dg=fold)
    assert all(torch.equal(x, y) for x, y in zip(a, before))  # inputs untouched
    for name, o, r, tol in zip(("dq", "dk", "db", "dg"), out, ref, (2e-3, 2e-3, 2e-3, 2e-3)):
        if emit and name in ("dq", "dk"):
            assert o.dtype == io
            tol = 1e-2
        assert o.shape == r.shape
        assert rel_rms(o, r) < tol, (name, rel_rms(o, r))


@pytest.mark.parametrize("io", IOS, ids=["bf16", "fp16"])
@pytest.mark.parametrize("K,V", [(64, 64), (128, 128), (128, 256)])
@pytest.mark.parametrize("with_h0,with_dht", [(True, True), (False, True), (True, False)])
def test_bwd_dhu_vs_float64(io, K, V, with_h0, with_dht):
    torch.manual_seed(1)
    a, h0, dht = dhu_inputs(2, 256, 4, K, V, io, "cuda")
    h0 = h0 if with_h0 else None
    dht = dht if with_dht else None
    dh, dh0, dv2 = kt.bwd_dhu(*a, h0=h0, dht=dht, scale=K ** -0.5)
    rdh, rdh0, rdv2 = bwd_dhu_ref(*a, h0=h0, dht=dht, scale=K ** -0.5)
    assert dh.dtype == io and dv2.dtype == io
    assert rel_rms(dh, rdh) < 1e-2 and rel_rms(dv2, rdv2) < 1e-2
    if with_h0:
        assert dh0.dtype == torch.float32 and rel_rms(dh0, rdh0) < 1e-2
    else:
        assert dh0 is None


def _both(a, d, h0, dht):
    dq, dk, db, dg = kt.bwd_intra(*a, fold_dg=True)
    dh, dh0, dv2 = kt.bwd_dhu(*d, h0=h0, dht=dht, scale=0.125)
    return dq, dk, db, dg, dh, dh0, dv2


def _inputs():
    torch.manual_seed(2)
    a = intra_inputs(1, 256, 2, 4, 128, torch.bfloat16, "cuda")
    d, h0, dht = dhu_inputs(1, 256, 4, 128, 128, torch.bfloat16, "cuda")
    return a, d, h0, dht


def test_compile_fullgraph_bitwise():
    a, d, h0, dht = _inputs()
    eager = _both(a, d, h0, dht)
    compiled = torch.compile(_both, fullgraph=True)(a, d, h0, dht)
    assert all(torch.equal(x, y) for x, y in zip(eager, compiled))


def test_cuda_graph_bitwise():
    a, d, h0, dht = _inputs()
    kt.prepare_for(kt.bwd_intra, *a, fold_dg=True)
    kt.prepare_for(kt.bwd_dhu, *d, h0=h0, dht=dht, scale=0.125)
    eager = _both(a, d, h0, dht)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        _both(a, d, h0, dht)  # warm-up on the side stream, as torch's docs ask
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = _both(a, d, h0, dht)
    graph.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(x, y) for x, y in zip(eager, outs))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_second_device():
    a, d, h0, dht = _inputs()
    ref = _both(a, d, h0, dht)
    with torch.cuda.device(0):
        out = _both(*[[t.to("cuda:1") for t in x] if isinstance(x, list) else x.to("cuda:1")
                      for x in (a, d, h0, dht)])
    torch.cuda.synchronize(1)
    assert all(o.device.index == 1 for o in out)
    assert all(torch.equal(x.cpu(), y.cpu()) for x, y in zip(ref, out))


# ------------------------------------------------------------- variable length, partial chunks

VARLEN_CUS = [[0, 15], [0, 256, 500, 1000], [0, 15, 100, 300, 1200, 2000], [0, 100, 100, 357]]
PARTIAL_TS = [1, 63, 65, 127, 1000]


def _cu(cu, dt):
    return torch.tensor(cu, dtype=dt, device="cuda")


@pytest.mark.parametrize("cu", VARLEN_CUS, ids=lambda c: f"N{len(c) - 1}")
@pytest.mark.parametrize("dt", [torch.int32, torch.int64], ids=["i32", "i64"])
@pytest.mark.parametrize("with_ci", [False, True], ids=["derived", "fla-indices"])
def test_bwd_dhu_varlen_vs_float64(cu, dt, with_ci):
    torch.manual_seed(10)
    cu_t, T = _cu(cu, dt), cu[-1] + 10  # 10 tokens past cu[N]
    a, h0, dht = varlen_dhu_inputs(cu_t, T, 4, 128, 128, torch.bfloat16, "cuda")
    ci = chunk_indices(cu_t) if with_ci else None
    co = torch.tensor(chunk_offsets(cu_t), dtype=dt, device="cuda") if with_ci else None
    kt.device_status(clear=True)
    dh, dh0, dv2 = kt.bwd_dhu(*a, h0=h0, dht=dht, scale=128 ** -0.5, cu_seqlens=cu_t, chunk_indices=ci,
                              chunk_offsets=co)
    rdh, rdh0, rdv2 = bwd_dhu_ref_varlen(*a, cu_t, h0=h0, dht=dht, scale=128 ** -0.5)
    assert dh.shape == rdh.shape == (1, chunk_offsets(cu_t)[-1], 4, 128, 128)  # fla's NT = len(chunk_indices)
    assert dh0.shape == (len(cu) - 1, 4, 128, 128)
    n = cu[-1]
    assert rel_rms(dh, rdh) < 1e-2 and rel_rms(dv2[:, :n], rdv2[:, :n]) < 1e-2 and rel_rms(dh0, rdh0) < 1e-2
    assert kt.device_status() == 0


@pytest.mark.parametrize("T", PARTIAL_TS)
def test_bwd_dhu_partial_fixed(T):
    torch.manual_seed(11)
    cu = torch.arange(3, device="cuda") * T
    a, h0, dht = varlen_dhu_inputs(cu, 2 * T, 4, 64, 64, torch.float16, "cuda")
    b = [t.reshape(2, T, *t.shape[2:]) for t in a]
    dh, dh0, dv2 = kt.bwd_dhu(*b, h0=h0, dht=dht, scale=0.125)
    rdh, rdh0, rdv2 = bwd_dhu_ref_varlen(*a, cu, h0=h0, dht=dht, scale=0.125)
    nt = -(-T // 64)
    assert dh.shape == (2, nt, 4, 64, 64)
    assert rel_rms(dh.reshape(rdh.shape), rdh) < 1e-2 and rel_rms(dv2.reshape(rdv2.shape), rdv2) < 1e-2
    assert rel_rms(dh0, rdh0) < 1e-2


@pytest.mark.parametrize("cu", VARLEN_CUS, ids=lambda c: f"N{len(c) - 1}")
@pytest.mark.parametrize("fold", [False, True])
def test_bwd_intra_varlen_vs_float64(cu, fold):
    """Needs the bwd_intra VARLEN body (kdart EUNSUPPORTED without it: a failure, not a skip)."""
    torch.manual_seed(12)
    cu_t, T = _cu(cu, torch.int64), cu[-1] + 10
    a = varlen_intra_inputs(cu_t, T, 2, 4, 64, torch.bfloat16, "cuda")
    out = kt.bwd_intra(*a, fold_dg=fold, cu_seqlens=cu_t, chunk_indices=chunk_indices(cu_t) if fold else None)
    ref = bwd_intra_ref_varlen(*a, cu_t, fold_dg=fold)
    n = cu[-1]
    for name, o, r in zip(("dq", "dk", "db", "dg"), out, ref):
        assert rel_rms(o[:, :n], r[:, :n]) < 2e-3, (name, rel_rms(o[:, :n], r[:, :n]))


@pytest.mark.parametrize("T", PARTIAL_TS)
def test_bwd_intra_partial_fixed(T):
    torch.manual_seed(13)
    cu = torch.arange(3, device="cuda") * T
    a = varlen_intra_inputs(cu, 2 * T, 2, 4, 128, torch.float16, "cuda")
    b = [t.reshape(2, T, *t.shape[2:]) for t in a]
    out = kt.bwd_intra(*b, fold_dg=True)
    ref = bwd_intra_ref_varlen(*a, cu, fold_dg=True)
    for name, o, r in zip(("dq", "dk", "db", "dg"), out, ref):
        assert rel_rms(o.reshape(r.shape), r) < 2e-3, name


def test_varlen_bad_cu_seqlens_reported():
    """Decreasing cu_seqlens: the launch returns, the kernel writes nothing, device_status says why."""
    cu = _cu([0, 100, 50, 300], torch.int64)
    a, h0, dht = varlen_dhu_inputs(_cu([0, 100, 200, 300], torch.int64), 300, 2, 64, 64, torch.bfloat16, "cuda")
    kt.device_status(clear=True)
    kt.bwd_dhu(*a, h0=h0, dht=dht, cu_seqlens=cu, chunk_indices=chunk_indices(_cu([0, 100, 200, 300], torch.int64)))
    assert kt.device_status(clear=True) & 1
    assert kt.device_status() == 0


def test_varlen_cuda_graph_bitwise():
    """A varlen launch with fla's chunk_indices (fixed dh rows, no host synchronization) captured and replayed."""
    torch.manual_seed(14)
    cu = _cu([0, 15, 100, 300], torch.int32)
    ci = chunk_indices(cu)
    a, h0, dht = varlen_dhu_inputs(cu, 310, 4, 128, 128, torch.bfloat16, "cuda")
    kw = dict(h0=h0, dht=dht, scale=0.125, cu_seqlens=cu, chunk_indices=ci)
    kt.prepare_for(kt.bwd_dhu, *a, **kw)
    eager = kt.bwd_dhu(*a, **kw)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        kt.bwd_dhu(*a, **kw)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = kt.bwd_dhu(*a, **kw)
    graph.replay()
    torch.cuda.synchronize()
    # dh and dh0 whole; dv2 up to cu[N] (tokens past the last sequence are never written, as in fla)
    n = int(cu[-1])
    assert torch.equal(eager[0], outs[0]) and torch.equal(eager[1], outs[1])
    assert torch.equal(eager[2][:, :n], outs[2][:, :n])


# ---------------------------------------------- head dims (issue 15, behind KDART_EXPERIMENTAL)

@pytest.mark.parametrize("K", [1, 16, 60, 100, 192, 256])
def test_bwd_intra_head_dims_vs_float64(monkeypatch, K):
    monkeypatch.setenv("KDART_EXPERIMENTAL", "1")
    torch.manual_seed(20)
    a = intra_inputs(2, 192, 2, 4, K, torch.bfloat16, "cuda")
    out = kt.bwd_intra(*a, fold_dg=True)
    for name, o, r in zip(("dq", "dk", "db", "dg"), out, bwd_intra_ref(*a, fold_dg=True)):
        assert o.shape == r.shape and rel_rms(o, r) < 2e-3, (name, rel_rms(o, r))


@pytest.mark.parametrize("K,V", [(1, 1), (60, 100), (100, 60), (64, 192), (192, 16), (256, 512)])
@pytest.mark.parametrize("state_v_first", [False, True])
def test_bwd_dhu_head_dims_vs_float64(monkeypatch, K, V, state_v_first):
    """K 1..256, V 1..512, fla's V-first state: against the float64 scan (taken K-first)."""
    monkeypatch.setenv("KDART_EXPERIMENTAL", "1")
    torch.manual_seed(21)
    a, h0, dht = dhu_inputs(2, 256, 4, K, V, torch.float16, "cuda")
    rdh, rdh0, rdv2 = bwd_dhu_ref(*a, h0=h0, dht=dht, scale=K ** -0.5)
    tr = (lambda t: t.transpose(-1, -2).contiguous()) if state_v_first else (lambda t: t)  # noqa: E731
    dh, dh0, dv2 = kt.bwd_dhu(*a, h0=tr(h0), dht=tr(dht), scale=K ** -0.5, state_v_first=state_v_first)
    assert dh.shape == tr(rdh).shape and dh0.shape == tr(rdh0).shape
    assert rel_rms(tr(dh), rdh) < 1e-2 and rel_rms(dv2, rdv2) < 1e-2 and rel_rms(tr(dh0), rdh0) < 1e-2
