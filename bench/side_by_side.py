#!/usr/bin/env python3
"""bench/side_by_side.py: kdart against fla (flash-linear-attention), stage by stage.

For each shape row it builds the inputs of the two KDA backward stages with
torch (fla's test recipe: bench/common.py), runs fla's
chunk_kda_bwd_intra and chunk_gated_delta_rule_bwd_dhu and kdart's
kdart_kda_bwd_intra and kdart_kda_bwd_dhu (libkdart.so through ctypes, DLPack
DLTensors), checks that the two agree (relative RMS of every output against
fla's), times both with CUDA events (median of --iters after warm-up), and
prints one table with the ratio fla/kdart, kdart's effective bandwidth over
the fewest bytes each stage must move, and that bandwidth as a share of the
device-to-device copy ceiling measured in the same run.

Runs on the GPU machine (torch, triton; fla from a wheel, see bench/README.md).
`--help` works without torch: torch is imported inside main().
"""
import argparse
import ctypes
import math
import os
import sys
import time

from common import (CHUNK, HERE, MISMATCH_AT, ROOT, Row, Timer, all_finite, cuda_setup, dav_bytes, dhu_bytes,
                    dump_json, fla_dav, fla_dhu, fla_fwdh, fla_gate_rwu, fla_intra, fla_wy, fmt, fwdh_bytes,
                    import_fla, intra_bytes, make_aqk, make_dhu, make_fwdh, make_intra, make_wy, nsets_for, print_table, rel_rms, rwu_bytes,
                    seq_layout, wy_bytes)


# ---------------------------------------------------------------- shape rows

# The standard table of shapes fla's users run, then prod8192 with fold_dg=1, emit_bf16=1.
ROWS = [
    Row("prod8192", 16, 8192, 16, 16, 128, 256, note="the production headline shape"),
    Row("b1_t8192_h96", 1, 8192, 96, 96, 128, 128),
    Row("b1_t32768_h32", 1, 32768, 32, 32, 128, 128),
    Row("b1_t8192_h32", 1, 8192, 32, 32, 128, 128),
    Row("b4_t4096_h32", 4, 4096, 32, 32, 128, 128),
    Row("b2_t8192_h16", 2, 8192, 16, 16, 128, 128),
    Row("b8_t2048_h32", 8, 2048, 32, 32, 128, 128),
    Row("b1_t2048_h16", 1, 2048, 16, 16, 128, 128),
    Row("b4_t4096_h16_hv32", 4, 4096, 16, 32, 128, 128, note="grouped value heads"),
    Row("b2_t4096_h32_k64", 2, 4096, 32, 32, 64, 64),
    Row("prod8192_fold_emit", 16, 8192, 16, 16, 128, 256, fold_emit=True,
        note="bwd_intra fold_dg=1 emit_bf16=1; fla = intra + chunk_local_cumsum(dg, reverse)"),
    # head dims beyond 64 / 128: the K tile 256, and two head dims served in the next tile up with masked tails
    Row("b2_t8192_h16_k256", 2, 8192, 16, 16, 256, 256, note="K = V = 256 (the K tile 256)"),
    Row("b2_t8192_h16_d100", 2, 8192, 16, 16, 100, 100, note="K = V = 100 (K tile 128, masked tail)"),
    Row("b2_t8192_h16_d60", 2, 8192, 16, 16, 60, 60, note="K = V = 60 (K tile 64, masked tail)"),
    Row("b2_t8192_h32", 2, 8192, 32, 32, 128, 128, note="the production configuration's first row"),
    Row("b1_t32768_h32_packed", 1, 32768, 32, 32, 128, 128, lens=(1, 63, 4096, 700, 9000, 2908, 16000),
        note="7 packed documents"),
]
QUICK = ["b1_t8192_h32", "b2_t4096_h32_k64"]


def select_rows(spec, quick):
    if quick and not spec:
        spec = ",".join(QUICK)
    if not spec:
        return list(ROWS)
    out = []
    for tok in spec.split(","):
        tok = tok.strip()
        if not tok:
            continue
        if tok.isdigit():
            i = int(tok)
            if not 0 <= i < len(ROWS):
                raise SystemExit(f"--rows: index {i} out of range 0..{len(ROWS) - 1}")
            r = ROWS[i]
        else:
            m = [r for r in ROWS if r.name.lower() == tok.lower()]
            if not m:
                raise SystemExit(f"--rows: no row named {tok!r} (see --list)")
            r = m[0]
        if r not in out:
            out.append(r)
    return out


# ------------------------------------------------------- ctypes: DLPack, kdart

class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):  # dlpack 0.6 (and 1.x: DLTensor is unchanged)
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_P = ctypes.POINTER(DLTensor)


class IntraArgs(ctypes.Structure):  # kdart_bwd_intra_args
    _fields_ = [("struct_size", ctypes.c_uint32)] + [
        (n, _P) for n in ("q", "k", "g", "beta", "dAqk", "dAkk", "dq_in", "dk_in", "dg_in", "db_in",
                          "dq", "dk", "dg", "db")
    ] + [("fold_dg", ctypes.c_int), ("emit_bf16", ctypes.c_int)]


class DhuArgs(ctypes.Structure):  # kdart_bwd_dhu_args
    _fields_ = [("struct_size", ctypes.c_uint32)] + [
        (n, _P) for n in ("qg", "kg", "w", "g", "d_o", "dv", "dht", "dh", "dv2", "dh0")
    ] + [("scale", ctypes.c_float), ("v_tile", ctypes.c_int)]


