"""kdart.torch: the two KDA backward stages as torch ops.

    dq, dk, db, dg = kdart.torch.bwd_intra(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg,
                                          fold_dg=False, emit_bf16=False)
    dh, dh0, dv2 = kdart.torch.bwd_dhu(q, k, w, do, dv, gk, h0=None, dht=None, scale=None)

Arguments, return order and shapes are those of fla 0.6.0's chunk_kda_bwd_intra
and chunk_gated_delta_rule_bwd_dhu (q = qg, k = kg for bwd_dhu); dh0 is None
when h0 is None, as in fla.  Outputs are new tensors on the inputs' device;
nothing is written to the inputs.  Shapes and dtypes: shared/spec/kda_backward.md
sections 3.1 and 4.1 (io dtype bf16 or fp16; g/gk, dAqk, dAkk, dq, dk, dg, db,
dht, h0 fp32; T % 64 == 0, K in {64, 128}, V % 64 == 0, contiguous).

Both are registered as torch.library custom ops (torch.ops.kdart.bwd_intra,
torch.ops.kdart.bwd_dhu) with fake implementations, so torch.compile traces
them (fullgraph).  In eager mode on plain CUDA tensors the functions below skip the
dispatcher and call the implementation directly (the dispatcher costs more
than the whole launch).  The launch runs on torch's current stream of the
inputs' device with that device current, allocates nothing but the outputs and
synchronizes nothing, so it can be captured in a CUDA graph once the
specialization is prepared: the first eager call with a given signature
prepares it, or call prepare_for(bwd_intra, ...) with the same arguments.

Per call, a cached plan per signature (shapes, dtypes, devices, flags) and
thread holds the ctypes argument struct; a call only writes the data pointers.
"""
import ctypes
import threading

import torch

from . import _lib

__all__ = ["bwd_intra", "bwd_dhu", "prepare_for"]

CHUNK = 64
_F32 = torch.float32
_IO = {torch.bfloat16: "bf16", torch.float16: "fp16"}
_DL_DTYPE = {torch.bfloat16: (4, 16), torch.float16: (2, 16), torch.float32: (2, 32)}
assert ctypes.sizeof(_lib.DLTensor) == 48  # 6 words: DLTensor i's data pointer is word 6 i of a plan's array


def _bad(msg):
    return _lib.KdartValueError(-20, "ESHAPE", msg)


def _want(name, t, shape, dtype):
    """ValueError unless t has this shape and dtype (dtype None: any io dtype)."""
    if not isinstance(t, torch.Tensor):
        raise _lib.KdartValueError(-18, "ENULL", f"{name} must be a tensor, got {type(t).__name__}")
    if dtype is None and t.dtype not in _IO:
        raise _lib.KdartValueError(-19, "EDTYPE", f"EDTYPE: {name} is {t.dtype}; the io dtype must be "
                                                  f"torch.bfloat16 or torch.float16")
    if dtype is not None and t.dtype != dtype:
        raise _lib.KdartValueError(-19, "EDTYPE", f"EDTYPE: {name} is {t.dtype}, expected {dtype}")
    if tuple(t.shape) != tuple(shape):
        raise _bad(f"ESHAPE: {name} has shape {list(t.shape)}, expected {list(shape)}")


def _dims(q, g, K_ok=True):
    if q.dim() != 4 or g.dim() != 4:
        raise _bad("ESHAPE: q must be [B,T,H,K] and g [B,T,HV,K]")
    B, T, H, K = q.shape
    HV = g.shape[2]
    if K not in (64, 128):
        raise _lib.KdartValueError(-24, "EUNSUPPORTED", f"EUNSUPPORTED: head dim K={K} (K must be 64 or 128)")
    if T % CHUNK:
        raise _lib.KdartValueError(-24, "EUNSUPPORTED", f"EUNSUPPORTED: T={T} is not a multiple of 64")
    return B, T, H, K, HV


