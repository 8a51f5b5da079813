"""kdart.torch without a GPU: argument checks, fake implementations on meta tensors, opcheck."""
import pytest
from conftest import child_env

torch = pytest.importorskip("torch")
import kdart.torch as kt  # noqa: E402

BF, F32 = torch.bfloat16, torch.float32


def intra_args(B=1, T=128, H=2, HV=4, K=64, io=BF, device="cpu"):
    r = lambda *s, dt=F32: torch.randn(*s, device=device).to(dt)  # noqa: E731
    return [r(B, T, H, K, dt=io), r(B, T, H, K, dt=io), r(B, T, HV, K), r(B, T, HV, dt=io),
            r(B, T, HV, 64), r(B, T, HV, 64), r(B, T, HV, K), r(B, T, HV, K), r(B, T, HV), r(B, T, HV, K)]


def dhu_args(B=1, T=128, HV=4, K=64, V=128, io=BF, device="cpu", h0=True, dht=True):
    r = lambda *s, dt=F32: torch.randn(*s, device=device).to(dt)  # noqa: E731
    a = [r(B, T, HV, K, dt=io), r(B, T, HV, K, dt=io), r(B, T, HV, K, dt=io), r(B, T, HV, V, dt=io),
         r(B, T, HV, V, dt=io), r(B, T, HV, K)]
    return a, (r(B, HV, K, V) if h0 else None), (r(B, HV, K, V) if dht else None)


@pytest.fixture(autouse=True)
def _no_cuda(monkeypatch, tmp_path, private_shared_runtime):
    monkeypatch.setenv("KDART_CACHE_DIR", str(tmp_path))  # read when the test's runtime opens, on first use


@pytest.mark.parametrize("which,bad", [(2, F32), (0, torch.float32), (3, torch.float64), (4, BF)])  # beta: io or fp32
def test_intra_wrong_dtype(which, bad):
    a = intra_args()
    a[which] = a[which].to(bad if a[which].dtype != bad else torch.float16)
    before = [t.clone() for t in a]
    with pytest.raises(ValueError, match="EDTYPE"):
        kt.bwd_intra(*a)
    assert all(torch.equal(x, y) for x, y in zip(a, before))  # nothing written


@pytest.mark.parametrize("which,shape", [(4, (1, 128, 4, 32)), (8, (1, 128, 3)), (1, (1, 128, 2, 128))])
def test_intra_wrong_shape(which, shape):
    a = intra_args()
    a[which] = torch.zeros(shape, dtype=a[which].dtype)
    with pytest.raises(ValueError, match="ESHAPE"):
        kt.bwd_intra(*a)


def test_intra_unsupported():
    with pytest.raises(ValueError, match="EDEVICE"):  # any T passes the Python checks (CPU tensors: EDEVICE)
        kt.bwd_intra(*intra_args(T=100))
    with pytest.raises(ValueError, match="EDEVICE"):  # so does any K in 1..256
        kt.bwd_intra(*intra_args(K=96))
    with pytest.raises(ValueError, match="K must be 1..256"):
        kt.bwd_intra(*intra_args(K=257))
    with pytest.raises(ValueError, match="EUNSUPPORTED"):
        kt.bwd_intra(*intra_args(), emit_bf16=True)  # HV != H


def test_intra_cpu_tensors_refused_by_kdart():
    """Right shapes and dtypes on the CPU: kdart's own checks refuse them (EDEVICE), nothing written."""
    a = intra_args()
    before = [t.clone() for t in a]
    with pytest.raises(ValueError, match="EDEVICE"):
        kt.bwd_intra(*a)
    assert all(torch.equal(x, y) for x, y in zip(a, before))


def test_noncontiguous_refused():
    a = intra_args()
    a[6] = torch.randn(1, 128, 64, 4).transpose(2, 3)  # the right shape, not contiguous
    with pytest.raises(ValueError, match="ESTRIDE"):
        kt.bwd_intra(*a)


def test_dhu_checks():
    a, h0, dht = dhu_args()
    with pytest.raises(ValueError, match="EDEVICE"):  # any V in 1..512 passes the Python checks
        kt.bwd_dhu(*dhu_args(V=96)[0])
    with pytest.raises(ValueError, match="V must be 1..512"):
        kt.bwd_dhu(*dhu_args(V=513)[0])
    with pytest.raises(ValueError, match="ESHAPE"):  # state_v_first with a K-first h0 (K 64 != V 128)
        kt.bwd_dhu(*a, h0=h0, state_v_first=True)
    bad = list(a)
    bad[5] = bad[5].to(BF)
    with pytest.raises(ValueError, match="EDTYPE"):
        kt.bwd_dhu(*bad, h0=h0, dht=dht)
    with pytest.raises(ValueError, match="ESHAPE"):
        kt.bwd_dhu(*a, h0=h0[:, :2], dht=dht)
    with pytest.raises(ValueError, match="EDEVICE"):
        kt.bwd_dhu(*a, h0=h0, dht=dht)


@pytest.mark.parametrize("io", [BF, torch.float16])
@pytest.mark.parametrize("fold,emit", [(False, False), (True, False), (True, True)])
def test_intra_fake_shapes(io, fold, emit):
    H = 4 if emit else 2
    a = [t.to("meta") for t in intra_args(B=2, T=192, H=H, HV=4, K=128, io=io)]
    dq, dk, db, dg = torch.ops.kdart.bwd_intra(*a, fold, emit)
    odt = io if emit else F32
    assert (dq.shape, dq.dtype, dk.shape, dk.dtype) == ((2, 192, 4, 128), odt, (2, 192, 4, 128), odt)
    assert (db.shape, db.dtype, dg.shape, dg.dtype) == ((2, 192, 4), F32, (2, 192, 4, 128), F32)
    assert dq.device.type == "meta"


@pytest.mark.parametrize("io", [BF, torch.float16])
@pytest.mark.parametrize("with_h0", [True, False])
def test_dhu_fake_shapes(io, with_h0):
    a, h0, dht = dhu_args(B=2, T=256, HV=4, K=128, V=256, io=io, h0=with_h0)
    a = [t.to("meta") for t in a]
    h0 = h0.to("meta") if with_h0 else None
    dh, dh0, dv2 = kt.bwd_dhu(*a, h0=h0, dht=dht.to("meta"), scale=0.1)
    assert (dh.shape, dh.dtype) == ((2, 4, 4, 128, 256), io)
    assert (dv2.shape, dv2.dtype) == ((2, 256, 4, 256), io)
    if with_h0:
        assert (dh0.shape, dh0.dtype) == ((2, 4, 128, 256), F32)
    else:
        assert dh0 is None


def test_fake_checks_arguments():
    a = [t.to("meta") for t in intra_args()]
    a[5] = torch.empty(1, 128, 4, 32, device="meta")
    with pytest.raises(ValueError, match="ESHAPE"):
        torch.ops.kdart.bwd_intra(*a)


def test_opcheck_meta():
    """torch.library.opcheck on meta tensors (runs the fake implementations; no CUDA needed)."""
    a = [t.to("meta") for t in intra_args()]
    torch.library.opcheck(torch.ops.kdart.bwd_intra.default, (*a, True, False),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))
    d, h0, dht = dhu_args()
    d = [t.to("meta") for t in d]
    torch.library.opcheck(torch.ops.kdart.bwd_dhu.default, (*d, h0.to("meta"), dht.to("meta"), 0.125),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))


def test_compile_traces_on_meta():
    """torch.compile(fullgraph=True) of a function calling both ops traces (fake tensors; meta device)."""
    def f(a, d, h0, dht):
        dq, dk, db, dg = kt.bwd_intra(*a, fold_dg=True)
        dh, dh0, dv2 = kt.bwd_dhu(*d, h0=h0, dht=dht)
        return dq.sum() + dh0.sum() + dv2.float().sum() + dg.sum()
    a = [t.to("meta") for t in intra_args()]
    d, h0, dht = dhu_args()
    d = [t.to("meta") for t in d]
    from torch._dynamo.testing import CompileCounterWithBackend
    cnt = CompileCounterWithBackend("aot_eager")
    out = torch.compile(f, backend=cnt, fullgraph=True)(a, d, h0.to("meta"), dht.to("meta"))
    assert out.device.type == "meta" and cnt.frame_count == 1