class Prepared(ctypes.Structure):  # kdart_prepared
    _fields_ = [("key", ctypes.c_char * 65), ("source", ctypes.c_int), ("compile_ms", ctypes.c_double),
                ("lookup_ms", ctypes.c_double), ("load_ms", ctypes.c_double), ("loaded", ctypes.c_int)]


FROM = {0: "memory", 1: "cache", 2: "ro-cache", 3: "compiled"}
kDLCUDA = 2
kDLFloat = 2
kDLBfloat = 4


class DL:
    """A DLTensor view of a contiguous CUDA torch tensor (keeps its shape array alive)."""

    def __init__(self, t):
        import torch
        assert t.is_cuda and t.is_contiguous(), "kdart takes contiguous CUDA tensors"
        code = {torch.bfloat16: (kDLBfloat, 16), torch.float16: (kDLFloat, 16),
                torch.float32: (kDLFloat, 32)}[t.dtype]
        self.t = t
        self.shape = (ctypes.c_int64 * t.dim())(*t.shape)
        self.dl = DLTensor(ctypes.c_void_p(t.data_ptr()), DLDevice(kDLCUDA, t.device.index or 0), t.dim(),
                           DLDataType(code[0], code[1], 1),
                           ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64)), None, 0)

    @property
    def ptr(self):
        return ctypes.pointer(self.dl)


class Kdart:
    def __init__(self, path):
        self.lib = lib = ctypes.CDLL(path)
        lib.kdart_open.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        lib.kdart_open.restype = ctypes.c_int
        lib.kdart_close.argtypes = [ctypes.c_void_p]
        lib.kdart_close.restype = None
        lib.kdart_last_error.argtypes = [ctypes.c_void_p]
        lib.kdart_last_error.restype = ctypes.c_char_p
        lib.kdart_strerror.argtypes = [ctypes.c_int]
        lib.kdart_strerror.restype = ctypes.c_char_p
        lib.kdart_version.argtypes = []
        lib.kdart_version.restype = ctypes.c_char_p
        lib.kdart_prepare.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.c_uint32, ctypes.POINTER(Prepared)]
        lib.kdart_prepare.restype = ctypes.c_int
        lib.kdart_kda_bwd_intra.argtypes = [ctypes.c_void_p, ctypes.POINTER(IntraArgs), ctypes.c_void_p]
        lib.kdart_kda_bwd_intra.restype = ctypes.c_int
        lib.kdart_kda_bwd_dhu.argtypes = [ctypes.c_void_p, ctypes.POINTER(DhuArgs), ctypes.c_void_p]
        lib.kdart_kda_bwd_dhu.restype = ctypes.c_int
        lib.kdart_dhu_v_tile.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                         ctypes.c_int64, ctypes.POINTER(ctypes.c_int)]
        lib.kdart_dhu_v_tile.restype = ctypes.c_int
        self.rt = ctypes.c_void_p()
        self.check(lib.kdart_open(ctypes.byref(self.rt), None), "kdart_open", rt=False)
        self.version = lib.kdart_version().decode()

    def check(self, rc, what, rt=True):
        if rc != 0:
            msg = self.lib.kdart_last_error(self.rt).decode(errors="replace") if rt and self.rt else ""
            raise RuntimeError(f"{what} failed: {rc} {self.lib.kdart_strerror(rc).decode()}: {msg}")

    def prepare(self, kernel, spec):
        p = Prepared()
        t0 = time.perf_counter()
        self.check(self.lib.kdart_prepare(self.rt, kernel.encode(), spec.encode(), None, 0, ctypes.byref(p)),
                   f"kdart_prepare({kernel}, {spec})")
        return p, (time.perf_counter() - t0) * 1e3

    def close(self):
        if self.rt:
            self.lib.kdart_close(self.rt)
            self.rt = ctypes.c_void_p()


# ------------------------------------------------------------------ helpers

