"""kdart.torch: kdart's KDA backward stages as torch ops.

    dq, dk, db, dg = kdart.torch.bwd_intra(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg,
                                          fold_dg=False, emit_bf16=False,
                                          cu_seqlens=None, chunk_indices=None)
    dh, dh0, dv2 = kdart.torch.bwd_dhu(q, k, w, do, dv, gk, h0=None, dht=None, scale=None,
                                       cu_seqlens=None, chunk_indices=None, chunk_offsets=None,
                                       state_v_first=False, Aqk=None)
    dq, dk, dv, db, dg, dA = kdart.torch.wy_dqkg(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale=None,
                                                 state_v_first=False, cu_seqlens=None,
                                                 chunk_indices=None, chunk_offsets=None)
    dq, dk, dv, db, dg, dA, dAqk = kdart.torch.wy_dqkg(..., dAqk=True)
    dq, dk, dv, db, dg, dA, dAqk = kdart.torch.wy_dqkg(..., dAqk=True, intra=True)  # + bwd_intra's terms
    w, u, qg, kg = kdart.torch.recompute_w_u(k, v, beta, A, gk, q=None,
                                             cu_seqlens=None, chunk_indices=None)
    gk, w, u, qg, kg = kdart.torch.gate_recompute_w_u(g, A_log, k, v, beta, A, q=None,
                                                      dt_bias=None, lower_bound=None, ...)
    dA, dv = kdart.torch.bwd_dAv(q, k, v, do, A, scale=None, cu_seqlens=None,
                                 chunk_size=64, chunk_indices=None, use_graph=False)

Arguments, return order and shapes are those of fla 0.6.0's chunk_kda_bwd_intra,
chunk_gated_delta_rule_bwd_dhu (q = qg, k = kg for bwd_dhu),
chunk_kda_bwd_wy_dqkg_fused, recompute_w_u_fwd (gate_recompute_w_u: fla's
kda_gate_chunk_cumsum of the raw gate, scale 1/ln 2, in the same launch, its
cumsum returned first) and chunk_kda_bwd_dAv; dh0 is None when h0 is None, as in fla.  Outputs
are new tensors on the inputs' device; nothing is written to the inputs.
Shapes and dtypes: docs/chunk_kda_flags.md (io dtype bf16 or fp16; beta in
the io dtype or fp32, as fla hands it when chunk_kda applies the beta
sigmoid; g/gk, dAqk, dAkk, dq, dk, dg, db, dht, h0 fp32; any T >= 1, K in
1..256, V in 1..512, contiguous; bwd_dhu also takes fla's state_v_first
layout).

fla's chunk_kda_bwd_dAv (dAqk, dv = chunk_kda_bwd_dAv(q, k, v_new, do, Aqk,
scale)) is bwd_dAv, a kernel of its own (kdart's bwd_dav: any T, packed
sequences, any V up to 512; q and k only size the call).  Where the shapes
allow, its two halves fuse into the stages that consume them instead (what
kdart.fla does): bwd_dhu(..., dv=None, Aqk=Aqk) computes dv = Aqk^T do per
chunk (Aqk's lower triangle, diagonal included) inside the scan, unrounded,
and returns what it returns with fla's dv (K 64 or 128 and V a multiple of
64 only, no zero padding; exactly one of dv and Aqk).  wy_dqkg(...,
dAqk=True) also returns dAqk [B,T,HV,64] fp32 = scale * do v_new^T within
each chunk, zeros above the diagonal: fla's dA, for bwd_intra.
wy_dqkg(..., dAqk=True, intra=True) goes one step further: the same launch
adds bwd_intra's terms (fold_dg) to its dq, dk, db, dg, so they come back as
bwd_intra's outputs and the fp32 gradients between the two stages stay on chip
and in L2 (what chunk_kda_bwd runs where dAv fuses).

Variable length as in fla: B = 1 and cu_seqlens [N+1] (int32 or int64, on the
inputs' device); h0, dht and dh0 are [N,HV,K,V]; fla's chunk_indices [NT,2] and
chunk_offsets [N+1] may be passed (kdart checks their dtype and shape, never
reads them, and derives what it needs on the device).  bwd_dhu's dh has, as
fla's, NT = len(chunk_indices) rows; without chunk_indices that count is
computed from cu_seqlens, which synchronizes the device like fla's own
prepare_chunk_indices (pass chunk_indices to avoid it, e.g. under CUDA-graph
capture).  Bad cu_seqlens (decreasing, cu[N] > T) are found on the device:
the kernels write nothing and device_status() reports them.

All are registered as torch.library custom ops (torch.ops.kdart.bwd_intra,
torch.ops.kdart.bwd_dhu, torch.ops.kdart.wy_dqkg, torch.ops.kdart.wy_dqkg_dAqk
for dAqk=True, torch.ops.kdart.wy_dqkg_intra for intra=True, torch.ops.kdart.recompute_wu for both recomputes, torch.ops.kdart.bwd_dav, torch.ops.kdart.fwd_h)
with fake
implementations, so torch.compile traces them
(fullgraph).  In eager mode on plain CUDA tensors the functions below skip the
dispatcher and call the implementation directly (the dispatcher costs more
than the whole launch).  The launch runs on torch's current stream of the
inputs' device with that device current, allocates nothing but the outputs and
synchronizes nothing, so it can be captured in a CUDA graph once the
specialization is prepared: the first eager call with a given signature
prepares it, or call prepare_for(bwd_intra, ...) with the same arguments.

Per call, a cached plan per signature (shapes, dtypes, devices, flags) and
thread holds the ctypes argument struct; a call only writes the data pointers.
Where kdart.torch_ext is built (python -m kdart.torch_ext), eager calls take
its C++ fast path instead: one call that builds the descriptors from the
tensors, allocates the outputs and calls kdart's C function (which validates
everything); a call it cannot take (another current device) or that kdart
refuses comes back to the Python path, which raises with fla's argument names.
bwd_dhu's calls with Aqk always take the Python path.
"""
import contextlib
import ctypes
import inspect
import operator
import os
import re
import threading

import torch

from . import _lib

__all__ = ["bwd_intra", "bwd_dhu", "wy_dqkg", "recompute_w_u", "gate_recompute_w_u", "bwd_dAv",
           "chunk_gated_delta_rule_fwd_h", "bwd_post", "chunk_kda_bwd", "prepare_for", "device_status"]

CHUNK = 64
_F32 = torch.float32
_IO = {torch.bfloat16: "bf16", torch.float16: "fp16"}
_DL_DTYPE = {torch.bfloat16: (4, 16), torch.float16: (2, 16), torch.float32: (2, 32), torch.int32: (0, 32),
             torch.int64: (0, 64), torch.uint8: (1, 8)}
_IDX = (torch.int32, torch.int64)
assert ctypes.sizeof(_lib.DLTensor) == 48  # 6 words: DLTensor i's data pointer is word 6 i of a plan's array


def _bad(msg):
    return _lib.value_error("ESHAPE", msg)


