"""kdart.fla: fla's chunk_kda backward through kdart.

    import kdart.fla
    kdart.fla.enable()            # or: with kdart.fla.enabled(): ...
    ...                           # chunk_kda(...).backward() as usual
    kdart.fla.stats()             # calls served per stage, fallbacks per reason
    kdart.fla.disable()

    kdart.fla.chunk_kda(...)      # fla's chunk_kda, forward and backward one custom op each (torch.compile)

enable() replaces, in the fla module whose chunk_kda_bwd calls them
(fla.ops.kda.chunk_bwd in fla-core 0.6.0), the names chunk_kda_bwd_intra,
chunk_gated_delta_rule_bwd_dhu and chunk_kda_bwd_wy_dqkg_fused (and chunk_kda_bwd_dAv, fused into the two
latter or run by kdart's own dAv kernel: below) by wrappers that run kdart for every call it
takes and fla's own function for every call it refuses (decided in Python
before calling: K outside 1..256, V outside 1..512, chunk size != 64,
a scalar gate g, cu_seqlens off q's device or with
B != 1, dtypes other than kdart's, non-CUDA or non-contiguous tensors; and
any call where kdart raises ValueError).  Every configuration of chunk_kda's
flags at chunk size 64 is served, the one people train with included
(l2norm, the gate and the beta sigmoid inside chunk_kda, safe gate, packed
documents): with use_beta_sigmoid_in_kernel fla hands bwd_intra beta in fp32,
which kdart reads as such (its beta=f32 specialization).  docs/chunk_kda_flags.md
lists what each stage receives, flag by flag.  Any T and variable-length
batches (cu_seqlens, with or without fla's chunk_indices / chunk_offsets)
are served, and so is fla's use_graph mode (cu_seqlens padded with
zero-length sequences to a fixed capacity, chunk_indices of nt_max rows with
sentinel rows: kdart never reads chunk_indices, derives the chunks from
cu_seqlens on the device and sizes its grids from T and the capacity, so
the captured launches replay for any cu_seqlens contents; its outputs come
from torch's allocator, the graph's pool under capture, not fla's static
buffers).  bwd_intra is served at every head dim fla takes (K up to 256:
D = 60, 100, 256, ...); bwd_dhu at those and any V up to 512, in both
state layouts (an odd K or V zero-padded to a multiple of 8 by
kdart.torch.bwd_dhu).  Each new fallback reason is warned about once.
With fold_dg (the default) bwd_intra returns dg already
reverse-cumsummed within each chunk, and the chunk_local_cumsum(dg, 64,
reverse=True) that chunk_kda_bwd runs right after it is skipped for exactly
that tensor (and the same cu_seqlens) (the name chunk_local_cumsum in the same module is wrapped; every
other call goes to fla's function).  disable() puts fla's functions back.

fla's chunk_kda_bwd_dAv (dAqk = scale * do v_new^T and dv = Aqk^T do per chunk) is fused into the stages
that consume it: its wrapper computes nothing when the call is chunk_kda_bwd's own, K is 64 or 128, V a
multiple of 64 (up to 512), chunk size 64, on CUDA in bf16/fp16, eager (not under torch.compile), and the
grid is one where bwd_dhu picks its V tile of 64 anyway (dav_grid_refusal: the fused dv runs that tile, so
on small grids, where kdart scans narrower tiles or splits those of packed sequences, fla's dAv and the
narrower scan together are faster and kdart.fla keeps them).  It returns
stand-ins for its two outputs (meta tensors: no memory, and any use outside these wrappers fails loudly)
and records the call (per thread, weak references to its inputs).  kdart's bwd_dhu then computes dv from
Aqk inside its scan (kdart.torch.bwd_dhu(..., Aqk=Aqk), never rounded to the io dtype), kdart's wy_dqkg
writes dAqk beside its own outputs (wy_dqkg(..., dAqk=True)), and bwd_intra's wrapper hands that dAqk to
bwd_intra (kdart's or fla's) in the stand-in's place: one launch and one dv buffer fewer than fla.
stats() counts such a call as served ("bwd_dAv") when both halves were fused.  Where a half cannot be
fused (bwd_dhu or wy_dqkg falls back to fla, or kdart refuses the fused bwd_dhu, e.g. a shape the fused dv
does not take: the unfused kdart bwd_dhu serves it then), and before fla's context-parallel pre-pass
(chunk_gated_delta_rule_bwd_dhu_pre_process, with cp_context, which reads dv: wrapped too), the deferred
call runs then on the recorded inputs and its outputs take the stand-ins' place: through kdart's own dAv
kernel (below; counted as served), or, where that refuses it, fla's chunk_kda_bwd_dAv (counted as a bwd_dAv
fallback with both reasons).  A call that is not fused at all (another head dim, V not a multiple of 64, a
grid dav_grid_refusal keeps unfused, torch.compile, a direct call from elsewhere) runs kdart's own dAv
kernel, kdart.torch.bwd_dAv (one launch as fla's: any T, packed sequences, any V up to 512, bf16/fp16;
counted as served "bwd_dAv"), and fla's function only where dav_standalone_refusal says why not (chunk size,
dtype, shapes) or kdart refuses the call (counted as a fallback).

fla's recompute_w_u_fwd (w, u, qg, kg from the forward's Akk) is served by kdart's recompute_wu, and when
chunk_kda computes the gate itself (use_gate_in_kernel) the kda_gate_chunk_cumsum that chunk_kda_bwd runs
just before it goes into the same launch: the gate wrapper (chunk_kda_bwd's own call only) returns the
float32 tensor fla would return, still unwritten, and records the call (per thread, weak references); the
recompute wrapper, given that tensor as gk, has kdart write the gate's cumsum into it beside w, u, qg and kg
(counted as "gate_cumsum" and "recompute_w_u" served).  Where the recompute is not served, fla's own gate
cumsum runs then and is copied into the tensor (a "gate_cumsum" fallback) before fla's recompute.  The
registry route serves the recompute and leaves the gate cumsum to fla.

fla's chunk_gated_delta_rule_fwd_h (the chunk states h and v_new, recomputed by chunk_kda_bwd from kg, w, u
and the gate) is served by kdart's fwd_h with enable(fwd_h=True), and so is the same call in chunk_kda's
forward (chunk_kda_fwd, in FWD_MODULE: the names route wraps it there too, where it is fla's own function;
the registry route serves every dispatched call), counted as "fwd_h".  It is off by default: on the H200,
fla's Triton scan is still the faster one (docs/kernels.md, "fwd_h"); the wrapper then passes every call
to fla uncounted.  fwdh_refusal says why a call still goes to fla: the scalar gate
g (gated delta rule models), no gate, chunk size, dtypes, shapes.

enable(whole=True) goes further (and so does enable(), whose default whole="auto" is the same in every
configuration of chunk_kda): fla's ChunkKDAFunction.backward
(FUNC_MODULE) is replaced whole by
kdart.torch.chunk_kda_bwd, every kernel of the backward kdart's (the gate cumsum and the recompute, the
state scan fwd_h, bwd_dhu with the fused dAv, wy_dqkg, bwd_intra with the folded cumsum, and bwd_post: the
l2norm, gate and beta-sigmoid backwards with the A_log / dt_bias reductions and the casts, which fla runs
after chunk_kda_bwd), launches only, counted as "whole_backward".  whole_refusal says why a backward still
goes to fla's own (context parallelism, chunk size, dtypes, head dims; counted as a fallback): then the
per-stage wrappers above serve what they take.

Without code changes: FLA_KDART=1 enables it when the script imports fla's chunk_kda backward (the wheel's
kdart-autoload.pth, kdart._autoload); FLA_KDART=0 makes enable() do nothing (logged once).  Fallbacks are
logged once per reason through the "kdart.fla" logger; stats() counts every one.

Two routes, one set of wrappers.  enable(via="names"), the default, replaces the names in fla's module as
above.  enable(via="registry") (or KDART_FLA_VIA=registry) registers kdart's backends in fla 0.6.0's backend
registry instead (fla.backends: 'kda' for bwd_intra and wy_dqkg, 'common' for bwd_dhu, chunk_local_cumsum's
own for the dg fold; priority 1, ahead of fla's TileLang; FLA_KDART=0 turns them off as fla's switches do);
their verifiers accept while kdart.fla is enabled, and a fallback calls fla's own function unwrapped, never
the registry again.  Both routes serve, fold and fall back the same (the routing tests run both), but for
chunk_kda_bwd_dAv, which is the names route's only (fused or by kdart's own dAv kernel): fla 0.6.0's registry
dispatches chunk_kda_bwd_dAv but not the context-parallel pre-pass that reads its dv, so the registry route
leaves chunk_kda_bwd_dAv to fla.  Why
the names route stays the default: FLA_DISABLE_BACKEND_DISPATCH=1 turns the registry off (the registry route then
refuses to start, with that reason); fla runs every dispatched call under torch.compiler.disable (a graph
break under torch.compile, whichever backend serves it).  On the H200 the two routes serve the same stages
with the same gradients; the registry's cost is small: about 6 us per dispatched call measured on a 2-core
CPU, four calls per backward.

The wrappers are written for fla-core 0.6.0: enable() compares
inspect.signature of every function it replaces (and of chunk_kda_bwd) with
the one it was written for, checks that chunk_kda_bwd still calls them, and
refuses with RuntimeError when either differs.
"""
import contextlib
import inspect
import sys
import threading
import weakref