def rcumsum_chunks(x):
    """chunk-local reverse (suffix) cumsum along T of [B,T,HV,K] fp32 (torch; fla-free)."""
    B, T, HV, K = x.shape
    y = x.reshape(B, T // CHUNK, CHUNK, HV, K).flip(2).cumsum(2).flip(2)
    return y.reshape(B, T, HV, K).contiguous()


def launcher(kd, name, args, stream):
    """A call of the op `name` (kdart_kda_bwd_*) with one argument struct, checked."""
    fn = getattr(kd.lib, name)

    def launch():
        rc = fn(kd.rt, ctypes.byref(args), stream)
        if rc:
            kd.check(rc, name)
    return launch


def copy_ceiling(timer):
    """Device-to-device copy of 2 GiB: (read + write bytes) / time, GB/s."""
    import torch
    n = 1 << 31
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    src.fill_(1)
    dst = torch.empty_like(src)
    med, _ = timer([lambda d=dst, s=src: d.copy_(s)])
    del src, dst
    torch.cuda.empty_cache()
    return 2 * n / (med * 1e-3) / 1e9, med


# ---------------------------------------------------------------- the stages

def k_tile(K):
    """The K tile (the specs' K) that serves head dim K: kdart._lib's (pure Python, loads nothing)."""
    if os.path.join(ROOT, "python") not in sys.path:
        sys.path.insert(0, os.path.join(ROOT, "python"))
    from kdart._lib import k_tile as kt
    return kt(K)


def intra_spec(K, fold, emit):
    """The bwd_intra specialization kdart launches for a fixed-length row (T % 64 == 0): K below its tile
    runs the masked tail body, which is varlen=1 only."""
    kt = k_tile(K)
    tail = int(K != kt)
    return f"io=bf16,fold_dg={fold},emit_bf16={emit},K={kt},varlen={tail},tail={tail}"


def run_intra(r, ctx):
    import torch
    kd, fla, timer, dev = ctx["kd"], ctx["fla"], ctx["timer"], ctx["device"]
    fold = emit = 1 if r.fold_emit else 0
    nbytes = intra_bytes(r, emit=bool(emit))
    nsets = nsets_for(nbytes)
    spec = intra_spec(r.K, fold, emit)
    p, ms = kd.prepare("bwd_intra", spec)
    print(f"  kdart bwd_intra [{spec}]: {FROM.get(p.source, p.source)} "
          f"(compile {p.compile_ms:.0f} ms, prepare call {ms:.0f} ms)", flush=True)
    sets = [make_intra(r, dev) for _ in range(nsets)]
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    odt = torch.bfloat16 if emit else torch.float32

    launches, outs, keep = [], [], []
    for s in sets:
        o = dict(dq=torch.full(s["dq"].shape, float("nan"), dtype=odt, device=dev),
                 dk=torch.full(s["dk"].shape, float("nan"), dtype=odt, device=dev),
                 dg=torch.full_like(s["dg"], float("nan")),
                 db=torch.full_like(s["db"], float("nan")))
        d = {n: DL(t) for n, t in list(s.items()) + [("o_" + n, t) for n, t in o.items()]}
        a = IntraArgs(ctypes.sizeof(IntraArgs), d["q"].ptr, d["k"].ptr, d["g"].ptr, d["beta"].ptr,
                      d["dAqk"].ptr, d["dAkk"].ptr, d["dq"].ptr, d["dk"].ptr, d["dg"].ptr, d["db"].ptr,
                      d["o_dq"].ptr, d["o_dk"].ptr, d["o_dg"].ptr, d["o_db"].ptr, fold, emit)
        keep.append((d, a))
        outs.append(o)

        launches.append(launcher(kd, "kdart_kda_bwd_intra", a, stream))

    res = dict(stage="bwd_intra" + (" fold+emit" if r.fold_emit else ""), row=r.name, shape=r.shape_str(),
               bytes=nbytes, nsets=nsets, checks={}, flags=[])
    # kdart once on poisoned outputs, then check
    launches[0]()
    torch.cuda.synchronize()
    ko = outs[0]
    for n, t in ko.items():
        if not all_finite(t):
            res["flags"].append(f"NONFINITE:{n}")

    res["kdart_ms"], res["kdart_min_ms"] = timer(launches)

    s0 = sets[0]
    if fla is not None:
        try:
            def fla_fold(s):  # fla's equivalent of fold_dg=1 (emit_bf16's casts: fla_fold_casts)
                _, _, _, dg_ = fla_intra(fla, s)
                return fla["cumsum"](dg_, CHUNK, reverse=True)

            def fla_fold_casts(s):
                dq_, dk_, _, dg_ = fla_intra(fla, s)
                return fla["cumsum"](dg_, CHUNK, reverse=True), dq_.to(torch.bfloat16), dk_.to(torch.bfloat16)

            dq2, dk2, db2, dg2 = fla_intra(fla, s0)
            if r.fold_emit:
                dg2 = fla["cumsum"](dg2, CHUNK, reverse=True)
            torch.cuda.synchronize()
            ref = dict(dq=dq2, dk=dk2, dg=dg2, db=db2)
            for n in ("dq", "dk", "dg", "db"):
                res["checks"][n] = rel_rms(ko[n], ref[n])
            del dq2, dk2, db2, dg2, ref
            if r.fold_emit:
                res["fla_ms"], res["fla_min_ms"] = timer([lambda s=s: fla_fold(s) for s in sets])
                res["fla_ms_with_casts"], _ = timer([lambda s=s: fla_fold_casts(s) for s in sets])
            else:
                res["fla_ms"], res["fla_min_ms"] = timer([lambda s=s: fla_intra(fla, s) for s in sets])
        except Exception as e:  # fla broke on this row: keep kdart's numbers
            print(f"  fla failed: {type(e).__name__}: {e}", flush=True)
            res["fla_error"] = f"{type(e).__name__}: {e}"
            res["flags"].append("FLA_ERROR")
            res.pop("fla_ms", None)
    elif r.fold_emit:
        # fla-free self check: the same inputs through kdart's plain specialization, folded by torch
        kd.prepare("bwd_intra", intra_spec(r.K, 0, 0))
        pl = dict(dq=torch.empty_like(s0["dq"]), dk=torch.empty_like(s0["dk"]),
                  dg=torch.empty_like(s0["dg"]), db=torch.empty_like(s0["db"]))
        dd = {n: DL(t) for n, t in list(s0.items()) + [("o_" + n, t) for n, t in pl.items()]}
        a = IntraArgs(ctypes.sizeof(IntraArgs), dd["q"].ptr, dd["k"].ptr, dd["g"].ptr, dd["beta"].ptr,
                      dd["dAqk"].ptr, dd["dAkk"].ptr, dd["dq"].ptr, dd["dk"].ptr, dd["dg"].ptr, dd["db"].ptr,
                      dd["o_dq"].ptr, dd["o_dk"].ptr, dd["o_dg"].ptr, dd["o_db"].ptr, 0, 0)
        kd.check(kd.lib.kdart_kda_bwd_intra(kd.rt, ctypes.byref(a), stream), "kdart_kda_bwd_intra")
        torch.cuda.synchronize()
        pl["dg"] = rcumsum_chunks(pl["dg"])
        for n in ("dq", "dk", "dg", "db"):
            res["checks"]["self_" + n] = rel_rms(ko[n], pl[n])
        del pl, dd, a
    del sets, outs, keep, launches, ko, s0
    return res


def run_dhu(r, ctx):
    import torch
    kd, fla, timer, dev = ctx["kd"], ctx["fla"], ctx["timer"], ctx["device"]
    nbytes = dhu_bytes(r)
    nsets = nsets_for(nbytes)
    bv = ctypes.c_int(0)
    kd.check(kd.lib.kdart_dhu_v_tile(kd.rt, r.B, r.HV, r.K, r.V, ctypes.byref(bv)), "kdart_dhu_v_tile")
    kt = k_tile(r.K)  # the specialization the op launches (v_tile = 0; the rows' T is a multiple of 64)
    spec = f"io=bf16,K={kt},BV={bv.value},varlen=0,tail={int(r.K != kt or r.V % bv.value != 0)}"
    p, ms = kd.prepare("bwd_dhu", spec)
    print(f"  kdart bwd_dhu [{spec}]: {FROM.get(p.source, p.source)} "
          f"(compile {p.compile_ms:.0f} ms, prepare call {ms:.0f} ms)", flush=True)
    sets = [make_dhu(r, dev) for _ in range(nsets)]
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    NT = r.T // CHUNK

    launches, outs, keep = [], [], []
    for s in sets:
        o = dict(dh=torch.full((r.B, NT, r.HV, r.K, r.V), float("nan"), dtype=torch.bfloat16, device=dev),
                 dv2=torch.full_like(s["dv"], float("nan")),
                 dh0=torch.full_like(s["h0"], float("nan")))
        d = {n: DL(t) for n, t in s.items() if n != "scale"}
        d.update({"o_" + n: DL(t) for n, t in o.items()})
        a = DhuArgs(ctypes.sizeof(DhuArgs), d["qg"].ptr, d["kg"].ptr, d["w"].ptr, d["g"].ptr, d["do"].ptr,
                    d["dv"].ptr, d["dht"].ptr, d["o_dh"].ptr, d["o_dv2"].ptr, d["o_dh0"].ptr, s["scale"], 0)
        keep.append((d, a))
        outs.append(o)

        launches.append(launcher(kd, "kdart_kda_bwd_dhu", a, stream))

    res = dict(stage="bwd_dhu", row=r.name, shape=r.shape_str(), bytes=nbytes, nsets=nsets, checks={}, flags=[])
    launches[0]()
    torch.cuda.synchronize()
    ko = outs[0]
    for n, t in ko.items():
        if not all_finite(t):
            res["flags"].append(f"NONFINITE:{n}")

    res["kdart_ms"], res["kdart_min_ms"] = timer(launches)

    if fla is not None:
        try:
            dh, dh0, dv2 = fla_dhu(fla, sets[0])
            torch.cuda.synchronize()
            ref = dict(dh=dh, dv2=dv2, dh0=dh0)
            for n in ("dh", "dv2", "dh0"):
                res["checks"][n] = rel_rms(ko[n], ref[n])
            del dh, dh0, dv2, ref
            res["fla_ms"], res["fla_min_ms"] = timer([lambda s=s: fla_dhu(fla, s) for s in sets])
        except Exception as e:  # fla broke on this row: keep kdart's numbers
            print(f"  fla failed: {type(e).__name__}: {e}", flush=True)
            res["fla_error"] = f"{type(e).__name__}: {e}"
            res["flags"].append("FLA_ERROR")
            res.pop("fla_ms", None)
    del sets, outs, keep, launches, ko
    return res


def torch_row(r, ctx):
    """What a row run through kdart.torch needs: (kdart.torch, the packed lengths or None, seq_layout, and
    for a packed row cu_seqlens and fla's chunk_indices / chunk_offsets, else None)."""
    import torch
    if os.path.join(ROOT, "python") not in sys.path:
        sys.path.insert(0, os.path.join(ROOT, "python"))
    import kdart.torch as kt
    fla, dev = ctx["fla"], ctx["device"]
    lens = getattr(r, "lens", None)
    lay = seq_layout(r.B, r.T, lens, device=dev)
    cu = ci = co = None
    if lens is not None:
        cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0).tolist()), dtype=torch.int32, device=dev)
        if fla is not None:
            ci, co = fla["chunk_indices"](cu, CHUNK), fla["chunk_offsets"](cu, CHUNK)
    return kt, lens, lay, cu, ci, co


