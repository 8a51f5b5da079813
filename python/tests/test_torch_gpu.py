"""kdart.torch on a GPU: both ops against the float64 references, torch.compile and CUDA-graph replay
bitwise equal to eager, a second device.  Skips without CUDA."""
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import kdart.torch as kt  # noqa: E402
from kda_ref import bwd_dhu_ref, bwd_intra_ref, dhu_inputs, intra_inputs, rel_rms  # noqa: E402

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
