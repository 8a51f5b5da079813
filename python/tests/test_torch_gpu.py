"""kdart.torch on a GPU: the ops against the float64 references (fla's chunk_kda_bwd_dAv included, fused into
bwd_dhu and wy_dqkg and as its own kernel), torch.compile and CUDA-graph replay bitwise equal to eager, a second
device.  Skips without CUDA."""
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import kdart.torch as kt  # noqa: E402
from kda_ref import (aqk_input, bwd_dhu_ref, bwd_dhu_ref_varlen, bwd_intra_ref, bwd_intra_ref_varlen,  # noqa: E402
                     chunk_indices, chunk_offsets, dav_ref, dhu_inputs, gate, intra_inputs, rel_rms,
                     varlen_dhu_inputs, varlen_intra_inputs, wy_dqkg_ref, wy_dqkg_ref_varlen, wy_inputs)

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
@pytest.mark.parametrize("K", [64, 100, 128])
@pytest.mark.parametrize("varlen", [False, True], ids=["fixed", "packed"])
def test_bwd_intra_beta_f32_vs_float64(io, K, varlen):
    """beta in fp32 (what fla hands the stage when chunk_kda applies the beta sigmoid), as kdart.fla calls it
    (fold_dg), fixed length with a partial chunk and packed with one-token documents, GVA."""
    torch.manual_seed(5)
    cu = [0, 1, 64, 65, 300, 301, 400]
    if varlen:
        a = varlen_intra_inputs(cu, cu[-1], 2, 4, K, io, "cuda")
    else:
        a = list(intra_inputs(2, 192, 2, 4, K, io, "cuda"))
        a = [t[:, :170].contiguous() for t in a]
    a = list(a)
    a[3] = torch.rand(a[3].shape, device="cuda") * 2  # fp32, not rounded to the io dtype: (0, 2)
    cus = torch.tensor(cu, dtype=torch.int32, device="cuda") if varlen else None
    out = kt.bwd_intra(*a, fold_dg=True, cu_seqlens=cus)
    ref = bwd_intra_ref_varlen(*a, cu, fold_dg=True) if varlen else bwd_intra_ref_padded(a)
    for name, o, r in zip(("dq", "dk", "db", "dg"), out, ref):
        assert o.dtype == torch.float32 and o.shape == r.shape
        assert rel_rms(o, r) < 2e-3, (name, rel_rms(o, r))
    again = kt.bwd_intra(*a, fold_dg=True, cu_seqlens=cus)
    assert all(torch.equal(x, y) for x, y in zip(out, again))