def run_wy(r, ctx):
    """wy_dqkg through kdart.torch (the op users call) against fla's chunk_kda_bwd_wy_dqkg_fused; a packed
    row (r.lens) passes cu_seqlens and fla's index tensors."""
    import torch
    fla, timer, dev = ctx["fla"], ctx["timer"], ctx["device"]
    kt, lens, lay, cu, ci, co = torch_row(r, ctx)
    nbytes = wy_bytes(r, NT=lay["NT"])
    sets = [make_wy(r, dev, lay) for _ in range(nsets_for(nbytes))]

    def kd(s):
        return kt.wy_dqkg(s["q"], s["k"], s["v"], s["v_new"], s["g"], s["beta"], s["A"], s["h"], s["do"],
                          s["dh"], s["dv"], scale=s["scale"], cu_seqlens=cu, chunk_indices=ci)
    res = dict(stage="wy_dqkg", row=r.name, shape=r.shape_str(), bytes=nbytes, nsets=len(sets), checks={},
               flags=[])
    ko = kd(sets[0])
    torch.cuda.synchronize()
    names = ("dq", "dk", "dv", "db", "dg", "dA")
    for n, t in zip(names, ko):
        if not all_finite(t):
            res["flags"].append(f"NONFINITE:{n}")
    res["kdart_ms"], res["kdart_min_ms"] = timer([lambda s=s: kd(s) for s in sets])
    if fla is not None:
        try:
            ref = fla_wy(fla, sets[0], cu, ci, co)
            torch.cuda.synchronize()
            for n, a, b in zip(names, ko, ref):
                res["checks"][n] = rel_rms(a, b)
            del ref
            res["fla_ms"], res["fla_min_ms"] = timer([lambda s=s: fla_wy(fla, s, cu, ci, co) for s in sets])
        except Exception as e:
            print(f"  fla failed: {type(e).__name__}: {e}", flush=True)
            res["fla_error"] = f"{type(e).__name__}: {e}"
            res["flags"].append("FLA_ERROR")
    del sets, ko
    return res