from . import _lib

__all__ = ["enable", "disable", "enabled", "is_enabled", "stats", "reset_stats"]

MODULE = "fla.ops.kda.chunk_bwd"
# bwd_dhu is served at every head dim (bench/masked_dhu.py on the H200, docs/performance.md, B2 T8192
# H16): with BV 64 at the K tiles 192 and 256 (two warpgroups), K in 129..191 runs 1.21-1.34x fla, the
# V-first state at K > 128 1.21-1.89x, K = 192 / 256 1.63x / 1.42x; D = 18, 60, 100 1.5-1.9x.  An odd K or V
# goes through kdart.torch.bwd_dhu's zero padding (only the pad region filled, h0 never copied): 1.28x at
# K = 63 with V = 64, 1.15x at K = 64 with V = 63; with both odd the padding's copies (rows of odd width run
# at a third of the copy bandwidth) leave the stage at 0.94-1.01x fla's (K = V = 63, 101), served all the
# same: the call's bwd_intra runs 3.3-3.6x fla's at D = 60 and 100, and kdart runs every head dim fla takes.
_INTRA, _DHU, _CUMSUM = "chunk_kda_bwd_intra", "chunk_gated_delta_rule_bwd_dhu", "chunk_local_cumsum"
_WY = "chunk_kda_bwd_wy_dqkg_fused"
_DAV, _PRE = "chunk_kda_bwd_dAv", "chunk_gated_delta_rule_bwd_dhu_pre_process"
_GATE, _RWU = "kda_gate_chunk_cumsum", "recompute_w_u_fwd"
# fla's state scan: chunk_kda_bwd's recompute of h and v_new, and chunk_kda's forward (chunk_kda_fwd in
# FWD_MODULE) call it with one contract (kg, w, u, the per-channel gate gk), and both calls are wrapped
_FWDH, FWD_MODULE = "chunk_gated_delta_rule_fwd_h", "fla.ops.kda.chunk_fwd"

# The parameters (name, default) of fla-core 0.6.0's functions.
_E = inspect.Parameter.empty
EXPECTED = {
    _INTRA: (("q", _E), ("k", _E), ("g", _E), ("beta", _E), ("dAqk", _E), ("dAkk", _E), ("dq", _E), ("dk", _E),
             ("db", _E), ("dg", _E), ("cu_seqlens", None), ("chunk_indices", None), ("chunk_size", 64),
             ("safe_gate", False), ("lower_bound", None), ("use_graph", False)),
    _DHU: (("q", _E), ("k", _E), ("w", _E), ("do", _E), ("dv", _E), ("g", None), ("gk", None), ("h0", None),
           ("dht", None), ("scale", None), ("state_v_first", False), ("cu_seqlens", None), ("chunk_size", 64),
           ("chunk_indices", None), ("chunk_offsets", None), ("use_graph", False)),
    _CUMSUM: (("g", _E), ("chunk_size", _E), ("reverse", False), ("scale", None), ("cu_seqlens", None),
              ("output_dtype", "torch.float32"), ("chunk_indices", None), ("use_graph", False), ("kwargs", _E)),
    _WY: (("q", _E), ("k", _E), ("v", _E), ("v_new", _E), ("g", _E), ("beta", _E), ("A", _E), ("h", _E),
          ("do", _E), ("dh", _E), ("dv", _E), ("scale", None), ("state_v_first", False), ("cu_seqlens", None),
          ("chunk_size", 64), ("chunk_indices", None), ("chunk_offsets", None), ("use_graph", False)),
    _DAV: (("q", _E), ("k", _E), ("v", _E), ("do", _E), ("A", None), ("scale", None), ("cu_seqlens", None),
           ("chunk_size", 64), ("chunk_indices", None), ("use_graph", False)),
    _PRE: (("q", _E), ("k", _E), ("w", _E), ("do", _E), ("dv", _E), ("g", None), ("gk", None), ("bg", None),
           ("scale", None), ("state_v_first", False), ("cu_seqlens", None), ("dht", None), ("initial_state", None),
           ("context", None), ("chunk_size", 64), ("use_graph", False)),
    _GATE: (("g", _E), ("A_log", _E), ("chunk_size", _E), ("scale", None), ("dt_bias", None), ("cu_seqlens", None),
            ("output_dtype", "torch.float32"), ("chunk_indices", None), ("lower_bound", None), ("use_graph", False),
            ("kwargs", _E)),
    _RWU: (("k", _E), ("v", _E), ("beta", _E), ("A", _E), ("gk", _E), ("q", None), ("cu_seqlens", None),
           ("chunk_indices", None), ("use_graph", False)),
    _FWDH: (("k", _E), ("w", _E), ("u", _E), ("g", None), ("gk", None), ("initial_state", None),
            ("output_final_state", False), ("chunk_size", 64), ("save_new_value", True), ("state_v_first", False),
            ("cu_seqlens", None), ("cu_seqlens_cpu", None), ("chunk_indices", None), ("chunk_offsets", None)),
    "chunk_kda_bwd": (("q", _E), ("k", _E), ("v", _E), ("beta", _E), ("Aqk", _E), ("Akk", _E), ("scale", _E),
                      ("initial_state", _E), ("do", _E), ("dht", _E), ("g", None), ("g_org", None),
                      ("state_v_first", False), ("cu_seqlens", None), ("chunk_indices", None), ("chunk_size", 64),
                      ("safe_gate", False), ("lower_bound", None), ("use_gate_in_kernel", False), ("A_log", None),
                      ("dt_bias", None), ("disable_recompute", False), ("cp_context", None), ("use_graph", False),
                      ("chunk_offsets", None), ("kwargs", _E)),
}

_lock = threading.RLock()
_state = {"module": None, "orig": None, "fold": False, "via": None, "bwd_code": None, "fwd_module": None,
          "fwd_h": False, "whole": None, "whole_mode": False}