# ------------------------------------------------------------- variable length

CU = torch.tensor([0, 15, 100, 300], dtype=torch.int64)  # 1 + 2 + 4 = 7 chunks


def ci_of(cu):
    from kda_ref import chunk_indices
    return chunk_indices(cu)


@pytest.mark.parametrize("dt", [torch.int32, torch.int64])
def test_dhu_fake_shapes_varlen(dt):
    """fla's shapes: dh [1, len(chunk_indices), HV, K, V], dh0 [N, HV, K, V], dv2 as dv."""
    cu = CU.to(dt)
    a, _, _ = dhu_args(B=1, T=310, HV=4, K=64, V=128)
    h0 = torch.randn(3, 4, 64, 128)
    a = [t.to("meta") for t in a]
    dh, dh0, dv2 = torch.ops.kdart.bwd_dhu(*a, h0.to("meta"), h0.to("meta"), 0.1, cu.to("meta"),
                                            ci_of(cu).to("meta"), None)
    assert dh.shape == (1, 7, 4, 64, 128) and dh0.shape == (3, 4, 64, 128) and dv2.shape == (1, 310, 4, 128)


def test_dhu_fake_shapes_partial():
    """Fixed length, T % 64 != 0: dh has B * ceil(T / 64) rows, as fla."""
    a, h0, dht = dhu_args(B=2, T=100, HV=4, K=64, V=64)
    dh, dh0, dv2 = kt.bwd_dhu(*[t.to("meta") for t in a], h0=h0.to("meta"), dht=dht.to("meta"))
    assert dh.shape == (2, 2, 4, 64, 64) and dh0.shape == (2, 4, 64, 64) and dv2.shape == (2, 100, 4, 64)


def test_intra_fake_shapes_varlen():
    a = [t.to("meta") for t in intra_args(B=1, T=310, H=2, HV=4, K=64)]
    dq, dk, db, dg = torch.ops.kdart.bwd_intra(*a, True, False, CU.to("meta"), ci_of(CU).to("meta"))
    assert dq.shape == (1, 310, 4, 64) and db.shape == (1, 310, 4) and dg.shape == (1, 310, 4, 64)


def test_varlen_checks():
    a, _, _ = dhu_args(B=1, T=310, HV=4, K=64, V=128)
    h3 = torch.randn(3, 4, 64, 128)
    with pytest.raises(ValueError, match="EDTYPE"):
        kt.bwd_dhu(*a, h0=h3, dht=h3, cu_seqlens=CU.float())
    with pytest.raises(ValueError, match="EDTYPE"):  # chunk_indices of another dtype than cu_seqlens
        kt.bwd_dhu(*a, h0=h3, cu_seqlens=CU, chunk_indices=ci_of(CU).int())
    with pytest.raises(ValueError, match="ESHAPE"):  # h0 per sequence: [N, ...]
        kt.bwd_dhu(*a, h0=torch.randn(1, 4, 64, 128), cu_seqlens=CU, chunk_indices=ci_of(CU))
    with pytest.raises(ValueError, match="ESHAPE"):  # chunk_offsets [N+1]
        kt.bwd_dhu(*a, cu_seqlens=CU, chunk_indices=ci_of(CU), chunk_offsets=CU[:3])
    with pytest.raises(ValueError, match="EINVAL"):
        kt.bwd_dhu(*a, chunk_indices=ci_of(CU))
    b, _, _ = dhu_args(B=2, T=310)
    with pytest.raises(ValueError, match="B == 1"):
        kt.bwd_dhu(*b, cu_seqlens=CU, chunk_indices=ci_of(CU))
    i = intra_args(B=1, T=310)
    with pytest.raises(ValueError, match="ESHAPE"):
        kt.bwd_intra(*i, cu_seqlens=CU[None])
    with pytest.raises(ValueError, match="EDEVICE"):  # valid shapes; CPU tensors: kdart's EDEVICE
        kt.bwd_intra(*i, cu_seqlens=CU, chunk_indices=ci_of(CU))
    with pytest.raises(ValueError, match="EDEVICE"):  # no chunk_indices: dh's rows counted from cu_seqlens
        kt.bwd_dhu(*a, h0=h3, dht=h3, cu_seqlens=CU)


def test_opcheck_meta_varlen():
    a = [t.to("meta") for t in intra_args(B=1, T=310)]
    cu, ci = CU.to("meta"), ci_of(CU).to("meta")
    torch.library.opcheck(torch.ops.kdart.bwd_intra.default, (*a, True, False, cu, ci),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))
    d, _, _ = dhu_args(B=1, T=310)
    d = [t.to("meta") for t in d]
    h3 = torch.randn(3, 4, 64, 128, device="meta")
    torch.library.opcheck(torch.ops.kdart.bwd_dhu.default, (*d, h3, h3, 0.125, cu, ci, None),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))


@pytest.mark.parametrize("K,V", [(1, 1), (60, 100), (100, 192), (256, 512), (192, 16)])
def test_head_dims(K, V):
    """Any K in 1..256 and V in 1..512 reaches kdart (CPU tensors: EDEVICE) and the fakes give
    fla's shapes, K-first or V-first."""
    with pytest.raises(ValueError, match="EDEVICE"):
        kt.bwd_intra(*intra_args(K=K))
    with pytest.raises(ValueError, match="EDEVICE"):
        kt.bwd_dhu(*dhu_args(K=K, V=V)[0])
    a = [t.to("meta") for t in intra_args(B=2, T=100, K=K)]
    dq, dk, db, dg = torch.ops.kdart.bwd_intra(*a, False, False)
    assert dq.shape == (2, 100, 4, K) and dg.shape == (2, 100, 4, K)
    for svf in (False, True):
        a, _, _ = dhu_args(B=2, T=130, HV=4, K=K, V=V, h0=False, dht=False)
        a = [t.to("meta") for t in a]
        S = (V, K) if svf else (K, V)
        h0 = torch.empty((2, 4) + S, device="meta")
        dh, dh0, dv2 = kt.bwd_dhu(*a, h0=h0, dht=h0, state_v_first=svf)
        assert dh.shape == (2, 3, 4) + S and dh0.shape == (2, 4) + S and dv2.shape == (2, 130, 4, V)
        if K != V:
            with pytest.raises(ValueError, match="ESHAPE"):  # the other layout's state
                kt.bwd_dhu(*a, h0=h0, state_v_first=not svf)


