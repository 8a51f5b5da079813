"""kdart.fla: fla's chunk_kda backward through kdart.

    import kdart.fla
    kdart.fla.enable()            # or: with kdart.fla.enabled(): ...
    ...                           # chunk_kda(...).backward() as usual
    kdart.fla.stats()             # calls served per stage, fallbacks per reason
    kdart.fla.disable()

enable() replaces, in the fla module whose chunk_kda_bwd calls them
(fla.ops.kda.chunk_bwd in fla-core 0.6.0), the names chunk_kda_bwd_intra,
chunk_gated_delta_rule_bwd_dhu and chunk_kda_bwd_wy_dqkg_fused by wrappers that run kdart for every call it
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

Without code changes: FLA_KDART=1 enables it when the script imports fla's chunk_kda backward (the wheel's
kdart-autoload.pth, kdart._autoload); FLA_KDART=0 makes enable() do nothing (logged once).  Fallbacks are
logged once per reason through the "kdart.fla" logger; stats() counts every one.

Two routes, one set of wrappers.  enable(via="names"), the default, replaces the names in fla's module as
above.  enable(via="registry") (or KDART_FLA_VIA=registry) registers kdart's backends in fla 0.6.0's backend
registry instead (fla.backends: 'kda' for bwd_intra and wy_dqkg, 'common' for bwd_dhu, chunk_local_cumsum's
own for the dg fold; priority 1, ahead of fla's TileLang; FLA_KDART=0 turns them off as fla's switches do);
their verifiers accept while kdart.fla is enabled, and a fallback calls fla's own function unwrapped, never
the registry again.  Both routes serve, fold and fall back the same (the routing tests run both).  Why the
names route stays the default: FLA_DISABLE_BACKEND_DISPATCH=1 turns the registry off (the registry route then
refuses to start, with that reason); fla runs every dispatched call under torch.compiler.disable (a graph
break under torch.compile, whichever backend serves it).  On the H200 the two routes serve the same stages
with the same gradients; the registry's cost is small: about 6 us per dispatched call measured on a 2-core
CPU, four calls per backward.

The wrappers are written for fla-core 0.6.0: enable() compares
inspect.signature of every function it replaces (and of chunk_kda_bwd) with
the one it was written for and refuses with RuntimeError when they differ.
"""
import contextlib
import inspect
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
    "chunk_kda_bwd": (("q", _E), ("k", _E), ("v", _E), ("beta", _E), ("Aqk", _E), ("Akk", _E), ("scale", _E),
                      ("initial_state", _E), ("do", _E), ("dht", _E), ("g", None), ("g_org", None),
                      ("state_v_first", False), ("cu_seqlens", None), ("chunk_indices", None), ("chunk_size", 64),
                      ("safe_gate", False), ("lower_bound", None), ("use_gate_in_kernel", False), ("A_log", None),
                      ("dt_bias", None), ("disable_recompute", False), ("cp_context", None), ("use_graph", False),
                      ("chunk_offsets", None), ("kwargs", _E)),
}

_lock = threading.RLock()
_state = {"module": None, "orig": None, "fold": False, "via": None}
_served = {"bwd_intra": 0, "bwd_dhu": 0, "dg_cumsum_folded": 0, "wy_dqkg": 0}
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
    if bwd is not None and not {_INTRA, _DHU, _CUMSUM, _WY} <= set(bwd.__code__.co_names):
        bad.append(f"{MODULE}.chunk_kda_bwd no longer calls {_INTRA}, {_DHU}, {_WY} and {_CUMSUM}")
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


def _intra_wrapper(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, cu_seqlens=None, chunk_indices=None,
                   chunk_size=64, safe_gate=False, lower_bound=None, use_graph=False):
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
    return _serve("wy_dqkg", wy_refusal(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale, state_v_first,
                                        cu_seqlens, chunk_size, chunk_indices, chunk_offsets, use_graph),
                  lambda kt: kt.wy_dqkg(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale=scale,
                                        state_v_first=bool(state_v_first), cu_seqlens=cu_seqlens,
                                        chunk_indices=chunk_indices),
                  lambda: _state["orig"][_WY](q, k, v, v_new, g, beta, A, h, do, dh, dv, scale=scale,
                                              state_v_first=state_v_first, cu_seqlens=cu_seqlens,
                                              chunk_size=chunk_size, chunk_indices=chunk_indices,
                                              chunk_offsets=chunk_offsets, use_graph=use_graph))


_DEFAULT = object()


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


_WRAPPERS = {_INTRA: _intra_wrapper, _DHU: _dhu_wrapper, _WY: _wy_wrapper, _CUMSUM: _cumsum_wrapper}


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
        _WY: staticmethod(_wy_wrapper), _WY + "_verifier": staticmethod(on)})
    common = type("KdartCommonBackend", (_Kdart,), {
        _DHU: staticmethod(_dhu_wrapper), _DHU + "_verifier": staticmethod(on)})
    cumsum = type("KdartCumsumBackend", (_Kdart,), {
        _CUMSUM: staticmethod(_cumsum_wrapper), _CUMSUM + "_verifier": staticmethod(on)})
    backends.register("kda")(kda)
    backends.register("common")(common)
    backends.register(getattr(mod, _CUMSUM))(cumsum)
    _registered.extend((kda, common, cumsum))


def enable(fold_dg=True, via=None):
    """Routes fla's chunk_kda backward stages through kdart (idempotent).  via: "names" (the default:
    the functions' names in fla's backward module replaced) or "registry" (kdart's backends registered in
    fla's backend registry, fla.backends; needs fla's dispatch on); None reads KDART_FLA_VIA.  RuntimeError
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
    via = via or os.environ.get("KDART_FLA_VIA") or "names"
    if via not in ("names", "registry"):
        raise ValueError(f"kdart.fla.enable: via must be 'names' or 'registry', not {via!r}")
    with _lock:
        if _state["module"] is not None:
            if _state["via"] != via:
                raise RuntimeError(f"kdart.fla is enabled through {_state['via']}; disable() it first")
            _state["fold"] = bool(fold_dg)
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
        _state["fold"] = bool(fold_dg)
        _state["via"] = via
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
        _state["module"] = None
        _state["fold"] = False
        _state["via"] = None


def is_enabled():
    return _state["module"] is not None


@contextlib.contextmanager
def enabled(fold_dg=True):
    """with kdart.fla.enabled(): ... (restores the previous state on exit)."""
    was, was_fold, was_via = is_enabled(), _state["fold"], _state["via"]
    enable(fold_dg)
    try:
        yield
    finally:
        if was:
            enable(was_fold, was_via)
        else:
            disable()