def bwd_intra_ref_padded(a):
    """The float64 reference at a T that is not a multiple of 64: every input zero-padded to whole chunks
    (zero dA rows add nothing), the outputs cut back."""
    T = a[0].shape[1]
    Tp = -(-T // 64) * 64
    pad = [torch.nn.functional.pad(t, (0, 0) * (t.dim() - 2) + (0, Tp - T)) for t in a]
    return [r[:, :T] for r in bwd_intra_ref(*pad, fold_dg=True)]


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


def test_varlen_graph_capacity_replay():
    """fla's use_graph contract: both ops captured once for a fixed capacity (N = 6 sequences of
    T = 1200 tokens, dh rows nt_max = ceil(T/64) + N - 1, chunk_indices never read), then replayed after
    cu_seqlens's contents change in place: the replay equals eager calls on the new contents, bitwise, on
    every token, dh row and state the new batch owns."""
    torch.manual_seed(15)
    T, N = 1200, 6
    cu_a, cu_b = [0, 100, 300, 700, 1000, 1000, 1000], [0, 15, 400, 401, 900, 1100, 1200]
    nt_max = -(-T // 64) + N - 1
    cu = _cu(cu_a, torch.int64)
    ci = torch.zeros(nt_max, 2, dtype=torch.int64, device="cuda")
    a = varlen_intra_inputs(_cu(cu_b, torch.int64), T, 2, 4, 64, torch.bfloat16, "cuda")  # inputs for batch b
    d, h0, dht = varlen_dhu_inputs(_cu(cu_b, torch.int64), T, 4, 128, 128, torch.bfloat16, "cuda")

    def both():
        return (kt.bwd_intra(*a, fold_dg=True, cu_seqlens=cu, chunk_indices=ci)
                + kt.bwd_dhu(*d, h0=h0, dht=dht, scale=0.125, cu_seqlens=cu, chunk_indices=ci))
    both()  # prepares both specializations (batch a)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        both()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = both()
    cu.copy_(_cu(cu_b, torch.int64))
    kt.device_status(clear=True)
    graph.replay()
    torch.cuda.synchronize()
    eager = both()  # cu holds batch b now
    n, rows = cu_b[-1], chunk_offsets(cu_b)[-1]
    for i, (x, y) in enumerate(zip(eager, outs)):  # dq dk db dg (tokens), dh (rows), dh0, dv2 (tokens)
        if i == 4:
            x, y = x[:, :rows], y[:, :rows]
        elif i != 5:
            x, y = x[:, :n], y[:, :n]
        assert torch.equal(x, y), i
    rdh, rdh0, rdv2 = bwd_dhu_ref_varlen(*d, _cu(cu_b, torch.int64), h0=h0, dht=dht, scale=0.125)
    assert rel_rms(outs[4][:, :rows], rdh) < 1e-2 and rel_rms(outs[5], rdh0) < 1e-2
    assert kt.device_status() == 0


def test_bwd_intra_batch_past_grid_y():
    """B*HV = 65600 > 65535 (the fixed-length grid's y limit): kdart runs the varlen body with B rows; the
    first and last batch rows against float64."""
    torch.manual_seed(16)
    a = intra_inputs(1025, 64, 64, 64, 64, torch.bfloat16, "cuda")
    out = kt.bwd_intra(*a, fold_dg=True)
    for rows in (slice(0, 2), slice(1023, 1025)):
        ref = bwd_intra_ref(*[t[rows] for t in a], fold_dg=True)
        for name, o, r in zip(("dq", "dk", "db", "dg"), out, ref):
            assert rel_rms(o[rows], r) < 2e-3, (name, rows)


# ------------------------------------------------------------ head dims

@pytest.mark.parametrize("K", [1, 16, 60, 100, 192, 256])
def test_bwd_intra_head_dims_vs_float64(K):
    torch.manual_seed(20)
    a = intra_inputs(2, 192, 2, 4, K, torch.bfloat16, "cuda")
    out = kt.bwd_intra(*a, fold_dg=True)
    for name, o, r in zip(("dq", "dk", "db", "dg"), out, bwd_intra_ref(*a, fold_dg=True)):
        assert o.shape == r.shape and rel_rms(o, r) < 2e-3, (name, rel_rms(o, r))


@pytest.mark.parametrize("K,V", [(1, 1), (60, 100), (100, 60), (64, 192), (192, 16), (190, 18), (256, 512)])
@pytest.mark.parametrize("state_v_first", [False, True])
def test_bwd_dhu_head_dims_vs_float64(K, V, state_v_first):
    """K 1..256, V 1..512, fla's V-first state: against the float64 scan (taken K-first)."""
    torch.manual_seed(21)
    a, h0, dht = dhu_inputs(2, 256, 4, K, V, torch.float16, "cuda")
    rdh, rdh0, rdv2 = bwd_dhu_ref(*a, h0=h0, dht=dht, scale=K ** -0.5)
    tr = (lambda t: t.transpose(-1, -2).contiguous()) if state_v_first else (lambda t: t)  # noqa: E731
    dh, dh0, dv2 = kt.bwd_dhu(*a, h0=tr(h0), dht=tr(dht), scale=K ** -0.5, state_v_first=state_v_first)
    assert dh.shape == tr(rdh).shape and dh0.shape == tr(rdh0).shape
    assert rel_rms(tr(dh), rdh) < 1e-2 and rel_rms(dv2, rdv2) < 1e-2 and rel_rms(tr(dh0), rdh0) < 1e-2


@pytest.mark.parametrize("K,V,state_v_first", [(63, 64, False), (64, 63, True), (101, 33, False), (1, 511, True),
                                                (255, 255, False)])
def test_bwd_dhu_odd_dims_padded_vs_float64(K, V, state_v_first):
    """An odd K or V goes through kdart.torch's zero padding (to a multiple of 8): the outputs have the caller's
    shapes, match the float64 scan, come out NaN-free from a NaN-filled pool, and the inputs are untouched."""
    torch.manual_seed(22)
    a, h0, dht = dhu_inputs(2, 256, 4, K, V, torch.bfloat16, "cuda")
    rdh, rdh0, rdv2 = bwd_dhu_ref(*a, h0=h0, dht=dht, scale=K ** -0.5)
    tr = (lambda t: t.transpose(-1, -2).contiguous()) if state_v_first else (lambda t: t)  # noqa: E731
    h0t, dhtt = tr(h0), tr(dht)
    before = [t.clone() for t in a] + [h0t.clone(), dhtt.clone()]
    _poisoned_pool(1 << 28)
    dh, dh0, dv2 = kt.bwd_dhu(*a, h0=h0t, dht=dhtt, state_v_first=state_v_first)  # scale None: K ** -0.5
    assert all(torch.equal(x, y) for x, y in zip(list(a) + [h0t, dhtt], before))
    assert dh.shape == tr(rdh).shape and dh0.shape == h0t.shape and dv2.shape == a[4].shape
    assert dh.is_contiguous() and dh0.is_contiguous() and dv2.is_contiguous()
    assert rel_rms(tr(dh), rdh) < 1e-2 and rel_rms(dv2, rdv2) < 1e-2 and rel_rms(tr(dh0), rdh0) < 1e-2


def test_bwd_dhu_odd_dims_varlen_and_bad_input():
    """Odd dims on packed sequences (fla's index tensors, dh0 per sequence); a bad call at an odd K is refused
    with the caller's shapes in the message, before anything is padded or launched."""
    torch.manual_seed(23)
    cu_t = _cu([0, 15, 100, 300, 1200], torch.int32)
    a, h0, dht = varlen_dhu_inputs(cu_t, 1210, 4, 63, 101, torch.float16, "cuda")
    ci = chunk_indices(cu_t)
    co = torch.tensor(chunk_offsets(cu_t), dtype=torch.int32, device="cuda")
    _poisoned_pool(1 << 28)
    dh, dh0, dv2 = kt.bwd_dhu(*a, h0=h0, dht=dht, cu_seqlens=cu_t, chunk_indices=ci, chunk_offsets=co)
    rdh, rdh0, rdv2 = bwd_dhu_ref_varlen(*a, cu_t, h0=h0, dht=dht, scale=63 ** -0.5)
    assert dh.shape == rdh.shape and dh0.shape == (4, 4, 63, 101)
    assert rel_rms(dh, rdh) < 1e-2 and rel_rms(dv2[:, :1200], rdv2[:, :1200]) < 1e-2 and rel_rms(dh0, rdh0) < 1e-2
    bad = list(a)
    bad[1] = bad[1][..., :62].contiguous()  # k with K = 62 against q's 63
    with pytest.raises(ValueError, match="63"):
        kt.bwd_dhu(*bad, h0=h0, dht=dht, cu_seqlens=cu_t)
    with pytest.raises(ValueError, match="ESTRIDE"):
        kt.bwd_dhu(a[0], a[1], a[2], a[3].transpose(1, 2).contiguous().transpose(1, 2), *a[4:], cu_seqlens=cu_t)


# ------------------------------------------------------------- past 32-bit indexing

BIG_T = (1 << 20) + 256  # H = HV = 32, K = V = 128: 4.3e9 elements per [1,T,HV,K] tensor
BIG_TAIL = 256           # the last 256 tokens start at element 2^32 exactly
BIG_BYTES = 80 << 30


def _poisoned_pool(nbytes):
    """NaN-fill nbytes of the caching allocator's memory and give it back, so that the outputs the ops
    allocate next start as NaN (kdart.torch allocates its outputs itself)."""
    x = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").fill_(float("nan"))
    del x


@pytest.mark.skipif(torch.cuda.get_device_properties(0).total_memory < BIG_BYTES + (20 << 30),
                    reason="needs about 100 GB of GPU memory")
def test_beyond_32bit_indexing():
    """Past 32-bit indexing: one [1,T,32,128] tensor of 4.3e9 elements, fixed length and varlen, both ops.  bwd_intra is
    chunk-local and bwd_dhu's scan of the last tokens needs only those tokens, so the outputs past element
    2^32 (and bwd_intra's first tokens) must equal, bitwise, those of a small call on a copy of the same
    tokens, which is itself checked against float64.  Inputs are aliased (q = k, g = dq = dk = dg;
    the dhu operands all q) to fit the device."""
    torch.manual_seed(20)
    T, HV, K, tail = BIG_T, 32, 128, BIG_TAIL
    q = torch.empty(1, T, HV, K, dtype=torch.bfloat16, device="cuda")
    for t0 in range(0, T, 1 << 16):
        q[:, t0:t0 + (1 << 16)] = torch.nn.functional.normalize(
            torch.randn(1, min(1 << 16, T - t0), HV, K, device="cuda"), dim=-1)
    g = torch.empty(1, T, HV, K, dtype=torch.float32, device="cuda")
    for t0 in range(0, T, 1 << 16):  # kda_ref's gate, in slices (its temporaries would not fit at once)
        g[:, t0:t0 + (1 << 16)] = gate(1, min(1 << 16, T - t0), HV, K, "cuda")
    ar = torch.arange(64, device="cuda")
    dAqk, dAkk = (torch.empty(1, T, HV, 64, dtype=torch.float32, device="cuda").normal_(0, 0.1) for _ in range(2))
    dAqk.view(1, T // 64, 64, HV, 64).mul_((ar[:, None] >= ar[None, :]).float()[:, None, :])  # lower, diagonal
    dAkk.view(1, T // 64, 64, HV, 64).mul_((ar[:, None] > ar[None, :]).float()[:, None, :])   # strictly lower
    beta = torch.rand(1, T, HV, device="cuda").to(torch.bfloat16)
    db = torch.randn(1, T, HV, device="cuda")
    assert (T - tail) * HV * K == 1 << 32

    def intra(args, **kw):
        q_, g_, aq_, ak_, b_, db_ = args
        return kt.bwd_intra(q_, q_, g_, b_, aq_, ak_, g_, g_, db_, g_, emit_bf16=True, **kw)

    def part(s):
        return [t[:, s].contiguous() for t in (q, g, dAqk, dAkk, beta, db)]

    heads, tails = part(slice(0, tail)), part(slice(T - tail, T))
    cu_big = torch.tensor([0, T - tail, T], dtype=torch.int64, device="cuda")
    cu_small = torch.tensor([0, tail], dtype=torch.int64, device="cuda")
    for kw, small_kw in (({}, {}), ({"cu_seqlens": cu_big}, {"cu_seqlens": cu_small})):
        _poisoned_pool(BIG_BYTES // 2)
        big = intra((q, g, dAqk, dAkk, beta, db), **kw)  # dq, dk (bf16), db, dg
        small_t = intra(tails, **small_kw)
        for o, s in zip(big, small_t):
            assert torch.equal(o[:, T - tail:], s), kw
        tq_, tg_, taq_, tak_, tb_, tdb_ = tails
        ref = bwd_intra_ref(tq_, tq_, tg_, tb_, taq_, tak_, tg_, tg_, tdb_, tg_)
        assert all(rel_rms(o, r) < 1e-2 for o, r in zip(small_t, ref)), kw
        if not kw:  # fixed length: the first tokens too, and every token written
            small_h = intra(heads)
            assert all(torch.equal(o[:, :tail], s) for o, s in zip(big, small_h))
            assert all(bool(torch.isfinite(o).all()) for o in big)
        del big
    torch.cuda.empty_cache()

    # bwd_dhu: qg = kg = w = do = dv = q (K = V = 128), gk = g; dh is [1, T/64, 32, 128, 128] (8.6e9 elements)
    dht = torch.randn(1, HV, K, K, device="cuda")
    h0 = torch.randn(1, HV, K, K, device="cuda")
    # (varlen: the small call keeps N = 2 with an empty first sequence, so that kdart picks the same V tile)
    cu_small2 = torch.tensor([0, 0, tail], dtype=torch.int64, device="cuda")
    for kw, small_kw in (({}, {}), ({"cu_seqlens": cu_big}, {"cu_seqlens": cu_small2})):
        _poisoned_pool(BIG_BYTES // 3)
        n = 2 if kw else 1
        dht_n, h0_n = dht.expand(n, -1, -1, -1).contiguous(), h0.expand(n, -1, -1, -1).contiguous()
        dh, dh0, dv2 = kt.bwd_dhu(q, q, q, q, q, g, h0=h0_n, dht=dht_n, scale=0.088, **kw)
        tq, tg = tails[0], tails[1]
        sdh, sdh0, sdv2 = kt.bwd_dhu(tq, tq, tq, tq, tq, tg, h0=h0_n, dht=dht_n, scale=0.088, **small_kw)
        rows = tail // 64
        assert dh.shape[1] == T // 64 and sdh.shape[1] == rows
        assert torch.equal(dh[:, T // 64 - rows:], sdh) and torch.equal(dv2[:, T - tail:], sdv2), kw
        if kw:  # the tail is sequence 1: its dh0 too
            assert torch.equal(dh0[1:], sdh0[1:])
        assert bool(torch.isfinite(dh).all()) and bool(torch.isfinite(dh0).all())
        rdh, rdh0, rdv2 = bwd_dhu_ref(tq, tq, tq, tq, tq, tg, h0=h0, dht=dht, scale=0.088)
        assert rel_rms(sdh, rdh) < 1e-2 and rel_rms(sdv2, rdv2) < 1e-2 and rel_rms(sdh0[n - 1:], rdh0) < 1e-2
        del dh, dh0, dv2
    torch.cuda.empty_cache()


# ------------------------------------------------------------------- wy_dqkg

WY_NAMES = ("dq", "dk", "dv", "db", "dg", "dA")


def _wy_check(out, ref, io, what):
    tol = 1e-2 if io == torch.bfloat16 else 2e-3  # the exact reference; the kernel rounds dw, kg, dA as fla
    for name, o, r in zip(WY_NAMES, out, ref):
        assert o.shape == r.shape, (what, name, o.shape, r.shape)
        assert torch.isfinite(o).all(), (what, name)
        assert rel_rms(o, r) < tol, (what, name, rel_rms(o, r))


@pytest.mark.parametrize("io", IOS, ids=["bf16", "fp16"])
@pytest.mark.parametrize("K,V", [(128, 128), (64, 64), (100, 100), (256, 128), (128, 256)])
@pytest.mark.parametrize("svf", [False, True], ids=["kfirst", "vfirst"])
def test_wy_dqkg_vs_float64(io, K, V, svf):
    torch.manual_seed(K + V)
    a = wy_inputs(2, 192, 2, 4, K, V, io, "cuda", beta_f32=svf, state_v_first=svf)
    before = [t.clone() for t in a]
    out = kt.wy_dqkg(*a, scale=K ** -0.5, state_v_first=svf)
    assert all(torch.equal(x, y) for x, y in zip(a, before))  # inputs untouched
    _wy_check(out, wy_dqkg_ref(*a, K ** -0.5, svf), io, f"K{K} V{V} svf{svf}")
    again = kt.wy_dqkg(*a, scale=K ** -0.5, state_v_first=svf)
    assert all(torch.equal(x, y) for x, y in zip(out, again))  # deterministic


@pytest.mark.parametrize("cu", [[0, 1, 65, 200, 300], [0, 64, 64, 191]], ids=["short", "empty"])
@pytest.mark.parametrize("with_ci", [False, True])
def test_wy_dqkg_varlen_vs_float64(cu, with_ci):
    dev = "cuda"
    cu_t = torch.tensor(cu, dtype=torch.int32, device=dev)
    T = cu[-1]
    a = wy_inputs(1, T, 2, 4, 128, 128, torch.bfloat16, dev, cu=cu_t)
    ci = chunk_indices(cu_t) if with_ci else None
    out = kt.wy_dqkg(*a, scale=0.125, cu_seqlens=cu_t, chunk_indices=ci)
    _wy_check(out, wy_dqkg_ref_varlen(*a, 0.125, cu_t), torch.bfloat16, f"cu {cu}")


def _compiled_and_graphed_bitwise(f, *args):
    """f's outputs under torch.compile (fullgraph) and CUDA-graph replay (after a warm-up call on a side
    stream, which prepares what the capture launches): bitwise its eager ones."""
    eager = f(*args)
    compiled = torch.compile(f, fullgraph=True)(*args)
    assert all(torch.equal(x, y) for x, y in zip(eager, compiled))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        f(*args)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = f(*args)
    graph.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(x, y) for x, y in zip(eager, outs))


def test_wy_dqkg_compile_and_graph_bitwise():
    a = wy_inputs(1, 256, 2, 4, 128, 128, torch.bfloat16, "cuda")

    def f(*x):
        return kt.wy_dqkg(*x, scale=0.125)
    assert kt.prepare_for(kt.wy_dqkg, *a, scale=0.125).startswith("io=bf16,K=128,varlen=0,tail=0,beta=f32")
    _compiled_and_graphed_bitwise(f, *a)


def test_wy_dqkg_bad_input():
    a = wy_inputs(1, 128, 2, 4, 64, 64, torch.bfloat16, "cuda")
    bad = list(a)
    bad[6] = a[6].float()  # A in fp32
    with pytest.raises(ValueError, match="A"):
        kt.wy_dqkg(*bad)
    bad = list(a)
    bad[7] = a[7][:, :1]  # h one chunk row short
    with pytest.raises(ValueError, match="h"):
        kt.wy_dqkg(*bad)
    bad = list(a)
    bad[2] = a[2].transpose(1, 2).contiguous().transpose(1, 2)  # v not contiguous
    with pytest.raises(ValueError, match="ESTRIDE"):
        kt.wy_dqkg(*bad)


# ------------------------------------------------------------------- chunk_kda_bwd_dAv, fused

def _t(x):
    return None if x is None else x.transpose(-1, -2).contiguous()


@pytest.mark.parametrize("io", IOS, ids=["bf16", "fp16"])
@pytest.mark.parametrize("K,V", [(64, 64), (128, 128), (64, 256), (128, 512)])
@pytest.mark.parametrize("with_state", [True, False], ids=["h0-dht", "no-state"])
@pytest.mark.parametrize("svf", [False, True], ids=["kfirst", "vfirst"])
def test_bwd_dhu_aqk_vs_float64(io, K, V, with_state, svf):
    """bwd_dhu with Aqk in dv's place: dv = Aqk^T do per chunk inside the scan (Aqk's lower triangle; garbage
    above it), unrounded.  dh, dh0, dv2 against the float64 reference fed the float64 dv of the same Aqk and do;
    the outputs start as NaN (every element written), the inputs stay untouched."""
    torch.manual_seed(K + V + 7 * svf)
    a, h0, dht = dhu_inputs(2, 256, 4, K, V, io, "cuda")
    A = aqk_input(2, 256, 4, io, "cuda")
    _, dv = dav_ref(a[3], a[3], A, 1.0)
    h0, dht = (h0, dht) if with_state else (None, None)
    before = [t.clone() for t in a + [A]]
    _poisoned_pool(1 << 28)
    dh, dh0, dv2 = kt.bwd_dhu(*a[:4], None, a[5], h0=_t(h0) if svf else h0, dht=_t(dht) if svf else dht,
                              scale=K ** -0.5, state_v_first=svf, Aqk=A)
    assert all(torch.equal(x, y) for x, y in zip(a + [A], before))
    rdh, rdh0, rdv2 = bwd_dhu_ref(*a[:4], dv, a[5], h0=h0, dht=dht, scale=K ** -0.5)
    if svf:
        dh, dh0 = dh.transpose(-1, -2), None if dh0 is None else dh0.transpose(-1, -2)
    assert (dh.dtype, dv2.dtype, dv2.shape) == (io, io, a[3].shape)
    assert rel_rms(dh, rdh) < 1e-2 and rel_rms(dv2, rdv2) < 1e-2, (rel_rms(dh, rdh), rel_rms(dv2, rdv2))
    if with_state:
        assert dh0.dtype == torch.float32 and rel_rms(dh0, rdh0) < 1e-2
    else:
        assert dh0 is None
    again = kt.bwd_dhu(*a[:4], None, a[5], h0=_t(h0) if svf else h0, dht=_t(dht) if svf else dht,
                       scale=K ** -0.5, state_v_first=svf, Aqk=A)
    assert torch.equal(again[2], dv2)  # deterministic


@pytest.mark.parametrize("cu", [[0, 1, 65, 200, 300], [0, 64, 64, 191], [0, 15, 100, 300, 1200]],
                         ids=["short", "empty", "long"])
@pytest.mark.parametrize("K,V", [(64, 128), (128, 64)])
def test_bwd_dhu_aqk_varlen_vs_float64(cu, K, V):
    """Packed sequences (one token, partial chunks, a zero-length one), tokens past cu[N]: the fused dv per
    sequence chunk.  The fused form is taken on grids of more than 4 waves of 64-column scans (on smaller
    ones kdart's scan splits its V tiles and the fused form is refused: the caller passes dv)."""
    torch.manual_seed(len(cu) + K)
    cu_t, T = _cu(cu, torch.int32), cu[-1] + 10
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    a, h0, dht = varlen_dhu_inputs(cu_t, T, 4, K, V, torch.bfloat16, "cuda")
    A = aqk_input(1, T, 4, torch.bfloat16, "cuda", cu=cu_t)
    with pytest.raises(ValueError, match="V split"):
        kt.bwd_dhu(*a[:4], None, a[5], h0=h0, dht=dht, scale=K ** -0.5, cu_seqlens=cu_t, Aqk=A)
    HV = 4 * sms // ((len(cu) - 1) * (V // 64)) + 1
    a, h0, dht = varlen_dhu_inputs(cu_t, T, HV, K, V, torch.bfloat16, "cuda")
    A = aqk_input(1, T, HV, torch.bfloat16, "cuda", cu=cu_t)
    _, dv = dav_ref(a[3], a[3], A, 1.0, cu_t)
    kt.device_status(clear=True)
    _poisoned_pool(1 << 28)
    dh, dh0, dv2 = kt.bwd_dhu(*a[:4], None, a[5], h0=h0, dht=dht, scale=K ** -0.5, cu_seqlens=cu_t,
                              chunk_indices=chunk_indices(cu_t), Aqk=A)
    rdh, rdh0, rdv2 = bwd_dhu_ref_varlen(*a[:4], dv, a[5], cu_t, h0=h0, dht=dht, scale=K ** -0.5)
    n = cu[-1]
    assert rel_rms(dh, rdh) < 1e-2 and rel_rms(dv2[:, :n], rdv2[:, :n]) < 1e-2 and rel_rms(dh0, rdh0) < 1e-2
    assert kt.device_status() == 0


@pytest.mark.parametrize("T", [1, 65, 200])
def test_bwd_dhu_aqk_partial_fixed(T):
    """Fixed length, T % 64 != 0: the last chunk of each row is partial."""
    torch.manual_seed(T)
    cu = torch.arange(3, device="cuda") * T
    a, h0, dht = varlen_dhu_inputs(cu, 2 * T, 4, 128, 128, torch.float16, "cuda")
    b = [t.reshape(2, T, *t.shape[2:]) for t in a]
    A = aqk_input(2, T, 4, torch.float16, "cuda")
    _, dv = dav_ref(b[3], b[3], A, 1.0)
    _poisoned_pool(1 << 28)
    dh, dh0, dv2 = kt.bwd_dhu(*b[:4], None, b[5], h0=h0, dht=dht, scale=0.125, Aqk=A)
    rdh, rdh0, rdv2 = bwd_dhu_ref_varlen(*a[:4], dv.reshape(1, 2 * T, *dv.shape[2:]), a[5], cu, h0=h0, dht=dht,
                                         scale=0.125)
    assert rel_rms(dh.reshape(rdh.shape), rdh) < 1e-2 and rel_rms(dv2.reshape(rdv2.shape), rdv2) < 1e-2
    assert rel_rms(dh0, rdh0) < 1e-2


def _daqk_check(dAqk, ref, what):
    """dAqk against dav_ref's float64 dA: products of the io inputs summed in fp32, near exact."""
    assert dAqk.dtype == torch.float32 and dAqk.shape == ref.shape, what
    assert torch.isfinite(dAqk).all(), what
    assert rel_rms(dAqk, ref) < 1e-4, (what, rel_rms(dAqk, ref))


@pytest.mark.parametrize("io", IOS, ids=["bf16", "fp16"])
@pytest.mark.parametrize("K,V", [(128, 128), (64, 64), (100, 100), (128, 256)])
def test_wy_dqkg_daqk_vs_float64(io, K, V):
    """wy_dqkg(..., dAqk=True): dAqk = scale * tril(do v_new^T) per chunk against float64 (zeros above the
    diagonal, every element written), and fla's six outputs as without it (bitwise)."""
    torch.manual_seed(K * V)
    a = wy_inputs(2, 192, 2, 4, K, V, io, "cuda")
    plain = kt.wy_dqkg(*a, scale=K ** -0.5)
    _poisoned_pool(1 << 28)
    out = kt.wy_dqkg(*a, scale=K ** -0.5, dAqk=True)
    assert len(out) == 7 and all(torch.equal(x, y) for x, y in zip(out[:6], plain))
    _wy_check(out[:6], wy_dqkg_ref(*a, K ** -0.5), io, f"K{K} V{V}")
    rdA, _ = dav_ref(a[8], a[3], a[6], K ** -0.5)
    _daqk_check(out[6], rdA, f"K{K} V{V}")
    pos = torch.arange(192, device="cuda") % 64
    above = torch.arange(64, device="cuda")[None, :] > pos[:, None]  # [t, s]: s > t
    assert (out[6].transpose(1, 2)[:, :, above] == 0).all()  # exact zeros above the diagonal


@pytest.mark.parametrize("io,K,V,svf,cu", [
    (torch.bfloat16, 128, 128, False, None), (torch.float16, 64, 64, False, None),
    (torch.bfloat16, 100, 128, False, None), (torch.bfloat16, 256, 128, True, None),
    (torch.bfloat16, 128, 256, False, [0, 1, 65, 200, 300]), (torch.float16, 128, 128, True, [0, 64, 64, 191])],
    ids=["k128", "fp16-k64", "k100", "k256-vfirst", "packed", "packed-empty"])
def test_wy_dqkg_intra_is_the_two_launches(io, K, V, svf, cu):
    """wy_dqkg(..., dAqk=True, intra=True) returns, bit for bit, what wy_dqkg(..., dAqk=True) followed by
    bwd_intra(..., fold_dg=True) return (the intra part reads the very fp32 values the wy part wrote): the two
    stages' float64 tests cover the math; this covers the fusion (in-place updates, L2 reads, grids)."""
    torch.manual_seed(K + V + (0 if cu is None else len(cu)))
    cu_t = None if cu is None else torch.tensor(cu, dtype=torch.int32, device="cuda")
    B, T = (2, 192) if cu is None else (1, cu[-1])
    a = wy_inputs(B, T, 2, 4, K, V, io, "cuda", beta_f32=True, state_v_first=svf, cu=cu_t)
    ci = None if cu is None else chunk_indices(cu_t)
    kw = dict(scale=K ** -0.5, state_v_first=svf, cu_seqlens=cu_t, chunk_indices=ci)
    dq, dk, dv, db, dg, dA, dAqk = kt.wy_dqkg(*a, dAqk=True, **kw)
    q, k, g, beta = a[0], a[1], a[4], a[5]
    two = kt.bwd_intra(q, k, g, beta, dAqk, dA, dq, dk, db, dg, fold_dg=True, cu_seqlens=cu_t, chunk_indices=ci)
    _poisoned_pool(1 << 28)
    out = kt.wy_dqkg(*a, dAqk=True, intra=True, **kw)
    n = T if cu is None else cu[-1]  # (rows past cu[-1] are not written)
    for name, x, y in zip(("dq", "dk", "db", "dg"), (out[0], out[1], out[3], out[4]), two):
        assert torch.equal(x[:, :n], y[:, :n]), name
    for name, x, y in zip(("dv", "dA", "dAqk"), (out[2], out[5], out[6]), (dv, dA, dAqk)):
        assert torch.equal(x[:, :n], y[:, :n]), name
    again = kt.wy_dqkg(*a, dAqk=True, intra=True, **kw)
    assert all(torch.equal(x[:, :n], y[:, :n]) for x, y in zip(out, again))  # deterministic


@pytest.mark.parametrize("cu", [[0, 1, 65, 200, 300], [0, 64, 64, 191]], ids=["short", "empty"])
def test_wy_dqkg_daqk_varlen_vs_float64(cu):
    """Packed sequences: dAqk per sequence chunk (a one-token sequence, partial chunks, a zero-length one)."""
    torch.manual_seed(len(cu))
    cu_t = torch.tensor(cu, dtype=torch.int32, device="cuda")
    T = cu[-1]
    a = wy_inputs(1, T, 2, 4, 128, 128, torch.bfloat16, "cuda", cu=cu_t)
    _poisoned_pool(1 << 28)
    out = kt.wy_dqkg(*a, scale=0.125, cu_seqlens=cu_t, chunk_indices=chunk_indices(cu_t), dAqk=True)
    _wy_check(out[:6], wy_dqkg_ref_varlen(*a, 0.125, cu_t), torch.bfloat16, f"cu {cu}")
    rdA, _ = dav_ref(a[8], a[3], a[6], 0.125, cu_t)
    _daqk_check(out[6], rdA, f"cu {cu}")


def test_fused_dav_compile_and_graph_bitwise():
    """bwd_dhu with Aqk and wy_dqkg with dAqk under torch.compile (fullgraph) and CUDA-graph replay: bitwise the
    eager outputs."""
    torch.manual_seed(5)
    d, h0, dht = dhu_inputs(1, 256, 4, 128, 128, torch.bfloat16, "cuda")
    A = aqk_input(1, 256, 4, torch.bfloat16, "cuda")
    w = wy_inputs(1, 256, 2, 4, 128, 128, torch.bfloat16, "cuda")

    def f(d, A, w):
        return kt.bwd_dhu(*d[:4], None, d[5], h0=h0, dht=dht, scale=0.125, Aqk=A) + \
            kt.wy_dqkg(*w, scale=0.125, dAqk=True)
    _compiled_and_graphed_bitwise(f, d, A, w)


def test_fused_dav_bad_input():
    """Exactly one of dv and Aqk; the fused dv's shapes (K 64 or 128, V a multiple of 64; an odd K is not padded
    then); Aqk's dtype, shape and layout."""
    a, _, _ = dhu_inputs(1, 128, 4, 64, 128, torch.bfloat16, "cuda")
    A = aqk_input(1, 128, 4, torch.bfloat16, "cuda")
    with pytest.raises(ValueError, match="EINVAL"):
        kt.bwd_dhu(*a, Aqk=A)
    with pytest.raises(ValueError, match="ENULL"):
        kt.bwd_dhu(*a[:4], None, a[5])
    for K, V in ((100, 128), (63, 128), (256, 128), (64, 96), (64, 63)):
        b, _, _ = dhu_inputs(1, 128, 4, K, V, torch.bfloat16, "cuda")
        with pytest.raises(ValueError, match="EUNSUPPORTED"):
            kt.bwd_dhu(*b[:4], None, b[5], Aqk=A)
    with pytest.raises(ValueError, match="EDTYPE"):
        kt.bwd_dhu(*a[:4], None, a[5], Aqk=A.half())
    with pytest.raises(ValueError, match="ESHAPE"):
        kt.bwd_dhu(*a[:4], None, a[5], Aqk=A[:, :64])
    with pytest.raises(ValueError, match="ESTRIDE"):
        kt.bwd_dhu(*a[:4], None, a[5], Aqk=A.transpose(1, 2).contiguous().transpose(1, 2))


# ------------------------------------------------------------------- chunk_kda_bwd_dAv, its own kernel

@pytest.mark.parametrize("io", IOS, ids=["bf16", "fp16"])
@pytest.mark.parametrize("T,V", [(256, 128), (200, 100), (130, 72), (64, 101), (128, 512)])
def test_bwd_dav_vs_float64(io, T, V):
    """kdart.torch.bwd_dAv (kernel bwd_dav) against float64: dA (fp32, products of io values summed in fp32) and
    dv (the io dtype: its one rounding), from an Aqk with garbage above its diagonal; the outputs start as NaN
    (every element written: dA's rows whole, zeros above the diagonal), the inputs stay untouched, a second
    call is bitwise equal.  q and k only size the call."""
    torch.manual_seed(T + V)
    v, do = (torch.randn(2, T, 4, V, device="cuda").to(io) for _ in range(2))
    A = aqk_input(2, T, 4, io, "cuda")
    q = torch.empty(2, T, 2, 100, dtype=io, device="cuda")
    before = [t.clone() for t in (v, do, A)]
    _poisoned_pool(1 << 28)
    dA, dv = kt.bwd_dAv(q, q, v, do, A, scale=0.125)
    assert all(torch.equal(x, y) for x, y in zip((v, do, A), before))
    rdA, rdv = dav_ref(do, v, A, 0.125)
    assert (dA.dtype, dA.shape, dv.dtype, dv.shape) == (torch.float32, (2, T, 4, 64), io, v.shape)
    assert torch.isfinite(dA).all() and torch.isfinite(dv).all()
    assert rel_rms(dA, rdA) < 1e-5 and rel_rms(dv, rdv) < (4e-3 if io == torch.bfloat16 else 5e-4), \
        (rel_rms(dA, rdA), rel_rms(dv, rdv))
    again = kt.bwd_dAv(q, q, v, do, A, scale=0.125)
    assert torch.equal(again[0], dA) and torch.equal(again[1], dv)


@pytest.mark.parametrize("cu", [[0, 1, 65, 200, 300], [0, 64, 64, 191], [0, 15, 100, 300, 1200]],
                         ids=["short", "empty", "long"])
@pytest.mark.parametrize("dt", [torch.int32, torch.int64], ids=["i32", "i64"])
def test_bwd_dav_varlen_vs_float64(cu, dt):
    """Packed sequences (one token, partial chunks, a zero-length one) with fla's chunk_indices; tokens past
    cu[N] are not read (NaN there) and not written."""
    torch.manual_seed(len(cu))
    cu_t, T = _cu(cu, dt), cu[-1] + 10
    v, do = (torch.randn(1, T, 3, 96, device="cuda").to(torch.bfloat16) for _ in range(2))
    v[:, cu[-1]:], do[:, cu[-1]:] = float("nan"), float("nan")
    A = aqk_input(1, T, 3, torch.bfloat16, "cuda", cu=cu_t)
    kt.device_status(clear=True)
    dA, dv = kt.bwd_dAv(v, v, v, do, A, scale=0.125, cu_seqlens=cu_t, chunk_indices=chunk_indices(cu_t))
    rdA, rdv = dav_ref(do, v, A, 0.125, cu_t)
    n = cu[-1]
    assert rel_rms(dA[:, :n], rdA[:, :n]) < 1e-5 and rel_rms(dv[:, :n], rdv[:, :n]) < 4e-3
    assert kt.device_status() == 0


def test_bwd_dav_compile_and_graph_bitwise():
    """bwd_dAv under torch.compile (fullgraph) and CUDA-graph replay: bitwise the eager outputs."""
    torch.manual_seed(6)
    v, do = (torch.randn(1, 300, 4, 100, device="cuda").to(torch.bfloat16) for _ in range(2))
    A = aqk_input(1, 300, 4, torch.bfloat16, "cuda")

    def f(v, do, A):
        return kt.bwd_dAv(v, v, v, do, A, scale=0.125)
    _compiled_and_graphed_bitwise(f, v, do, A)