def intra_meta(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg=False, emit_bf16=False):
    """Checks bwd_intra's arguments (ValueError); returns its outputs' (shape, dtype) list."""
    B, T, H, K, HV = _dims(q, g)
    io = q.dtype
    _want("q", q, (B, T, H, K), None)
    if HV % H:
        raise _bad(f"ESHAPE: HV={HV} (value heads, from g) is not a multiple of H={H} (from q)")
    if emit_bf16 and HV != H:
        raise _lib.KdartValueError(-24, "EUNSUPPORTED", "EUNSUPPORTED: emit_bf16 needs HV == H")
    for name, t, shape, dt in (("k", k, (B, T, H, K), io), ("g", g, (B, T, HV, K), _F32),
                               ("beta", beta, (B, T, HV), io), ("dAqk", dAqk, (B, T, HV, CHUNK), _F32),
                               ("dAkk", dAkk, (B, T, HV, CHUNK), _F32), ("dq", dq, (B, T, HV, K), _F32),
                               ("dk", dk, (B, T, HV, K), _F32), ("db", db, (B, T, HV), _F32),
                               ("dg", dg, (B, T, HV, K), _F32)):
        _want(name, t, shape, dt)
    odt = io if emit_bf16 else _F32
    return [((B, T, HV, K), odt), ((B, T, HV, K), odt), ((B, T, HV), _F32), ((B, T, HV, K), _F32)]


def dhu_meta(q, k, w, do, dv, gk, h0=None, dht=None):
    """Checks bwd_dhu's arguments (ValueError); returns its outputs' (shape, dtype) list (dh, dh0, dv2);
    dh0's shape is (0,) when h0 is None."""
    B, T, HV, K, _ = _dims(q, gk)
    if do.dim() != 4:
        raise _bad("ESHAPE: do must be [B,T,HV,V]")
    V = do.shape[3]
    if V % 64 or V < 64:
        raise _lib.KdartValueError(-24, "EUNSUPPORTED", f"EUNSUPPORTED: V={V} is not a multiple of 64")
    io = q.dtype
    _want("q", q, (B, T, HV, K), None)
    for name, t, shape, dt in (("k", k, (B, T, HV, K), io), ("w", w, (B, T, HV, K), io),
                               ("do", do, (B, T, HV, V), io), ("dv", dv, (B, T, HV, V), io),
                               ("gk", gk, (B, T, HV, K), _F32)):
        _want(name, t, shape, dt)
    if h0 is not None:
        _want("h0", h0, (B, HV, K, V), _F32)
    if dht is not None:
        _want("dht", dht, (B, HV, K, V), _F32)
    return [((B, T // CHUNK, HV, K, V), io), ((B, HV, K, V) if h0 is not None else (0,), _F32),
            ((B, T, HV, V), io)]


# ------------------------------------------------------------------ plans

class _Plan:
    """The ctypes argument struct of one signature; calls only write data pointers."""

    def __init__(self, args_cls, names, tensors, fill):
        n = len(names)
        self.dls = (_lib.DLTensor * n)()
        self.keep = []
        self.args = args_cls()
        self.args.struct_size = ctypes.sizeof(args_cls)
        for i, (name, t) in enumerate(zip(names, tensors)):
            if t is None:
                continue  # stays a NULL pointer (optional dht / dh0)
            dl = self.dls[i]
            shape = (ctypes.c_int64 * t.dim())(*t.shape)
            self.keep.append(shape)
            dl.shape, dl.ndim = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)), t.dim()
            dl.device = _lib.DLDevice(2, t.get_device()) if t.is_cuda else _lib.DLDevice(1, 0)
            code, bits = _DL_DTYPE.get(t.dtype, (0, 0))
            dl.dtype = _lib.DLDataType(code, bits, 1)
            setattr(self.args, name, ctypes.pointer(dl))
        fill(self.args)
        self.addr = ctypes.addressof(self.args)
        self.data = memoryview(self.dls).cast("B").cast("Q")  # data field of DLTensor i at [6 i]
        self.warm = False


# Plans are per thread: a call writes its data pointers into the plan's
# DLTensors before the C call reads them, so two threads sharing a plan (two
# devices driven from one process, or a data-loader thread) would race.
_tls = threading.local()
_prepared = set()  # (device index, kernel, spec) loaded into that device's context
_rt_state = {}  # "rt": the runtime, "intra"/"dhu": fast function pointers


def _fast():
    st = _rt_state
    if not st:
        rt = _lib.runtime()
        fi, fd = rt.lib["kdart_kda_bwd_intra"], rt.lib["kdart_kda_bwd_dhu"]  # own objects: own argtypes
        for f in (fi, fd):
            f.argtypes, f.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int
        st.update(rt=rt, handle=rt.handle, intra=fi, dhu=fd)
    return st