_served = {"bwd_intra": 0, "bwd_dhu": 0, "dg_cumsum_folded": 0, "wy_dqkg": 0, "bwd_dAv": 0, "recompute_w_u": 0,
           "gate_cumsum": 0, "fwd_h": 0, "whole_backward": 0}
_fallbacks = {}
_warned = set()
_tls = threading.local()


def _params(fn):
    out = []
    for p in inspect.signature(fn).parameters.values():
        d = p.default
        if d is not _E and d is not None and not isinstance(d, (bool, int, float, str)):
            d = str(d)  # torch.float32
        out.append((p.name, d))
    return tuple(out)


def _check_signatures(mod):
    bad = []
    for name, want in EXPECTED.items():
        fn = getattr(mod, name, None)
        if fn is None:
            bad.append(f"{MODULE}.{name} is missing")
            continue
        have = _params(fn)
        if have != want:
            bad.append(f"{MODULE}.{name}{inspect.signature(fn)} differs from fla-core 0.6.0's")
    bwd = getattr(mod, "chunk_kda_bwd", None)
    if bwd is not None and not {_INTRA, _DHU, _CUMSUM, _WY, _DAV, _PRE, _GATE, _RWU, _FWDH} <= \
            set(bwd.__code__.co_names):
        bad.append(f"{MODULE}.chunk_kda_bwd no longer calls {_GATE}, {_RWU}, {_FWDH}, {_DAV}, {_PRE}, {_DHU}, "
                   f"{_WY}, {_INTRA} and {_CUMSUM}")
    if bad:
        raise RuntimeError("kdart.fla was written for fla-core 0.6.0 and refuses this fla: " + "; ".join(bad))


# --------------------------------------------------------------- counting

def _count_served(stage):
    with _lock:
        _served[stage] += 1


def _count_fallback(stage, reason):
    key = f"{stage}: {reason}"
    with _lock:
        _fallbacks[key] = _fallbacks.get(key, 0) + 1
        new = key not in _warned
        _warned.add(key)
    if new:  # once per stage and reason, through the "kdart" logger (stats() counts every one)
        _lib.log.getChild("fla").warning("%s falls back to fla (%s)", stage, reason)


def stats():
    """{"served": {stage: calls}, "fallbacks": {"stage: reason": calls}, "enabled": bool, "fold_dg": bool}."""
    with _lock:
        return {"served": dict(_served), "fallbacks": dict(_fallbacks), "enabled": _state["module"] is not None,
                "fold_dg": _state["fold"]}


def reset_stats():
    with _lock:
        for k in _served:
            _served[k] = 0
        _fallbacks.clear()
        _warned.clear()


# ------------------------------------------------------- acceptance checks

def _torch():
    import torch
    return torch


def _is_cuda(t):
    return t.is_cuda


def _io_reason(torch, q, others_io, others_f32):
    if not _is_cuda(q):
        return "not a CUDA tensor"
    if q.dtype not in (torch.bfloat16, torch.float16):
        return f"io dtype {q.dtype}"
    for t in others_io:
        if t.dtype != q.dtype:
            return f"mixed io dtypes ({q.dtype}, {t.dtype})"
    for t in others_f32:
        if t is not None and t.dtype != torch.float32:
            return f"{t.dtype} where kdart takes float32"
    for t in (q,) + tuple(others_io) + tuple(others_f32):
        if t is not None and not t.is_contiguous():
            return "non-contiguous tensor"
    return None


def _common_reason(chunk_size, q, other, cu_seqlens):
    """The checks both stages share (q [B,T,*,K], other a second 4-d tensor).  Any T and variable
    length (cu_seqlens, B = 1, on q's device) are kdart's, fla's use_graph mode with them."""
    if chunk_size != 64:
        return f"chunk_size={chunk_size}"
    if q.dim() != 4 or other.dim() != 4:
        return "shape"
    K = q.shape[3]
    if not 1 <= K <= 256:
        return f"head dim K={K}"
    if cu_seqlens is not None and (cu_seqlens.device != q.device or q.shape[0] != 1):
        return "cu_seqlens not on q's device or B != 1"
    return None


def intra_refusal(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, cu_seqlens=None, chunk_indices=None,
                  chunk_size=64, safe_gate=False, lower_bound=None, use_graph=False):
    """None when kdart takes this chunk_kda_bwd_intra call, else the reason it does not."""
    if chunk_indices is not None and cu_seqlens is None:
        return "chunk_indices without cu_seqlens"
    r = _common_reason(chunk_size, q, g, cu_seqlens)
    if r:
        return r
    if g.shape[2] % q.shape[2]:
        return "HV % H != 0"
    torch = _torch()
    # beta: the io dtype, or fp32 (fla's with use_beta_sigmoid_in_kernel; kdart's beta=f32 specialization)
    if beta.dtype == torch.float32:
        return _io_reason(torch, q, (k,), (beta, g, dAqk, dAkk, dq, dk, db, dg))
    return _io_reason(torch, q, (k, beta), (g, dAqk, dAkk, dq, dk, db, dg))


def dhu_refusal(q, k, w, do, dv, g=None, gk=None, h0=None, dht=None, scale=None, state_v_first=False,
                cu_seqlens=None, chunk_size=64, chunk_indices=None, chunk_offsets=None, use_graph=False):
    """None when kdart takes this chunk_gated_delta_rule_bwd_dhu call, else the reason it does not."""
    if cu_seqlens is None and (chunk_indices is not None or chunk_offsets is not None):
        return "chunk_indices/chunk_offsets without cu_seqlens"
    if g is not None:
        return "scalar gate g"
    if gk is None:
        return "no gk"
    r = _common_reason(chunk_size, q, do, cu_seqlens)
    if r:
        return r
    if q.shape[2] != do.shape[2]:
        return "q/k heads != value heads"
    V = do.shape[3]
    if not 1 <= V <= 512:
        return f"V={V} (V > 512)"
    return _io_reason(_torch(), q, (k, w, do, dv), (gk, h0, dht))


def wy_refusal(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale=None, state_v_first=False, cu_seqlens=None,
               chunk_size=64, chunk_indices=None, chunk_offsets=None, use_graph=False):
    """None when kdart takes this chunk_kda_bwd_wy_dqkg_fused call, else the reason it does not."""
    if cu_seqlens is None and (chunk_indices is not None or chunk_offsets is not None):
        return "chunk_indices/chunk_offsets without cu_seqlens"
    r = _common_reason(chunk_size, q, v, cu_seqlens)
    if r:
        return r
    if v.shape[2] % q.shape[2]:
        return "HV % H != 0"
    if not 1 <= v.shape[3] <= 512:
        return f"V={v.shape[3]} (V > 512)"
    torch = _torch()
    if beta.dtype == torch.float32:
        return _io_reason(torch, q, (k, v, v_new, A, h, do, dh, dv), (beta, g))
    return _io_reason(torch, q, (k, v, v_new, beta, A, h, do, dh, dv), (g,))


def _dav_call_reason(A, scale, cu_seqlens, chunk_indices):
    """What both dAv routes refuse of a chunk_kda_bwd_dAv call before looking at its tensors."""
    if A is None or scale is None:
        return "no A or no scale"
    if cu_seqlens is None and chunk_indices is not None:
        return "chunk_indices without cu_seqlens"
    return None