def run_dav(r, ctx):
    """fla's chunk_kda_bwd_dAv against kdart's, as kdart.fla serves the call (asking kdart.fla.dav_refusal and
    dav_standalone_refusal as kdart.fla asks them).  Where it fuses the call: the time bwd_dhu with Aqk in place
    of dv adds over bwd_dhu with fla's dv, plus the time wy_dqkg's dAqk output adds over the plain wy_dqkg, the
    four timed in this run (kdart ms is that sum); checks: dAqk against fla's dA, and the fused scan's dv2
    against the unfused one fed fla's dv.  Elsewhere: kdart's own dAv kernel (kdart.torch.bwd_dAv, flag "own
    kernel"), timed as fla's is; checks: dA and dv against fla's.  Where kdart.fla leaves the call to fla, the row
    has fla's time and the reason."""
    import torch
    fla, timer, dev = ctx["fla"], ctx["timer"], ctx["device"]
    kt, lens, lay, cu, ci, co = torch_row(r, ctx)
    import kdart.fla as kf
    res = dict(stage="bwd_dAv", row=r.name, shape=r.shape_str(), bytes=dav_bytes(r), nsets=1, checks={}, flags=[])
    s = make_wy(r, dev, lay)
    d = make_dhu(r, dev, lay)
    d["do"] = s["do"]
    Aqk = make_aqk(r, dev, lay)
    fdA, fdv = fla_dav(fla, s, Aqk, cu, ci)
    torch.cuda.synchronize()
    res["fla_ms"], res["fla_min_ms"] = timer([lambda: fla_dav(fla, s, Aqk, cu, ci)])
    why = kf.dav_refusal(s["q"], s["k"], s["v_new"], s["do"], Aqk, s["scale"], cu_seqlens=cu, chunk_indices=ci)
    if why:
        res["not_fused"] = why
        alone = kf.dav_standalone_refusal(s["q"], s["k"], s["v_new"], s["do"], Aqk, s["scale"], cu_seqlens=cu,
                                          chunk_indices=ci)
        if alone:
            res["not_served"] = alone
            print(f"  kdart.fla leaves this dAv to fla: {alone}", flush=True)
            return res
        print(f"  kdart.fla does not fuse this dAv ({why}): kdart's own dAv kernel", flush=True)

        def kd():
            return kt.bwd_dAv(s["q"], s["k"], s["v_new"], s["do"], Aqk, scale=s["scale"], cu_seqlens=cu,
                              chunk_indices=ci)
        kdA, kdv = kd()
        torch.cuda.synchronize()
        res["checks"]["dA"], res["checks"]["dv"] = rel_rms(kdA, fdA), rel_rms(kdv, fdv)
        for n, t in (("dA", kdA), ("dv", kdv)):
            if not all_finite(t):
                res["flags"].append(f"NONFINITE:{n}")
        del kdA, kdv
        res["flags"].append("own kernel")
        res["kdart_ms"], res["kdart_min_ms"] = timer([kd])
        return res
    seqs = dict(cu_seqlens=cu, chunk_indices=ci, chunk_offsets=co)

    def dhu(aqk):
        return kt.bwd_dhu(d["qg"], d["kg"], d["w"], d["do"], None if aqk else fdv, d["g"], h0=d["h0"], dht=d["dht"],
                          scale=s["scale"], Aqk=Aqk if aqk else None, **seqs)

    def wy(daqk):
        return kt.wy_dqkg(s["q"], s["k"], s["v"], s["v_new"], s["g"], s["beta"], s["A"], s["h"], s["do"], s["dh"],
                          s["dv"], scale=s["scale"], cu_seqlens=cu, chunk_indices=ci, dAqk=daqk)
    plain, fused = dhu(False), dhu(True)
    wo = wy(True)
    torch.cuda.synchronize()
    res["checks"]["dA"] = rel_rms(wo[6], fdA)
    res["checks"]["dv2"] = rel_rms(fused[2], plain[2])
    for n, t in (("dA", wo[6]), ("dv2", fused[2])):
        if not all_finite(t):
            res["flags"].append(f"NONFINITE:{n}")
    del plain, fused, wo
    ms = {}
    for name, fn in (("dhu", lambda: dhu(False)), ("dhu_aqk", lambda: dhu(True)), ("wy", lambda: wy(False)),
                     ("wy_daqk", lambda: wy(True))):
        ms[name] = timer([fn])[0]
    res["parts_ms"] = ms
    res["kdart_ms"] = (ms["dhu_aqk"] - ms["dhu"]) + (ms["wy_daqk"] - ms["wy"])
    res["kdart_min_ms"] = res["kdart_ms"]
    print(f"  bwd_dhu {ms['dhu']:.3f} -> {ms['dhu_aqk']:.3f} ms with Aqk, wy_dqkg {ms['wy']:.3f} -> "
          f"{ms['wy_daqk']:.3f} ms with dAqk", flush=True)
    return res