@pytest.mark.parametrize("K,B,T,HV,cu,want", [
    (64, 2, 128, 4, None, "K=64,varlen=0,tail=0"),    # native, fixed length
    (128, 2, 100, 4, None, "K=128,varlen=1,tail=0"),  # T % 64 != 0: the varlen body
    (64, 1, 128, 4, [0, 50, 128], "K=64,varlen=1,tail=0"),
    (60, 2, 128, 4, None, "K=64,varlen=1,tail=1"),    # below the tile: the tail body (varlen only)
    (100, 2, 128, 4, None, "K=128,varlen=1,tail=1"),
    (192, 1, 128, 4, [0, 50, 128], "K=256,varlen=1,tail=1"),
    (256, 2, 128, 4, None, "K=256,varlen=0,tail=0"),
    (64, 1025, 64, 64, None, "K=64,varlen=1,tail=0"),  # B*HV > 65535: the varlen body takes the batch
])
def test_plan_specs_are_ops_c_choices(K, B, T, HV, cu, want):
    """The spec a plan prepares (prepare_for, and the check before a capture) is the one kdart launches for
    the shapes: K tile, varlen (T % 64, cu_seqlens, K below its tile, B*HV past the grid's y) and tail."""
    a = intra_args(B=B, T=T, H=HV // 2, HV=HV, K=K, device="meta")  # metadata only
    cus = None if cu is None else torch.tensor(cu, dtype=torch.int32, device="meta")
    plan = kt._intra_plan(*a, True, False, cus)
    assert plan.spec == f"io=bf16,fold_dg=1,emit_bf16=0,{want},beta=io"
    a[3] = torch.empty(a[3].shape, dtype=torch.float32, device="meta")  # beta in fp32: its own specialization
    plan = kt._intra_plan(*a, True, False, cus)
    assert plan.spec == f"io=bf16,fold_dg=1,emit_bf16=0,{want},beta=f32"


def test_intra_beta_dtypes():
    """bwd_intra's beta: the io dtype or fp32 (the outputs as ever); any other dtype is refused, naming beta."""
    a = intra_args(B=1, T=128, H=2, HV=4, K=64, device="meta")
    for dt in (torch.bfloat16, torch.float32):
        a[3] = torch.empty(1, 128, 4, dtype=dt, device="meta")
        outs = kt.intra_meta(*a)
        assert [o[1] for o in outs] == [torch.float32] * 4
    for dt in (torch.float16, torch.float64):
        a[3] = torch.empty(1, 128, 4, dtype=dt, device="meta")
        with pytest.raises(ValueError, match="EDTYPE: tensor beta is"):
            kt.intra_meta(*a)
    a[3] = torch.empty(1, 128, 2, dtype=torch.float32, device="meta")
    with pytest.raises(ValueError, match="ESHAPE: tensor beta"):
        kt.intra_meta(*a)


@pytest.mark.parametrize("K,svf,tail,tile", [(64, False, 0, 64), (128, False, 0, 128), (60, False, 1, 64),
                                           (200, False, 1, 256), (256, False, 0, 256), (64, True, 2, 64),
                                           (256, True, 2, 256), (60, True, 1, 64), (192, False, 0, 192),
                                           (160, False, 1, 192), (192, True, 2, 192)])
def test_dhu_plan_tail(K, svf, tail, tile):
    """bwd_dhu's K tile (192 for K in 129..192) and tail: 1 for K below its tile (the partial V tile needs
    the device's BV), else 2 for the V-first state at native dims, else 0."""
    d, _, _ = dhu_args(B=1, T=128, HV=2, K=K, V=128, device="meta", h0=False, dht=False)
    plan = kt._dhu_plan(*d, None, None, None, None, None, None, None, svf)
    assert plan.spec == f"io=bf16,K={tile},BV=64,varlen=0,tail={tail}"  # off the GPU: the widest V tile


def _wy_meta_args(B=2, T=192, H=2, HV=4, K=128, V=128, io=BF, svf=False, NT=None):
    NT = B * (-(-T // 64)) if NT is None else NT
    Bh = B if NT == B * (-(-T // 64)) else 1
    S = (V, K) if svf else (K, V)
    m = lambda *s, dt=io: torch.empty(*s, dtype=dt, device="meta")  # noqa: E731
    return [m(B, T, H, K), m(B, T, H, K), m(B, T, HV, V), m(B, T, HV, V), m(B, T, HV, K, dt=F32),
            m(B, T, HV, dt=F32), m(B, T, HV, 64), m(Bh, NT // Bh, HV, *S), m(B, T, HV, V), m(Bh, NT // Bh, HV, *S),
            m(B, T, HV, V)]


@pytest.mark.parametrize("io", [BF, torch.float16])
@pytest.mark.parametrize("svf", [False, True])
def test_wy_fake_shapes_and_plans(io, svf):
    """wy_dqkg's fake implementation (fla's outputs: dq, dk at HV heads fp32, dv in the io dtype, db, dg, dA
    fp32), opcheck on meta tensors, and the spec a plan prepares: kdart's choice of K tile, varlen, tail."""
    a = _wy_meta_args(io=io, svf=svf)
    out = torch.ops.kdart.wy_dqkg(*a, 0.125, svf)
    want = [((2, 192, 4, 128), F32), ((2, 192, 4, 128), F32), ((2, 192, 4, 128), io), ((2, 192, 4), F32),
            ((2, 192, 4, 128), F32), ((2, 192, 4, 64), F32)]
    assert [(tuple(o.shape), o.dtype) for o in out] == want
    torch.library.opcheck(torch.ops.kdart.wy_dqkg.default, (*a, 0.125, svf),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))
    name = "bf16" if io == BF else "fp16"
    assert kt._wy_plan(*a, svf).spec == f"io={name},K=128,varlen=0,tail=0,beta=f32,svf={int(svf)},dAqk=0,intra=0,post=0"
    b = _wy_meta_args(B=1, T=300, K=100, V=100, io=io, svf=svf, NT=7)
    cu = torch.tensor([0, 100, 300], dtype=torch.int32, device="meta")
    assert kt._wy_plan(*b, svf, cu).spec == f"io={name},K=128,varlen=1,tail=1,beta=f32,svf={int(svf)},dAqk=0,intra=0,post=0"


def test_wy_checks():
    a = _wy_meta_args()
    bad = list(a)
    bad[6] = torch.empty(2, 192, 4, 64, dtype=F32, device="meta")
    with pytest.raises(ValueError, match="EDTYPE: tensor A"):
        kt.wy_meta(*bad)
    bad = list(a)
    bad[5] = torch.empty(2, 192, 4, dtype=torch.float16, device="meta")
    with pytest.raises(ValueError, match="EDTYPE: tensor beta"):
        kt.wy_meta(*bad)
    bad = list(a)
    bad[9] = torch.empty(2, 4, 4, 128, 128, dtype=BF, device="meta")
    with pytest.raises(ValueError, match="ESHAPE: tensor dh"):
        kt.wy_meta(*bad)
    with pytest.raises(ValueError, match="EUNSUPPORTED"):
        kt.wy_meta(*_wy_meta_args(V=600))


def test_wy_plan_batch_past_grid_y():
    """B*HV past the grid's 65535 in y: wy_dqkg's variable-length body takes the batch (B rows of T tokens)."""
    a = _wy_meta_args(B=1025, T=64, H=32, HV=64, K=64, V=64)
    assert kt._wy_plan(*a).spec == "io=bf16,K=64,varlen=1,tail=0,beta=f32,svf=0,dAqk=0,intra=0,post=0"
    a = _wy_meta_args(B=1, T=100, H=2, HV=4, K=64, V=64)  # any T at fixed length: varlen, h of ceil(T/64) rows
    assert kt._wy_plan(*a).spec == "io=bf16,K=64,varlen=1,tail=0,beta=f32,svf=0,dAqk=0,intra=0,post=0"


# ------------------------------------------------- fla's chunk_kda_bwd_dAv, fused into bwd_dhu and wy_dqkg

def _dhu_aqk_meta(B=2, T=192, HV=4, K=128, V=128, io=BF):
    m = lambda *s, dt=io: torch.empty(*s, dtype=dt, device="meta")  # noqa: E731
    return [m(B, T, HV, K), m(B, T, HV, K), m(B, T, HV, K), m(B, T, HV, V), None, m(B, T, HV, K, dt=F32)], \
        m(B, T, HV, 64)


@pytest.mark.parametrize("io", [BF, torch.float16])
@pytest.mark.parametrize("svf", [False, True])
def test_dhu_aqk_fake_shapes_and_opcheck(io, svf):
    """bwd_dhu with Aqk in dv's place: the same outputs (dv2 as do), through the fake implementation and opcheck;
    its plan is its own (the key tells Aqk calls from dv calls)."""
    d, A = _dhu_aqk_meta(io=io)
    S = (128, 128)
    h0 = torch.empty(2, 4, *S, device="meta")
    dh, dh0, dv2 = kt.bwd_dhu(*d, h0=h0, dht=h0, scale=0.1, state_v_first=svf, Aqk=A)
    assert (dh.shape, dh.dtype, dh0.shape) == ((2, 3, 4, *S), io, (2, 4, *S))
    assert (dv2.shape, dv2.dtype) == ((2, 192, 4, 128), io)
    dh, dh0, dv2 = kt.bwd_dhu(*d, Aqk=A)
    assert dh0 is None and dv2.shape == (2, 192, 4, 128)
    torch.library.opcheck(torch.ops.kdart.bwd_dhu.default, (*d, h0, h0, 0.125, None, None, None, svf, A),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))
    assert kt.prepare_for(kt.bwd_dhu, *d, Aqk=A).startswith(f"io={'bf16' if io == BF else 'fp16'},K=128,BV=64")
    plans = kt._thread_plans()
    plans.clear()
    for dv, aqk in ((d[3], None), (None, A)):  # meta tensors: the launch refuses them, the plans stay
        with pytest.raises(ValueError, match="ENULL"):
            kt._bwd_dhu_impl(*d[:4], dv, d[5], Aqk=aqk)
    assert sorted(k[3] for k in plans) == ["dhu", "dhu+Aqk"]


def test_dhu_aqk_checks():
    """Exactly one of dv and Aqk; with Aqk, K 64 or 128 and V a multiple of 64 (kdart's refusal, a ValueError; an
    odd K is not zero-padded then)."""
    d, A = _dhu_aqk_meta()
    with pytest.raises(ValueError, match="ENULL: bwd_dhu needs dv or Aqk"):
        kt.bwd_dhu(*d)
    both = list(d)
    both[4] = d[3]
    with pytest.raises(ValueError, match="EINVAL: bwd_dhu takes dv or Aqk, not both"):
        kt.bwd_dhu(*both, Aqk=A)
    with pytest.raises(ValueError, match="EINVAL"):
        torch.ops.kdart.bwd_dhu(*both, Aqk=A)
    for K, V in ((100, 128), (63, 128), (256, 128), (128, 96), (64, 63)):
        d, A = _dhu_aqk_meta(K=K, V=V)
        with pytest.raises(ValueError, match="EUNSUPPORTED"):
            kt.bwd_dhu(*d, Aqk=A)
    d, A = _dhu_aqk_meta()
    with pytest.raises(ValueError, match="EDTYPE"):
        kt.bwd_dhu(*d, Aqk=A.float())
    with pytest.raises(ValueError, match="ESHAPE"):
        kt.bwd_dhu(*d, Aqk=A[..., :32])
    cpu = [None if t is None else torch.zeros(t.shape, dtype=t.dtype) for t in d]  # CPU tensors: kdart's EDEVICE
    with pytest.raises(ValueError, match="EDEVICE"):
        kt.bwd_dhu(*cpu, Aqk=torch.zeros(A.shape, dtype=A.dtype))


@pytest.mark.parametrize("svf", [False, True])
def test_wy_daqk_fake_shapes_and_opcheck(svf):
    """wy_dqkg(..., dAqk=True): fla's six outputs and dAqk [B,T,HV,64] fp32 (its own op, kdart::wy_dqkg_dAqk);
    the default stays fla's six."""
    a = _wy_meta_args(svf=svf)
    out = kt.wy_dqkg(*a, scale=0.125, state_v_first=svf, dAqk=True)
    assert len(out) == 7 and (out[6].shape, out[6].dtype) == ((2, 192, 4, 64), F32)
    assert len(kt.wy_dqkg(*a, scale=0.125, state_v_first=svf)) == 6
    six = torch.ops.kdart.wy_dqkg(*a, 0.125, svf)
    assert [(o.shape, o.dtype) for o in out[:6]] == [(o.shape, o.dtype) for o in six]
    torch.library.opcheck(torch.ops.kdart.wy_dqkg_dAqk.default, (*a, 0.125, svf),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))
    spec = kt.prepare_for(kt.wy_dqkg, *a, scale=0.125, state_v_first=svf, dAqk=True)
    assert spec == kt.prepare_for(torch.ops.kdart.wy_dqkg_dAqk, *a, scale=0.125, state_v_first=svf)
    assert spec == kt._wy_plan(*a, svf, None, None, True).spec and spec.endswith(",dAqk=1,intra=0,post=0")
    cu = torch.tensor([0, 100, 300], dtype=torch.int32, device="meta")
    b = _wy_meta_args(B=1, T=300, NT=7)
    assert kt.wy_meta(*b, cu_seqlens=cu, dAqk=True)[6] == ((1, 300, 4, 64), F32)


@pytest.mark.parametrize("svf", [False, True])
def test_wy_intra_fake_shapes_and_opcheck(svf):
    """wy_dqkg(..., dAqk=True, intra=True): the same seven outputs (its own op, kdart::wy_dqkg_intra), the
    intra=1 spec; intra without dAqk is refused here (the C call would take it: dA and dAqk are optional outputs
    with intra, and the specialization computes dAqk either way)."""
    a = _wy_meta_args(svf=svf)
    out = kt.wy_dqkg(*a, scale=0.125, state_v_first=svf, dAqk=True, intra=True)
    seven = kt.wy_dqkg(*a, scale=0.125, state_v_first=svf, dAqk=True)
    assert [(o.shape, o.dtype) for o in out] == [(o.shape, o.dtype) for o in seven]
    torch.library.opcheck(torch.ops.kdart.wy_dqkg_intra.default, (*a, 0.125, svf),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))
    spec = kt.prepare_for(torch.ops.kdart.wy_dqkg_intra, *a, scale=0.125, state_v_first=svf)
    assert spec == kt.prepare_for(kt.wy_dqkg, *a, scale=0.125, state_v_first=svf, dAqk=True, intra=True)
    assert spec.endswith(",dAqk=1,intra=1,post=0")
    with pytest.raises(ValueError, match="EUNSUPPORTED"):
        kt.wy_dqkg(*a, scale=0.125, intra=True)
    assert kt._wy_plan(*a, svf, None, None, False, True).spec == spec  # (C: intra computes dAqk anyway)


def test_compile_traces_fused_dav_on_meta():
    """torch.compile(fullgraph=True) through bwd_dhu with Aqk and wy_dqkg with dAqk (fake tensors; meta)."""
    def f(d, A, w):
        dh, dh0, dv2 = kt.bwd_dhu(*d, Aqk=A)
        out = kt.wy_dqkg(*w, scale=0.125, dAqk=True)
        return dh.float().sum() + dv2.float().sum() + out[6].sum() + out[0].sum()
    d, A = _dhu_aqk_meta()
    from torch._dynamo.testing import CompileCounterWithBackend
    cnt = CompileCounterWithBackend("aot_eager")
    out = torch.compile(f, backend=cnt, fullgraph=True)(d, A, _wy_meta_args())
    assert out.device.type == "meta" and cnt.frame_count == 1


def test_torch_ext_rebuilds_only_when_out_of_date(tmp_path, monkeypatch):
    """`python -m kdart.torch_ext` builds once per torch and source: with the keyed build present it says
    so and builds nothing (the build folder's key covers torch's version and the source)."""
    import os
    import subprocess
    import sys
    from kdart import torch_ext
    monkeypatch.setenv("KDART_TORCH_EXT_DIR", str(tmp_path))
    torch_ext._key.cache_clear()
    so = torch_ext._so_path()[0]
    os.makedirs(os.path.dirname(so))
    with open(so, "wb") as f:
        f.write(b"not a build: it must not be touched")
    env = child_env()
    r = subprocess.run([sys.executable, "-m", "kdart.torch_ext"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "up to date" in r.stdout, r.stdout + r.stderr
    assert "No CUDA runtime" not in r.stderr  # quiet: no notes from torch's build helpers
    assert open(so, "rb").read() == b"not a build: it must not be touched"


def test_not_a_tensor_is_named():
    """An argument that is not a tensor is refused by name, in fla's words, before kdart is asked."""
    a = intra_args(B=1, T=128, H=2, HV=4, K=64, device="meta")
    a[1] = [1, 2, 3]
    with pytest.raises(ValueError, match="ENULL: k must be a tensor, got list"):
        kt.intra_meta(*a)
    a = intra_args(B=1, T=128, H=2, HV=4, K=64, device="meta")
    a[6] = 0.5  # fla's dq (kdart's dq_in)
    with pytest.raises(ValueError, match="ENULL: dq must be a tensor, got float"):
        kt.intra_meta(*a)


# ------------------------------------------------------------- the recompute (recompute_wu)

def rwu_args(B=1, T=200, H=2, HV=4, K=100, V=72, io=BF, device="meta"):
    e = lambda *s, dt=io: torch.empty(*s, dtype=dt, device=device)  # noqa: E731
    return dict(k=e(B, T, H, K), v=e(B, T, HV, V), beta=e(B, T, HV, dt=F32), A=e(B, T, HV, 64), q=e(B, T, H, K),
                gk=e(B, T, HV, K, dt=F32), g=e(B, T, HV, K), A_log=e(HV, dt=F32), dt_bias=e(HV * K, dt=F32))


@pytest.mark.parametrize("io", [BF, torch.float16])
def test_rwu_fake_shapes(io):
    a = rwu_args(io=io)
    w, u, qg, kg = kt.recompute_w_u(a["k"], a["v"], a["beta"], a["A"], a["gk"], q=a["q"])
    assert (w.shape, w.dtype, u.shape, u.dtype) == ((1, 200, 4, 100), io, (1, 200, 4, 72), io)
    assert qg.shape == kg.shape == (1, 200, 4, 100) and qg.dtype == kg.dtype == io
    w, u, qg, kg = kt.recompute_w_u(a["k"], a["v"], a["beta"], a["A"], a["gk"])
    assert qg is None and w.device.type == "meta"
    gk, w, u, qg, kg = kt.gate_recompute_w_u(a["g"], a["A_log"], a["k"], a["v"], a["beta"], a["A"], q=a["q"],
                                             dt_bias=a["dt_bias"], lower_bound=-5.0)
    assert (gk.shape, gk.dtype) == ((1, 200, 4, 100), F32) and qg.shape == (1, 200, 4, 100)


def test_rwu_checks():
    a = rwu_args()
    with pytest.raises(ValueError, match="ESHAPE"):  # Akk's chunk dim
        kt.rwu_meta(a["k"], a["v"], a["beta"], torch.empty(1, 200, 4, 32, dtype=BF, device="meta"), a["gk"])
    with pytest.raises(ValueError, match="EDTYPE"):  # the cumsummed gate is fp32
        kt.rwu_meta(a["k"], a["v"], a["beta"], a["A"], a["gk"].to(BF))
    with pytest.raises(ValueError, match="ENULL: give either g"):  # neither gate
        kt.rwu_meta(a["k"], a["v"], a["beta"], a["A"], None)
    with pytest.raises(ValueError, match="EINVAL"):  # both gates
        kt.rwu_meta(a["k"], a["v"], a["beta"], a["A"], a["gk"], g_raw=a["g"], A_log=a["A_log"])
    with pytest.raises(ValueError, match="ENULL: g_raw needs A_log"):  # the raw gate without A_log
        kt.rwu_meta(a["k"], a["v"], a["beta"], a["A"], None, g_raw=a["g"])
    with pytest.raises(ValueError, match="EUNSUPPORTED"):  # K past 256
        kt.rwu_meta(*(torch.empty(1, 64, 2, 257, dtype=BF, device="meta"),) + (a["v"][:, :64], a["beta"][:, :64],
                    a["A"][:, :64], torch.empty(1, 64, 4, 257, device="meta")))


def test_rwu_opcheck_and_compile():
    a = rwu_args()
    torch.library.opcheck(torch.ops.kdart.recompute_wu.default,
                          (a["k"], a["v"], a["beta"], a["A"], None, a["q"], a["g"], a["A_log"], a["dt_bias"], -5.0,
                           None, None),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))

    def f(a):
        gk, w, u, qg, kg = kt.gate_recompute_w_u(a["g"], a["A_log"], a["k"], a["v"], a["beta"], a["A"], q=a["q"],
                                                 dt_bias=a["dt_bias"], lower_bound=-5.0)
        return gk.sum() + w.float().sum() + u.float().sum() + qg.float().sum() + kg.float().sum()
    from torch._dynamo.testing import CompileCounterWithBackend
    cnt = CompileCounterWithBackend("aot_eager")
    out = torch.compile(f, backend=cnt, fullgraph=True)(a)
    assert out.device.type == "meta" and cnt.frame_count == 1


# ------------------------------------------------------------- fla's dAv (bwd_dav)

def dav_args(B=1, T=200, H=2, HV=4, K=100, V=72, io=BF, device="meta"):
    e = lambda *s, dt=io: torch.empty(*s, dtype=dt, device=device)  # noqa: E731
    return dict(q=e(B, T, H, K), k=e(B, T, H, K), v=e(B, T, HV, V), do=e(B, T, HV, V), A=e(B, T, HV, 64))


@pytest.mark.parametrize("io", [BF, torch.float16])
def test_dav_fake_shapes(io):
    a = dav_args(io=io)
    dA, dv = kt.bwd_dAv(a["q"], a["k"], a["v"], a["do"], a["A"], scale=0.1)
    assert (dA.shape, dA.dtype, dv.shape, dv.dtype) == ((1, 200, 4, 64), F32, (1, 200, 4, 72), io)
    assert dA.device.type == "meta"
    # packed, fla's chunk_indices, V = 512; scale from q's head dim; fla's use_graph taken
    a = dav_args(V=512, io=io)
    cu, ci = torch.empty(4, dtype=torch.int64, device="meta"), torch.empty(6, 2, dtype=torch.int64, device="meta")
    dA, dv = kt.bwd_dAv(a["q"], a["k"], a["v"], a["do"], a["A"], cu_seqlens=cu, chunk_indices=ci, use_graph=True)
    assert dA.shape == (1, 200, 4, 64) and dv.shape == (1, 200, 4, 512)


def test_dav_checks():
    a = dav_args()
    with pytest.raises(ValueError, match="ESHAPE: tensor A"):  # Aqk's chunk dim
        kt.dav_meta(a["v"], a["do"], torch.empty(1, 200, 4, 32, dtype=BF, device="meta"))
    with pytest.raises(ValueError, match="EDTYPE: tensor v"):  # mixed io dtypes
        kt.dav_meta(a["v"].to(torch.float16), a["do"], a["A"])
    with pytest.raises(ValueError, match="EDTYPE"):  # float32 io: fla's
        kt.dav_meta(a["v"].float(), a["do"].float(), a["A"].float())
    with pytest.raises(ValueError, match="EUNSUPPORTED: value dim V=513"):
        b = dav_args(V=513)
        kt.dav_meta(b["v"], b["do"], b["A"])
    with pytest.raises(ValueError, match="ESHAPE: cu_seqlens needs B == 1"):
        b = dav_args(B=2)
        kt.dav_meta(b["v"], b["do"], b["A"], cu_seqlens=torch.empty(3, dtype=torch.int32, device="meta"))
    with pytest.raises(ValueError, match="EUNSUPPORTED: chunk_size=32"):
        kt.bwd_dAv(a["q"], a["k"], a["v"], a["do"], a["A"], chunk_size=32)
    with pytest.raises(ValueError, match="ENULL: bwd_dAv needs A"):
        kt.bwd_dAv(a["q"], a["k"], a["v"], a["do"])


def test_dav_host_tensors_refused():
    """CPU tensors reach kdart through the custom op and are refused (EDEVICE) before anything is written."""
    v, do = torch.randn(1, 128, 2, 64).to(BF), torch.randn(1, 128, 2, 64).to(BF)
    A = torch.randn(1, 128, 2, 64).to(BF)
    before = [t.clone() for t in (v, do, A)]
    with pytest.raises(ValueError, match="EDEVICE"):
        kt.bwd_dAv(v, v, v, do, A, scale=0.1)
    assert all(torch.equal(x, y) for x, y in zip((v, do, A), before))


def test_dav_opcheck_and_compile():
    a = dav_args()
    torch.library.opcheck(torch.ops.kdart.bwd_dav.default, (a["v"], a["do"], a["A"], 0.1, None, None),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))

    def f(a):
        dA, dv = kt.bwd_dAv(a["q"], a["k"], a["v"], a["do"], a["A"], scale=0.1)
        return dA.sum() + dv.float().sum()
    from torch._dynamo.testing import CompileCounterWithBackend
    cnt = CompileCounterWithBackend("aot_eager")
    out = torch.compile(f, backend=cnt, fullgraph=True)(a)
    assert out.device.type == "meta" and cnt.frame_count == 1


# ------------------------------------------------------------- fla's state scan (fwd_h)

def fwdh_args(B=1, T=200, H=2, HV=4, K=100, V=72, io=BF, device="meta", svf=False):
    e = lambda *s, dt=io: torch.empty(*s, dtype=dt, device=device)  # noqa: E731
    S = (V, K) if svf else (K, V)
    return dict(k=e(B, T, H, K), w=e(B, T, HV, K), u=e(B, T, HV, V), gk=e(B, T, HV, K, dt=F32),
                h0=e(B, HV, *S, dt=F32))


@pytest.mark.parametrize("io", [BF, torch.float16])
@pytest.mark.parametrize("svf", [False, True])
def test_fwdh_fake_shapes(io, svf):
    a = fwdh_args(io=io, svf=svf)
    S = (72, 100) if svf else (100, 72)
    h, v_new, ht = kt.chunk_gated_delta_rule_fwd_h(a["k"], a["w"], a["u"], gk=a["gk"], initial_state=a["h0"],
                                                   output_final_state=True, state_v_first=svf)
    assert (h.shape, h.dtype, v_new.shape, v_new.dtype) == ((1, 4, 4) + S, io, (1, 200, 4, 72), io)
    assert (ht.shape, ht.dtype) == ((1, 4) + S, F32) and h.device.type == "meta"
    h, v_new, ht = kt.chunk_gated_delta_rule_fwd_h(a["k"], a["w"], a["u"], gk=a["gk"], save_new_value=False,
                                                   state_v_first=svf)
    assert v_new is None and ht is None and h.shape == (1, 4, 4) + S
    # packed: h has fla's len(chunk_indices) rows, the states one per sequence
    cu, ci = torch.empty(4, dtype=torch.int64, device="meta"), torch.empty(6, 2, dtype=torch.int64, device="meta")
    h, v_new, ht = kt.chunk_gated_delta_rule_fwd_h(a["k"], a["w"], a["u"], gk=a["gk"], output_final_state=True,
                                                   state_v_first=svf, cu_seqlens=cu, chunk_indices=ci)
    assert h.shape == (1, 6, 4) + S and ht.shape == (3, 4) + S


def test_fwdh_checks():
    a = fwdh_args()
    f = kt.chunk_gated_delta_rule_fwd_h
    with pytest.raises(ValueError, match="EUNSUPPORTED: the scalar gate g"):
        f(a["k"], a["w"], a["u"], g=torch.empty(1, 200, 4, device="meta"), gk=a["gk"])
    with pytest.raises(ValueError, match="ENULL: chunk_gated_delta_rule_fwd_h needs gk"):
        f(a["k"], a["w"], a["u"])
    with pytest.raises(ValueError, match="EUNSUPPORTED: chunk_size=32"):
        f(a["k"], a["w"], a["u"], gk=a["gk"], chunk_size=32)
    with pytest.raises(ValueError, match="EDTYPE: tensor gk"):  # the gate is fp32
        kt.fwdh_meta(a["k"], a["w"], a["u"], a["gk"].to(BF))
    with pytest.raises(ValueError, match="EDTYPE: tensor u"):  # mixed io dtypes
        kt.fwdh_meta(a["k"], a["w"], a["u"].to(torch.float16), a["gk"])
    with pytest.raises(ValueError, match="EDTYPE"):  # float32 io: fla's
        kt.fwdh_meta(a["k"].float(), a["w"].float(), a["u"].float(), a["gk"])
    with pytest.raises(ValueError, match="ESHAPE: tensor initial_state"):  # h0 in the other layout
        kt.fwdh_meta(a["k"], a["w"], a["u"], a["gk"], initial_state=a["h0"], state_v_first=True)
    with pytest.raises(ValueError, match="ESHAPE: tensor w"):
        kt.fwdh_meta(a["k"], a["w"][..., :64], a["u"], a["gk"])
    with pytest.raises(ValueError, match="ESHAPE: HV=4"):  # value heads not a multiple of k's heads
        b = fwdh_args(H=3)
        kt.fwdh_meta(b["k"], b["w"], b["u"], b["gk"])
    with pytest.raises(ValueError, match="EUNSUPPORTED: value dim V=513"):
        b = fwdh_args(V=513)
        kt.fwdh_meta(b["k"], b["w"], b["u"], b["gk"])
    with pytest.raises(ValueError, match="EUNSUPPORTED: head dim K=257"):
        b = fwdh_args(K=257)
        kt.fwdh_meta(b["k"], b["w"], b["u"], b["gk"])
    with pytest.raises(ValueError, match="ESHAPE: cu_seqlens needs B == 1"):
        b = fwdh_args(B=2)
        kt.fwdh_meta(b["k"], b["w"], b["u"], b["gk"], cu_seqlens=torch.empty(3, dtype=torch.int32, device="meta"),
                     nt=4)
    with pytest.raises(ValueError, match="ENULL: k must be a tensor"):
        kt.fwdh_meta([1, 2], a["w"], a["u"], a["gk"])


def test_fwdh_host_tensors_refused():
    """CPU tensors reach kdart through the custom op and are refused (EDEVICE) before anything is written."""
    k, w, u = (torch.randn(1, 128, 2, 64).to(BF) for _ in range(3))
    gk = torch.randn(1, 128, 2, 64)
    before = [t.clone() for t in (k, w, u, gk)]
    with pytest.raises(ValueError, match="EDEVICE"):
        kt.chunk_gated_delta_rule_fwd_h(k, w, u, gk=gk)
    assert all(torch.equal(x, y) for x, y in zip((k, w, u, gk), before))


def test_fwdh_opcheck_and_compile():
    a = fwdh_args()
    torch.library.opcheck(torch.ops.kdart.fwd_h.default,
                          (a["k"], a["w"], a["u"], a["gk"], a["h0"], True, True, False, None, None, None),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))

    def f(a):
        h, v_new, ht = kt.chunk_gated_delta_rule_fwd_h(a["k"], a["w"], a["u"], gk=a["gk"], initial_state=a["h0"],
                                                       output_final_state=True)
        return h.float().sum() + v_new.float().sum() + ht.sum()
    from torch._dynamo.testing import CompileCounterWithBackend
    cnt = CompileCounterWithBackend("aot_eager")
    out = torch.compile(f, backend=cnt, fullgraph=True)(a)
    assert out.device.type == "meta" and cnt.frame_count == 1


def _post_args(B=1, T=200, H=2, HV=4, K=64, io=BF, gdt=F32):
    m = lambda *s, dt=F32: torch.empty(*s, dtype=dt, device="meta")  # noqa: E731
    return dict(dq=m(B, T, HV, K), dk=m(B, T, HV, K), dg=m(B, T, HV, K), db=m(B, T, HV), q=m(B, T, H, K, dt=io),
                k=m(B, T, H, K, dt=io), q_rstd=m(B, T, H), k_rstd=m(B, T, H), g=m(B, T, HV, K, dt=gdt), A_log=m(HV),
                dt_bias=m(HV * K), beta=m(B, T, HV, dt=io))


@pytest.mark.parametrize("io", [BF, torch.float16])
def test_post_fake_shapes(io):
    """bwd_post on meta tensors (its fake): dq, dk at the heads in io, dg in g's dtype, dbeta in the logits',
    dA_log / ddt_bias in A_log's / dt_bias's shapes; kdart's checks ran (its spec was asked for)."""
    a = _post_args(io=io)
    dq, dk, dg, db, dA, dbias = kt.bwd_post(**a, lower_bound=-5.0)
    assert (dq.shape, dq.dtype, dk.shape) == ((1, 200, 2, 64), io, (1, 200, 2, 64))
    assert (dg.shape, dg.dtype, db.shape, db.dtype) == ((1, 200, 4, 64), F32, (1, 200, 4), io)
    assert (dA.shape, dbias.shape, dA.device.type) == ((4,), (256,), "meta")
    # no gate, no l2norm, no sigmoid: the value heads' sum and the casts; heads given
    dq, dk, dg, db, dA, dbias = kt.bwd_post(a["dq"], a["dk"], a["dg"], a["db"], io_dtype=io, heads=2,
                                            g_dtype=io)
    assert dq.shape == (1, 200, 2, 64) and dg.dtype == io and db.dtype == F32 and dA is None and dbias is None


def test_post_checks():
    a = _post_args()
    with pytest.raises(ValueError, match="ENULL.*A_log"):
        kt.bwd_post(**{**a, "A_log": None, "dt_bias": None})
    with pytest.raises(ValueError, match="ENULL.*q_rstd"):
        kt.bwd_post(**{**a, "q_rstd": None})
    with pytest.raises(ValueError, match="EDTYPE"):
        kt.bwd_post(**{**a, "g": a["g"].to(torch.float16)})
    with pytest.raises(ValueError, match="EUNSUPPORTED: head dim K=300"):
        kt.bwd_post(**_post_args(K=300))
    with pytest.raises(ValueError, match="ESHAPE"):
        kt.bwd_post(**{**a, "db": torch.empty(1, 200, 3, device="meta")})


def test_post_host_tensors_refused():
    """CPU tensors are refused (EDEVICE) before anything is written."""
    dq = torch.randn(1, 64, 2, 64)
    db = torch.randn(1, 64, 2)
    with pytest.raises(ValueError, match="EDEVICE"):
        kt.bwd_post(dq, dq, dq, db, io_dtype=BF)


def test_compile_traces_post_on_meta():
    """torch.compile(fullgraph=True) through bwd_post (fake tensors; meta)."""
    a = _post_args()
    from torch._dynamo.testing import CompileCounterWithBackend
    cnt = CompileCounterWithBackend("aot_eager")
    out = torch.compile(lambda a: sum(x.float().sum() for x in kt.bwd_post(**a, lower_bound=-5.0)), backend=cnt,
                        fullgraph=True)(a)
    assert out.device.type == "meta" and cnt.frame_count == 1


@pytest.mark.parametrize("gate", [True, False])
def test_chunk_kda_bwd_on_meta(gate):
    """The whole backward composes (meta tensors: every stage's fake), and returns fla's gradients' shapes and
    dtypes: dq, dk at the heads (GVA summed), dg in g's dtype, dbeta in the logits', dA_log / ddt_bias in
    A_log's / dt_bias's shapes (None without the gate), dh0 as h0."""
    B, T, H, HV, K, V = 1, 200, 2, 4, 64, 64
    m = lambda *s, dt=BF: torch.empty(*s, dtype=dt, device="meta")  # noqa: E731
    q, k, v = m(B, T, H, K), m(B, T, H, K), m(B, T, HV, V)
    g = m(B, T, HV, K) if gate else m(B, T, HV, K, dt=F32)
    beta, beta_raw = m(B, T, HV, dt=F32), m(B, T, HV)
    Aqk, Akk, do = m(B, T, HV, 64), m(B, T, HV, 64), m(B, T, HV, V)
    h0, dht = m(B, HV, K, V, dt=F32), m(B, HV, K, V, dt=F32)
    kw = dict(A_log=m(HV, dt=F32), dt_bias=m(HV * K, dt=F32), use_gate_in_kernel=True, lower_bound=-5.0) if gate \
        else dict(g_cumsum=m(B, T, HV, K, dt=F32))
    out = kt.chunk_kda_bwd(q, k, v, g, beta, Aqk, Akk, do, dht, scale=0.125, initial_state=h0, q_rstd=m(B, T, H, dt=F32),
                           k_rstd=m(B, T, H, dt=F32), beta_raw=beta_raw, use_beta_sigmoid_in_kernel=True, **kw)
    dq, dk, dv, dg, db, dA, dbias, dh0 = out
    assert (dq.shape, dq.dtype, dk.shape, dv.shape, dv.dtype) == ((B, T, H, K), BF, (B, T, H, K), (B, T, HV, V), BF)
    assert (dg.shape, dg.dtype, db.shape, db.dtype) == ((B, T, HV, K), g.dtype, (B, T, HV), BF)
    assert dh0.shape == h0.shape and dh0.dtype == F32
    assert (dA is None, dbias is None) == (not gate, not gate)
    if gate:
        assert dA.shape == (HV,) and dbias.shape == (HV * K,)


def test_chunk_kda_bwd_refuses_on_meta():
    """A bad whole-backward call is refused by a stage's own checks (ValueError), as the eager call's meta
    precheck refuses it before anything launches: a head dim past 256, packed sequences without fla's
    chunk_indices, the gate in the kernel without A_log, the log gate without its cumsum."""
    B, T, H, HV, V = 1, 128, 2, 2, 64
    m = lambda *s, dt=BF: torch.empty(*s, dtype=dt, device="meta")  # noqa: E731

    def call(K=64, **kw):
        q, k, v = m(B, T, H, K), m(B, T, H, K), m(B, T, HV, V)
        base = dict(g_cumsum=m(B, T, HV, K, dt=F32))
        base.update(kw)
        return kt.chunk_kda_bwd(q, k, v, m(B, T, HV, K, dt=F32), m(B, T, HV, dt=F32), m(B, T, HV, 64),
                                m(B, T, HV, 64), m(B, T, HV, V), None, scale=0.125, **base)
    call()  # (the valid call composes)
    with pytest.raises(ValueError, match="K=300"):
        call(K=300, g_cumsum=m(B, T, HV, 300, dt=F32))
    with pytest.raises(ValueError, match="chunk_indices"):
        call(cu_seqlens=torch.empty(3, dtype=torch.int64, device="meta"))
    with pytest.raises(ValueError, match="A_log"):
        call(use_gate_in_kernel=True)
    with pytest.raises(ValueError, match="g_cumsum"):
        call(g_cumsum=None)


def test_chunk_bwd_args_layout():
    """kdart.torch's ctypes image of kdart_chunk_bwd_args is kdart.h's: the C library sizes a call laid out
    through it (struct_size checked, q's and v's shapes read where kdart.h puts them: the workspace grows
    with v's value heads and with the recompute), and refuses a wrong struct_size."""
    import ctypes
    from kdart import _lib
    st = kt._fast()
    f = st["chunk_bwd_ws"]
    keep = []

    def size(HV, recompute=True, struct_size=None):
        B, T, H, K, V = 1, 256, 2, 64, 64
        a = kt._CBArgs()
        a.struct_size = struct_size or ctypes.sizeof(kt._CBArgs)
        shapes = dict(q=(B, T, H, K), k=(B, T, H, K), v=(B, T, HV, V), g_cumsum=(B, T, HV, K), beta=(B, T, HV),
                      Aqk=(B, T, HV, 64), Akk=(B, T, HV, 64), d_o=(B, T, HV, V))
        if not recompute:
            shapes.update(w=(B, T, HV, K), u=(B, T, HV, V), qg=(B, T, HV, K), kg=(B, T, HV, K),
                          v_new=(B, T, HV, V), h=(B, T // 64, HV, K, V))
        for n, shp in shapes.items():
            kt._cb_put(a, n, shp, F32 if n in ("g_cumsum", "beta") else BF, 0, keep)
        a.scale = 0.125
        return f(st["handle"], ctypes.byref(a))
    n2, n4 = size(2), size(4)
    assert 0 < n2 < n4
    assert 0 < size(2, recompute=False) < n2
    assert size(2, struct_size=ctypes.sizeof(kt._CBArgs) - 8) == _lib.status_of("EINVAL")


def test_compile_records_the_whole_backward_as_one_op():
    """torch.compile(fullgraph=True) through kdart.torch.chunk_kda_bwd records one op, kdart::chunk_kda_bwd
    (the one C call at run time), whose fake runs the stages' checks and gives fla's output shapes, Nones
    included (fake tensors; meta)."""
    B, T, H, HV, K, V = 1, 192, 2, 2, 64, 64
    m = lambda *s, dt=BF: torch.empty(*s, dtype=dt, device="meta")  # noqa: E731
    args = (m(B, T, H, K), m(B, T, H, K), m(B, T, HV, V), m(B, T, HV, K), m(B, T, HV, dt=F32), m(B, T, HV, 64),
            m(B, T, HV, 64), m(B, T, HV, V))
    kw = dict(A_log=m(HV, dt=F32), dt_bias=m(HV * K, dt=F32), use_gate_in_kernel=True, lower_bound=-5.0,
              q_rstd=m(B, T, H, dt=F32), k_rstd=m(B, T, H, dt=F32), beta_raw=m(B, T, HV),
              use_beta_sigmoid_in_kernel=True)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def f(*a):
        dq, dk, dv, dg, db, dA, dbias, dh0 = kt.chunk_kda_bwd(*a, None, scale=0.125, **kw)
        assert dh0 is None and dA is not None and dbias.shape == (HV * K,)
        return dq.float().sum() + dk.float().sum() + dv.float().sum() + dg.float().sum() + db.float().sum() + dA.sum()
    out = torch.compile(f, backend=backend, fullgraph=True)(*args)
    assert out.device.type == "meta" and len(graphs) == 1
    ops = [n.target for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert sum("kdart.chunk_kda_bwd" in str(t) for t in ops) == 1, ops
    assert not any("wy_dqkg" in str(t) or "bwd_post" in str(t) for t in ops), ops


@pytest.mark.parametrize("packed,dynamic", [(False, False), (True, False), (False, True)])
def test_compile_records_a_kda_layer_forward_and_backward(packed, dynamic):
    """torch.compile(fullgraph=True) of a KDA layer through kdart.fla.chunk_kda (projections, the production
    flags, a loss) and its backward: no graph break; the forward graph holds fla's forward as one op
    (kdart::fla_chunk_kda_fwd), the backward graph kdart's whole backward as one op (kdart::chunk_kda_bwd);
    every input of the layer gets a gradient of its own shape and dtype (fake tensors; meta).  dynamic: the
    sizes symbolic, as torch.compile makes them once a second shape comes."""
    import kdart.fla
    from torch._dynamo.backends.common import aot_autograd
    B, T, H, K, V, D = (1, 300, 2, 64, 64, 32) if packed else (2, 192, 2, 64, 64, 32)
    dev = "meta"
    x = torch.empty(B, T, D, device=dev, dtype=BF, requires_grad=True)
    W = {n: torch.empty(D, H * s, device=dev, dtype=BF, requires_grad=True)
         for n, s in (("q", K), ("k", K), ("v", V), ("g", K), ("b", 1))}
    A_log = torch.empty(H, device=dev, requires_grad=True)
    dt_bias = torch.empty(H * K, device=dev, requires_grad=True)
    h0 = torch.empty(3 if packed else B, H, K, V, device=dev, requires_grad=True)
    cu = torch.tensor([0, 100, 250, 300]).to(dev) if packed else None
    graphs = []

    def rec(gm, example_inputs):
        from functorch.compile import make_boxed_func
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    def layer(x, W, A_log, dt_bias, h0):
        p = {n: (x @ w).view(B, T, H, -1) for n, w in W.items()}
        o, ht = kdart.fla.chunk_kda(p["q"], p["k"], p["v"], p["g"], p["b"].squeeze(-1), initial_state=h0,
                                    output_final_state=True, use_qk_l2norm_in_kernel=True,
                                    use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True, safe_gate=True,
                                    lower_bound=-5.0, A_log=A_log, dt_bias=dt_bias, cu_seqlens=cu)
        return o.float().sum() + ht.sum()
    f = torch.compile(layer, backend=aot_autograd(fw_compiler=rec, bw_compiler=rec), fullgraph=True,
                      dynamic=dynamic)
    loss = f(x, W, A_log, dt_bias, h0)
    loss.backward()
    assert len(graphs) == 2
    fw, bw = ([str(n.target) for n in g.graph.nodes if n.op == "call_function"] for g in graphs)
    assert sum("kdart.fla_chunk_kda_fwd" in t for t in fw) == 1, fw
    assert sum("kdart.chunk_kda_bwd" in t for t in bw) == 1, bw
    for t in [x, A_log, dt_bias, h0, *W.values()]:
        assert t.grad is not None and t.grad.shape == t.shape and t.grad.dtype == t.dtype


@pytest.mark.parametrize("bad,code", [
    (dict(cu_seqlens=("i64", 3)), "ESHAPE"),                 # packed with B = 2
    (dict(use_gate_in_kernel=True), "ENULL"),                # the gate without A_log or lower_bound
    (dict(k=(2, 64, 2, 32)), "ESHAPE"),                      # k not q's shape
    (dict(v=(2, 64, 3, 64)), "ESHAPE"),                      # HV not a multiple of H
    (dict(q=(2, 64, 2, 300), k=(2, 64, 2, 300), g=(2, 64, 2, 300)), "EUNSUPPORTED"),  # K > 256
    (dict(g=(2, 64, 2, 32)), "ESHAPE"),                      # g not [B,T,HV,K]
    (dict(beta=(2, 64)), "ESHAPE"),
    (dict(q=("f32", (2, 64, 2, 64))), "EDTYPE"),             # fp32 io
    (dict(v=("f16", (2, 64, 2, 64))), "EDTYPE"),             # mixed io
    (dict(g=("f64", (2, 64, 2, 64))), "EDTYPE"),
    (dict(initial_state=("f32", (3, 2, 64, 64))), "ESHAPE"),  # h0 not [N,HV,K,V]
    (dict(initial_state=("bf", (2, 2, 64, 64))), "ESHAPE"),   # h0 not fp32
    (dict(use_gate_in_kernel=True, A_log=("f32", (3,))), "ESHAPE"),
    (dict(use_gate_in_kernel=True, A_log=("f32", (2,)), dt_bias=("f32", (100,))), "ESHAPE"),
    (dict(q=None), "ENULL"),
])
def test_kda_layer_op_refuses(bad, code):
    """kdart.fla.chunk_kda refuses a bad call with kdart's status in a ValueError before the forward launches
    anything (meta tensors: nothing could run)."""
    import kdart.fla
    dts = dict(bf=BF, f16=torch.float16, f32=F32, f64=torch.float64, i64=torch.int64)

    def t(spec, dt=BF):
        if spec is None:
            return None
        if isinstance(spec[0], str):
            dt, spec = dts[spec[0]], spec[1]
        return torch.empty(*((spec,) if isinstance(spec, int) else spec), dtype=dt, device="meta")
    a = dict(q=(2, 64, 2, 64), k=(2, 64, 2, 64), v=(2, 64, 2, 64), g=(2, 64, 2, 64), beta=("f32", (2, 64, 2)))
    kw = {}
    for n, spec in bad.items():
        if n in a:
            a[n] = spec
        elif isinstance(spec, tuple):
            kw[n] = t(spec)
        else:
            kw[n] = spec
    with pytest.raises(ValueError, match=code):
        kdart.fla.chunk_kda(*(t(a[n]) for n in ("q", "k", "v", "g", "beta")), **kw)


def test_whole_backward_traces_with_symbolic_sizes():
    """kdart::chunk_kda_bwd's fake under symbolic sizes outside torch.compile (make_fx, as AOTAutograd's
    dynamic-shape tracing and torch.library.opcheck run it): no size is hashed or compared as an int."""
    from torch.fx.experimental.proxy_tensor import make_fx
    B, T, H, HV, K, V = 1, 192, 2, 2, 64, 64
    m = lambda *s, dt=BF: torch.empty(*s, dtype=dt, device="meta")  # noqa: E731
    args = (m(B, T, H, K), m(B, T, H, K), m(B, T, HV, V), m(B, T, HV, K), m(B, T, HV, dt=F32), m(B, T, HV, 64),
            m(B, T, HV, 64), m(B, T, HV, V), m(HV, dt=F32), m(HV * K, dt=F32))

    def f(q, k, v, g, beta, Aqk, Akk, do, A_log, dt_bias):
        out = kt.chunk_kda_bwd(q, k, v, g, beta, Aqk, Akk, do, None, scale=0.125, A_log=A_log, dt_bias=dt_bias,
                               use_gate_in_kernel=True, lower_bound=-5.0)
        return tuple(x for x in out if x is not None)
    gm = make_fx(f, tracing_mode="symbolic")(*args)
    assert any("kdart.chunk_kda_bwd" in str(n.target) for n in gm.graph.nodes if n.op == "call_function")


def test_dav_fusion_choice_under_symbolic_sizes():
    """The whole backward's fake on CUDA tensors asks whether fla's dAv fuses into bwd_dhu (a grid question):
    with symbolic sizes the answer is no (the fake's shapes do not depend on it), never a hash of a SymInt."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x):
        assert kt._dav_fusable(x.shape[0], x.shape[1], 64, 64, False, torch.device("cuda", 0)) is False
        return x + 1
    make_fx(f, tracing_mode="symbolic")(torch.empty(4, 2, device="meta"))