def dav_refusal(q, k, v, do, A=None, scale=None, cu_seqlens=None, chunk_size=64, chunk_indices=None,
                use_graph=False):
    """None when kdart can fuse this chunk_kda_bwd_dAv call into bwd_dhu and wy_dqkg, else the reason it does
    not (fla's function then runs as it is).  The fused dv needs K (q's head dim) 64 or 128 and V a multiple
    of 64; bwd_dhu and wy_dqkg check their own calls again when they come."""
    r = _dav_call_reason(A, scale, cu_seqlens, chunk_indices) or _common_reason(chunk_size, q, do, cu_seqlens)
    if r:
        return r
    K, V = q.shape[3], do.shape[3]
    if K not in (64, 128):
        return f"head dim K={K} (the fused dAv takes K 64 or 128)"
    if V % 64 or V > 512:
        return f"V={V} (the fused dAv takes V a multiple of 64, up to 512)"
    if v.dim() != 4 or A.dim() != 4 or v.shape != do.shape or A.shape != do.shape[:3] + (64,) or \
            q.shape[:2] != do.shape[:2] or do.shape[2] % q.shape[2]:
        return "shape"
    torch = _torch()
    if torch.compiler.is_compiling():
        return "torch.compile (the fused dAv is eager only)"
    r = _io_reason(torch, q, (k, v, do, A), ())
    if r is None:
        N = do.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
        r = dav_grid_refusal(N, do.shape[2], K, V, cu_seqlens is not None, do.device)
    return r


def dav_standalone_refusal(q, k, v, do, A=None, scale=None, cu_seqlens=None, chunk_size=64, chunk_indices=None,
                           use_graph=False):
    """None when kdart's own dAv kernel (kdart.torch.bwd_dAv) takes this chunk_kda_bwd_dAv call, else the reason
    it does not (fla's function then runs).  q and k only size fla's call; any T, packed sequences (fla's
    use_graph mode too), V in 1..512, any HV, under torch.compile as eagerly (a custom op)."""
    r = _dav_call_reason(A, scale, cu_seqlens, chunk_indices)
    if r:
        return r
    if chunk_size != 64:
        return f"chunk_size={chunk_size}"
    if v.dim() != 4 or do.dim() != 4 or A.dim() != 4 or v.shape != do.shape or A.shape != do.shape[:3] + (64,):
        return "shape"
    if not 1 <= do.shape[3] <= 512:
        return f"V={do.shape[3]} (V > 512)"
    if cu_seqlens is not None and (cu_seqlens.device != do.device or do.shape[0] != 1):
        return "cu_seqlens not on do's device or B != 1"
    return _io_reason(_torch(), do, (v, A), ())


def dav_grid_refusal(N, HV, K, V, packed, device=None):
    """None when bwd_dhu's own choice for this grid is the V tile 64 without the V split, where the fused dAv
    costs almost nothing; else why kdart.fla leaves chunk_kda_bwd_dAv unfused (kdart.torch.dav_grid_refusal,
    which kdart.torch.chunk_kda_bwd asks too)."""
    from . import torch as kt
    return kt.dav_grid_refusal(N, HV, K, V, packed, device)


# ------------------------------------------------------------- wrappers

def _serve(stage, reason, kdart_call, fla_call):
    """kdart_call(kdart.torch) when the call was not refused (reason None) and kdart takes it, counted as
    served; else fla_call(), counted (and warned once) as a fallback for the reason."""
    if reason is None:
        from . import torch as kt
        try:
            out = kdart_call(kt)
        except ValueError as e:
            reason = f"kdart refused: {getattr(e, 'name', type(e).__name__)}"
        else:
            _count_served(stage)
            return out
    _count_fallback(stage, reason)
    return fla_call()


# ------------------------------------------------- fla's chunk_kda_bwd_dAv, fused

def _none():
    return None


def _ref(t):
    return _none if t is None else weakref.ref(t)


class _Deferred:
    """One chunk_kda_bwd_dAv call of chunk_kda_bwd that kdart fuses: fla's two outputs are stand-ins (meta
    tensors of their shapes and dtypes: no memory, and any use outside kdart.fla's wrappers fails loudly);
    bwd_dhu computes dv itself from Aqk (dv_fused) and wy_dqkg returns dA (dA_out), which bwd_intra's wrapper
    hands fla's bwd_intra in the stand-in's place.  Where a stage cannot take its half, fla's own
    chunk_kda_bwd_dAv runs then, on the same inputs (still alive: chunk_kda_bwd holds them), and its outputs
    take the stand-ins' place (_materialize).  Only weak references to the inputs: a record of a backward
    that raised keeps nothing alive, and its outputs are dropped with its dA stand-in."""
    __slots__ = ("dA", "dv", "inputs", "cu", "kw", "scale", "dA_out", "dv_out", "dv_fused", "settled",
                 "__weakref__")

    def __init__(self, dA, dv, q, k, v, do, A, scale, cu_seqlens, chunk_size, chunk_indices, use_graph):
        self.dA, self.dv = weakref.ref(dA, self._drop), weakref.ref(dv)
        self.inputs = tuple(map(weakref.ref, (q, k, v, do, A)))
        self.cu, self.scale = _ref(cu_seqlens), scale
        self.kw = dict(chunk_size=chunk_size, chunk_indices=_ref(chunk_indices), use_graph=use_graph)
        self.dA_out = self.dv_out = None
        self.dv_fused = self.settled = False

    def _drop(self, _):
        self.dA_out = self.dv_out = None

    def same(self, v, do, cu_seqlens):
        """The call's v_new, do and cu_seqlens are the ones chunk_kda_bwd_dAv had."""
        return self.inputs[3]() is do and (v is None or self.inputs[2]() is v) and self.cu() is cu_seqlens


def _deferred(dv=None, dA=None):
    """The pending record whose dv (or dA) stand-in this tensor is, else None."""
    rec = getattr(_tls, "dav", None)
    if rec is None or (dv is not None and rec.dv() is not dv) or (dA is not None and rec.dA() is not dA):
        return None
    return rec


def _standalone_dav(q, k, v, do, A, scale, cu_seqlens, chunk_size, chunk_indices, use_graph):
    """(dA, dv, None) from kdart's own dAv kernel, or (None, None, the reason it does not take the call)."""
    why = dav_standalone_refusal(q, k, v, do, A, scale, cu_seqlens, chunk_size, chunk_indices, use_graph)
    if why is None:
        from . import torch as kt
        try:
            return kt.bwd_dAv(q, k, v, do, A, scale=scale, cu_seqlens=cu_seqlens, chunk_indices=chunk_indices) + (None,)
        except ValueError as e:
            why = f"kdart refused: {getattr(e, 'name', type(e).__name__)}"
    return None, None, why


def _materialize(rec, why, need):
    """The deferred chunk_kda_bwd_dAv run on the recorded inputs when the output need ("dA" or "dv") is not
    known yet, its outputs in the stand-ins' place: by kdart's own dAv kernel (counted as served), else by fla's
    function (counted, and warned once, as a fallback of bwd_dAv: why, and why the kernel did not take it)."""
    if (rec.dA_out if need == "dA" else rec.dv_out) is None:
        q, k, v, do, A = (r() for r in rec.inputs)
        if any(x is None for x in (q, k, v, do, A)):
            raise RuntimeError("kdart.fla: the inputs of a deferred chunk_kda_bwd_dAv are gone")
        kw = dict(rec.kw, chunk_indices=rec.kw["chunk_indices"]())
        dA, dv, refused = _standalone_dav(q, k, v, do, A, rec.scale, rec.cu(), **kw)
        if dA is None:
            dA, dv = _state["orig"][_DAV](q, k, v, do, A=A, scale=rec.scale, cu_seqlens=rec.cu(), **kw)
        if rec.dA_out is None:
            rec.dA_out = dA
        if rec.dv_out is None:
            rec.dv_out = dv
        if not rec.settled:
            rec.settled = True
            if refused is None:
                _count_served("bwd_dAv")
            else:
                _count_fallback("bwd_dAv", f"{why}; {refused}")
    return rec


