"""kdart.fla.chunk_kda as one custom op each way: fla's chunk_kda forward (fla-core 0.6.0's kernels, run as an
opaque op) and kdart's whole backward (kdart.torch.chunk_kda_bwd), registered with torch.library so that a KDA
layer's forward and backward compile whole under torch.compile(fullgraph=True).  fla's own chunk_kda is
torch.compiler.disable'd: a graph break on each side.

The forward returns what fla's ChunkKDAFunction saves for its backward as extra outputs (empty tensors where
fla saves None or the input itself: a custom op's outputs never alias its inputs); the backward is the op
kdart::chunk_kda_bwd, so AOTAutograd records it in the backward graph.  Packed sequences use fla's static
chunk index (fla's use_graph mode: nt_max = ceil(T/64) + N - 1 rows), whose shape the fake implementation
knows without reading cu_seqlens; the results are those of fla's dynamic index.  Imported on the first call of
kdart.fla.chunk_kda (it needs torch and, at run time, fla)."""
import torch

from . import _lib
from . import torch as kt

Tensor = torch.Tensor
_OT = torch.Tensor | None


def _empty(x):
    return x.new_empty(0)  # (a new one each time: the outputs never alias each other either)


def _nt_max(T, N):
    return (T + 63) // 64 + N - 1


@torch.library.custom_op("kdart::fla_chunk_kda_fwd", mutates_args=(), device_types="cuda")
def _fwd(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, A_log: _OT, dt_bias: _OT, scale: float,
         initial_state: _OT, output_final_state: bool, use_qk_l2norm_in_kernel: bool, use_gate_in_kernel: bool,
         use_beta_sigmoid_in_kernel: bool, allow_neg_eigval: bool, safe_gate: bool, lower_bound: float | None,
         state_v_first: bool, cu_seqlens: _OT) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor,
                                                        Tensor, Tensor, Tensor, Tensor, Tensor]:
    from fla.modules.norm.l2norm import l2norm_fwd
    from fla.ops.common.gate import fused_beta_sigmoid_fwd
    from fla.ops.kda.chunk_fwd import chunk_kda_fwd
    from fla.ops.utils.index import prepare_chunk_indices_static
    q, k, v, g, beta = (x.contiguous() for x in (q, k, v, g, beta))
    qn = qr = kn = kr = bs = None
    if use_qk_l2norm_in_kernel:
        qn, qr = l2norm_fwd(q)
        kn, kr = l2norm_fwd(k)
    if use_beta_sigmoid_in_kernel:
        bs = fused_beta_sigmoid_fwd(beta, scale=2.0 if allow_neg_eigval else 1.0)
    ci = co = None
    if cu_seqlens is not None:
        ci, co = prepare_chunk_indices_static(cu_seqlens, 64, _nt_max(q.shape[1], cu_seqlens.shape[0] - 1))
    o, ht, g_cumsum, Aqk, Akk, *_ = chunk_kda_fwd(
        q=q if qn is None else qn, k=k if kn is None else kn, v=v, g=g, beta=beta if bs is None else bs,
        scale=scale, initial_state=initial_state, output_final_state=output_final_state,
        state_v_first=state_v_first, cu_seqlens=cu_seqlens, chunk_indices=ci, chunk_size=64, safe_gate=safe_gate,
        lower_bound=lower_bound, use_gate_in_kernel=use_gate_in_kernel, A_log=A_log, dt_bias=dt_bias,
        use_graph=cu_seqlens is not None, chunk_offsets=co)
    return (o.type_as(q),) + tuple(_empty(q) if x is None else x for x in (ht, qn, qr, kn, kr, bs, g_cumsum)) + (
        Aqk, Akk) + tuple(_empty(q) if x is None else x for x in (ci, co))