def run_rwu(r, ctx):
    """fla's gate cumsum + recompute_w_u_fwd (the safe gate, raw gate in bf16, beta in fp32: chunk_kda_bwd's
    calls in the configuration people train with) against kdart's one launch (gate_recompute_w_u); also the
    plain recompute alone (the cumsummed gate in: printed).  Checks every output against fla's."""
    import torch
    fla, timer, dev = ctx["fla"], ctx["timer"], ctx["device"]
    kt, lens, lay, cu, ci, co = torch_row(r, ctx)
    s = make_wy(r, dev, lay)
    s["g_raw"] = torch.randn(r.B, r.T, r.HV, r.K, device=dev).to(torch.bfloat16)
    s["A_log"] = torch.log(torch.empty(r.HV, device=dev).uniform_(1, 16))
    s["dt_bias"] = torch.randn(r.HV * r.K, device=dev)
    seqs = dict(cu_seqlens=cu, chunk_indices=ci)
    res = dict(stage="gate+recompute_w_u", row=r.name, shape=r.shape_str(), bytes=rwu_bytes(r), nsets=1,
               checks={}, flags=[])

    def kd():
        return kt.gate_recompute_w_u(s["g_raw"], s["A_log"], s["k"], s["v"], s["beta"], s["A"], q=s["q"],
                                     dt_bias=s["dt_bias"], lower_bound=-5.0, **seqs)
    got = kd()
    if fla is not None:
        want = fla_gate_rwu(fla, s, cu, ci)
        for n, x, y in zip(("g", "w", "u", "qg", "kg"), got, want):
            res["checks"][n] = rel_rms(x, y)
        gk = want[0]

        def plain(fn):
            return fn(q=s["q"], k=s["k"], v=s["v"], beta=s["beta"], A=s["A"], gk=gk, **seqs)
        res["fla_ms"], res["fla_min_ms"] = timer([lambda: fla_gate_rwu(fla, s, cu, ci)])
        f_plain = timer([lambda: plain(fla["rwu"])])[0]
        k_plain = timer([lambda: kt.recompute_w_u(s["k"], s["v"], s["beta"], s["A"], gk, q=s["q"], **seqs)])[0]
        print(f"  the recompute alone (cumsummed gate in): fla {f_plain:.3f} ms, kdart {k_plain:.3f} ms "
              f"({f_plain / k_plain:.2f}x; {rwu_bytes(r, gate=False) / (k_plain * 1e-3) / 1e9:.0f} GB/s)", flush=True)
    for n, t in zip(("g", "w", "u", "qg", "kg"), got):
        if not all_finite(t):
            res["flags"].append(f"NONFINITE:{n}")
    del got
    res["kdart_ms"], res["kdart_min_ms"] = timer([kd])
    return res


def run_fwdh(r, ctx):
    """fla's chunk_gated_delta_rule_fwd_h as chunk_kda_bwd calls it (kg, w, u, the per-channel gate, h0, no final
    state) against kdart's fwd_h through kdart.torch; checks h and v_new against fla's.  Its floor: the bytes
    moved once (fwdh_bytes)."""
    fla, timer, dev = ctx["fla"], ctx["timer"], ctx["device"]
    kt, lens, lay, cu, ci, co = torch_row(r, ctx)
    s = make_fwdh(r, dev, lay)
    seqs = dict(cu_seqlens=cu, chunk_indices=ci, chunk_offsets=co)
    res = dict(stage="fwd_h", row=r.name, shape=r.shape_str(), bytes=fwdh_bytes(r, NT=lay["NT"], N=lay["N"]),
               nsets=1, checks={}, flags=[])

    def kd():
        return kt.chunk_gated_delta_rule_fwd_h(s["kg"], s["w"], s["u"], gk=s["g"], initial_state=s["h0"], **seqs)
    got = kd()
    if fla is not None:
        want = fla_fwdh(fla, s, cu, ci, co)
        for n, x, y in zip(("h", "v_new"), got, want):
            res["checks"][n] = rel_rms(x, y)
        del want
        res["fla_ms"], res["fla_min_ms"] = timer([lambda: fla_fwdh(fla, s, cu, ci, co)])
    for n, t in zip(("h", "v_new"), got):
        if not all_finite(t):
            res["flags"].append(f"NONFINITE:{n}")
    del got
    res["kdart_ms"], res["kdart_min_ms"] = timer([kd])
    return res


# --------------------------------------------------------------------- main