def _dav_wrapper(q, k, v, do, A=None, scale=None, cu_seqlens=None, chunk_size=64, chunk_indices=None,
                 use_graph=False):
    reason = dav_refusal(q, k, v, do, A, scale, cu_seqlens, chunk_size, chunk_indices, use_graph)
    # only chunk_kda_bwd's own call: its outputs go nowhere but to the wrappers below
    if reason is None and sys._getframe(1).f_code is not _state["bwd_code"]:
        reason = "not called by chunk_kda_bwd"
    if reason is not None:  # not fused: kdart's own dAv kernel, where it takes the call
        return _serve("bwd_dAv", dav_standalone_refusal(q, k, v, do, A, scale, cu_seqlens, chunk_size, chunk_indices,
                                                        use_graph),
                      lambda kt: kt.bwd_dAv(q, k, v, do, A, scale=scale, cu_seqlens=cu_seqlens,
                                            chunk_indices=chunk_indices),
                      lambda: _state["orig"][_DAV](q, k, v, do, A=A, scale=scale, cu_seqlens=cu_seqlens,
                                                   chunk_size=chunk_size, chunk_indices=chunk_indices,
                                                   use_graph=use_graph))
    torch = _torch()
    dA = torch.empty(do.shape[:3] + (64,), dtype=torch.float32, device="meta")
    dv = torch.empty(do.shape, dtype=do.dtype, device="meta")
    _tls.dav = _Deferred(dA, dv, q, k, v, do, A, scale, cu_seqlens, chunk_size, chunk_indices, use_graph)
    return dA, dv


def _pre_wrapper(q, k, w, do, dv, g=None, gk=None, bg=None, scale=None, state_v_first=False, cu_seqlens=None,
                 dht=None, initial_state=None, context=None, chunk_size=64, use_graph=False):
    """fla's context-parallel pre-pass reads dv: fla's dAv runs first (the fusion does not apply)."""
    rec = _deferred(dv=dv)
    if rec is not None:
        dv = _materialize(rec, "context parallel (cp_context)", "dv").dv_out
    return _state["orig"][_PRE](q, k, w, do, dv, g=g, gk=gk, bg=bg, scale=scale, state_v_first=state_v_first,
                                cu_seqlens=cu_seqlens, dht=dht, initial_state=initial_state, context=context,
                                chunk_size=chunk_size, use_graph=use_graph)


def _intra_wrapper(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, cu_seqlens=None, chunk_indices=None,
                   chunk_size=64, safe_gate=False, lower_bound=None, use_graph=False):
    rec = _deferred(dA=dAqk)
    if rec is not None:  # the last stage of chunk_kda_bwd that sees the record
        _tls.dav = None
        dAqk = _materialize(rec, "dAqk not computed by wy_dqkg", "dA").dA_out
    fold = _state["fold"]

    def kdart_call(kt):
        out = kt.bwd_intra(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, fold_dg=fold, cu_seqlens=cu_seqlens,
                           chunk_indices=chunk_indices)
        if fold:  # folded over the same chunks: each sequence's, as the cumsum with this cu_seqlens
            _tls.folded = (weakref.ref(out[3]), cu_seqlens)
        return out
    return _serve("bwd_intra", intra_refusal(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, cu_seqlens, chunk_indices,
                                             chunk_size, safe_gate, lower_bound, use_graph), kdart_call,
                  lambda: _state["orig"][_INTRA](q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, cu_seqlens=cu_seqlens,
                                                 chunk_indices=chunk_indices, chunk_size=chunk_size,
                                                 safe_gate=safe_gate, lower_bound=lower_bound, use_graph=use_graph))


def _dhu_wrapper(q, k, w, do, dv, g=None, gk=None, h0=None, dht=None, scale=None, state_v_first=False,
                 cu_seqlens=None, chunk_size=64, chunk_indices=None, chunk_offsets=None, use_graph=False):
    rec = _deferred(dv=dv)
    if rec is not None:  # dv is chunk_kda_bwd_dAv's, deferred: kdart computes it from Aqk in the scan
        why = "dv asked for twice"
        if rec.dv_out is None and not rec.dv_fused:
            # dhu_refusal's checks of dv apply to do, dv's shape and dtype
            why = dhu_refusal(q, k, w, do, do, g, gk, h0, dht, scale, state_v_first, cu_seqlens, chunk_size,
                              chunk_indices, chunk_offsets, use_graph)
            if why is not None:
                why = f"bwd_dhu not served ({why})"
            elif not rec.same(None, do, cu_seqlens):
                why = "arguments differ from chunk_kda_bwd_dAv's"
            else:
                from . import torch as kt
                try:
                    out = kt.bwd_dhu(q, k, w, do, None, gk, h0=h0, dht=dht, scale=scale, cu_seqlens=cu_seqlens,
                                     chunk_indices=chunk_indices, chunk_offsets=chunk_offsets,
                                     state_v_first=bool(state_v_first), Aqk=rec.inputs[4]())
                except ValueError as e:
                    why = f"kdart refused the fused bwd_dhu: {getattr(e, 'name', type(e).__name__)}"
                else:
                    rec.dv_fused = True
                    _count_served("bwd_dhu")
                    return out
        dv = _materialize(rec, why, "dv").dv_out
    return _serve("bwd_dhu", dhu_refusal(q, k, w, do, dv, g, gk, h0, dht, scale, state_v_first, cu_seqlens,
                                         chunk_size, chunk_indices, chunk_offsets, use_graph),
                  lambda kt: kt.bwd_dhu(q, k, w, do, dv, gk, h0=h0, dht=dht, scale=scale, cu_seqlens=cu_seqlens,
                                        chunk_indices=chunk_indices, chunk_offsets=chunk_offsets,
                                        state_v_first=bool(state_v_first)),
                  lambda: _state["orig"][_DHU](q, k, w, do, dv, g=g, gk=gk, h0=h0, dht=dht, scale=scale,
                                               state_v_first=state_v_first, cu_seqlens=cu_seqlens,
                                               chunk_size=chunk_size, chunk_indices=chunk_indices,
                                               chunk_offsets=chunk_offsets, use_graph=use_graph))


def _wy_wrapper(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale=None, state_v_first=False, cu_seqlens=None,
                chunk_size=64, chunk_indices=None, chunk_offsets=None, use_graph=False):
    rec = getattr(_tls, "dav", None)
    # the deferred dAv's dA half, when its dv half was fused into bwd_dhu: this call's do and v_new are its
    if rec is not None and not (rec.dv_fused and rec.dA_out is None and rec.same(v_new, do, cu_seqlens)
                                and scale == rec.scale):
        rec = None

    def kdart_call(kt):
        if rec is None:
            return kt.wy_dqkg(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale=scale,
                              state_v_first=bool(state_v_first), cu_seqlens=cu_seqlens, chunk_indices=chunk_indices)
        *out, rec.dA_out = kt.wy_dqkg(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale=scale,
                                      state_v_first=bool(state_v_first), cu_seqlens=cu_seqlens,
                                      chunk_indices=chunk_indices, dAqk=True)
        rec.settled = True
        _count_served("bwd_dAv")
        return tuple(out)

    def fla_call():
        if rec is not None:
            _materialize(rec, "wy_dqkg not served", "dA")
        return _state["orig"][_WY](q, k, v, v_new, g, beta, A, h, do, dh, dv, scale=scale,
                                   state_v_first=state_v_first, cu_seqlens=cu_seqlens, chunk_size=chunk_size,
                                   chunk_indices=chunk_indices, chunk_offsets=chunk_offsets, use_graph=use_graph)
    return _serve("wy_dqkg", wy_refusal(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale, state_v_first,
                                        cu_seqlens, chunk_size, chunk_indices, chunk_offsets, use_graph),
                  kdart_call, fla_call)