def _check_layout(tensors):
    dev = None
    for t in tensors:
        if t is None:
            continue
        if not t.is_contiguous():
            raise _lib.KdartValueError(-21, "ESTRIDE", "ESTRIDE: kdart takes contiguous tensors "
                                                       f"(shape {list(t.shape)}, strides {list(t.stride())})")
        d = t.device
        if dev is None:
            dev = d
        elif d != dev:
            raise _lib.KdartValueError(-23, "EDEVICE", f"EDEVICE: tensors on {dev} and {d}")
    return dev


def _capturing(dev):
    return dev.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _stream(idx):
    try:
        return torch._C._cuda_getCurrentRawStream(idx)
    except AttributeError:
        return torch.cuda.current_stream(idx).cuda_stream


def _launch(fn_name, plan, idx):
    """Calls the C op with the plan's struct (data pointers already written) on idx's current stream."""
    st = _rt_state if _rt_state else _fast()
    if idx < 0:  # not CUDA: kdart's own checks refuse it (EDEVICE) before touching anything
        rc = st[fn_name](st["handle"], plan.addr, None)
    elif torch._C._cuda_getDevice() == idx:
        rc = st[fn_name](st["handle"], plan.addr, _stream(idx))
    else:
        with torch.cuda.device(idx):
            rc = st[fn_name](st["handle"], plan.addr, _stream(idx))
    if rc:
        st["rt"].check(rc, fn_name)
    plan.warm = True


def _prepare_plan(kernel, plan, spec, dev):
    """Prepares the plan's specialization in the device's context (not inside a capture)."""
    if plan.warm or dev.type != "cuda":
        return
    done = (dev.index, kernel, spec)
    if done not in _prepared:
        if _capturing(dev):
            raise _lib.KdartRuntimeError(-17, "EMISUSE", f"kdart: {kernel} [{spec}] is not prepared and the "
                                         "stream is capturing a CUDA graph: call it once eagerly (or "
                                         "kdart.torch.prepare_for) before capture")
        st = _fast()
        info = (ctypes.c_void_p * 2)()  # kdart_launch_info
        with torch.cuda.device(dev):
            st["rt"].check(st["rt"].lib.kdart_get_function(st["handle"], kernel.encode(), spec.encode(), info),
                           kernel)
        _prepared.add(done)
    plan.warm = True


def _intra_plan(key, q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg, emit_bf16):
    outs = intra_meta(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg, emit_bf16)
    dev = _check_layout((q, k, g, beta, dAqk, dAkk, dq, dk, db, dg))
    fake = [torch.empty(s, dtype=d, device="meta") for s, d in outs]  # metadata only
    # C order: ..., dq_in, dk_in, dg_in, db_in, dq, dk, dg, db (fla returns dq, dk, db, dg)
    tensors = (q, k, g, beta, dAqk, dAkk, dq, dk, dg, db, fake[0], fake[1], fake[3], fake[2])

    def fill(a):
        a.fold_dg, a.emit_bf16 = int(bool(fold_dg)), int(bool(emit_bf16))
    plan = _Plan(_lib.IntraArgs, _lib.INTRA_TENSORS, tensors, fill)
    for i in range(10, 14):  # the outputs are on the inputs' device
        plan.dls[i].device = plan.dls[0].device
    plan.outs, plan.dev, plan.idx = outs, dev, (dev.index if dev.type == "cuda" else -1)
    plan.spec = (f"io={_IO[q.dtype]},fold_dg={int(bool(fold_dg))},emit_bf16={int(bool(emit_bf16))},"
                 f"K={q.shape[3]}")
    return plan


def _thread_plans():
    plans = getattr(_tls, "plans", None)
    if plans is None:
        plans = _tls.plans = {}
    return plans


def _get_plan(key, build, *a):
    plans = _thread_plans()
    plan = plans.get(key)
    if plan is None:
        plan = plans[key] = build(key, *a)
    return plan