@_fwd.register_fake
def _fwd_fake(q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
              use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate, lower_bound,
              state_v_first, cu_seqlens):
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    N = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    f32 = torch.float32
    l2, packed = use_qk_l2norm_in_kernel, cu_seqlens is not None
    e = lambda: _empty(q)  # noqa: E731
    return (q.new_empty(B, T, HV, V),
            q.new_empty((N, HV, V, K) if state_v_first else (N, HV, K, V), dtype=f32) if output_final_state else e(),
            torch.empty_like(q) if l2 else e(), q.new_empty(B, T, H, dtype=f32) if l2 else e(),
            torch.empty_like(k) if l2 else e(), k.new_empty(B, T, H, dtype=f32) if l2 else e(),
            beta.new_empty(beta.shape, dtype=f32) if use_beta_sigmoid_in_kernel else e(),
            e() if use_gate_in_kernel else g.new_empty(B, T, HV, K, dtype=f32),
            k.new_empty(B, T, HV, 64), k.new_empty(B, T, HV, 64),
            cu_seqlens.new_empty(_nt_max(T, N), 2) if packed else e(),
            torch.empty_like(cu_seqlens) if packed else e())


_IN = ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "scale", "initial_state", "output_final_state", "l2norm",
       "gate", "beta_sigmoid", "allow_neg_eigval", "safe_gate", "lower_bound", "state_v_first", "cu_seqlens")


def _setup(ctx, inputs, output):
    a = dict(zip(_IN, inputs))
    o, ht, qn, qr, kn, kr, bs, gc, Aqk, Akk, ci, co = output
    l2, gate, bsig, packed = a["l2norm"], a["gate"], a["beta_sigmoid"], a["cu_seqlens"] is not None
    ctx.mark_non_differentiable(*output[2:])  # (what the backward reads, not results)
    A_log = a["A_log"]
    if gate and A_log is None:  # (fla's gate without A_log: lower_bound sigmoid(g + dt_bias), i.e. exp(A_log) = 1)
        A_log = a["v"].new_zeros(a["v"].shape[2], dtype=torch.float32)
    ctx.save_for_backward(qn if l2 else a["q"], kn if l2 else a["k"], a["v"], a["g"], bs if bsig else a["beta"],
                          Aqk, Akk, a["initial_state"], qr if l2 else None, kr if l2 else None,
                          a["beta"] if bsig else None, A_log if gate else None, a["dt_bias"] if gate else None,
                          None if gate else gc, a["cu_seqlens"], ci if packed else None, co if packed else None)
    ctx.flags = (a["scale"], gate, a["lower_bound"], bsig, a["allow_neg_eigval"], a["state_v_first"],
                 a["output_final_state"], a["A_log"] is None, a["g"].dtype, a["beta"].dtype)


def _backward(ctx, do, dht, *_):
    q, k, v, g, beta, Aqk, Akk, h0, qr, kr, beta_raw, A_log, dt_bias, gc, cu, ci, co = ctx.saved_tensors
    scale, gate, lb, bsig, neg, svf, ofs, no_alog, g_dtype, b_dtype = ctx.flags
    dq, dk, dv, dg, db, dA, dbias, dh0 = kt.chunk_kda_bwd(
        q, k, v, g, beta, Aqk, Akk, do.contiguous(), dht.contiguous() if ofs and dht is not None else None,
        scale=scale, initial_state=h0, q_rstd=qr, k_rstd=kr, beta_raw=beta_raw, A_log=A_log, dt_bias=dt_bias,
        use_gate_in_kernel=gate, lower_bound=lb, use_beta_sigmoid_in_kernel=bsig, allow_neg_eigval=neg,
        state_v_first=svf, cu_seqlens=cu, chunk_indices=ci, chunk_offsets=co, g_cumsum=gc, g_dtype=g_dtype,
        beta_dtype=b_dtype)
    return (dq, dk, dv, dg, db, None if no_alog else dA, dbias, None, dh0) + (None,) * 9


_fwd.register_autograd(_backward, setup_context=_setup)


def _bad(code, msg):
    return _lib.value_error(code, f"{code}: {msg}")