_DEFAULT = object()
_DEFAULT_F32 = object()  # (fla's kda_gate_chunk_cumsum defaults output_dtype to torch.float)


def _cumsum_wrapper(g, chunk_size, reverse=False, scale=None, cu_seqlens=None, output_dtype=_DEFAULT,
                    chunk_indices=None, use_graph=False, **kwargs):
    folded = getattr(_tls, "folded", None)
    if folded is not None:
        _tls.folded = None
        ref, folded_cu = folded
        torch = _torch()
        if (ref() is g and reverse and chunk_size == 64 and scale is None and cu_seqlens is folded_cu
                and (chunk_indices is None or cu_seqlens is not None) and not kwargs
                and (output_dtype is _DEFAULT or output_dtype in (None, torch.float32))):
            _count_served("dg_cumsum_folded")
            return g  # bwd_intra already returned it reverse-cumsummed within each chunk (fold_dg)
    orig = _state["orig"][_CUMSUM]
    if output_dtype is _DEFAULT:
        output_dtype = _torch().float  # fla's default
    return orig(g, chunk_size, reverse=reverse, scale=scale, cu_seqlens=cu_seqlens, output_dtype=output_dtype,
                chunk_indices=chunk_indices, use_graph=use_graph, **kwargs)


# ------------------------------------- fla's gate cumsum and recompute_w_u_fwd, fused

_RCP_LN2 = 1.4426950408889634


def rwu_refusal(k, v, beta, A, gk, q=None, cu_seqlens=None, chunk_indices=None, use_graph=False):
    """Why kdart would not take this recompute_w_u_fwd call (None: it would).  gk may be a pending gate
    cumsum (its dtype and shape are checked)."""
    torch = _torch()
    if q is None:
        return "no q (qg not asked for)"
    r = _common_reason(A.shape[-1] if A.dim() == 4 else 0, q, v, cu_seqlens)
    if r is None and not 1 <= v.shape[3] <= 512:
        r = f"value dim V={v.shape[3]}"
    return r or _io_reason(torch, q, (k, v, A) + (() if beta.dtype == torch.float32 else (beta,)), (gk,))


def _gate_refusal(g, A_log, chunk_size, scale, dt_bias, output_dtype, kwargs):
    torch = _torch()
    if chunk_size != 64:
        return f"chunk_size={chunk_size}"
    if scale is None or abs(scale - _RCP_LN2) > 1e-6:
        return f"scale={scale}"
    if output_dtype not in (None, torch.float32) or kwargs:
        return "output dtype or extra arguments"
    if A_log is None or g.dim() != 4 or not _is_cuda(g) or not g.is_contiguous():
        return "A_log None, or g not a contiguous 4-d CUDA tensor"
    if g.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        return f"g dtype {g.dtype}"
    for t in (A_log, dt_bias):
        if t is not None and (t.dtype != torch.float32 or not t.is_contiguous()):
            return "A_log or dt_bias not contiguous float32"
    return None


class _PendingGate:
    """A kda_gate_chunk_cumsum call of chunk_kda_bwd deferred into the recompute_w_u_fwd call that reads its
    output next: gk is allocated and returned unfilled; kdart's gate_recompute_w_u fills it in the same launch
    as w, u, qg, kg, or, where the recompute is not served, fla's own gate cumsum runs then and is copied in."""
    __slots__ = ("gk", "args", "kw")

    def __init__(self, gk, g, A_log, dt_bias, cu_seqlens, kw):
        self.gk = weakref.ref(gk)
        self.args = tuple(map(_ref, (g, A_log, dt_bias, cu_seqlens)))
        self.kw = kw

    def fill(self, why):
        gk = self.gk()
        g, A_log, dt_bias, cu = (r() for r in self.args)
        out = _state["orig"][_GATE](g, A_log, 64, scale=self.kw["scale"], dt_bias=dt_bias, cu_seqlens=cu,
                                    output_dtype=_torch().float32, chunk_indices=self.kw["chunk_indices"](),
                                    lower_bound=self.kw["lower_bound"], use_graph=self.kw["use_graph"])
        gk.copy_(out)
        _count_fallback("gate_cumsum", why)


def _gate_wrapper(g, A_log, chunk_size, scale=None, dt_bias=None, cu_seqlens=None, output_dtype=_DEFAULT_F32,
                  chunk_indices=None, lower_bound=None, use_graph=False, **kwargs):
    if output_dtype is _DEFAULT_F32:
        output_dtype = _torch().float32
    reason = _gate_refusal(g, A_log, chunk_size, scale, dt_bias, output_dtype, kwargs)
    # only chunk_kda_bwd's own call, whose output goes straight to recompute_w_u_fwd
    if reason is None and sys._getframe(1).f_code is not _state["bwd_code"]:
        reason = "not called by chunk_kda_bwd"
    if reason is not None:
        _count_fallback("gate_cumsum", reason)
        return _state["orig"][_GATE](g, A_log, chunk_size, scale=scale, dt_bias=dt_bias, cu_seqlens=cu_seqlens,
                                     output_dtype=output_dtype, chunk_indices=chunk_indices,
                                     lower_bound=lower_bound, use_graph=use_graph, **kwargs)
    gk = _torch().empty(g.shape, dtype=_torch().float32, device=g.device)
    _tls.gate = _PendingGate(gk, g, A_log, dt_bias, cu_seqlens,
                             dict(scale=scale, chunk_indices=_ref(chunk_indices), lower_bound=lower_bound,
                                  use_graph=use_graph))
    return gk


def _rwu_wrapper(k, v, beta, A, gk, q=None, cu_seqlens=None, chunk_indices=None, use_graph=False):
    pend = getattr(_tls, "gate", None)
    _tls.gate = None
    if pend is not None and pend.gk() is not gk:
        pend = None
    reason = rwu_refusal(k, v, beta, A, gk, q, cu_seqlens, chunk_indices, use_graph)

    def kdart_call(kt):
        if pend is None:
            return kt.recompute_w_u(k, v, beta, A, gk, q=q, cu_seqlens=cu_seqlens, chunk_indices=chunk_indices)
        g, A_log, dt_bias, _ = (r() for r in pend.args)
        lb = pend.kw["lower_bound"]
        if kt._eager(k):  # the cumsum written into fla's tensor itself
            _, w, u, qg, kg = kt._rwu_impl(k, v, beta, A, None, q, g, A_log, dt_bias, lb, cu_seqlens, chunk_indices,
                                           g_out=gk)
        else:  # (torch.compile: the op's own cumsum, copied into fla's tensor)
            g2, w, u, qg, kg = kt.gate_recompute_w_u(g, A_log, k, v, beta, A, q=q, dt_bias=dt_bias, lower_bound=lb,
                                                     cu_seqlens=cu_seqlens, chunk_indices=chunk_indices)
            gk.copy_(g2)
        _count_served("gate_cumsum")
        return w, u, qg, kg

    def fla_call():
        if pend is not None:
            pend.fill("recompute_w_u_fwd not served")
        return _state["orig"][_RWU](k, v, beta, A, gk, q=q, cu_seqlens=cu_seqlens, chunk_indices=chunk_indices,
                                    use_graph=use_graph)
    return _serve("recompute_w_u", reason, kdart_call, fla_call)


# ------------------------------------------------- fla's chunk_gated_delta_rule_fwd_h