def _bwd_intra_impl(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg=False, emit_bf16=False):
    key = (q.shape, k.shape, g.shape, beta.shape, dAqk.shape, dAkk.shape, dq.shape, dk.shape, db.shape, dg.shape,
           q.dtype, k.dtype, g.dtype, beta.dtype, dAqk.dtype, dAkk.dtype, dq.dtype, dk.dtype, db.dtype, dg.dtype,
           q.get_device(), k.get_device(), g.get_device(), beta.get_device(), dAqk.get_device(),
           dAkk.get_device(), dq.get_device(), dk.get_device(), db.get_device(), dg.get_device(),
           bool(fold_dg), bool(emit_bf16), "intra")
    plan = _get_plan(key, _intra_plan, q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg,
                                          emit_bf16)
    if not (q.is_contiguous() and k.is_contiguous() and g.is_contiguous() and beta.is_contiguous()
            and dAqk.is_contiguous() and dAkk.is_contiguous() and dq.is_contiguous() and dk.is_contiguous()
            and db.is_contiguous() and dg.is_contiguous()):
        _check_layout((q, k, g, beta, dAqk, dAkk, dq, dk, db, dg))
    dev = plan.dev
    (s0, t0), (s1, t1), (s2, t2), (s3, t3) = plan.outs
    oq = torch.empty(s0, dtype=t0, device=dev)
    ok = torch.empty(s1, dtype=t1, device=dev)
    ob = torch.empty(s2, dtype=t2, device=dev)
    og = torch.empty(s3, dtype=t3, device=dev)
    if not plan.warm:
        _prepare_plan("bwd_intra", plan, plan.spec, dev)
    d = plan.data  # DLTensor i's data at [6 i], in kdart_bwd_intra_args order
    d[0], d[6], d[12], d[18], d[24] = q.data_ptr(), k.data_ptr(), g.data_ptr(), beta.data_ptr(), dAqk.data_ptr()
    d[30], d[36], d[42], d[48], d[54] = dAkk.data_ptr(), dq.data_ptr(), dk.data_ptr(), dg.data_ptr(), db.data_ptr()
    d[60], d[66], d[72], d[78] = oq.data_ptr(), ok.data_ptr(), og.data_ptr(), ob.data_ptr()
    _launch("intra", plan, plan.idx)
    return oq, ok, ob, og


def _dhu_plan(key, q, k, w, do, dv, gk, h0, dht, scale):
    outs = dhu_meta(q, k, w, do, dv, gk, h0, dht)
    dev = _check_layout((q, k, w, do, dv, gk, h0, dht))
    fake = [torch.empty(s, dtype=d, device="meta") for s, d in outs]
    B, T, HV, K = q.shape
    V = do.shape[3]
    v_tile = 0
    if dev.type == "cuda":
        with torch.cuda.device(dev):
            v_tile = _fast()["rt"].dhu_v_tile(B, HV, K, V)
    tensors = (q, k, w, gk, do, dv, dht, fake[0], fake[2], fake[1] if h0 is not None else None)

    def fill(a):
        a.v_tile = v_tile
    plan = _Plan(_lib.DhuArgs, _lib.DHU_TENSORS, tensors, fill)
    for i in (7, 8, 9):
        plan.dls[i].device = plan.dls[0].device
    plan.outs, plan.dev, plan.idx = outs, dev, (dev.index if dev.type == "cuda" else -1)
    plan.spec = f"io={_IO[q.dtype]},K={K},BV={v_tile}"
    return plan


def _bwd_dhu_impl(q, k, w, do, dv, gk, h0=None, dht=None, scale=None):
    key = (q.shape, k.shape, w.shape, do.shape, dv.shape, gk.shape,
           None if h0 is None else (h0.shape, h0.dtype, h0.get_device()),
           None if dht is None else (dht.shape, dht.dtype, dht.get_device()),
           q.dtype, k.dtype, w.dtype, do.dtype, dv.dtype, gk.dtype,
           q.get_device(), k.get_device(), w.get_device(), do.get_device(), dv.get_device(), gk.get_device(), "dhu")
    plan = _get_plan(key, _dhu_plan, q, k, w, do, dv, gk, h0, dht, scale)
    if not (q.is_contiguous() and k.is_contiguous() and w.is_contiguous() and do.is_contiguous()
            and dv.is_contiguous() and gk.is_contiguous() and (dht is None or dht.is_contiguous())):
        _check_layout((q, k, w, do, dv, gk, dht))
    dev = plan.dev
    (s0, t0), (s1, t1), (s2, t2) = plan.outs
    dh = torch.empty(s0, dtype=t0, device=dev)
    dh0 = torch.empty(s1, dtype=t1, device=dev)
    dv2 = torch.empty(s2, dtype=t2, device=dev)
    plan.args.scale = q.shape[3] ** -0.5 if scale is None else scale
    if not plan.warm:
        _prepare_plan("bwd_dhu", plan, plan.spec, dev)
    d = plan.data  # DLTensor i's data at [6 i], in kdart_bwd_dhu_args order (dht 6, dh0 9 stay NULL if absent)
    d[0], d[6], d[12], d[18], d[24], d[30] = (q.data_ptr(), k.data_ptr(), w.data_ptr(), gk.data_ptr(),
                                              do.data_ptr(), dv.data_ptr())
    d[42], d[48] = dh.data_ptr(), dv2.data_ptr()
    if dht is not None:
        d[36] = dht.data_ptr()
    if h0 is not None:
        d[54] = dh0.data_ptr()
    _launch("dhu", plan, plan.idx)
    return dh, dh0, dv2