def _check(q, k, v, g, beta, initial_state, state_v_first, cu_seqlens, A_log, dt_bias, gate, lower_bound):
    """What both directions need, refused before the forward launches anything (the backward's own checks, in
    kdart's C library, come after the forward has run)."""
    named = dict(q=q, k=k, v=v, g=g, beta=beta)
    for n, t in named.items():
        if not isinstance(t, torch.Tensor):
            raise _bad("ENULL", f"{n} must be a tensor, got {type(t).__name__}")
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:2] != q.shape[:2]:
        raise _bad("ESHAPE", f"q, k must be [B,T,H,K] and v [B,T,HV,V]; got q {tuple(q.shape)}, k {tuple(k.shape)}, "
                             f"v {tuple(v.shape)}")
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if HV % H:
        raise _bad("ESHAPE", f"HV={HV} is not a multiple of H={H}")
    if not (1 <= K <= 256 and 1 <= V <= 512):
        raise _bad("EUNSUPPORTED", f"K={K}, V={V}: kdart's backward takes K up to 256 and V up to 512")
    if tuple(g.shape) != (B, T, HV, K) or tuple(beta.shape) != (B, T, HV):
        raise _bad("ESHAPE", f"g must be [B,T,HV,K] = {(B, T, HV, K)} and beta [B,T,HV]; got g {tuple(g.shape)}, "
                             f"beta {tuple(beta.shape)}")
    if q.dtype not in (torch.bfloat16, torch.float16) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise _bad("EDTYPE", f"q, k, v must share one io dtype, bfloat16 or float16; got {q.dtype}, {k.dtype}, "
                             f"{v.dtype}")
    if g.dtype not in (q.dtype, torch.float32) or beta.dtype not in (q.dtype, torch.float32):
        raise _bad("EDTYPE", f"g and beta must be in the io dtype or float32; got {g.dtype}, {beta.dtype}")
    if any(t.device != q.device for t in named.values()) or q.device.type not in ("cuda", "meta"):
        raise _bad("EDEVICE", "q, k, v, g and beta must be on one CUDA device")
    N = B
    if cu_seqlens is not None:
        if B != 1:
            raise _bad("ESHAPE", f"packed sequences (cu_seqlens) need B == 1, got B={B}")
        if cu_seqlens.dim() != 1 or cu_seqlens.shape[0] < 2 or cu_seqlens.dtype not in (torch.int32, torch.int64):
            raise _bad("ESHAPE", "cu_seqlens must be a 1-D int32 or int64 tensor of N + 1 >= 2 offsets")
        if cu_seqlens.device != q.device:
            raise _bad("EDEVICE", "cu_seqlens must be on q's device")
        N = cu_seqlens.shape[0] - 1
    if initial_state is not None:
        want = (N, HV, V, K) if state_v_first else (N, HV, K, V)
        if tuple(initial_state.shape) != want or initial_state.dtype != torch.float32:
            raise _bad("ESHAPE", f"initial_state must be float32 {want}; got {initial_state.dtype} "
                                 f"{tuple(initial_state.shape)}")
    if gate:
        if A_log is None and lower_bound is None:
            raise _bad("ENULL", "use_gate_in_kernel needs A_log (or lower_bound: fla's gate without A_log)")
        if A_log is not None and (tuple(A_log.shape) != (HV,) or A_log.dtype != torch.float32):
            raise _bad("ESHAPE", f"A_log must be float32 [HV] = [{HV}]")
        if dt_bias is not None and (dt_bias.numel() != HV * K or dt_bias.dtype != torch.float32):
            raise _bad("ESHAPE", f"dt_bias must be float32 [HV*K] = [{HV * K}]")


def chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False,
              allow_neg_eigval=False, safe_gate=False, lower_bound=None, state_v_first=False, cu_seqlens=None,
              A_log=None, dt_bias=None):
    _check(q, k, v, g, beta, initial_state, state_v_first, cu_seqlens, A_log, dt_bias, use_gate_in_kernel,
           lower_bound)
    if scale is None:
        scale = q.shape[-1] ** -0.5
    out = torch.ops.kdart.fla_chunk_kda_fwd(
        q, k, v, g, beta, A_log, dt_bias, float(scale), initial_state, bool(output_final_state),
        bool(use_qk_l2norm_in_kernel), bool(use_gate_in_kernel), bool(use_beta_sigmoid_in_kernel),
        bool(allow_neg_eigval), bool(safe_gate), None if lower_bound is None else float(lower_bound),
        bool(state_v_first), cu_seqlens)
    return out[0], (out[1] if output_final_state else None)