def fwdh_refusal(k, w, u, g=None, gk=None, initial_state=None, output_final_state=False, chunk_size=64,
                 save_new_value=True, state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, chunk_indices=None,
                 chunk_offsets=None):
    """Why kdart would not take this chunk_gated_delta_rule_fwd_h call (None: it would)."""
    torch = _torch()
    if g is not None:
        return "the scalar gate g"
    if gk is None:
        return "no gate gk"
    r = _common_reason(chunk_size, k, u, cu_seqlens)
    if r is None and not 1 <= u.shape[3] <= 512:
        r = f"value dim V={u.shape[3]}"
    if r is None and (w.dim() != 4 or u.shape[2] % k.shape[2] != 0):
        r = "shape"
    return r or _io_reason(torch, k, (w, u), (gk, initial_state))


def _fwdh_wrapper(k, w, u, g=None, gk=None, initial_state=None, output_final_state=False, chunk_size=64,
                  save_new_value=True, state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, chunk_indices=None,
                  chunk_offsets=None):
    kw = dict(g=g, gk=gk, initial_state=initial_state, output_final_state=output_final_state, chunk_size=chunk_size,
              save_new_value=save_new_value, state_v_first=state_v_first, cu_seqlens=cu_seqlens,
              cu_seqlens_cpu=cu_seqlens_cpu, chunk_indices=chunk_indices, chunk_offsets=chunk_offsets)
    if not _state["fwd_h"]:  # not asked for: fla's scan, uncounted
        return _state["orig"][_FWDH](k, w, u, **kw)
    return _serve("fwd_h", fwdh_refusal(k, w, u, **kw), lambda kt: kt.chunk_gated_delta_rule_fwd_h(k, w, u, **kw),
                  lambda: _state["orig"][_FWDH](k, w, u, **kw))


# ------------------------------------------------- the whole backward (enable(whole=True))

FUNC_MODULE = "fla.ops.kda.chunk"
# what ChunkKDAFunction's forward saves, in order (fla-core 0.6.0)
_SAVED = ("q", "q_rstd", "k", "k_rstd", "v", "g_cumsum", "g_input", "beta_raw", "beta", "A_log", "dt_bias", "Aqk",
          "Akk", "w", "u", "qg", "kg", "v_new", "h", "initial_state", "cu_seqlens", "chunk_indices", "chunk_offsets")


def whole_refusal(ctx, saved, do):
    """None when kdart.torch.chunk_kda_bwd takes this ChunkKDAFunction backward, else the reason it does not."""
    if getattr(ctx, "cp_context", None) is not None:
        return "context parallelism (cp_context)"
    if ctx.chunk_size != 64:
        return f"chunk_size={ctx.chunk_size}"
    q, k, v = saved["q"], saved["k"], saved["v"]
    r = _common_reason(ctx.chunk_size, q, v, saved["cu_seqlens"])
    if r is None and not 1 <= v.shape[3] <= 512:
        r = f"value dim V={v.shape[3]}"
    if r is None and v.shape[2] % q.shape[2]:
        r = "HV % H != 0"
    if r is None and saved["cu_seqlens"] is not None and saved["chunk_indices"] is None:
        r = "packed sequences without chunk_indices"
    if r is None and ctx.use_gate_in_kernel and saved["A_log"] is None:
        r = "the gate in the kernel without A_log"
    torch = _torch()
    if r is None:
        r = _io_reason(torch, q, (k, v, saved["Akk"], do), ())
    if r is None:
        f32 = [x for x in (saved["A_log"], saved["dt_bias"]) if x is not None]
        if any(x.dtype != torch.float32 for x in f32):
            r = "A_log or dt_bias not float32"
    if r is None:
        for name in ("g_input", "beta_raw"):
            x = saved[name]
            if x is not None and x.dtype not in (q.dtype, torch.float32):
                r = f"{name} in {x.dtype}"
    return r


def _whole_backward(ctx, do, dht):
    """ChunkKDAFunction.backward through kdart.torch.chunk_kda_bwd (fla's own where whole_refusal says no)."""
    saved = dict(zip(_SAVED, ctx.saved_tensors))
    do = do.contiguous()
    dht = dht.contiguous() if dht is not None else None
    reason = whole_refusal(ctx, saved, do)
    if reason is None:
        from . import torch as kt
        gate = bool(ctx.use_gate_in_kernel)
        kw = {n: saved[n] for n in ("initial_state", "q_rstd", "k_rstd", "beta_raw", "cu_seqlens", "chunk_indices",
                                    "chunk_offsets", "g_cumsum")}
        kw.update(A_log=saved["A_log"] if gate else None, dt_bias=saved["dt_bias"] if gate else None)
        if ctx.disable_recompute:  # the forward saved what the recompute would make
            kw.update({n: saved[n] for n in ("w", "u", "qg", "kg", "v_new", "h")})
        try:
            with _device_of(saved["q"]):
                dq, dk, dv, dg, db, dA, dbias, dh0 = kt.chunk_kda_bwd(
                    *(saved[n] for n in ("q", "k", "v", "g_input", "beta", "Aqk", "Akk")), do, dht, scale=ctx.scale,
                    use_gate_in_kernel=gate, lower_bound=ctx.lower_bound,
                    use_beta_sigmoid_in_kernel=ctx.use_beta_sigmoid_in_kernel, allow_neg_eigval=ctx.allow_neg_eigval,
                    state_v_first=ctx.state_v_first, **kw)
        except ValueError as e:
            reason = f"kdart refused: {getattr(e, 'name', type(e).__name__)}"
        else:
            _count_served("whole_backward")
            return (dq, dk, dv, dg, db, dA, dbias, None, dh0) + (None,) * 16
    _count_fallback("whole_backward", reason)
    return _state["whole"][1](ctx, do, dht)


def chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False,
              allow_neg_eigval=False, safe_gate=False, lower_bound=None, state_v_first=False, cu_seqlens=None,
              A_log=None, dt_bias=None):
    """fla's chunk_kda (fla-core 0.6.0, chunk size 64) for torch.compile(fullgraph=True): -> (o, final_state).

    The same arguments and results as fla.ops.kda.chunk_kda (A_log, dt_bias as keywords; not its
    disable_recompute, context parallelism or intermediate states).  The forward runs fla's kernels as one
    custom op (torch.ops.kdart.fla_chunk_kda_fwd), the backward is kdart's whole backward
    (torch.ops.kdart.chunk_kda_bwd): torch.compile records a KDA layer's forward and backward without a graph
    break, where fla's own chunk_kda is excluded from compilation.  Eager calls run the same two ops.  Packed
    sequences (cu_seqlens, B == 1) go through fla's fixed-capacity chunk index (its use_graph mode), whose
    shape follows from T and the number of sequences: CUDA-graph safe, no host synchronization.  Bad
    arguments raise ValueError (from kdart's checks, before anything launches, for the backward)."""
    from ._fla_op import chunk_kda as op
    # (the arguments are listed, not taken from locals(): torch.compile cannot trace locals())
    return op(q, k, v, g, beta, scale=scale, initial_state=initial_state, output_final_state=output_final_state,
              use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, use_gate_in_kernel=use_gate_in_kernel,
              use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
              safe_gate=safe_gate, lower_bound=lower_bound, state_v_first=state_v_first, cu_seqlens=cu_seqlens,
              A_log=A_log, dt_bias=dt_bias)


def _device_of(t):
    torch = _torch()
    return torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext()


_WRAPPERS = {_INTRA: _intra_wrapper, _DHU: _dhu_wrapper, _WY: _wy_wrapper, _CUMSUM: _cumsum_wrapper,
             _DAV: _dav_wrapper, _PRE: _pre_wrapper, _GATE: _gate_wrapper, _RWU: _rwu_wrapper, _FWDH: _fwdh_wrapper}


# ------------------------------------------------------ enable / disable