# ------------------------------------------------------------- custom ops

@torch.library.custom_op("kdart::bwd_intra", mutates_args=())
def _bwd_intra_op(q: torch.Tensor, k: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, dAqk: torch.Tensor,
                  dAkk: torch.Tensor, dq: torch.Tensor, dk: torch.Tensor, db: torch.Tensor, dg: torch.Tensor,
                  fold_dg: bool = False, emit_bf16: bool = False
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _bwd_intra_impl(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg, emit_bf16)


@_bwd_intra_op.register_fake
def _bwd_intra_fake(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg=False, emit_bf16=False):
    outs = intra_meta(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg, emit_bf16)
    return tuple(q.new_empty(s, dtype=d) for s, d in outs)


@torch.library.custom_op("kdart::bwd_dhu", mutates_args=())
def _bwd_dhu_op(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor, do: torch.Tensor, dv: torch.Tensor,
                gk: torch.Tensor, h0: torch.Tensor | None = None, dht: torch.Tensor | None = None,
                scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dh0 is a (0,)-shaped tensor when h0 is None (custom ops cannot return None); bwd_dhu maps it to None."""
    return _bwd_dhu_impl(q, k, w, do, dv, gk, h0, dht, scale)


@_bwd_dhu_op.register_fake
def _bwd_dhu_fake(q, k, w, do, dv, gk, h0=None, dht=None, scale=None):
    outs = dhu_meta(q, k, w, do, dv, gk, h0, dht)
    return tuple(q.new_empty(s, dtype=d) for s, d in outs)


def _eager(t):
    return type(t) is torch.Tensor and t.is_cuda and not torch.compiler.is_compiling()


def bwd_intra(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg=False, emit_bf16=False):
    """fla's chunk_kda_bwd_intra (chunk 64, fixed length) -> (dq, dk, db, dg).
    fold_dg: dg comes back reverse-cumsummed within each chunk (fla's following
    chunk_local_cumsum(dg, 64, reverse=True)); emit_bf16: dq, dk in the io dtype (HV == H)."""
    if _eager(q):
        return _bwd_intra_impl(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg, emit_bf16)
    return torch.ops.kdart.bwd_intra(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg, emit_bf16)


def bwd_dhu(q, k, w, do, dv, gk, h0=None, dht=None, scale=None):
    """fla's chunk_gated_delta_rule_bwd_dhu with the per-channel gate gk (KDA's call: q = qg, k = kg)
    -> (dh, dh0, dv2); dh0 is None when h0 is None.  scale None: K ** -0.5."""
    if _eager(q):
        dh, dh0, dv2 = _bwd_dhu_impl(q, k, w, do, dv, gk, h0, dht, scale)
    else:
        dh, dh0, dv2 = torch.ops.kdart.bwd_dhu(q, k, w, do, dv, gk, h0, dht, scale)
    return dh, (dh0 if h0 is not None else None), dv2


def prepare_for(op, *args, **kwargs):
    """Prepares (compiles or loads, into the inputs' device) the specialization that op (bwd_intra or
    bwd_dhu) would launch for these arguments, without launching: call it before CUDA-graph capture."""
    if op in (bwd_intra, torch.ops.kdart.bwd_intra):
        names = ("q", "k", "g", "beta", "dAqk", "dAkk", "dq", "dk", "db", "dg", "fold_dg", "emit_bf16")
        defaults, build, kernel = {"fold_dg": False, "emit_bf16": False}, _intra_plan, "bwd_intra"
    elif op in (bwd_dhu, torch.ops.kdart.bwd_dhu):
        names = ("q", "k", "w", "do", "dv", "gk", "h0", "dht", "scale")
        defaults, build, kernel = {"h0": None, "dht": None, "scale": None}, _dhu_plan, "bwd_dhu"
    else:
        raise ValueError("prepare_for: op must be kdart.torch.bwd_intra or kdart.torch.bwd_dhu")
    a = dict(defaults)
    a.update(zip(names, args))
    a.update(kwargs)
    plan = build(None, *(a[n] for n in names))
    _prepare_plan(kernel, plan, plan.spec, plan.dev)
    return plan.spec