def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--varlen" in argv:  # the variable-length table: bench/varlen.py
        sys.path.insert(0, HERE)
        import varlen
        return varlen.main([a for a in argv if a != "--varlen"])
    ap = argparse.ArgumentParser(
        description="kdart vs fla side by side for the KDA backward stages bwd_intra and bwd_dhu "
                    "(agreement, CUDA-event timings, bandwidth vs the copy ceiling).")
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "libkdart.so"),
                    help="path of libkdart.so (default: build/libkdart.so in the repo)")
    ap.add_argument("--rows", default="",
                    help="comma-separated row indices or names (see --list); default: all")
    ap.add_argument("--quick", action="store_true", help=f"two small rows only ({', '.join(QUICK)})")
    ap.add_argument("--stage", choices=("both", "intra", "dhu", "wy", "dav", "rwu", "fwdh", "all"), default="both",
                    help="which stages to run (both: bwd_intra and bwd_dhu; dav: fla's chunk_kda_bwd_dAv against "
                         "its cost fused into kdart's bwd_dhu and wy_dqkg, or kdart's own dAv kernel where "
                         "kdart.fla does not fuse it; rwu: fla's gate cumsum and "
                         "recompute_w_u_fwd against kdart's recompute_wu; fwdh: fla's chunk_gated_delta_rule_fwd_h "
                         "(the backward's recompute of the states) against kdart's fwd_h; all: every one)")
    ap.add_argument("--no-fla", action="store_true", help="kdart only (no fla runs, no agreement checks)")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    ap.add_argument("--iters", type=int, default=20, help="timed iterations per measurement (median; default 20)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls before timing (default 3)")
    ap.add_argument("--pad-cycles", type=int, default=1_000_000,
                    help="GPU spin (torch.cuda._sleep cycles) before each timed call, to hide host launch "
                         "overhead (default 1e6, about 0.5 ms); 0 disables")
    ap.add_argument("--budget-s", type=float, default=0,
                    help="start no new row after this many seconds (the table is still printed); 0: no limit")
    ap.add_argument("--no-ceiling", action="store_true", help="skip the 2 GiB copy-ceiling measurement")
    ap.add_argument("--list", action="store_true", help="list the rows and exit")
    ap.add_argument("--warm-only", action="store_true",
                    help="fla's stages (--stage) once per row at T <= 1024 (the same Triton specializations), no kdart, "
                         "no timing: the workload of tools/triton_warm.py")
    ap.add_argument("--varlen", action="store_true",
                    help="run the variable-length table instead (bench/varlen.py; its options: --varlen --help)")
    args = ap.parse_args(argv)

    if args.list:
        for i, r in enumerate(ROWS):
            print(f"{i:2d}  {r.name:22s} {r.shape_str():28s} {r.note}")
        return 0
    rows = select_rows(args.rows, args.quick)

    import torch
    dev = cuda_setup()
    if dev is None:
        return 3

    fla = None if args.no_fla else import_fla()
    if args.warm_only:
        if fla is None:
            print("--warm-only needs fla", file=sys.stderr)
            return 3
        for r in rows:
            small = Row(r.name, r.B, min(r.T, 1024), r.H, r.HV, r.K, r.V)
            if args.stage in ("both", "intra", "all"):
                fla_intra(fla, make_intra(small, dev))
            if args.stage in ("both", "dhu", "all") and not r.fold_emit:
                fla_dhu(fla, make_dhu(small, dev))
            if args.stage in ("wy", "all") and not r.fold_emit:
                fla_wy(fla, make_wy(small, dev))
            if args.stage in ("dav", "all") and not r.fold_emit:
                s = make_wy(small, dev)
                fla_dav(fla, s, s["A"])
            if args.stage in ("rwu", "all") and not r.fold_emit:
                s = make_wy(small, dev)
                s.update(g_raw=s["q"].new_zeros(small.B, small.T, small.HV, small.K),
                         A_log=s["beta"].new_zeros(small.HV), dt_bias=s["beta"].new_zeros(small.HV * small.K))
                fla_gate_rwu(fla, s)
            if args.stage in ("fwdh", "all") and not r.fold_emit:
                fla_fwdh(fla, make_fwdh(small, dev))
            torch.cuda.synchronize()
            print(f"[{r.name}] warm", flush=True)
        return 0
    lib = os.path.abspath(args.lib)
    if not os.path.exists(lib):
        print(f"{lib}: not found (build with tools/build.sh, or pass --lib)", file=sys.stderr)
        return 3
    kd = Kdart(lib)
    props = torch.cuda.get_device_properties(dev)
    print(f"device {props.name}, {props.multi_processor_count} SMs; torch {torch.__version__}; "
          f"kdart {kd.version} ({lib}); fla {fla['version'] if fla else 'off'}; "
          f"KDART_CACHE_DIR={os.environ.get('KDART_CACHE_DIR', '(default)')}", flush=True)

    timer = Timer(args.iters, args.warmup, args.pad_cycles)
    t_start = time.time()
    ceil_gbs = None
    if not args.no_ceiling:
        ceil_gbs, ceil_ms = copy_ceiling(timer)
        print(f"copy ceiling: {ceil_gbs:.0f} GB/s (2 GiB device-to-device copy, read+write, {ceil_ms:.3f} ms)",
              flush=True)

    meta = dict(device=props.name, sms=props.multi_processor_count, torch=torch.__version__, kdart=kd.version,
                fla=fla["version"] if fla else None, copy_ceiling_gbs=ceil_gbs, iters=args.iters,
                warmup=args.warmup, pad_cycles=args.pad_cycles, mismatch_at=MISMATCH_AT)
    ctx = dict(kd=kd, fla=fla, timer=timer, device=dev)
    results = []
    failed = fatal = False
    for r in rows:
        if fatal:
            break
        if args.budget_s and time.time() - t_start > args.budget_s:
            left = rows[rows.index(r):]
            print(f"--budget-s {args.budget_s:.0f} spent: skipping {', '.join(x.name for x in left)}", flush=True)
            meta["skipped"] = [x.name for x in left]
            break
        stages = []
        if args.stage in ("both", "intra", "all"):
            stages.append(run_intra)
        if args.stage in ("both", "dhu", "all") and not r.fold_emit:
            stages.append(run_dhu)
        if args.stage in ("wy", "all") and not r.fold_emit:
            stages.append(run_wy)
        if args.stage in ("dav", "all") and not r.fold_emit and fla is not None:
            stages.append(run_dav)
        if args.stage in ("rwu", "all") and not r.fold_emit:
            stages.append(run_rwu)
        if args.stage in ("fwdh", "all") and not r.fold_emit:
            stages.append(run_fwdh)
        for fn in stages:
            print(f"[{r.name}] {r.shape_str()} {fn.__name__[4:]} (t={time.time() - t_start:.0f} s)", flush=True)
            try:
                res = fn(r, ctx)
            except Exception as e:  # report and go on with the next row
                failed = True
                stage = ("bwd_dhu" if fn is run_dhu else "wy_dqkg" if fn is run_wy else "bwd_dAv" if fn is run_dav
                         else "gate+recompute_w_u" if fn is run_rwu else "fwd_h" if fn is run_fwdh
                         else "bwd_intra fold+emit" if r.fold_emit else "bwd_intra")
                res = dict(stage=stage, row=r.name, shape=r.shape_str(), error=f"{type(e).__name__}: {e}")
                print(f"  ERROR {res['error']}", flush=True)
            try:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
            except Exception as e:  # a kernel fault poisons the context: nothing after it can run
                print(f"  CUDA context lost ({type(e).__name__}: {e}); stopping", flush=True)
                res.setdefault("error", f"context lost: {e}")
                fatal = True
            if "not_served" in res:
                print(f"  fla {res['fla_ms']:.3f} ms; kdart: not fused here", flush=True)
            elif "error" not in res:
                res["kdart_gbs"] = res["bytes"] / (res["kdart_ms"] * 1e-3) / 1e9
                res["fla_gbs"] = res["bytes"] / (res["fla_ms"] * 1e-3) / 1e9 if "fla_ms" in res else None
                res["ratio"] = res["fla_ms"] / res["kdart_ms"] if "fla_ms" in res else None
                res["pct_ceiling"] = 100 * res["kdart_gbs"] / ceil_gbs if ceil_gbs else None
                for n, v in res["checks"].items():
                    if not math.isfinite(v) or v > MISMATCH_AT:
                        res["flags"].append(f"MISMATCH:{n}")
                if any(f.startswith(("MISMATCH", "NONFINITE")) for f in res["flags"]):
                    failed = True
                chk = " ".join(f"{n}={v:.2e}" for n, v in res["checks"].items())
                extra = f"  fla+casts {res['fla_ms_with_casts']:.3f} ms" if "fla_ms_with_casts" in res else ""
                print(f"  kdart {res['kdart_ms']:.3f} ms, fla {fmt(res.get('fla_ms'), '.3f')} ms{extra}; "
                      f"rel-RMS vs {'fla' if fla else 'kdart plain'}: {chk or '-'} "
                      f"{' '.join(res['flags'])}", flush=True)
            results.append(res)
            if args.json:  # after every row, so a run cut short still leaves its numbers
                dump_json(args.json, meta, results)
            if fatal:
                break

    elapsed = time.time() - t_start
    if not fatal:
        kd.close()

    # the table
    print()
    hdr = ("stage", "shape", "fla ms", "kdart ms", "fla/kdart", "kdart GB/s", "% ceil", "worst rel-RMS", "flags")
    lines = []
    for res in results:
        if "error" in res:
            lines.append((res["stage"], res["shape"], "-", "-", "-", "-", "-", "-", "ERROR"))
            continue
        if "not_served" in res:
            lines.append((res["stage"], res["shape"], fmt(res.get("fla_ms"), ".3f"), "-", "-", "-", "-", "-",
                          "fla's: " + res["not_served"]))
            continue
        worst = max((v if math.isfinite(v) else math.inf) for v in res["checks"].values()) if res["checks"] else None
        lines.append((res["stage"], res["shape"], fmt(res.get("fla_ms"), ".3f"), f"{res['kdart_ms']:.3f}",
                      fmt(res.get("ratio"), ".2f") + ("x" if res.get("ratio") else ""), f"{res['kdart_gbs']:.0f}",
                      fmt(res.get("pct_ceiling"), ".0f"), fmt(worst, ".1e"), ",".join(res["flags"])))
    print_table(hdr, lines)
    print(f"\nbf16 io; median of {args.iters} CUDA-event timings after {args.warmup} warm-up calls; "
          f"copy ceiling {fmt(ceil_gbs, '.0f')} GB/s; GB/s over the fewest bytes each stage must move; "
          f"fold+emit row: fla = chunk_kda_bwd_intra + chunk_local_cumsum(dg, reverse) "
          f"(with the two bf16 casts: see 'fla+casts' above); bwd_dAv: kdart ms is the time its two fused "
          f"halves add to bwd_dhu and wy_dqkg, its GB/s fla's stage bytes over that, or, flagged 'own kernel' "
          f"where kdart.fla does not fuse the call, the time of kdart's own dAv kernel; {elapsed:.0f} s")

    if args.json:
        meta["elapsed_s"] = elapsed
        dump_json(args.json, meta, results)
        print(f"wrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