def _fla_backends():
    """fla.backends when its dispatch is on (FLA_DISABLE_BACKEND_DISPATCH was not 1 when fla was imported)."""
    try:
        from fla import backends
    except ImportError:
        return None
    return None if getattr(backends, "_DISPATCH_DISABLED", True) else backends


_registered = []  # the backends kdart put in fla's registries (once per process)


def _register(backends, mod):
    """kdart's backends in fla 0.6.0's registries: 'kda' (bwd_intra, wy_dqkg), 'common' (bwd_dhu) and
    chunk_local_cumsum's own.  Each accepts a call only while kdart.fla is enabled through the registry
    (its verifier), and then runs the same wrapper as the names route: kdart for what it takes, fla's own
    function (unwrapped: never back into the registry) for the rest.  Priority 1: ahead of fla's TileLang
    backend; FLA_KDART=0 turns it off, as fla's switches do."""
    if _registered:
        return

    def on(*args, **kwargs):
        return (_state["via"] == "registry", "kdart.fla is not enabled")

    class _Kdart(backends.BaseBackend):
        backend_type = "kdart"
        env_var = "FLA_KDART"
        priority = 1

    kda = type("KdartKDABackend", (_Kdart,), {
        _INTRA: staticmethod(_intra_wrapper), _INTRA + "_verifier": staticmethod(on),
        _WY: staticmethod(_wy_wrapper), _WY + "_verifier": staticmethod(on),
        _RWU: staticmethod(_rwu_wrapper), _RWU + "_verifier": staticmethod(on)})
    common = type("KdartCommonBackend", (_Kdart,), {
        _DHU: staticmethod(_dhu_wrapper), _DHU + "_verifier": staticmethod(on),
        _FWDH: staticmethod(_fwdh_wrapper), _FWDH + "_verifier": staticmethod(on)})
    cumsum = type("KdartCumsumBackend", (_Kdart,), {
        _CUMSUM: staticmethod(_cumsum_wrapper), _CUMSUM + "_verifier": staticmethod(on)})
    backends.register("kda")(kda)
    backends.register("common")(common)
    backends.register(getattr(mod, _CUMSUM))(cumsum)
    _registered.extend((kda, common, cumsum))


def _import_or_none(importlib, name):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def enable(fold_dg=True, via=None, fwd_h=False, whole="auto"):
    """Routes fla's chunk_kda backward stages through kdart (idempotent).  via: "names" (the default:
    the functions' names in fla's backward module replaced) or "registry" (kdart's backends registered in
    fla's backend registry, fla.backends; needs fla's dispatch on); None reads KDART_FLA_VIA.  fwd_h: serve
    fla's state scan (chunk_gated_delta_rule_fwd_h, in the backward's recompute and in the forward) too.  whole:
    True replaces ChunkKDAFunction.backward whole by kdart.torch.chunk_kda_bwd (every kernel kdart's); False
    keeps fla's backward with kdart's stages inside; "auto" (the default) is True: the whole backward is
    the faster route in every configuration, with or without an epilogue in the kernel (an l2norm, the gate,
    beta's sigmoid), and the stages serve what it refuses.  RuntimeError
    when the installed fla is not the one this was written for, or the registry is asked for with fla's
    dispatch off; ImportError when fla or torch is missing."""
    import importlib
    import os
    if os.environ.get("FLA_KDART") == "0":  # the environment's kill switch, named as fla's backend switches
        with _lock:
            said = "FLA_KDART=0" in _warned
            _warned.add("FLA_KDART=0")
        if not said:
            _lib.log.getChild("fla").warning("FLA_KDART=0: kdart.fla.enable() leaves fla's functions in place")
        return
    if whole not in (True, False, "auto"):
        raise ValueError(f"kdart.fla.enable: whole must be True, False or 'auto', not {whole!r}")
    via = via or os.environ.get("KDART_FLA_VIA") or "names"
    if via not in ("names", "registry"):
        raise ValueError(f"kdart.fla.enable: via must be 'names' or 'registry', not {via!r}")
    with _lock:
        if _state["module"] is not None:
            if _state["via"] != via:
                raise RuntimeError(f"kdart.fla is enabled through {_state['via']}; disable() it first")
            _state["fold"] = bool(fold_dg)
            _state["fwd_h"] = bool(fwd_h)
            _set_whole(importlib, whole)
            return
        mod = importlib.import_module(MODULE)
        _check_signatures(mod)
        from . import torch as _kt  # noqa: F401  (registers the ops; raises early if torch is missing)
        if via == "registry":
            backends = _fla_backends()
            if backends is None:
                raise RuntimeError("kdart.fla.enable(via='registry'): fla's backend dispatch is off "
                                   "(FLA_DISABLE_BACKEND_DISPATCH=1 when fla was imported); use via='names'")
            # fla's own functions, never the registry's wrappers (a fallback must not come back to kdart)
            _state["orig"] = {name: inspect.unwrap(getattr(mod, name)) for name in _WRAPPERS}
            _register(backends, mod)
        else:
            _state["orig"] = {name: getattr(mod, name) for name in _WRAPPERS}
            for name in _WRAPPERS:  # the cumsum wrapper passes through unless bwd_intra folded dg
                setattr(mod, name, _WRAPPERS[name])
            # chunk_kda's forward: the same scan under the same name, where it is fla's own function
            fwd = sys.modules.get(FWD_MODULE) or _import_or_none(importlib, FWD_MODULE)
            if fwd is not None and getattr(fwd, _FWDH, None) is _state["orig"][_FWDH]:
                setattr(fwd, _FWDH, _fwdh_wrapper)
                _state["fwd_module"] = fwd
        _state["fold"] = bool(fold_dg)
        _state["fwd_h"] = bool(fwd_h)
        _set_whole(importlib, whole)
        _state["via"] = via
        _state["bwd_code"] = inspect.unwrap(mod.chunk_kda_bwd).__code__
        _state["module"] = mod


def disable():
    """Puts fla's own functions back (idempotent); through the registry, kdart's backends decline."""
    with _lock:
        mod = _state["module"]
        if mod is None:
            return
        if _state["via"] == "names":
            for name, fn in _state["orig"].items():
                setattr(mod, name, fn)
            if _state["fwd_module"] is not None:
                setattr(_state["fwd_module"], _FWDH, _state["orig"][_FWDH])
        _state["module"] = None
        _state["fwd_module"] = None
        _set_whole(None, False)
        _state["fold"] = False
        _state["fwd_h"] = False
        _state["via"] = None
        _state["bwd_code"] = None
        _tls.dav = None
        _tls.gate = None


def _set_whole(importlib, on):
    """Puts kdart's whole backward on ChunkKDAFunction (on: True or "auto") or fla's own back."""
    _state["whole_mode"] = on
    if on and _state["whole"] is None:
        cls = importlib.import_module(FUNC_MODULE).ChunkKDAFunction
        _state["whole"] = (cls, cls.backward)
        # (autograd looks the backward up on the class at every call: the staticmethod's swap takes effect)
        cls.backward = staticmethod(_whole_backward)
    elif not on and _state["whole"] is not None:
        cls, orig = _state["whole"]
        cls.backward = staticmethod(orig)
        _state["whole"] = None


def is_enabled():
    return _state["module"] is not None


@contextlib.contextmanager
def enabled(fold_dg=True, fwd_h=False, whole="auto"):
    """with kdart.fla.enabled(): ... (restores the previous state on exit)."""
    was, was_fold, was_via, was_fwdh = is_enabled(), _state["fold"], _state["via"], _state["fwd_h"]
    was_whole = _state["whole_mode"]
    enable(fold_dg, fwd_h=fwd_h, whole=whole)
    try:
        yield
    finally:
        if was:
            enable(was_fold, was_via, was_fwdh, was_whole)
        else:
            disable()