def _chunk_count(cu_seqlens):
    """sum ceil(T_n / 64): what fla's len(prepare_chunk_indices(cu_seqlens)) is (synchronizes)."""
    lens = (cu_seqlens[1:] - cu_seqlens[:-1]).clamp(min=0)  # bad cu_seqlens: the kernel reports them
    return int(((lens + CHUNK - 1) // CHUNK).sum().item())


def _fla_nt(T, cu_seqlens, chunk_indices, nt=None):
    """dh's chunk rows as fla sizes them: ceil(T/64) at fixed length, else len(chunk_indices), else nt (the
    caller's count of cu_seqlens's chunks; counted here, a synchronization, when None)."""
    if cu_seqlens is None:
        return -(-T // CHUNK)
    if chunk_indices is not None:
        return chunk_indices.shape[0]
    return _chunk_count(cu_seqlens) if nt is None else nt


# ------------------------------------------------------------------ the stages, as kdart describes them

class _Stage:
    """One kdart operation as its C side describes it (kdart_op_arg: its args struct, its tensors with their
    dtypes and dims, its scalars), and the one thing the binding adds: fla's names for its arguments and the
    order fla returns its outputs in.  Checks, output shapes and dtypes, the args struct and the spec all
    follow from the description; nothing of a stage's rules is written here."""

    def __init__(self, kernel, fla_names, returns):
        self.kernel, self.fla_names, self.returns = kernel, fla_names, returns
        self.built = False

    def build(self):
        if not self.built:
            args, _ = _lib.op_args(self.kernel)
            self.struct = _lib.op_struct(self.kernel)
            self.tensors = tuple(a for a in args if a.is_tensor)
            self.names = tuple(a.name for a in self.tensors)
            self.slot = {a.name: 6 * i for i, a in enumerate(self.tensors)}  # DLTensor i's data at [6 i]
            self.inputs = tuple(a for a in self.tensors if a.kind == _lib.ARG_INPUT)
            self.outputs = tuple(a for a in self.tensors if a.kind == _lib.ARG_OUTPUT)
            self.built = True
        return self

    def slots(self, names):
        """The plan data slots of these C argument names, in order."""
        return tuple(self.build().slot[n] for n in names)


# fla's names where they differ from the C args struct's (C name -> fla name), and fla's return order
_INTRA = _Stage("bwd_intra", {"dq_in": "dq", "dk_in": "dk", "dg_in": "dg", "db_in": "db"},
                ("dq", "dk", "db", "dg"))
_DHU = _Stage("bwd_dhu", {"qg": "q", "kg": "k", "g": "gk", "dht": "dht", "dh0": "h0"}, ("dh", "dh0", "dv2"))
_WY = _Stage("wy_dqkg", {"dv2": "dv"}, ("dq", "dk", "dv2", "db", "dg", "dA"))
_WY_DAQK = _Stage("wy_dqkg", {"dv2": "dv"}, ("dq", "dk", "dv2", "db", "dg", "dA", "dAqk"))  # (dAqk=True)
_RWU = _Stage("recompute_wu", {"g": "gk"}, ("w", "u", "qg", "kg"))
_RWU_GATE = _Stage("recompute_wu", {"g_raw": "g"}, ("g_out", "w", "u", "qg", "kg"))  # the raw gate in
_DAV = _Stage("bwd_dav", {}, ("dA", "dv"))
_FWDH = _Stage("fwd_h", {"h0": "initial_state", "ht": "final_state"}, ("h", "v_new", "ht"))
_POST = _Stage("bwd_post", {}, ("dq", "dk", "dg", "db", "dA_log", "ddt_bias"))


def _sizes(st, t, sc, nt):
    """The call's sizes (B, T, H, HV, K, V, N, NT, HB, S1, S2), read from its inputs as the description
    writes their dims; NT of a packed call whose inputs hold no state: nt (fla's count of chunk rows)."""
    d = {"64": CHUNK}
    for a in st.inputs:
        x = t.get(a.name)
        if isinstance(x, torch.Tensor) and x.dim() == len(a.dims):
            for sym, n in zip(a.dims, x.shape):
                d.setdefault(sym, n)
    cu = t.get("cu_seqlens")
    B, T = d.get("B", 1), d.get("T", 1)
    d.setdefault("N", B if cu is None else cu.shape[0] - 1)
    d.setdefault("HB", B if cu is None else 1)
    d.setdefault("NT", -(-T // CHUNK) if cu is None else nt)
    K, V = d.get("K", 1), d.get("V", 1)
    svf = bool(sc.get("state_v_first"))
    d.setdefault("S1", V if svf else K)
    d.setdefault("S2", K if svf else V)
    return d


def _outputs(st, t, sc, nt=None, want=()):
    """{C name: (shape, dtype)} of the call's outputs (an optional output only when named in want)."""
    st.build()
    d = _sizes(st, t, sc, nt)
    io = next((x.dtype for x in (t.get(a.name) for a in st.inputs) if isinstance(x, torch.Tensor) and x.dtype in _IO),
              torch.bfloat16)  # the first io tensor's dtype (an optional first input, recompute_wu's q, may be None)
    out = {}
    for a in st.outputs:
        if a.optional and a.name not in want:
            continue
        dt = _F32 if a.dtype == "float32" else io if a.dtype == "io" else (io if sc.get(a.flag) else _F32)
        out[a.name] = (tuple(d.get(sym, 1) for sym in a.dims), dt)
    return out


def _fla_message(st, msg):
    """kdart's message with fla's argument names (kdart names the C struct's fields)."""
    return re.sub(r"\b(tensor|output|input) (\w+)", lambda m: f"{m.group(1)} {st.fla_names.get(m.group(2), m.group(2))}",
                  msg)


def _ask_kdart(st, plan):
    """kdart's own checks of the plan's arguments and the spec it would launch (kdart_spec_for: shapes,
    dtypes, sizes; nothing that looks at memory), raising as the C library words it, in fla's names."""
    try:
        return _fast()["rt"].spec_for(st.kernel, plan.args)
    except _lib.KdartError as e:
        raise type(e)(e.status, e.name, _fla_message(st, str(e))) from None


def _meta(st, t, sc, nt=None, want=()):
    """Checks a call's arguments through kdart (shapes and dtypes; concrete sizes only: under symbolic ones,
    the launch checks) and returns its outputs' (shape, dtype) in fla's return order (None: not produced)."""
    outs = _outputs(st, t, sc, nt, want)
    concrete = all(isinstance(n, int) for x in t.values() if isinstance(x, torch.Tensor) for n in x.shape) and \
        all(isinstance(n, int) for s, _ in outs.values() for n in s)
    if concrete:
        fakes = {n: torch.empty(s, dtype=dt, device="meta") for n, (s, dt) in outs.items()}
        _ask_kdart(st, _Plan(st, {**t, **fakes}, sc))
    return [outs.get(n) for n in st.returns]


def _intra_call(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg, emit_bf16, cu_seqlens, chunk_indices):
    return (dict(q=q, k=k, g=g, beta=beta, dAqk=dAqk, dAkk=dAkk, dq_in=dq, dk_in=dk, dg_in=dg, db_in=db,
                 cu_seqlens=cu_seqlens, chunk_indices=chunk_indices),
            dict(fold_dg=int(bool(fold_dg)), emit_bf16=int(bool(emit_bf16))))


def _dhu_call(q, k, w, do, dv, gk, h0, dht, cu_seqlens, chunk_indices, chunk_offsets, state_v_first, v_tile=0,
              Aqk=None):
    return (dict(qg=q, kg=k, w=w, g=gk, do=do, dv=dv, dht=dht, Aqk=Aqk, cu_seqlens=cu_seqlens,
                 chunk_indices=chunk_indices, chunk_offsets=chunk_offsets),
            dict(state_v_first=int(bool(state_v_first)), v_tile=v_tile))


def _wy_call(q, k, v, v_new, g, beta, A, h, do, dh, dv, state_v_first, cu_seqlens, chunk_indices, intra=False):
    return (dict(q=q, k=k, v=v, v_new=v_new, g=g, beta=beta, A=A, h=h, dh=dh, do=do, dv=dv, cu_seqlens=cu_seqlens,
                 chunk_indices=chunk_indices),
            dict(state_v_first=int(bool(state_v_first)), intra=int(bool(intra))))


def _shape_error(name, t, ndim, what):
    if not isinstance(t, torch.Tensor):
        raise _lib.value_error("ENULL", f"ENULL: {name} must be a tensor, got {type(t).__name__}")
    if t.dim() != ndim:
        raise _bad(f"ESHAPE: {name} must be {what}")


def intra_meta(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg=False, emit_bf16=False, cu_seqlens=None,
               chunk_indices=None):
    """Checks bwd_intra's arguments through kdart (ValueError); returns its outputs' (shape, dtype) list."""
    return _meta(_INTRA, *_intra_call(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg, emit_bf16, cu_seqlens,
                                      chunk_indices))


def dhu_meta(q, k, w, do, dv, gk, h0=None, dht=None, cu_seqlens=None, chunk_indices=None, chunk_offsets=None,
             nt=None, state_v_first=False, Aqk=None):
    """Checks bwd_dhu's arguments through kdart (ValueError); returns its outputs' (shape, dtype) list (dh,
    dh0, dv2); dh0's shape is (0,) when h0 is None.  dh has fla's rows: B*ceil(T/64) at fixed length; varlen:
    len(chunk_indices), else nt (the caller's count of cu_seqlens's chunks).  state_v_first: the state's last
    two dims are [V, K] (dh, h0, dht, dh0), else [K, V].  Aqk: chunk_kda's Aqk in place of dv (exactly one)."""
    _shape_error("q", q, 4, "[B,T,HV,K]")
    _dv_or_aqk(dv, Aqk)
    if cu_seqlens is not None and isinstance(cu_seqlens, torch.Tensor) and cu_seqlens.dim() == 1:
        nt = _fla_nt(q.shape[1], cu_seqlens, chunk_indices, nt)
    t, sc = _dhu_call(q, k, w, do, dv, gk, h0, dht, cu_seqlens, chunk_indices, chunk_offsets, state_v_first, 64,
                      Aqk)
    outs = _meta(_DHU, t, sc, max(nt, 1) if isinstance(nt, int) else nt, ("dh0",) if h0 is not None else ())
    if h0 is not None:
        _check_h0(h0, outs[1][0])
    else:
        outs[1] = ((0,), _F32)
    if isinstance(nt, int) and nt == 0:  # only zero-length sequences: fla's dh has no rows
        outs[0] = ((outs[0][0][0], 0) + outs[0][0][2:], outs[0][1])
    return outs


def _dv_or_aqk(dv, Aqk):
    """bwd_dhu takes fla's dv (chunk_kda_bwd_dAv's) or chunk_kda's Aqk (the dAv stage fused): exactly one."""
    if dv is None and Aqk is None:
        raise _lib.value_error("ENULL", "ENULL: bwd_dhu needs dv or Aqk (both are None)")
    if dv is not None and Aqk is not None:
        raise _lib.value_error("EINVAL", "EINVAL: bwd_dhu takes dv or Aqk, not both (with Aqk it computes dv "
                                         "itself)")


def _check_h0(h0, shape):
    """h0 only sizes dh0 (kdart checks dh0's shape, built as h0's): the same shape, float32."""
    if not isinstance(h0, torch.Tensor):
        raise _lib.value_error("ENULL", f"ENULL: h0 must be a tensor, got {type(h0).__name__}")
    if h0.dtype != _F32:
        raise _lib.value_error("EDTYPE", f"EDTYPE: h0 is {h0.dtype}, expected torch.float32")
    if tuple(h0.shape) != tuple(shape):
        raise _bad(f"ESHAPE: h0 has shape {list(h0.shape)}, expected {list(shape)}")


def wy_meta(q, k, v, v_new, g, beta, A, h, do, dh, dv, state_v_first=False, cu_seqlens=None, chunk_indices=None,
            dAqk=False, intra=False):
    """Checks wy_dqkg's arguments through kdart (ValueError); returns its outputs' (shape, dtype) list in fla's
    order (dq, dk, dv2, db, dg, dA), then dAqk's when dAqk is true."""
    t, sc = _wy_call(q, k, v, v_new, g, beta, A, h, do, dh, dv, state_v_first, cu_seqlens, chunk_indices, intra)
    if not dAqk:
        return _meta(_WY, t, sc, want=("dA",))
    return _meta(_WY_DAQK, t, sc, want=("dA", "dAqk"))


# ------------------------------------------------------------------ plans

class _Plan:
    """The args struct of one signature, laid out from kdart's description of the stage; calls only write
    data pointers (DLTensor i's at data[6 i])."""

    def __init__(self, st, t, sc):
        st.build()
        self.dls = (_lib.DLTensor * len(st.names))()
        self.keep = []
        self.args = st.struct()
        self.args.struct_size = ctypes.sizeof(st.struct)
        dev0 = None
        for i, a in enumerate(st.tensors):
            x = t.get(a.name)
            if x is None:
                continue  # stays a NULL pointer (optional dht / dh0, no cu_seqlens; kdart says ENULL if needed)
            if not isinstance(x, torch.Tensor):
                name = st.fla_names.get(a.name, a.name)
                raise _lib.value_error("ENULL", f"ENULL: {name} must be a tensor, got {type(x).__name__}")
            dl = self.dls[i]
            shape = (ctypes.c_int64 * x.dim())(*x.shape)
            self.keep.append(shape)
            dl.shape, dl.ndim = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)), x.dim()
            dl.device = _lib.DLDevice(2, x.get_device()) if x.is_cuda else _lib.DLDevice(1, 0)
            if dev0 is None:
                dev0 = dl.device
            elif a.kind == _lib.ARG_OUTPUT or x.device.type == "meta":
                dl.device = dev0  # the outputs (and bwd_post's workspace) are on the inputs' device (built on meta)
            code, bits = _DL_DTYPE.get(x.dtype, (0, 0))
            dl.dtype = _lib.DLDataType(code, bits, 1)
            setattr(self.args, a.name, ctypes.pointer(dl))
        for name, v in sc.items():
            setattr(self.args, name, v)
        self.addr = ctypes.addressof(self.args)
        self.data = memoryview(self.dls).cast("B").cast("Q")
        self.warm = False


def _build_plan(st, t, sc, nt=None, want=(), layout=()):
    """A plan for one signature: kdart's checks and spec (kdart_spec_for), then the tensors' devices and
    contiguity (layout); plan.outs: the outputs' (shape, dtype) by C name."""
    outs = _outputs(st, t, sc, nt, want)
    fakes = {n: torch.empty(shp, dtype=dt, device="meta") for n, (shp, dt) in outs.items()}
    plan = _Plan(st, {**t, **fakes}, sc)
    plan.spec = _ask_kdart(st, plan)
    dev = _check_layout(layout)
    plan.outs, plan.dev, plan.idx = outs, dev, (dev.index if dev.type == "cuda" else -1)
    return plan


def _set_data(plan, tensors, seqs):
    """Writes one call's data pointers into its plan: tensors at plan.slots (None, an optional tensor the
    plan was built without, stays NULL), and the sequence tensors at plan.seq_slots when cu_seqlens (the
    first) is given, as the plan was built."""
    d = plan.data
    for i, x in zip(plan.slots, tensors):
        if x is not None:
            d[i] = x.data_ptr()
    if seqs[0] is not None:
        for i, x in zip(plan.seq_slots, seqs):
            if x is not None:
                d[i] = x.data_ptr()


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
        fw, fr, fv = rt.lib["kdart_kda_wy_dqkg"], rt.lib["kdart_kda_recompute_wu"], rt.lib["kdart_kda_bwd_dav"]
        fh, fp, fc = rt.lib["kdart_kda_fwd_h"], rt.lib["kdart_kda_bwd_post"], rt.lib["kdart_kda_chunk_bwd"]
        for f in (fi, fd, fw, fr, fv, fh, fp, fc):
            f.argtypes, f.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int
        fws, fcw = rt.lib["kdart_bwd_post_workspace"], rt.lib["kdart_chunk_bwd_workspace"]
        fws.argtypes, fws.restype = [ctypes.c_int64] * 3, ctypes.c_int64
        fcw.argtypes, fcw.restype = [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int64
        st.update(rt=rt, handle=rt.handle, intra=fi, dhu=fd, wy=fw, rwu=fr, dav=fv, fwdh=fh, post=fp, post_ws=fws,
                  chunk_bwd=fc, chunk_bwd_ws=fcw,
                  intra_addr=ctypes.cast(fi, ctypes.c_void_p).value, dhu_addr=ctypes.cast(fd, ctypes.c_void_p).value)
        _bind_direct(st)
    return st


# ------------------------------------------------------------- the C++ fast path (kdart.torch_ext)

def _load_ext():
    mode = os.environ.get("KDART_TORCH_EXT", "")
    if mode == "0":
        return None
    from . import torch_ext
    try:
        ext = torch_ext.load()
        if ext is None and mode == "1":
            ext = torch_ext.build()
        if ext is not None:  # built against the kdart.h of the library that is loaded (struct layouts)
            major, minor, patch = (int(x) for x in _lib.version().split(".")[:3])
            if ext.ABI != major * 10000 + minor * 100 + patch:
                raise RuntimeError(f"built for another kdart ({ext.ABI}, library {_lib.version()})")
    except Exception as e:  # a stale or foreign build: the Python path serves, and says why once
        _lib.log.getChild("torch").warning("the C++ fast path is not used (%s)", e)
        return None
    return ext


_EXT = _load_ext()
# the extension's direct entries (built with c10::cuda), bound to the runtime by _fast(): bwd_intra and
# bwd_dhu hand them their positional arguments and take the Python path when they answer None
_XI = _XD = None


def _bind_direct(st):
    global _XI, _XD
    if _EXT is not None and hasattr(_EXT, "intra_fast"):
        _EXT.bind(st["handle"], st["intra_addr"], st["dhu_addr"])
        _XI, _XD = _EXT.intra_fast, _EXT.dhu_fast


def _ext_intra(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg, emit_bf16, cu_seqlens, chunk_indices):
    """The outputs, or None when the Python path must take the call (another current device, or kdart
    refused: the Python path then raises with fla's argument names)."""
    st = _rt_state if _rt_state else _fast()
    idx = q.get_device()
    if idx != torch._C._cuda_getDevice():
        return None
    r = _EXT.intra(st["handle"], st["intra_addr"], _stream(idx), q, k, g, beta, dAqk, dAkk, dq, dk, db, dg,
                   bool(fold_dg), bool(emit_bf16), cu_seqlens, chunk_indices)
    return None if type(r) is int else r


def _ext_dhu(q, k, w, do, dv, gk, h0, dht, scale, cu_seqlens, chunk_indices, chunk_offsets, state_v_first):
    """As _ext_intra; kdart's C function picks the specialization (K tile, BV, varlen, tail) from the shapes
    and state_v_first, as for the Python path's plan (whose spec only says what to prepare)."""
    st = _rt_state if _rt_state else _fast()
    idx = q.get_device()
    if idx != torch._C._cuda_getDevice() or q.dim() != 4:
        return None
    nt = _fla_nt(q.shape[1], cu_seqlens, chunk_indices)
    r = _EXT.dhu(st["handle"], st["dhu_addr"], _stream(idx), q, k, w, do, dv, gk, h0, dht,
                 float("nan") if scale is None else float(scale), max(nt, 1), cu_seqlens, chunk_indices,
                 chunk_offsets, bool(state_v_first))
    if type(r) is int:
        return None
    return (r[0][:, :0], r[1], r[2]) if nt == 0 else r


def _check_layout(tensors):
    dev = None
    for t in tensors:
        if t is None:
            continue
        if not t.is_contiguous():
            raise _lib.value_error("ESTRIDE", "ESTRIDE: kdart takes contiguous tensors "
                                                       f"(shape {list(t.shape)}, strides {list(t.stride())})")
        d = t.device
        if dev is None:
            dev = d
        elif d != dev:
            raise _lib.value_error("EDEVICE", f"EDEVICE: tensors on {dev} and {d}")
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


def _prepare_plan(kernel, plan, dev):
    """Prepares the plan's specialization in the device's context (not inside a capture)."""
    spec = plan.spec
    if plan.warm or dev.type != "cuda":
        return
    done = (dev.index, kernel, spec)
    if done not in _prepared:
        if _capturing(dev):
            raise _lib.runtime_error("EMISUSE", f"kdart: {kernel} [{spec}] is not prepared and the "
                                         "stream is capturing a CUDA graph: call it once eagerly (or "
                                         "kdart.torch.prepare_for) before capture")
        st = _fast()
        info = (ctypes.c_void_p * 2)()  # kdart_launch_info
        with torch.cuda.device(dev):
            st["rt"].check(st["rt"].lib.kdart_get_function(st["handle"], kernel.encode(), spec.encode(), info),
                           kernel)
        _prepared.add(done)
    plan.warm = True


def _intra_plan(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg, emit_bf16, cu_seqlens=None,
                chunk_indices=None):
    t, sc = _intra_call(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg, emit_bf16, cu_seqlens, chunk_indices)
    plan = _build_plan(_INTRA, t, sc, layout=(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, cu_seqlens, chunk_indices))
    plan.outs = [plan.outs[n] for n in _INTRA.returns]
    plan.slots = _INTRA.slots(("q", "k", "g", "beta", "dAqk", "dAkk", "dq_in", "dk_in", "db_in", "dg_in")
                              + _INTRA.returns)
    plan.seq_slots = _INTRA.slots(("cu_seqlens", "chunk_indices"))
    return plan


# A tensor's part of a plan's key, and the contiguity test, as C-level calls over a tuple of tensors
# (map of an attrgetter: no bytecode per attribute; the hot path is a few microseconds of such calls).
_SIG = operator.attrgetter("shape", "dtype", "device")
_CONTIG = operator.methodcaller("is_contiguous")


def _idx_key(t):
    return None if t is None else _SIG(t)


def _thread_plans():
    plans = getattr(_tls, "plans", None)
    if plans is None:
        plans = _tls.plans = {}
    return plans


def _get_plan(key, build, *a):
    plans = _thread_plans()
    plan = plans.get(key)
    if plan is None:
        plan = plans[key] = build(*a)
    return plan


def _bwd_intra_impl(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg=False, emit_bf16=False, cu_seqlens=None,
                    chunk_indices=None):
    ts = (q, k, g, beta, dAqk, dAkk, dq, dk, db, dg)
    key = (tuple(map(_SIG, ts)), bool(fold_dg), bool(emit_bf16), "intra",
           None if cu_seqlens is None else (_idx_key(cu_seqlens), _idx_key(chunk_indices)))
    plan = _get_plan(key, _intra_plan, q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg,
                     emit_bf16, cu_seqlens, chunk_indices)
    if not all(map(_CONTIG, ts)):
        _check_layout(ts)
    # the outputs have the shapes of dq, dk, db, dg (checked): empty_like parses no shape (a third cheaper)
    if emit_bf16:
        oq, ok = torch.empty_like(dq, dtype=q.dtype), torch.empty_like(dk, dtype=q.dtype)
    else:
        oq, ok = torch.empty_like(dq), torch.empty_like(dk)
    ob, og = torch.empty_like(db), torch.empty_like(dg)
    if not plan.warm:
        _prepare_plan("bwd_intra", plan, plan.dev)
    _set_data(plan, ts + (oq, ok, ob, og), (cu_seqlens, chunk_indices))
    _launch("intra", plan, plan.idx)
    return oq, ok, ob, og


def _dhu_plan(q, k, w, do, dv, gk, h0, dht, scale, cu_seqlens=None, chunk_indices=None, chunk_offsets=None,
              nt=None, state_v_first=False, Aqk=None):
    # the spec a launch with these arguments prepares, as kdart's C side chooses it (kdart_spec_for): on the
    # device its V tile is the one kdart picks for the device's SM count (v_tile 0; the launch passes 0 too,
    # and kdart may add the V split for packed sequences at BV 64); elsewhere (never launched) the widest,
    # the choice for one SM
    on_gpu = isinstance(q, torch.Tensor) and q.is_cuda
    _shape_error("q", q, 4, "[B,T,HV,K]")
    _dv_or_aqk(dv, Aqk)
    rows = _fla_nt(q.shape[1], cu_seqlens, chunk_indices, nt) if isinstance(cu_seqlens, torch.Tensor) else None
    t, sc = _dhu_call(q, k, w, do, dv, gk, h0, dht, cu_seqlens, chunk_indices, chunk_offsets, state_v_first,
                      0 if on_gpu else 64, Aqk)
    want = ("dh0",) if h0 is not None else ()
    with torch.cuda.device(q.device) if on_gpu else contextlib.nullcontext():
        # only zero-length sequences: fla's dh has no rows; kdart's dh needs one (never written)
        plan = _build_plan(_DHU, t, sc, None if rows is None else max(rows, 1), want,
                           (q, k, w, do, dv, gk, h0, dht, Aqk, cu_seqlens, chunk_indices, chunk_offsets))
    if h0 is not None:
        _check_h0(h0, plan.outs["dh0"][0])
    plan.args.v_tile = 0
    plan.no_rows = rows == 0
    plan.slots = _DHU.slots(("qg", "kg", "w", "g", "do", "dv", "dht", "Aqk", "dh", "dv2", "dh0"))
    plan.seq_slots = _DHU.slots(("cu_seqlens", "chunk_indices", "chunk_offsets"))
    return plan


def _bwd_dhu_impl(q, k, w, do, dv, gk, h0=None, dht=None, scale=None, cu_seqlens=None, chunk_indices=None,
                  chunk_offsets=None, state_v_first=False, Aqk=None):
    # dh's rows without chunk_indices: counted from cu_seqlens (a synchronization, as fla's own)
    nt = _chunk_count(cu_seqlens) if cu_seqlens is not None and chunk_indices is None else None
    if (dv is None) == (Aqk is None):
        _dv_or_aqk(dv, Aqk)
    fused = Aqk is not None  # the dAv stage fused: Aqk in dv's place
    ts = (q, k, w, do, Aqk if fused else dv, gk)
    key = (tuple(map(_SIG, ts)), _idx_key(h0), _idx_key(dht), "dhu+Aqk" if fused else "dhu",
           None if cu_seqlens is None else (_idx_key(cu_seqlens), _idx_key(chunk_indices), _idx_key(chunk_offsets),
                                            nt), bool(state_v_first))
    plan = _get_plan(key, _dhu_plan, q, k, w, do, dv, gk, h0, dht, scale, cu_seqlens, chunk_indices, chunk_offsets,
                     nt, state_v_first, Aqk)
    if not (all(map(_CONTIG, ts)) and (dht is None or dht.is_contiguous())):
        _check_layout(ts + (dht,))
    dev = plan.dev
    s0, t0 = plan.outs["dh"]
    dh = torch.empty(s0, dtype=t0, device=dev)
    dh0 = torch.empty_like(h0) if h0 is not None else torch.empty((0,), dtype=_F32, device=dev)  # h0 is fp32
    dv2 = torch.empty_like(do if fused else dv)  # (do's shape and dtype: checked)
    plan.args.scale = q.shape[3] ** -0.5 if scale is None else scale
    if not plan.warm:
        _prepare_plan("bwd_dhu", plan, dev)
    # dht, Aqk or dv, and dh0 (only with h0) stay NULL when absent
    _set_data(plan, (q, k, w, gk, do, dv, dht, Aqk, dh, dv2, dh0 if h0 is not None else None),
              (cu_seqlens, chunk_indices, chunk_offsets))
    _launch("dhu", plan, plan.idx)
    return (dh[:, :0] if plan.no_rows else dh), dh0, dv2


def _wy_plan(q, k, v, v_new, g, beta, A, h, do, dh, dv, state_v_first=False, cu_seqlens=None,
             chunk_indices=None, dAqk=False, intra=False):
    st = _WY_DAQK if dAqk else _WY
    t, sc = _wy_call(q, k, v, v_new, g, beta, A, h, do, dh, dv, state_v_first, cu_seqlens, chunk_indices, intra)
    plan = _build_plan(st, t, sc, want=("dA", "dAqk") if dAqk else ("dA",),
                       layout=(q, k, v, v_new, g, beta, A, h, dh, do, dv, cu_seqlens, chunk_indices))
    plan.outs = [plan.outs[n] for n in st.returns]  # dq, dk, dv2, db, dg, dA (, dAqk)
    plan.slots = st.slots(("q", "k", "v", "v_new", "g", "beta", "A", "h", "do", "dh", "dv") + st.returns)
    plan.seq_slots = st.slots(("cu_seqlens", "chunk_indices"))
    return plan


def _wy_dqkg_impl(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale=None, state_v_first=False, cu_seqlens=None,
                  chunk_indices=None, dAqk=False, intra=False):
    ts = (q, k, v, v_new, g, beta, A, h, do, dh, dv)
    key = (tuple(map(_SIG, ts)), ("wy+dAqk" if dAqk else "wy") + ("+intra" if intra else ""),
           None if cu_seqlens is None else (_idx_key(cu_seqlens), _idx_key(chunk_indices)), bool(state_v_first))
    plan = _get_plan(key, _wy_plan, q, k, v, v_new, g, beta, A, h, do, dh, dv, state_v_first, cu_seqlens,
                     chunk_indices, bool(dAqk), bool(intra))
    if not all(map(_CONTIG, ts)):
        _check_layout(ts)
    dev = plan.dev
    o = [torch.empty(s, dtype=d, device=dev) for s, d in plan.outs]  # dq, dk, dv2, db, dg, dA (, dAqk)
    plan.args.scale = q.shape[3] ** -0.5 if scale is None else scale
    if not plan.warm:
        _prepare_plan("wy_dqkg", plan, dev)
    _set_data(plan, ts + tuple(o), (cu_seqlens, chunk_indices))
    _launch("wy", plan, plan.idx)
    return tuple(o)


def _dt_bias_2d(dt_bias, g_raw):
    """fla's dt_bias [HV*K] as kdart's [HV, K] (a view; anything else as given, for kdart to judge)."""
    if dt_bias is not None and dt_bias.dim() == 1 and g_raw is not None and g_raw.dim() == 4:
        return dt_bias.view(g_raw.shape[2], -1)
    return dt_bias


def _rwu_call(k, v, beta, A, gk, q, g_raw, A_log, dt_bias, lower_bound, cu_seqlens, chunk_indices):
    """(stage, tensors, scalars, optional outputs asked for) of one recompute_wu call."""
    st = _RWU_GATE if g_raw is not None else _RWU
    # (u is optional in C, where kdart_kda_chunk_bwd lets fwd_h make it; fla's recompute_w_u_fwd returns it)
    want = ("u",) + tuple(n for n, on in (("qg", q is not None), ("g_out", g_raw is not None)) if on)
    return (st, dict(q=q, k=k, v=v, beta=beta, A=A, g=gk, g_raw=g_raw, A_log=A_log,
                     dt_bias=_dt_bias_2d(dt_bias, g_raw), cu_seqlens=cu_seqlens, chunk_indices=chunk_indices),
            dict(lower_bound=0.0 if lower_bound is None else float(lower_bound),
                 safe_gate=int(lower_bound is not None)), want)


def _rwu_plan(k, v, beta, A, gk, q, g_raw, A_log, dt_bias, lower_bound, cu_seqlens=None, chunk_indices=None):
    st, t, sc, want = _rwu_call(k, v, beta, A, gk, q, g_raw, A_log, dt_bias, lower_bound, cu_seqlens, chunk_indices)
    plan = _build_plan(st, t, sc, want=want, layout=(k, v, beta, A, gk, q, g_raw, A_log, t["dt_bias"], cu_seqlens,
                                                      chunk_indices))
    plan.outs = [plan.outs.get(n) for n in st.returns]  # (g_out,) w, u, qg or None, kg
    plan.slots = st.slots(("q", "k", "v", "beta", "A", "g", "g_raw", "A_log", "dt_bias") + st.returns)
    plan.seq_slots = st.slots(("cu_seqlens", "chunk_indices"))
    return plan


def _rwu_impl(k, v, beta, A, gk=None, q=None, g_raw=None, A_log=None, dt_bias=None, lower_bound=None,
              cu_seqlens=None, chunk_indices=None, g_out=None):
    ts = (q, k, v, beta, A, gk, g_raw, A_log, _dt_bias_2d(dt_bias, g_raw))
    key = (tuple(map(_idx_key, ts)), "rwu", lower_bound is not None,
           None if cu_seqlens is None else (_idx_key(cu_seqlens), _idx_key(chunk_indices)))
    plan = _get_plan(key, _rwu_plan, k, v, beta, A, gk, q, g_raw, A_log, dt_bias, lower_bound, cu_seqlens,
                     chunk_indices)
    live = tuple(x for x in ts if x is not None)
    if not all(map(_CONTIG, live)):
        _check_layout(live)
    dev = plan.dev
    o = [None if sd is None else torch.empty(sd[0], dtype=sd[1], device=dev) for sd in plan.outs]
    if g_out is not None:  # (kdart.fla: the tensor fla's gate cumsum returned, filled here)
        if g_raw is None or g_out.shape != o[0].shape or g_out.dtype != o[0].dtype or not g_out.is_contiguous() \
                or g_out.device != dev:
            raise _bad("ESHAPE: g_out must be a contiguous float32 tensor of g's shape on its device")
        o[0] = g_out
    if lower_bound is not None:
        plan.args.lower_bound = float(lower_bound)
    if not plan.warm:
        _prepare_plan("recompute_wu", plan, dev)
    _set_data(plan, ts + tuple(o), (cu_seqlens, chunk_indices))
    _launch("rwu", plan, plan.idx)
    return tuple(o)


def _dav_call(v, do, A, cu_seqlens, chunk_indices):
    return dict(v=v, do=do, A=A, cu_seqlens=cu_seqlens, chunk_indices=chunk_indices), dict(scale=1.0)


def _dav_plan(v, do, A, cu_seqlens=None, chunk_indices=None):
    t, sc = _dav_call(v, do, A, cu_seqlens, chunk_indices)
    plan = _build_plan(_DAV, t, sc, want=("dA",), layout=(v, do, A, cu_seqlens, chunk_indices))
    plan.outs = [plan.outs[n] for n in _DAV.returns]  # dA, dv
    plan.slots = _DAV.slots(("v", "do", "A") + _DAV.returns)
    plan.seq_slots = _DAV.slots(("cu_seqlens", "chunk_indices"))
    return plan


def _dav_impl(v, do, A, scale, cu_seqlens=None, chunk_indices=None):
    ts = (v, do, A)
    key = (tuple(map(_SIG, ts)), "dav", None if cu_seqlens is None else (_idx_key(cu_seqlens), _idx_key(chunk_indices)))
    plan = _get_plan(key, _dav_plan, v, do, A, cu_seqlens, chunk_indices)
    if not all(map(_CONTIG, ts)):
        _check_layout(ts)
    dev = plan.dev
    dA = torch.empty(plan.outs[0][0], dtype=_F32, device=dev)
    dv = torch.empty_like(do)  # (do's shape and dtype: checked)
    plan.args.scale = float(scale)
    if not plan.warm:
        _prepare_plan("bwd_dav", plan, dev)
    _set_data(plan, ts + (dA, dv), (cu_seqlens, chunk_indices))
    _launch("dav", plan, plan.idx)
    return dA, dv


# ------------------------------------------------------------- custom ops

@torch.library.custom_op("kdart::bwd_intra", mutates_args=())
def _bwd_intra_op(q: torch.Tensor, k: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, dAqk: torch.Tensor,
                  dAkk: torch.Tensor, dq: torch.Tensor, dk: torch.Tensor, db: torch.Tensor, dg: torch.Tensor,
                  fold_dg: bool = False, emit_bf16: bool = False, cu_seqlens: torch.Tensor | None = None,
                  chunk_indices: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _bwd_intra_impl(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg, emit_bf16, cu_seqlens, chunk_indices)


@_bwd_intra_op.register_fake
def _bwd_intra_fake(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg=False, emit_bf16=False, cu_seqlens=None,
                    chunk_indices=None):
    outs = intra_meta(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg, emit_bf16, cu_seqlens, chunk_indices)
    return tuple(q.new_empty(s, dtype=d) for s, d in outs)


@torch.library.custom_op("kdart::bwd_dhu", mutates_args=())
def _bwd_dhu_op(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor, do: torch.Tensor, dv: torch.Tensor | None,
                gk: torch.Tensor, h0: torch.Tensor | None = None, dht: torch.Tensor | None = None,
                scale: float | None = None, cu_seqlens: torch.Tensor | None = None,
                chunk_indices: torch.Tensor | None = None, chunk_offsets: torch.Tensor | None = None,
                state_v_first: bool = False, Aqk: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dh0 is a (0,)-shaped tensor when h0 is None (custom ops cannot return None); bwd_dhu maps it to None."""
    return _bwd_dhu_impl(q, k, w, do, dv, gk, h0, dht, scale, cu_seqlens, chunk_indices, chunk_offsets,
                         state_v_first, Aqk)


@_bwd_dhu_op.register_fake
def _bwd_dhu_fake(q, k, w, do, dv, gk, h0=None, dht=None, scale=None, cu_seqlens=None, chunk_indices=None,
                  chunk_offsets=None, state_v_first=False, Aqk=None):
    # varlen without chunk_indices: dh's row count depends on cu_seqlens's values
    nt = torch.library.get_ctx().new_dynamic_size() if cu_seqlens is not None and chunk_indices is None else None
    outs = dhu_meta(q, k, w, do, dv, gk, h0, dht, cu_seqlens, chunk_indices, chunk_offsets, nt, state_v_first, Aqk)
    return tuple(q.new_empty(s, dtype=d) for s, d in outs)


@torch.library.custom_op("kdart::wy_dqkg", mutates_args=())
def _wy_dqkg_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, v_new: torch.Tensor, g: torch.Tensor,
                beta: torch.Tensor, A: torch.Tensor, h: torch.Tensor, do: torch.Tensor, dh: torch.Tensor,
                dv: torch.Tensor, scale: float | None = None, state_v_first: bool = False,
                cu_seqlens: torch.Tensor | None = None, chunk_indices: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _wy_dqkg_impl(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale, state_v_first, cu_seqlens,
                         chunk_indices)


@_wy_dqkg_op.register_fake
def _wy_dqkg_fake(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale=None, state_v_first=False, cu_seqlens=None,
                  chunk_indices=None):
    outs = wy_meta(q, k, v, v_new, g, beta, A, h, do, dh, dv, state_v_first, cu_seqlens, chunk_indices)
    return tuple(q.new_empty(s, dtype=d) for s, d in outs)


def _wy_dqkg_op7(name, intra, doc):
    """The custom op of wy_dqkg's seven outputs (dAqk=True), with or without bwd_intra's terms (intra)."""
    @torch.library.custom_op(f"kdart::{name}", mutates_args=())
    def op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, v_new: torch.Tensor, g: torch.Tensor,
           beta: torch.Tensor, A: torch.Tensor, h: torch.Tensor, do: torch.Tensor, dh: torch.Tensor, dv: torch.Tensor,
           scale: float | None = None, state_v_first: bool = False, cu_seqlens: torch.Tensor | None = None,
           chunk_indices: torch.Tensor | None = None
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                      torch.Tensor]:
        return _wy_dqkg_impl(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale, state_v_first, cu_seqlens,
                             chunk_indices, True, intra)
    op.__doc__ = doc

    @op.register_fake
    def _fake(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale=None, state_v_first=False, cu_seqlens=None,
              chunk_indices=None):
        outs = wy_meta(q, k, v, v_new, g, beta, A, h, do, dh, dv, state_v_first, cu_seqlens, chunk_indices, True,
                       intra)
        return tuple(q.new_empty(s, dtype=d) for s, d in outs)
    return op


_wy_dqkg_daqk_op = _wy_dqkg_op7("wy_dqkg_dAqk", False,
                                "wy_dqkg with dAqk=True: fla's six outputs, then dAqk (fla's chunk_kda_bwd_dAv dA).")
_wy_dqkg_intra_op = _wy_dqkg_op7("wy_dqkg_intra", True, "wy_dqkg with dAqk=True, intra=True: dq, dk, db, dg are "
                                 "bwd_intra's (fold_dg) over wy_dqkg's.")


_Tensor = torch.Tensor
_is_compiling = torch.compiler.is_compiling


def _eager(t):
    return type(t) is torch.Tensor and t.is_cuda and not torch.compiler.is_compiling()


def bwd_intra(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg=False, emit_bf16=False, cu_seqlens=None,
              chunk_indices=None):
    """fla's chunk_kda_bwd_intra (chunk 64; any T, or packed sequences per cu_seqlens) -> (dq, dk, db, dg).
    fold_dg: dg comes back reverse-cumsummed within each chunk (fla's following
    chunk_local_cumsum(dg, 64, reverse=True)); emit_bf16: dq, dk in the io dtype (HV == H)."""
    # is_compiling first: under torch.compile it is a constant True, so Dynamo never looks at _XI (a C
    # function it cannot trace) and goes on to the custom op below
    if not _is_compiling() and _XI is not None and type(q) is _Tensor:
        r = _XI(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg, emit_bf16, cu_seqlens, chunk_indices)
        if r is not None:
            return r
    if _eager(q):
        if _EXT is not None and _XI is None:  # (the direct entries took their calls above)
            r = _ext_intra(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg, emit_bf16, cu_seqlens, chunk_indices)
            if r is not None:
                return r
        return _bwd_intra_impl(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg, emit_bf16, cu_seqlens,
                               chunk_indices)
    return torch.ops.kdart.bwd_intra(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg, emit_bf16, cu_seqlens,
                                     chunk_indices)


def _pad8(n):
    return n + (-n) % 8


def _zero_padded(t, sizes):
    """t copied into a new tensor whose trailing dims have the given sizes (each >= t's), zero past t: only the
    pad region is zero-filled (F.pad fills the whole output first, one more write of every byte)."""
    nd = len(sizes)
    out = t.new_empty(t.shape[:-nd] + tuple(sizes))
    for i, n in enumerate(sizes):
        d = t.dim() - nd + i
        if n > t.shape[d]:
            out.narrow(d, t.shape[d], n - t.shape[d]).zero_()
    out[(Ellipsis,) + tuple(slice(0, s) for s in t.shape[-nd:])].copy_(t)
    return out


def _bwd_dhu_padded(q, k, w, do, dv, gk, h0, dht, scale, cu_seqlens, chunk_indices, chunk_offsets,
                    state_v_first):
    """bwd_dhu at an odd K or V: the odd dims zero-padded to the next multiple of 8, the outputs sliced back.
    Exact: a padded K channel has qg = kg = w = 0 and gk = 0, so its dH rows keep dht's zeros and add nothing
    to dv2; a padded V column has do = dv = 0, so its dH column and dv2 stay zero.  Why: at odd dims the C
    kernel's masked path moves single elements (0.18x fla at K = V = 63 on the H200); padded, it takes
    16-byte granules, and the copies (one read and write of each padded input and output, at about a third of
    the copy bandwidth for rows of odd width) leave it at 1.15-1.28x fla with one odd side and 0.94-1.01x with
    both (docs/performance.md).  The arguments are checked as given first, so errors name the caller's
    shapes."""
    dhu_meta(q, k, w, do, dv, gk, h0, dht, cu_seqlens, chunk_indices, chunk_offsets,
             0 if cu_seqlens is not None and chunk_indices is None else None, state_v_first)
    _check_layout((q, k, w, do, dv, gk, h0, dht, cu_seqlens, chunk_indices, chunk_offsets))
    K, V = q.shape[3], do.shape[3]
    Kp, Vp = (_pad8(K) if K % 2 else K), (_pad8(V) if V % 2 else V)
    lastk = (lambda t: _zero_padded(t, (Kp,)) if Kp != K else t)  # noqa: E731
    lastv = (lambda t: _zero_padded(t, (Vp,)) if Vp != V else t)  # noqa: E731
    S = (Vp, Kp) if state_v_first else (Kp, Vp)  # the state's last two dims: [V, K] or [K, V]
    dht = None if dht is None else _zero_padded(dht, S)
    h0 = None if h0 is None else h0.new_empty(h0.shape[:-2] + S)  # only its shape is read (dh0 is h0's shape)
    dh, dh0, dv2 = bwd_dhu(lastk(q), lastk(k), lastk(w), lastv(do), lastv(dv), lastk(gk), h0, dht,
                           K ** -0.5 if scale is None else scale, cu_seqlens, chunk_indices, chunk_offsets,
                           state_v_first)
    cut = (lambda t: t[..., :V, :K] if state_v_first else t[..., :K, :V])  # noqa: E731
    return (cut(dh).contiguous(), None if dh0 is None else cut(dh0).contiguous(),
            dv2[..., :V].contiguous() if Vp != V else dv2)


def bwd_dhu(q, k, w, do, dv, gk, h0=None, dht=None, scale=None, cu_seqlens=None, chunk_indices=None,
            chunk_offsets=None, state_v_first=False, Aqk=None):
    """fla's chunk_gated_delta_rule_bwd_dhu with the per-channel gate gk (KDA's call: q = qg, k = kg)
    -> (dh, dh0, dv2); dh0 is None when h0 is None.  scale None: K ** -0.5.  Varlen: dh has
    len(chunk_indices) rows (without chunk_indices: counted from cu_seqlens, a synchronization).
    state_v_first: fla's transposed state, dh [.., V, K] and h0/dht/dh0 [N, HV, V, K].  An odd K or V
    is zero-padded to a multiple of 8 around the kernel (exact; see _bwd_dhu_padded).

    Aqk (chunk_kda's Aqk [B,T,HV,64], io dtype) in place of dv (dv=None; exactly one of the two): the
    dv of fla's chunk_kda_bwd_dAv, Aqk^T do per chunk (Aqk's lower triangle, diagonal included), is computed
    inside the kernel and never rounded to the io dtype; dh, dh0 and dv2 are what they are with that dv.  K 64
    or 128 and V a multiple of 64 only (ValueError otherwise: no zero padding); never the C++ fast path."""
    if Aqk is not None or dv is None:
        _dv_or_aqk(dv, Aqk)  # (raises unless Aqk alone)
        if _eager(q):
            dh, dh0, dv2 = _bwd_dhu_impl(q, k, w, do, None, gk, h0, dht, scale, cu_seqlens, chunk_indices,
                                         chunk_offsets, state_v_first, Aqk)
        else:
            dh, dh0, dv2 = torch.ops.kdart.bwd_dhu(q, k, w, do, None, gk, h0, dht, scale, cu_seqlens,
                                                   chunk_indices, chunk_offsets, bool(state_v_first), Aqk)
        return dh, (dh0 if h0 is not None else None), dv2
    if (q.shape[-1] | do.shape[-1]) & 1 and q.dim() == 4 and do.dim() == 4:
        return _bwd_dhu_padded(q, k, w, do, dv, gk, h0, dht, scale, cu_seqlens, chunk_indices, chunk_offsets,
                               state_v_first)
    if not _is_compiling() and _XD is not None and type(q) is _Tensor:
        r = _XD(q, k, w, do, dv, gk, h0, dht, scale, cu_seqlens, chunk_indices, chunk_offsets, state_v_first)
        if r is not None:
            return r
    r = None
    if _eager(q):
        if _EXT is not None and _XI is None:  # (the direct entries took their calls above)
            r = _ext_dhu(q, k, w, do, dv, gk, h0, dht, scale, cu_seqlens, chunk_indices, chunk_offsets,
                         state_v_first)
        dh, dh0, dv2 = r if r is not None else _bwd_dhu_impl(q, k, w, do, dv, gk, h0, dht, scale, cu_seqlens,
                                                           chunk_indices, chunk_offsets, state_v_first)
    else:
        dh, dh0, dv2 = torch.ops.kdart.bwd_dhu(q, k, w, do, dv, gk, h0, dht, scale, cu_seqlens, chunk_indices,
                                               chunk_offsets, bool(state_v_first))
    return dh, (dh0 if h0 is not None else None), dv2


def wy_dqkg(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale=None, state_v_first=False, cu_seqlens=None,
            chunk_indices=None, chunk_offsets=None, dAqk=False, intra=False):
    """fla's chunk_kda_bwd_wy_dqkg_fused (chunk 64) -> (dq, dk, dv, db, dg, dA), dq and dk at the value heads
    (fla's GVA contract: the caller sums them over the head groups).  scale None: K ** -0.5.  h and dh as fla
    has them ([B,NT,HV,K,V], or [..,V,K] with state_v_first; packed: [1,len(chunk_indices),..]).  chunk_offsets
    is accepted for fla's signature and not read (kdart derives each chunk's row on the device).

    dAqk=True: a seventh output, dAqk [B,T,HV,64] fp32, the dA of fla's chunk_kda_bwd_dAv for this do and v_new
    (chunk_kda_bwd hands that function v_new as v): scale * do v_new^T within each 64-row chunk, on and below
    the diagonal, zeros above (rows past the last packed sequence's end are not written).

    intra=True (with dAqk=True): bwd_intra's terms are added in the same launch, so dq, dk, db, dg are what
    bwd_intra(q, k, g, beta, dAqk, dA, dq, dk, db, dg, fold_dg=True) would return for the wy outputs (fp32,
    dg suffix-summed down each chunk); dA and dAqk come back as that call's inputs.  The intermediate fp32
    gradients never make a round trip through memory."""
    if intra and not dAqk:
        raise _lib.value_error("EUNSUPPORTED", "EUNSUPPORTED: intra=True needs dAqk=True (the intra-chunk terms "
                                               "read dAqk)")
    if dAqk:
        if _eager(q):
            return _wy_dqkg_impl(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale, state_v_first, cu_seqlens,
                                 chunk_indices, True, intra)
        op = torch.ops.kdart.wy_dqkg_intra if intra else torch.ops.kdart.wy_dqkg_dAqk
        return op(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale, bool(state_v_first), cu_seqlens, chunk_indices)
    if _eager(q):
        return _wy_dqkg_impl(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale, state_v_first, cu_seqlens,
                             chunk_indices)
    return torch.ops.kdart.wy_dqkg(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale, bool(state_v_first),
                                   cu_seqlens, chunk_indices)


def rwu_meta(k, v, beta, A, gk=None, q=None, g_raw=None, A_log=None, dt_bias=None, lower_bound=None,
             cu_seqlens=None, chunk_indices=None):
    """Checks recompute_wu's arguments through kdart (ValueError); returns its outputs' (shape, dtype) list:
    w, u, qg (None without q), kg, with the gate's cumsum first when g_raw is given."""
    st, t, sc, want = _rwu_call(k, v, beta, A, gk, q, g_raw, A_log, dt_bias, lower_bound, cu_seqlens, chunk_indices)
    return _meta(st, t, sc, want=want)


@torch.library.custom_op("kdart::recompute_wu", mutates_args=())
def _rwu_op(k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, A: torch.Tensor, gk: torch.Tensor | None,
            q: torch.Tensor | None, g_raw: torch.Tensor | None, A_log: torch.Tensor | None,
            dt_bias: torch.Tensor | None, lower_bound: float | None, cu_seqlens: torch.Tensor | None,
            chunk_indices: torch.Tensor | None) -> list[torch.Tensor]:
    """recompute_w_u / gate_recompute_w_u; an output not produced (qg without q) is a (0,)-shaped tensor."""
    outs = _rwu_impl(k, v, beta, A, gk, q, g_raw, A_log, dt_bias, lower_bound, cu_seqlens, chunk_indices)
    return [k.new_empty((0,)) if o is None else o for o in outs]


@_rwu_op.register_fake
def _rwu_fake(k, v, beta, A, gk, q, g_raw, A_log, dt_bias, lower_bound, cu_seqlens, chunk_indices):
    outs = rwu_meta(k, v, beta, A, gk, q, g_raw, A_log, dt_bias, lower_bound, cu_seqlens, chunk_indices)
    return [k.new_empty((0,)) if o is None else k.new_empty(o[0], dtype=o[1]) for o in outs]


def _rwu(k, v, beta, A, gk, q, g_raw, A_log, dt_bias, lower_bound, cu_seqlens, chunk_indices):
    if _eager(k):
        return _rwu_impl(k, v, beta, A, gk, q, g_raw, A_log, dt_bias, lower_bound, cu_seqlens, chunk_indices)
    outs = torch.ops.kdart.recompute_wu(k, v, beta, A, gk, q, g_raw, A_log, dt_bias, lower_bound, cu_seqlens,
                                        chunk_indices)
    return tuple(None if o.dim() == 1 and o.shape[0] == 0 else o for o in outs)


def recompute_w_u(k, v, beta, A, gk, q=None, cu_seqlens=None, chunk_indices=None):
    """fla's recompute_w_u_fwd (chunk 64; any T, packed sequences, any K and V up to 256 / 512, GVA) ->
    (w, u, qg, kg): w = A (beta k exp2(gk)), u = A (beta v), qg = q exp2(gk) (None without q), kg = k
    exp2(gk_last - gk), with A the forward's Akk and gk the chunk-local cumsummed gate in log2 units."""
    return _rwu(k, v, beta, A, gk, q, None, None, None, None, cu_seqlens, chunk_indices)


def gate_recompute_w_u(g, A_log, k, v, beta, A, q=None, dt_bias=None, lower_bound=None, cu_seqlens=None,
                       chunk_indices=None):
    """fla's kda_gate_chunk_cumsum (scale 1/ln 2, fp32 out) and recompute_w_u_fwd in one launch -> (gk, w, u, qg,
    kg): gk the chunk-local cumsum of -exp(A_log) softplus(g + dt_bias), or with lower_bound (the safe gate)
    lower_bound sigmoid(exp(A_log) (g + dt_bias)), in log2 units; the rest as recompute_w_u with that gk.  g
    the raw gate [B,T,HV,K] (io dtype or fp32), A_log [HV] and dt_bias [HV*K] (or None) fp32."""
    return _rwu(k, v, beta, A, None, q, g, A_log, dt_bias, lower_bound, cu_seqlens, chunk_indices)


def dav_meta(v, do, A, cu_seqlens=None, chunk_indices=None):
    """Checks bwd_dav's arguments through kdart (ValueError); returns its outputs' (shape, dtype) list (dA, dv)."""
    return _meta(_DAV, *_dav_call(v, do, A, cu_seqlens, chunk_indices), want=("dA",))


@torch.library.custom_op("kdart::bwd_dav", mutates_args=())
def _dav_op(v: torch.Tensor, do: torch.Tensor, A: torch.Tensor, scale: float, cu_seqlens: torch.Tensor | None = None,
            chunk_indices: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    return _dav_impl(v, do, A, scale, cu_seqlens, chunk_indices)


@_dav_op.register_fake
def _dav_fake(v, do, A, scale, cu_seqlens=None, chunk_indices=None):
    outs = dav_meta(v, do, A, cu_seqlens, chunk_indices)
    return tuple(v.new_empty(s, dtype=d) for s, d in outs)


def bwd_dAv(q, k, v, do, A=None, scale=None, cu_seqlens=None, chunk_size=64, chunk_indices=None, use_graph=False):
    """fla's chunk_kda_bwd_dAv (chunk 64; any T, packed sequences, any V up to 512, any HV) -> (dA, dv): dA
    [B,T,HV,64] fp32 = scale * do v^T within each 64-row chunk, on and below the diagonal, zeros above (rows past
    the last packed sequence's end are not written, as in fla); dv = A^T do per chunk in the io dtype, A being
    chunk_kda's Aqk [B,T,HV,64] (its lower triangle, diagonal included, is read; above it may hold anything).
    chunk_kda_bwd hands it v_new as v.  q and k only size fla's call: scale None is q's head dim ** -0.5.
    use_graph is taken for fla's signature: the outputs come from torch's allocator (the graph's pool under
    capture), not from fla's static buffers."""
    if chunk_size != CHUNK:
        raise _lib.value_error("EUNSUPPORTED", f"EUNSUPPORTED: chunk_size={chunk_size} (kdart's chunks are 64 rows)")
    if A is None:
        raise _lib.value_error("ENULL", "ENULL: bwd_dAv needs A (chunk_kda's Aqk)")
    if scale is None:
        scale = q.shape[-1] ** -0.5
    if _eager(do):
        return _dav_impl(v, do, A, scale, cu_seqlens, chunk_indices)
    return torch.ops.kdart.bwd_dav(v, do, A, float(scale), cu_seqlens, chunk_indices)


def _fwdh_call(k, w, u, gk, initial_state, output_final_state, save_new_value, state_v_first, cu_seqlens,
               chunk_indices, chunk_offsets, v_tile=0):
    """(tensors, scalars, optional outputs asked for) of one fwd_h call."""
    want = tuple(n for n, on in (("v_new", save_new_value), ("ht", output_final_state)) if on)
    return (dict(k=k, w=w, u=u, gk=gk, h0=initial_state, cu_seqlens=cu_seqlens, chunk_indices=chunk_indices,
                 chunk_offsets=chunk_offsets),
            dict(v_tile=v_tile, state_v_first=int(bool(state_v_first))), want)


def _fwdh_plan(k, w, u, gk, initial_state, output_final_state, save_new_value, state_v_first, cu_seqlens=None,
               chunk_indices=None, chunk_offsets=None, nt=None):
    # as bwd_dhu's plan: on the device the V tile is the one kdart picks for its SM count (v_tile 0), elsewhere
    # (never launched) the widest
    on_gpu = isinstance(k, torch.Tensor) and k.is_cuda
    _shape_error("k", k, 4, "[B,T,H,K]")
    rows = _fla_nt(k.shape[1], cu_seqlens, chunk_indices, nt) if isinstance(cu_seqlens, torch.Tensor) else None
    t, sc, want = _fwdh_call(k, w, u, gk, initial_state, output_final_state, save_new_value, state_v_first,
                             cu_seqlens, chunk_indices, chunk_offsets, 0 if on_gpu else 64)
    with torch.cuda.device(k.device) if on_gpu else contextlib.nullcontext():
        # only zero-length sequences: fla's h has no rows; kdart's h needs one (never written)
        plan = _build_plan(_FWDH, t, sc, None if rows is None else max(rows, 1), want,
                           (k, w, u, gk, initial_state, cu_seqlens, chunk_indices, chunk_offsets))
    plan.args.v_tile = 0
    plan.no_rows = rows == 0
    plan.slots = _FWDH.slots(("k", "w", "u", "gk", "h0", "h", "v_new", "ht"))
    plan.seq_slots = _FWDH.slots(("cu_seqlens", "chunk_indices", "chunk_offsets"))
    return plan


def _fwdh_impl(k, w, u, gk, initial_state=None, output_final_state=False, save_new_value=True, state_v_first=False,
               cu_seqlens=None, chunk_indices=None, chunk_offsets=None, nt=None):
    # h's rows without chunk_indices: nt (counted from cu_seqlens_cpu by the caller), else counted from
    # cu_seqlens (a synchronization, as fla's own prepare_chunk_indices)
    if cu_seqlens is not None and chunk_indices is None and nt is None:
        nt = _chunk_count(cu_seqlens)
    ts = (k, w, u, gk)
    key = (tuple(map(_SIG, ts)), _idx_key(initial_state), "fwdh", bool(output_final_state), bool(save_new_value),
           bool(state_v_first),
           None if cu_seqlens is None else (_idx_key(cu_seqlens), _idx_key(chunk_indices), _idx_key(chunk_offsets),
                                            nt))
    plan = _get_plan(key, _fwdh_plan, k, w, u, gk, initial_state, output_final_state, save_new_value, state_v_first,
                     cu_seqlens, chunk_indices, chunk_offsets, nt)
    if not (all(map(_CONTIG, ts)) and (initial_state is None or initial_state.is_contiguous())):
        _check_layout(ts + (initial_state,))
    dev = plan.dev
    s0, t0 = plan.outs["h"]
    h = torch.empty(s0, dtype=t0, device=dev)
    v_new = torch.empty_like(u) if save_new_value else None  # (u's shape and dtype: checked)
    ht = torch.empty(plan.outs["ht"][0], dtype=_F32, device=dev) if output_final_state else None
    if not plan.warm:
        _prepare_plan("fwd_h", plan, dev)
    _set_data(plan, (k, w, u, gk, initial_state, h, v_new, ht), (cu_seqlens, chunk_indices, chunk_offsets))
    _launch("fwdh", plan, plan.idx)
    return (h[:, :0] if plan.no_rows else h), v_new, ht


def fwdh_meta(k, w, u, gk, initial_state=None, output_final_state=False, save_new_value=True, state_v_first=False,
              cu_seqlens=None, chunk_indices=None, chunk_offsets=None, nt=None):
    """Checks fwd_h's arguments through kdart (ValueError); returns its outputs' (shape, dtype) list (h, v_new,
    final_state; None where not asked for).  h has fla's rows: B*ceil(T/64) at fixed length; varlen:
    len(chunk_indices), else nt (the caller's count of cu_seqlens's chunks)."""
    _shape_error("k", k, 4, "[B,T,H,K]")
    rows = _fla_nt(k.shape[1], cu_seqlens, chunk_indices, nt) if isinstance(cu_seqlens, torch.Tensor) else None
    t, sc, want = _fwdh_call(k, w, u, gk, initial_state, output_final_state, save_new_value, state_v_first,
                             cu_seqlens, chunk_indices, chunk_offsets, 64)
    return _meta(_FWDH, t, sc, rows, want)


@torch.library.custom_op("kdart::fwd_h", mutates_args=())
def _fwdh_op(k: torch.Tensor, w: torch.Tensor, u: torch.Tensor, gk: torch.Tensor, initial_state: torch.Tensor | None,
             output_final_state: bool, save_new_value: bool, state_v_first: bool, cu_seqlens: torch.Tensor | None,
             chunk_indices: torch.Tensor | None, chunk_offsets: torch.Tensor | None) -> list[torch.Tensor]:
    """chunk_gated_delta_rule_fwd_h; an output not asked for (v_new, final_state) is a (0,)-shaped tensor."""
    outs = _fwdh_impl(k, w, u, gk, initial_state, output_final_state, save_new_value, state_v_first, cu_seqlens,
                      chunk_indices, chunk_offsets)
    return [k.new_empty((0,)) if o is None else o for o in outs]


@_fwdh_op.register_fake
def _fwdh_fake(k, w, u, gk, initial_state, output_final_state, save_new_value, state_v_first, cu_seqlens,
               chunk_indices, chunk_offsets):
    nt = torch.library.get_ctx().new_dynamic_size() if cu_seqlens is not None and chunk_indices is None else None
    outs = fwdh_meta(k, w, u, gk, initial_state, output_final_state, save_new_value, state_v_first, cu_seqlens,
                     chunk_indices, chunk_offsets, nt)
    return [k.new_empty((0,)) if o is None else k.new_empty(o[0], dtype=o[1]) for o in outs]


def chunk_gated_delta_rule_fwd_h(k, w, u, g=None, gk=None, initial_state=None, output_final_state=False,
                                 chunk_size=64, save_new_value=True, state_v_first=False, cu_seqlens=None,
                                 cu_seqlens_cpu=None, chunk_indices=None, chunk_offsets=None):
    """fla's chunk_gated_delta_rule_fwd_h with the per-channel gate gk, as chunk_kda calls it (its forward, and
    its backward's recompute of the states) -> (h, v_new, final_state): per sequence and value head, from
    initial_state (or zero), h [B,NT,HV,K,V] in the io dtype holds the state entering each 64-row chunk,
    v_new = u - w h (io dtype; None when not save_new_value), and the state moves on as S = exp2(gk_last) S +
    k^T v_new (gk_last: the chunk-local cumsummed gate, log2 units, at the chunk's last row; k: chunk_kda's
    kg, [B,T,H,K] with HV a multiple of H); final_state [N,HV,K,V] fp32 when output_final_state, else None.
    state_v_first: h, initial_state and final_state as [.., V, K].  Any T, packed sequences (cu_seqlens; h's NT
    is len(chunk_indices), else counted from cu_seqlens_cpu when given, else from cu_seqlens, which
    synchronizes as fla's own), K up to 256, V up to 512, bf16/fp16.  What kdart does not take raises
    ValueError: the scalar gate g (gated delta rule models: fla's kernel), no gate at all, chunk_size != 64."""
    if chunk_size != CHUNK:
        raise _lib.value_error("EUNSUPPORTED", f"EUNSUPPORTED: chunk_size={chunk_size} (kdart's chunks are 64 rows)")
    if g is not None:
        raise _lib.value_error("EUNSUPPORTED", "EUNSUPPORTED: the scalar gate g (kdart's fwd_h takes the "
                                               "per-channel gate gk only)")
    if gk is None:
        raise _lib.value_error("ENULL", "ENULL: chunk_gated_delta_rule_fwd_h needs gk (the per-channel gate)")
    if _eager(k):
        nt = None
        if cu_seqlens is not None and chunk_indices is None and cu_seqlens_cpu is not None:
            nt = _chunk_count(cu_seqlens_cpu)  # (on the host: no synchronization)
        return _fwdh_impl(k, w, u, gk, initial_state, output_final_state, save_new_value, state_v_first,
                          cu_seqlens, chunk_indices, chunk_offsets, nt)
    outs = torch.ops.kdart.fwd_h(k, w, u, gk, initial_state, bool(output_final_state), bool(save_new_value),
                                 bool(state_v_first), cu_seqlens, chunk_indices, chunk_offsets)
    return tuple(None if o.dim() == 1 and o.shape[0] == 0 else o for o in outs)


# ------------------------------------------------------------- bwd_post and the whole backward

_POST_ORDER = ("dq_in", "dk_in", "q", "k", "q_rstd", "k_rstd", "dg_in", "g_raw", "A_log", "dt_bias", "db_in",
               "beta_raw")
_POST_OUTS = ("dq", "dk", "dg", "db", "dA_log", "ddt_bias")


def _post_sizes(dq_in, dg_in, db_in, H, dt_bias, io, g_dtype, beta_dtype, gate):
    """bwd_post's outputs {name: (shape, dtype)} (dq, dk at H heads)."""
    B, T, HV, K = dq_in.shape
    out = {"dq": ((B, T, H, K), io), "dk": ((B, T, H, K), io), "dg": (tuple(dg_in.shape), g_dtype),
           "db": (tuple(db_in.shape), beta_dtype)}
    if gate:
        out["dA_log"] = ((HV,), _F32)
        if dt_bias is not None:
            out["ddt_bias"] = ((HV, K), _F32)
    return out


def _post_scalars(lower_bound, beta_scale, g_dtype, beta_dtype):
    """bwd_post's scalar arguments, by their C names."""
    return dict(lower_bound=0.0 if lower_bound is None else float(lower_bound), safe_gate=int(lower_bound is not None),
                beta_scale=float(beta_scale), g_io=int(g_dtype != _F32), beta_io=int(beta_dtype != _F32))


def _post_check(t, sc, outs):
    """kdart's checks and spec of one bwd_post call (t: its inputs by C name; outs: _post_sizes) -> the plan."""
    fakes = {n: torch.empty(shp, dtype=dt, device="meta") for n, (shp, dt) in outs.items()}
    B, T, HV, K = t["dq_in"].shape
    H = outs["dq"][0][2]
    ws = torch.empty((_fast()["post_ws"](H, HV, K),), dtype=_F32, device="meta") if t.get("g_raw") is not None \
        else None
    plan = _Plan(_POST, {**t, "workspace": ws, **fakes}, sc)
    plan.spec = _ask_kdart(_POST, plan)
    plan.ws = (ws.shape[0], H) if ws is not None else None
    return plan


def _post_plan(t, sc, outs):
    plan = _post_check(t, sc, outs)
    dev = _check_layout(tuple(x for x in t.values() if x is not None))
    plan.outs, plan.dev, plan.idx = outs, dev, (dev.index if dev.type == "cuda" else -1)
    plan.slots = _POST.slots(_POST_ORDER + ("workspace",) + _POST_OUTS)
    return plan


def _post_impl(dq_in, dk_in, dg_in, db_in, q, k, q_rstd, k_rstd, g_raw, A_log, dt_bias, beta_raw, lower_bound,
               beta_scale, io, g_dtype, beta_dtype, H):
    ts = (dq_in, dk_in, q, k, q_rstd, k_rstd, dg_in, g_raw, A_log, _dt_bias_2d(dt_bias, g_raw), db_in, beta_raw)
    # (the gate's form is a scalar of the plan's args, not a tensor: it keys the plan as the dtypes do)
    key = (tuple(map(_idx_key, ts)), "post", io, g_dtype, beta_dtype, H, lower_bound is not None)

    def build():
        if not isinstance(dq_in, torch.Tensor) or dq_in.dim() != 4:
            raise _lib.value_error("ESHAPE", "ESHAPE: dq_in must be a [B,T,HV,K] tensor")
        return _post_plan(dict(zip(_POST_ORDER, ts)), _post_scalars(lower_bound, beta_scale, g_dtype, beta_dtype),
                          _post_sizes(dq_in, dg_in, db_in, H, ts[9], io, g_dtype, beta_dtype, g_raw is not None))
    plan = _get_plan(key, build)
    live = tuple(x for x in ts if x is not None)
    if not all(map(_CONTIG, live)):
        _check_layout(live)
    dev = plan.dev
    o = [torch.empty(plan.outs[n][0], dtype=plan.outs[n][1], device=dev) if n in plan.outs else None
         for n in _POST_OUTS]
    ws = None
    if plan.ws is not None:
        ws = torch.empty(plan.ws[0], dtype=_F32, device=dev)
        ws[-plan.ws[1]:].zero_()  # the per-head counters; the kernel leaves them zero again
    plan.args.lower_bound = 0.0 if lower_bound is None else float(lower_bound)
    plan.args.beta_scale = float(beta_scale)
    if not plan.warm:
        _prepare_plan("bwd_post", plan, dev)
    _set_data(plan, ts + (ws,) + tuple(o), (None,))
    _launch("post", plan, plan.idx)
    return tuple(o)


@torch.library.custom_op("kdart::bwd_post", mutates_args=())
def _post_op(dq_in: torch.Tensor, dk_in: torch.Tensor, dg_in: torch.Tensor, db_in: torch.Tensor,
             q: torch.Tensor | None, k: torch.Tensor | None, q_rstd: torch.Tensor | None, k_rstd: torch.Tensor | None,
             g_raw: torch.Tensor | None, A_log: torch.Tensor | None, dt_bias: torch.Tensor | None,
             beta_raw: torch.Tensor | None, lower_bound: float | None, beta_scale: float, io: torch.dtype,
             g_dtype: torch.dtype, beta_dtype: torch.dtype, H: int) -> list[torch.Tensor]:
    """bwd_post; an output not produced (dA_log, ddt_bias) is a (0,)-shaped tensor."""
    outs = _post_impl(dq_in, dk_in, dg_in, db_in, q, k, q_rstd, k_rstd, g_raw, A_log, dt_bias, beta_raw,
                      lower_bound, beta_scale, io, g_dtype, beta_dtype, H)
    return [dq_in.new_empty((0,)) if x is None else x for x in outs]


@_post_op.register_fake
def _post_fake(dq_in, dk_in, dg_in, db_in, q, k, q_rstd, k_rstd, g_raw, A_log, dt_bias, beta_raw, lower_bound,
               beta_scale, io, g_dtype, beta_dtype, H):
    outs = _post_sizes(dq_in, dg_in, db_in, H, dt_bias, io, g_dtype, beta_dtype, g_raw is not None)
    ts = (dq_in, dk_in, q, k, q_rstd, k_rstd, dg_in, g_raw, A_log, dt_bias, db_in, beta_raw)
    if all(isinstance(n, int) for x in ts if x is not None for n in x.shape):  # (symbolic sizes: the launch checks)
        _post_check(dict(zip(_POST_ORDER, ts)), _post_scalars(lower_bound, beta_scale, g_dtype, beta_dtype), outs)
    return [dq_in.new_empty(outs[n][0], dtype=outs[n][1]) if n in outs else dq_in.new_empty((0,))
            for n in _POST_OUTS]


def bwd_post(dq, dk, dg, db, q=None, k=None, q_rstd=None, k_rstd=None, g=None, A_log=None, dt_bias=None,
             beta=None, lower_bound=None, allow_neg_eigval=False, io_dtype=None, g_dtype=None, beta_dtype=None,
             heads=None):
    """The backward's last step, in one launch -> (dq, dk, dg, dbeta, dA_log, ddt_bias), from the chunk stages'
    fp32 dq, dk [B,T,HV,K], dg [B,T,HV,K] (reverse-cumsummed) and db [B,T,HV]:
    dq = fla's l2norm_bwd(q, q_rstd, dq summed over each head's HV/H value heads) in io_dtype (without q_rstd:
    the sum), dk alike, at q_rstd's heads (heads, else HV, without the l2norm); with g (the raw gate,
    chunk_kda's use_gate_in_kernel; io dtype or fp32), dg = fla's kda_gate_bwd (lower_bound: the safe gate) in
    g's dtype with dA_log [HV] and ddt_bias (dt_bias's shape) summed deterministically, else dg in g_dtype
    (default fp32) and dA_log = ddt_bias = None; with beta (the logits, chunk_kda's use_beta_sigmoid_in_kernel),
    dbeta = db sigmoid'(beta) (x2 with allow_neg_eigval) in beta's dtype, else db in beta_dtype (default fp32).
    io_dtype defaults to q's dtype."""
    io = io_dtype or (q.dtype if q is not None else None)
    if io not in _IO:
        raise _lib.value_error("EDTYPE", f"EDTYPE: the io dtype must be bfloat16 or float16, not {io}")
    g_dtype = g.dtype if g is not None else (g_dtype or _F32)
    beta_dtype = beta.dtype if beta is not None else (beta_dtype or _F32)
    for name, dt in (("g", g_dtype), ("beta", beta_dtype)):
        if dt not in (io, _F32):
            raise _lib.value_error("EDTYPE", f"EDTYPE: {name}'s dtype {dt} is neither the io dtype {io} nor float32")
    scale = 2.0 if allow_neg_eigval else 1.0
    H = q_rstd.shape[2] if q_rstd is not None and q_rstd.dim() == 3 else (heads or dq.shape[2])
    if _eager(dq):
        outs = _post_impl(dq, dk, dg, db, q, k, q_rstd, k_rstd, g, A_log, dt_bias, beta, lower_bound, scale, io,
                          g_dtype, beta_dtype, H)
    else:
        outs = torch.ops.kdart.bwd_post(dq, dk, dg, db, q, k, q_rstd, k_rstd, g, A_log,
                                        _dt_bias_2d(dt_bias, g), beta, lower_bound, scale, io, g_dtype,
                                        beta_dtype, H)
        outs = [None if i >= 4 and x.dim() == 1 and x.shape[0] == 0 else x for i, x in enumerate(outs)]
    dq, dk, dg, db, dA, dbias = outs
    if dA is not None and A_log is not None:
        dA = dA.view(A_log.shape)
    if dbias is not None and dt_bias is not None:
        dbias = dbias.view(dt_bias.shape)
    return dq, dk, dg, db, dA, dbias


PACKED_SMALL = "packed sequences on a grid of at most 4 waves (bwd_dhu splits its V tiles there)"
_sms, _tiles = {}, {}


def _dhu_tile(device, N, HV, K, V):
    """kdart's V tile for bwd_dhu on device (kdart_dhu_v_tile), 0 when it cannot say (no CUDA)."""
    key = (None if device is None else device.index, N, HV, K, V)
    if key not in _tiles:
        try:
            with torch.cuda.device(device) if device is not None and device.type == "cuda" else \
                    contextlib.nullcontext():
                _tiles[key] = _lib.runtime().dhu_v_tile(N, HV, K, V)
        except (RuntimeError, ValueError, AssertionError, OSError):
            return 0
        if len(_tiles) > 4096:  # (shapes of a training run are few; bounded all the same)
            _tiles.clear()
    return _tiles[key]


def _sm_count(device):
    """The SM count of device (0 when CUDA cannot say: bwd_dhu then decides by itself)."""
    i = None if device is None else device.index
    if i not in _sms:
        try:
            _sms[i] = torch.cuda.get_device_properties(torch.cuda.current_device() if i is None else i) \
                .multi_processor_count
        except (RuntimeError, AssertionError):
            return 0
    return _sms[i]


def dav_grid_refusal(N, HV, K, V, packed, device=None):
    """None when bwd_dhu's own choice for N sequences (or batch rows) of HV value heads at K, V is the V
    tile 64 without the V split, where computing fla's dAv dv inside the scan costs almost nothing; else why
    the dAv stays a kernel of its own.  (With dv from Aqk the scan runs the tile 64 whatever the grid: on
    grids where kdart picks a narrower tile for its waves, or splits the tiles of packed sequences, that
    was slower than the dAv kernel and the narrower scan together.)"""
    bv = _dhu_tile(device, N, HV, K, V)
    if bv and bv != 64:
        return f"bwd_dhu runs a V tile of {bv} on this grid (the fused dAv runs it at 64)"
    if packed and N * HV * (V // 64) <= 4 * _sm_count(device):
        return PACKED_SMALL
    return None


def _dav_fusable(N, HV, K, V, packed, dev):
    """Whether the whole backward computes fla's dAv inside bwd_dhu and wy_dqkg: K 64 or 128, V a multiple of
    64, eagerly, on grids dav_grid_refusal accepts.  While tracing (torch.compile, or symbolic sizes outside
    it: AOTAutograd's dynamic tracing) it answers False without asking the device: no traced shape depends on
    it."""
    tracing = _is_compiling() or not all(type(x) is int for x in (N, HV, V))
    if K not in (64, 128) or V % 64 or V > 512 or tracing:
        return False
    return dav_grid_refusal(N, HV, K, V, packed, dev) is None


# ------------------------------------------------------------------ the whole backward, one C call

# kdart_chunk_bwd_args (kdart.h): its tensor fields before and after the scalars, in order
_CB_T1 = ("q", "k", "v", "g", "g_cumsum", "beta", "Aqk", "Akk", "d_o", "dht", "h0", "q_rstd", "k_rstd", "beta_raw",
          "A_log", "dt_bias")
_CB_T2 = ("cu_seqlens", "chunk_indices", "chunk_offsets", "w", "u", "qg", "kg", "v_new", "h", "dq", "dk", "dv", "dg",
          "dbeta", "dA_log", "ddt_bias", "dh0", "workspace")
_CB_OUTS = ("dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dh0")


def _cb_struct():
    P = ctypes.POINTER(_lib.DLTensor)
    fields = [("struct_size", ctypes.c_uint32)] + [(n, P) for n in _CB_T1] + [
        ("scale", ctypes.c_float), ("lower_bound", ctypes.c_float), ("safe_gate", ctypes.c_int),
        ("allow_neg_eigval", ctypes.c_int), ("state_v_first", ctypes.c_int)] + [(n, P) for n in _CB_T2]
    return type("kdart_chunk_bwd_args", (ctypes.Structure,), {"_fields_": fields})


_CBArgs = _cb_struct()


def _cb_put(args, name, shape, dtype, dev_index, keep, data=None):
    """args.name = a contiguous CUDA DLTensor of this shape and dtype (another dtype: kdart says EDTYPE) at
    data; the ctypes objects it needs go to keep.  Returns the DLTensor."""
    shp = (ctypes.c_int64 * len(shape))(*shape)
    dl = _lib.DLTensor(data, _lib.DLDevice(2, dev_index), len(shape), _lib.DLDataType(*_DL_DTYPE.get(dtype, (0, 0)), 1),
                       ctypes.cast(shp, ctypes.POINTER(ctypes.c_int64)), None, 0)
    keep += [shp, dl]
    setattr(args, name, ctypes.pointer(dl))
    return dl


class _CBPlan:
    """kdart_chunk_bwd_args for one signature: every DLTensor laid out once (outputs and the workspace
    included), so that a call only writes data pointers; outs: the outputs' (name, shape, dtype)."""

    def __init__(self, t, outs, sc, dev):
        self.args, self.keep, self.dl = _CBArgs(), [], {}
        self.args.struct_size = ctypes.sizeof(_CBArgs)
        for n, x in t.items():
            if x is not None:
                self._put(n, x.shape, x.dtype, dev)
        for n, shp, dt in outs:
            self._put(n, shp if n != "ddt_bias" else t["dt_bias"].shape, dt, dev)
        for n, v in sc.items():
            setattr(self.args, n, v)
        self.outs, self.dev, self.warm = outs, dev, False
        self.addr = ctypes.addressof(self.args)
        st = _fast()
        with torch.cuda.device(dev):
            n = st["chunk_bwd_ws"](st["handle"], self.addr)
        if n < 0:
            st["rt"].check(int(n), "chunk_kda_bwd")
        self.ws_bytes = int(n)
        self._put("workspace", (max(self.ws_bytes, 1),), torch.uint8, dev)

    def _put(self, n, shape, dtype, dev):
        dl = _cb_put(self.args, n, shape, dtype, dev.index, self.keep)
        self.dl[n] = dl

    def run(self, t, o, ws):
        """One kdart_kda_chunk_bwd call on the tensors of t and o (names as laid out; None: not given) and
        the workspace ws, on the device's current torch stream; returns kdart's status."""
        dl = self.dl
        for d in (t, o):
            for n, x in d.items():
                if x is not None:
                    dl[n].data = x.data_ptr()
        dl["workspace"].data = ws.data_ptr()
        st = _rt_state if _rt_state else _fast()
        idx = self.dev.index
        if torch._C._cuda_getDevice() == idx:
            return st["chunk_bwd"](st["handle"], self.addr, _stream(idx))
        with torch.cuda.device(idx):
            return st["chunk_bwd"](st["handle"], self.addr, _stream(idx))


def _chunk_bwd_c(q, k, v, g, beta, Aqk, Akk, do, dht, scale, h0, q_rstd, k_rstd, beta_raw, A_log, dt_bias, gate,
                 lower_bound, sig, allow_neg_eigval, state_v_first, cu_seqlens, chunk_indices, chunk_offsets,
                 g_cumsum, w, u, qg, kg, v_new, h, g_dtype, beta_dtype):
    """chunk_kda_bwd on CUDA tensors as one kdart_kda_chunk_bwd call: the outputs and the workspace from
    torch's allocator, the args struct of this signature laid out once (per thread)."""
    t = dict(q=q, k=k, v=v, g=g if gate else None, g_cumsum=g_cumsum if (w is not None or not gate) else None,
             beta=beta, Aqk=Aqk, Akk=Akk, d_o=do, dht=dht, h0=h0, q_rstd=q_rstd, k_rstd=k_rstd,
             beta_raw=beta_raw if sig else None, A_log=A_log if gate else None,
             dt_bias=_dt_bias_2d(dt_bias, g) if gate else None, cu_seqlens=cu_seqlens, chunk_indices=chunk_indices,
             chunk_offsets=chunk_offsets, w=w, u=u, qg=qg, kg=kg, v_new=v_new, h=h)
    ts = tuple(t.values())
    key = ("chunk_bwd", tuple(map(_idx_key, ts)), float(scale), lower_bound, bool(allow_neg_eigval),
           bool(state_v_first), g_dtype, beta_dtype)
    plans = _thread_plans()
    plan = plans.get(key)
    if plan is None:
        dev = _check_layout(ts)
        gt = g if g is not None else (g_cumsum if g_cumsum is not None else w)
        if gt is None or gt.dim() != 4 or q.dim() != 4 or v.dim() != 4:
            raise _lib.value_error("ESHAPE", "ESHAPE: q, k must be [B,T,H,K], v [B,T,HV,V], g [B,T,HV,K]")
        if sig:
            db_dt = beta_raw.dtype
        else:
            db_dt = beta_dtype if beta_dtype is not None else (beta_raw if beta_raw is not None else beta).dtype
        outs = [("dq", tuple(q.shape), q.dtype), ("dk", tuple(k.shape), q.dtype), ("dv", tuple(v.shape), v.dtype),
                ("dg", tuple(gt.shape), g.dtype if g is not None else (g_dtype or _F32)),
                ("dbeta", tuple(v.shape[:3]), db_dt)]
        if gate:
            outs.append(("dA_log", tuple(A_log.shape), _F32))
            if dt_bias is not None:
                outs.append(("ddt_bias", tuple(dt_bias.shape), _F32))
        if h0 is not None:
            outs.append(("dh0", tuple(h0.shape), _F32))
        sc = dict(scale=float(scale), lower_bound=0.0 if lower_bound is None else float(lower_bound),
                  safe_gate=int(lower_bound is not None), allow_neg_eigval=int(bool(allow_neg_eigval)),
                  state_v_first=int(bool(state_v_first)))
        plan = plans[key] = _CBPlan(t, outs, sc, dev)
    elif not all(map(_CONTIG, (x for x in ts if x is not None))):
        _check_layout(ts)
    dev = plan.dev
    if not plan.warm and _capturing(dev):
        raise _lib.runtime_error("EMISUSE", "kdart: chunk_kda_bwd has not run for these shapes and the stream is "
                                            "capturing a CUDA graph: call it once eagerly before capture")
    o = {n: torch.empty(shp, dtype=dt, device=dev) for n, shp, dt in plan.outs}
    rc = plan.run(t, o, torch.empty(max(plan.ws_bytes, 1), dtype=torch.uint8, device=dev))
    if rc:
        _fast()["rt"].check(rc, "chunk_kda_bwd")
    plan.warm = True
    return tuple(o.get(n) for n in _CB_OUTS)


def chunk_kda_bwd(q, k, v, g, beta, Aqk, Akk, do, dht=None, scale=None, initial_state=None, q_rstd=None,
                  k_rstd=None, beta_raw=None, A_log=None, dt_bias=None, use_gate_in_kernel=False, lower_bound=None,
                  use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, state_v_first=False, cu_seqlens=None,
                  chunk_indices=None, chunk_offsets=None, g_cumsum=None, w=None, u=None, qg=None, kg=None,
                  v_new=None, h=None, g_dtype=None, beta_dtype=None):
    """The whole KDA backward of fla's chunk_kda (chunk 64) from what its forward saved, every kernel kdart's
    -> (dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0), as fla's ChunkKDAFunction.backward returns them.

    q, k: as the forward saved them (l2-normalized when use_qk_l2norm_in_kernel: then q_rstd, k_rstd too);
    v; g: the gate the user passed (raw when use_gate_in_kernel, with A_log, dt_bias and lower_bound for the
    safe gate; else the log gate, whose chunk cumsum g_cumsum the forward saved); beta: the beta the kernels
    used (after the sigmoid), beta_raw the logits when use_beta_sigmoid_in_kernel; Aqk, Akk; do, dht (or
    None); initial_state (or None).  With fla's disable_recompute, pass the saved w, u, qg, kg, v_new, h and
    g_cumsum: nothing is recomputed.  Launches only: no synchronization (packed calls need fla's
    chunk_indices, which chunk_kda's forward always makes).  dg comes back in g's dtype (g_dtype when g is not
    given), dbeta in beta_raw's (beta_dtype, else beta's), dA_log / ddt_bias as A_log / dt_bias (None without
    the gate in the kernel), dh0 None without initial_state.

    On CUDA tensors this is one call of kdart's C function kdart_kda_chunk_bwd (every stage's arguments
    checked before the first launch; about 0.1 ms of host time), recorded by torch.compile as one custom op,
    torch.ops.kdart.chunk_kda_bwd, whose fake implementation runs the stages' own checks."""
    gate = bool(use_gate_in_kernel)
    if gate and (A_log is None or g is None):
        raise _lib.value_error("ENULL", "ENULL: use_gate_in_kernel needs the raw gate g and A_log")
    if cu_seqlens is not None and chunk_indices is None:
        raise _lib.value_error("ENULL", "ENULL: packed sequences need fla's chunk_indices (the forward's)")
    if w is None and not gate and g_cumsum is None:
        raise _lib.value_error("ENULL", "ENULL: without the gate in the kernel, pass g_cumsum (the forward's)")
    if w is not None and (g_cumsum is None or any(x is None for x in (u, qg, kg, v_new, h))):
        raise _lib.value_error("ENULL", "ENULL: without the recompute, pass g_cumsum, w, u, qg, kg, v_new and h")
    if scale is None:
        scale = q.shape[-1] ** -0.5
    if _eager(q):
        return _chunk_bwd_c(q, k, v, g, beta, Aqk, Akk, do, dht, scale, initial_state, q_rstd, k_rstd, beta_raw,
                            A_log, dt_bias, gate, lower_bound, bool(use_beta_sigmoid_in_kernel), allow_neg_eigval,
                            state_v_first, cu_seqlens, chunk_indices, chunk_offsets, g_cumsum, w, u, qg, kg, v_new, h,
                            g_dtype, beta_dtype)
    out = torch.ops.kdart.chunk_kda_bwd(q, k, v, g, beta, Aqk, Akk, do, dht, float(scale), initial_state, q_rstd,
                                        k_rstd, beta_raw, A_log, dt_bias, gate, lower_bound,
                                        bool(use_beta_sigmoid_in_kernel), bool(allow_neg_eigval), bool(state_v_first),
                                        cu_seqlens, chunk_indices, chunk_offsets, g_cumsum, w, u, qg, kg, v_new, h,
                                        g_dtype, beta_dtype)
    return _cb_nones(out, gate, dt_bias, initial_state)


def _cb_nones(out, gate, dt_bias, h0):
    """The op's eight tensors with fla's Nones back: dA_log and ddt_bias without the gate (ddt_bias also
    without dt_bias), dh0 without an initial state (the op returns empty tensors there)."""
    dq, dk, dv, dg, db, dA, dbias, dh0 = out
    return (dq, dk, dv, dg, db, dA if gate else None, dbias if gate and dt_bias is not None else None,
            dh0 if h0 is not None else None)


def _cb_empties(out, q):
    return tuple(q.new_empty(0) if x is None else x for x in out)


_OT = torch.Tensor | None


@torch.library.custom_op("kdart::chunk_kda_bwd", mutates_args=())
def _chunk_bwd_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: _OT, beta: torch.Tensor, Aqk: torch.Tensor,
                  Akk: torch.Tensor, do: torch.Tensor, dht: _OT, scale: float, initial_state: _OT, q_rstd: _OT,
                  k_rstd: _OT, beta_raw: _OT, A_log: _OT, dt_bias: _OT, gate: bool, lower_bound: float | None,
                  sig: bool, allow_neg_eigval: bool, state_v_first: bool, cu_seqlens: _OT, chunk_indices: _OT,
                  chunk_offsets: _OT, g_cumsum: _OT, w: _OT, u: _OT, qg: _OT, kg: _OT, v_new: _OT, h: _OT,
                  g_dtype: torch.dtype | None, beta_dtype: torch.dtype | None
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                             torch.Tensor, torch.Tensor]:
    """kdart.torch.chunk_kda_bwd as one op (what torch.compile records): one kdart_kda_chunk_bwd call; the
    outputs a configuration does not have come back empty."""
    return _cb_empties(_chunk_bwd_c(q, k, v, g, beta, Aqk, Akk, do, dht, scale, initial_state, q_rstd, k_rstd,
                                    beta_raw, A_log, dt_bias, gate, lower_bound, sig, allow_neg_eigval,
                                    state_v_first, cu_seqlens, chunk_indices, chunk_offsets, g_cumsum, w, u, qg, kg,
                                    v_new, h, g_dtype, beta_dtype), q)


@_chunk_bwd_op.register_fake
def _chunk_bwd_fake(q, k, v, g, beta, Aqk, Akk, do, dht, scale, initial_state, q_rstd, k_rstd, beta_raw, A_log,
                    dt_bias, gate, lower_bound, sig, allow_neg_eigval, state_v_first, cu_seqlens, chunk_indices,
                    chunk_offsets, g_cumsum, w, u, qg, kg, v_new, h, g_dtype, beta_dtype):
    # the stages' own fakes: every stage's checks, and the outputs' shapes and dtypes as the C call makes them
    return _cb_empties(_chunk_kda_bwd_stages(q, k, v, g, beta, Aqk, Akk, do, dht, scale, initial_state, q_rstd,
                                             k_rstd, beta_raw, A_log, dt_bias, gate, lower_bound, sig,
                                             allow_neg_eigval, state_v_first, cu_seqlens, chunk_indices,
                                             chunk_offsets, g_cumsum, w, u, qg, kg, v_new, h, g_dtype, beta_dtype),
                       q)


def _chunk_kda_bwd_stages(q, k, v, g, beta, Aqk, Akk, do, dht=None, scale=None, initial_state=None, q_rstd=None,
                          k_rstd=None, beta_raw=None, A_log=None, dt_bias=None, use_gate_in_kernel=False,
                          lower_bound=None, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                          state_v_first=False, cu_seqlens=None, chunk_indices=None, chunk_offsets=None,
                          g_cumsum=None, w=None, u=None, qg=None, kg=None, v_new=None, h=None, g_dtype=None,
                          beta_dtype=None):
    """chunk_kda_bwd as the stages' calls (each a custom op under torch.compile); the arguments checked."""
    gate = bool(use_gate_in_kernel)
    if scale is None:
        scale = q.shape[-1] ** -0.5
    if _eager(q):  # every stage's checks first, on meta stand-ins (once per signature): a bad call launches nothing
        loc = locals()
        key = tuple((n, _idx_key(x)) if isinstance(x, torch.Tensor) else (n, x) for n, x in loc.items()
                    if n not in ("scale", "gate"))
        checked = _thread_plans()
        if ("whole", key) not in checked:
            meta = {n: torch.empty_like(x, device="meta") if isinstance(x, torch.Tensor) else x for n, x in loc.items()
                    if n != "gate"}
            _chunk_kda_bwd_stages(**meta)
            checked[("whole", key)] = True
    if w is None:  # the recompute: gate cumsum, w, u, qg, kg, then h and v_new
        if gate:
            gk, w, u, qg, kg = gate_recompute_w_u(g, A_log, k, v, beta, Akk, q=q, dt_bias=dt_bias,
                                                  lower_bound=lower_bound, cu_seqlens=cu_seqlens,
                                                  chunk_indices=chunk_indices)
        else:
            gk = g_cumsum
            w, u, qg, kg = recompute_w_u(k, v, beta, Akk, gk, q=q, cu_seqlens=cu_seqlens, chunk_indices=chunk_indices)
        h, v_new, _ = chunk_gated_delta_rule_fwd_h(kg, w, u, gk=gk, initial_state=initial_state,
                                                   state_v_first=state_v_first, cu_seqlens=cu_seqlens,
                                                   chunk_indices=chunk_indices, chunk_offsets=chunk_offsets)
    else:
        gk = g_cumsum
    N = q.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
    HV, K, V = v.shape[2], q.shape[3], v.shape[3]
    common = dict(scale=scale, state_v_first=state_v_first, cu_seqlens=cu_seqlens, chunk_indices=chunk_indices,
                  chunk_offsets=chunk_offsets)
    if q.is_cuda and _dav_fusable(N, HV, K, V, cu_seqlens is not None, q.device):
        dh, dh0, dv = bwd_dhu(qg, kg, w, do, None, gk, h0=initial_state, dht=dht, Aqk=Aqk, **common)
        # bwd_intra's terms (with the reverse dg cumsum) in the same launch as wy_dqkg
        dq, dk, dv, db, dg, _, _ = wy_dqkg(q, k, v, v_new, gk, beta, Akk, h, do, dh, dv, dAqk=True, intra=True,
                                           **common)
    else:  # dAv's dv as a kernel of its own; its dA again inside wy_dqkg, which then takes bwd_intra's terms
        _, dv = bwd_dAv(q, k, v_new, do, Aqk, scale=scale, cu_seqlens=cu_seqlens, chunk_indices=chunk_indices)
        dh, dh0, dv = bwd_dhu(qg, kg, w, do, dv, gk, h0=initial_state, dht=dht, **common)
        dq, dk, dv, db, dg, _, _ = wy_dqkg(q, k, v, v_new, gk, beta, Akk, h, do, dh, dv, dAqk=True, intra=True,
                                           **common)
    sig = bool(use_beta_sigmoid_in_kernel)
    dq, dk, dg, db, dA, dbias = bwd_post(
        dq, dk, dg, db, q=q if q_rstd is not None else None, k=k if k_rstd is not None else None, q_rstd=q_rstd,
        k_rstd=k_rstd, g=g if gate else None, A_log=A_log if gate else None, dt_bias=dt_bias if gate else None,
        beta=beta_raw if sig else None, lower_bound=lower_bound, allow_neg_eigval=allow_neg_eigval,
        io_dtype=q.dtype, g_dtype=g.dtype if g is not None else g_dtype, heads=q.shape[2],
        beta_dtype=(beta_raw if beta_raw is not None else beta).dtype if beta_dtype is None else beta_dtype)
    return dq, dk, dv, dg, db, dA, dbias, dh0


def device_status(device=None, clear=True):
    """The KDART_DEVERR_* bits (kdart._lib.DEVERR_*: 1 cu_seqlens out of order, 2 cu[N] > T, 4 more chunks
    than dh rows) that variable-length launches found on device since the last clear; those launches
    wrote nothing.  Synchronizes the device: call it when you choose to, never on a hot path."""
    with torch.cuda.device(device if device is not None else torch.cuda.current_device()):
        return _fast()["rt"].device_status(clear)


def prepare_for(op, *args, **kwargs):
    """Prepares (compiles or loads, into the inputs' device) the specialization that op (bwd_intra, bwd_dhu or
    wy_dqkg, or its torch.ops.kdart op) would launch for these arguments, without launching: call it before
    CUDA-graph capture.  Returns the spec, as kdart's C side chooses it for these arguments."""
    for fn, st, build in ((bwd_intra, _INTRA, _intra_plan), (bwd_dhu, _DHU, _dhu_plan), (wy_dqkg, _WY, _wy_plan)):
        if op is fn or op is getattr(torch.ops.kdart, st.kernel):
            break
        if fn is wy_dqkg and op is torch.ops.kdart.wy_dqkg_dAqk:
            kwargs = dict(kwargs, dAqk=True)
            break
        if fn is wy_dqkg and op is torch.ops.kdart.wy_dqkg_intra:
            kwargs = dict(kwargs, dAqk=True, intra=True)
            break
    else:
        raise ValueError("prepare_for: op must be kdart.torch.bwd_intra, bwd_dhu or wy_dqkg")
    bound = inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    params = inspect.signature(build).parameters
    a = {k: v for k, v in bound.arguments.items() if k in params}
    if "nt" in params:  # packed without chunk_indices: dh's rows need not be counted to prepare
        a.setdefault("nt", 1)
    plan = build(**a)
    _prepare_plan(st.kernel, plan, plan.dev)
    return plan.spec
