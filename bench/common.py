"""bench/common.py: what the benchmarks against fla share: the shape row, the byte counts of each stage,
the input recipe (fla's tests' inputs, fixed length or packed sequences), fla's stage functions and
their import, the CUDA-event timer, the agreement measure and the table printer.

Imported by bench/side_by_side.py and bench/varlen.py; nothing here imports either, and nothing imports
torch at module level (`--help` of both works without it).
"""
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CHUNK = 64
RCP_LN2 = 1.4426950216  # fla/ops/utils/constant.py
MISMATCH_AT = 5e-2


# ---------------------------------------------------------------- shape rows

class Row:
    def __init__(self, name, B, T, H, HV, K, V, fold_emit=False, note="", lens=None):
        self.name, self.B, self.T, self.H, self.HV, self.K, self.V = name, B, T, H, HV, K, V
        self.lens = lens  # packed documents (B = 1, sum(lens) = T): wy_dqkg's rows only
        self.fold_emit = fold_emit  # bwd_intra with fold_dg=1, emit_bf16=1 (intra only)
        self.note = note

    def shape_str(self):
        h = f"H{self.H}" if self.H == self.HV else f"H{self.H}/HV{self.HV}"
        v = f"K{self.K}" if self.K == self.V else f"K{self.K} V{self.V}"
        return f"{self.B},{self.T},{h},{v}"


# ------------------------------------------------------------ byte counting

def intra_bytes(r, emit=False, io=2):
    """Fewest bytes bwd_intra must move: every input read once, every output written once."""
    n_hk = r.B * r.T * r.H * r.K
    n_vk = r.B * r.T * r.HV * r.K
    n_v = r.B * r.T * r.HV
    rd = 2 * n_hk * io + n_vk * 4 + n_v * io + 2 * n_v * CHUNK * 4 + 3 * n_vk * 4 + n_v * 4
    wr = 2 * n_vk * (io if emit else 4) + n_vk * 4 + n_v * 4
    return rd + wr


def dhu_bytes(r, dht=True, dh0=True, io=2, NT=None, N=None):
    """Fewest bytes bwd_dhu must move (of g only the last row of each chunk is read); NT: chunk rows of
    the whole batch and N: sequences, for packed sequences (default B sequences of T // 64 chunks)."""
    NT = r.B * (r.T // CHUNK) if NT is None else NT
    N = r.B if N is None else N
    n_k = r.B * r.T * r.HV * r.K
    n_v = r.B * r.T * r.HV * r.V
    state = N * r.HV * r.K * r.V
    rd = 3 * n_k * io + NT * r.HV * r.K * 4 + 2 * n_v * io + (state * 4 if dht else 0)
    wr = NT * r.HV * r.K * r.V * io + n_v * io + (state * 4 if dh0 else 0)
    return rd + wr


# ------------------------------------------------------ inputs and agreement

def wy_bytes(r, io=2, beta_f32=True, NT=None):
    """wy_dqkg: q, k [B,T,H,K], v, v_new, do, dv [B,T,HV,V], A [B,T,HV,64] io; g fp32, beta fp32 (fla's with
    the beta sigmoid in chunk_kda); h, dh [B,NT,HV,K,V] io in; dq, dk, dg fp32, dv2 io, db, dA fp32 out."""
    B, T, H, HV, K, V = r.B, r.T, r.H, r.HV, r.K, r.V
    NT = B * (T // CHUNK) if NT is None else NT
    tok = B * T * (2 * H * K * io + 4 * HV * V * io + HV * CHUNK * io + HV * K * 4 + HV * (4 if beta_f32 else io))
    out = B * T * HV * (3 * K * 4 + V * io + 4 + CHUNK * 4)
    return tok + 2 * NT * HV * K * V * io + out


def dav_bytes(r, io=2):
    """chunk_kda_bwd_dAv: do, v_new [B,T,HV,V] and Aqk [B,T,HV,64] io in; dv io and dA fp32 [B,T,HV,64] out."""
    return r.B * r.T * r.HV * (3 * r.V * io + CHUNK * io + CHUNK * 4)


def rwu_bytes(r, io=2, gate=True):
    """recompute_wu: k, q [B,T,H,K], v [B,T,HV,V], Akk [B,T,HV,64] io, beta fp32 in; w, qg, kg [B,T,HV,K], u
    [B,T,HV,V] io out; and either the cumsummed gate (fp32) in, or the raw gate (io) in and its cumsum
    (fp32) out.  fla's gate cumsum + recompute_w_u move the raw gate, and the cumsum twice (out and in)."""
    B, T, H, HV, K, V = r.B, r.T, r.H, r.HV, r.K, r.V
    common = B * T * (2 * H * K * io + 2 * HV * V * io + HV * CHUNK * io + HV * 4 + 3 * HV * K * io)
    return common + B * T * HV * K * ((io + 4) if gate else 4)


def fwdh_bytes(r, io=2, NT=None, N=None, h0=True):
    """chunk_gated_delta_rule_fwd_h as chunk_kda_bwd calls it: kg [B,T,H,K], w [B,T,HV,K], u [B,T,HV,V] io and
    the gate's last row of each chunk (fp32), h0 [N,HV,K,V] fp32 in; h [B,NT,HV,K,V] and v_new [B,T,HV,V] io out
    (no final state).  NT: chunk rows of the whole batch, N: sequences (default B of T // 64 chunks)."""
    B, T, H, HV, K, V = r.B, r.T, r.H, r.HV, r.K, r.V
    NT = B * (T // CHUNK) if NT is None else NT
    N = B if N is None else N
    rd = B * T * (H * K + HV * K + HV * V) * io + NT * HV * K * 4 + (N * HV * K * V * 4 if h0 else 0)
    return rd + NT * HV * K * V * io + B * T * HV * V * io


def rel_rms(a, b):
    """rms(a - b) / rms(b) in float64, in slices (the dh tensors are GBs)."""
    a = a.reshape(-1)
    b = b.reshape(-1)
    num = den = 0.0
    step = 1 << 25
    for i in range(0, b.numel(), step):
        x = a[i:i + step].double()
        y = b[i:i + step].double()
        num += (x - y).square().sum().item()
        den += y.square().sum().item()
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return math.sqrt(num / den)


def all_finite(t):
    import torch
    return bool(torch.isfinite(t).all().item())


def seq_layout(B, T, lens=None, device="cpu"):
    """Where each token sits in fla's chunking: B sequences of T tokens (lens None), or B = 1 and the
    packed sequences of lengths lens (sum T).  Returns dict(pos [B*T] position in its chunk, row [B*T]
    global chunk row (chunk_offsets[n] + c), NT rows, N sequences, lens); host-side, then on device."""
    import torch
    if lens is None:
        lens = [T] * B
    else:
        assert B == 1 and sum(lens) == T and min(lens) >= 0, "packed sequences: B = 1, sum(lens) == T"
    L = torch.tensor(lens, dtype=torch.int64)
    nch = (L + CHUNK - 1) // CHUNK
    offs = torch.nn.functional.pad(nch.cumsum(0), (1, 0))
    starts = torch.nn.functional.pad(L.cumsum(0), (1, 0))
    seq = torch.repeat_interleave(torch.arange(len(lens)), L)
    p = torch.arange(B * T) - starts[seq]
    return dict(pos=(p % CHUNK).to(device), row=(offs[seq] + p // CHUNK).to(device), NT=int(offs[-1]),
                N=len(lens), lens=list(lens))


def chunk_gate(shape, device, lay=None):
    """g = chunk-local inclusive cumsum (log2 units) of logsigmoid(1.5*randn + 2), fp32 [B,T,HV,K]; the
    chunks are those of lay (seq_layout; default: B sequences of T tokens), so a partial chunk or a
    sequence boundary restarts the sum as in fla."""
    import torch
    import torch.nn.functional as F
    B, T, HV, K = shape
    lay = lay or seq_layout(B, T, device=device)
    a = F.logsigmoid(torch.randn(B * T, HV, K, device=device) * 1.5 + 2.0)
    idx = lay["row"] * CHUNK + lay["pos"]
    pad = torch.zeros(lay["NT"] * CHUNK, HV, K, device=device)
    pad[idx] = a
    del a
    pad = pad.view(lay["NT"], CHUNK, HV, K).cumsum_(1).mul_(RCP_LN2).view(-1, HV, K)
    return pad[idx].reshape(B, T, HV, K).contiguous()


def make_intra(r, device, lay=None):
    import torch
    import torch.nn.functional as F
    B, T, H, HV, K = r.B, r.T, r.H, r.HV, r.K
    lay = lay or seq_layout(B, T, device=device)
    bf = torch.bfloat16
    q = torch.randn(B, T, H, K, device=device).to(bf)
    k = F.normalize(torch.randn(B, T, H, K, device=device), dim=-1).to(bf)
    g = chunk_gate((B, T, HV, K), device, lay)
    beta = torch.rand(B, T, HV, device=device).to(bf)
    ar = torch.arange(CHUNK, device=device)
    pos = lay["pos"][:, None, None]  # the token's row r in its chunk
    lower = (ar[None, None, :] <= pos).float()  # columns s <= r (of the token's own chunk)
    strict = (ar[None, None, :] < pos).float()  # s < r
    dAqk = (torch.randn(B * T, HV, CHUNK, device=device) * 0.1).mul_(lower).reshape(B, T, HV, CHUNK)
    dAkk = (torch.randn(B * T, HV, CHUNK, device=device) * 0.1).mul_(strict).reshape(B, T, HV, CHUNK)
    dq = torch.randn(B, T, HV, K, device=device)
    dk = torch.randn(B, T, HV, K, device=device)
    dg = torch.randn(B, T, HV, K, device=device)
    db = torch.randn(B, T, HV, device=device)
    return dict(q=q, k=k, g=g, beta=beta, dAqk=dAqk, dAkk=dAkk, dq=dq, dk=dk, dg=dg, db=db)


def make_dhu(r, device, lay=None):
    import torch
    B, T, HV, K, V = r.B, r.T, r.HV, r.K, r.V
    lay = lay or seq_layout(B, T, device=device)
    N = lay["N"]
    bf = torch.bfloat16
    qg = (torch.randn(B, T, HV, K, device=device) * 0.1).to(bf)
    kg = (torch.randn(B, T, HV, K, device=device) * 0.1).to(bf)
    w = (torch.randn(B, T, HV, K, device=device) * 0.1).to(bf)
    g = chunk_gate((B, T, HV, K), device, lay)
    do = torch.randn(B, T, HV, V, device=device).to(bf)
    dv = torch.randn(B, T, HV, V, device=device).to(bf)
    h0 = torch.randn(N, HV, K, V, device=device)
    dht = torch.randn(N, HV, K, V, device=device)
    return dict(qg=qg, kg=kg, w=w, g=g, do=do, dv=dv, h0=h0, dht=dht, scale=K ** -0.5)


def make_wy(r, device, lay=None):
    """wy_dqkg's inputs as chunk_kda's backward hands them over (l2-normalised q, k; fp32 beta after the
    sigmoid; A lower triangular with a unit diagonal, as the WY inverse)."""
    import torch
    import torch.nn.functional as F
    B, T, H, HV, K, V = r.B, r.T, r.H, r.HV, r.K, r.V
    lay = lay or seq_layout(B, T, device=device)
    bf = torch.bfloat16
    q = F.normalize(torch.randn(B, T, H, K, device=device), dim=-1).to(bf)
    k = F.normalize(torch.randn(B, T, H, K, device=device), dim=-1).to(bf)
    v, v_new, do, dv = (torch.randn(B, T, HV, V, device=device).to(bf) for _ in range(4))
    g = chunk_gate((B, T, HV, K), device, lay)
    beta = torch.sigmoid(torch.randn(B, T, HV, device=device))
    ar = torch.arange(CHUNK, device=device)
    pos = lay["pos"][:, None, None]
    A = (torch.randn(B * T, HV, CHUNK, device=device) * 0.1).mul_((ar[None, None, :] < pos).float())
    A = (A + (ar[None, None, :] == pos).float()).to(bf).reshape(B, T, HV, CHUNK)
    NT = lay["NT"]
    Bh = 1 if lay["N"] != B else B
    h = (torch.randn(Bh, NT // Bh, HV, K, V, device=device) * 0.1).to(bf)
    dh = (torch.randn(Bh, NT // Bh, HV, K, V, device=device) * 0.1).to(bf)
    return dict(q=q, k=k, v=v, v_new=v_new, g=g, beta=beta, A=A, h=h, do=do, dh=dh, dv=dv, scale=K ** -0.5)


def make_aqk(r, device, lay):
    """chunk_kda's Aqk [B,T,HV,64] (bf16) for the dAv rows: 0.1 randn on and below each chunk row's diagonal,
    zeros above (lay: seq_layout)."""
    import torch
    ar = torch.arange(CHUNK, device=device)
    lower = (ar[None, None, :] <= lay["pos"][:, None, None]).float()
    Aqk = (torch.randn(r.B * r.T, r.HV, CHUNK, device=device) * 0.1).mul_(lower).to(torch.bfloat16)
    return Aqk.reshape(r.B, r.T, r.HV, CHUNK)


def make_fwdh(r, device, lay=None):
    """fwd_h's inputs as chunk_kda_bwd hands them over, scaled so the scan stays bounded over any T: kg with
    rows of norm 0.5 [B,T,H,K], w 0.02 randn, u randn (bf16), the cumsummed gate (fp32, chunk_gate) and h0."""
    import torch
    import torch.nn.functional as F
    B, T, H, HV, K, V = r.B, r.T, r.H, r.HV, r.K, r.V
    lay = lay or seq_layout(B, T, device=device)
    bf = torch.bfloat16
    kg = (F.normalize(torch.randn(B, T, H, K, device=device), dim=-1) * 0.5).to(bf)
    w = (torch.randn(B, T, HV, K, device=device) * 0.02).to(bf)
    u = torch.randn(B, T, HV, V, device=device).to(bf)
    g = chunk_gate((B, T, HV, K), device, lay)
    h0 = torch.randn(lay["N"], HV, K, V, device=device)
    return dict(kg=kg, w=w, u=u, g=g, h0=h0)


# ------------------------------------------------------------- fla's stages

def fla_intra(fla, s, cu=None, ci=None):
    """fla's chunk_kda_bwd_intra on an input set of make_intra -> (dq, dk, db, dg) (cu, ci: varlen)."""
    return fla["intra"](s["q"], s["k"], s["g"], s["beta"], s["dAqk"], s["dAkk"], s["dq"], s["dk"], s["db"],
                        s["dg"], cu_seqlens=cu, chunk_indices=ci, chunk_size=CHUNK, safe_gate=False)


def fla_dhu(fla, s, cu=None, ci=None, co=None):
    """fla's chunk_gated_delta_rule_bwd_dhu on an input set of make_dhu -> (dh, dh0, dv2)."""
    kw = {} if cu is None else dict(cu_seqlens=cu, chunk_indices=ci, chunk_offsets=co)
    return fla["dhu"](q=s["qg"], k=s["kg"], w=s["w"], do=s["do"], dv=s["dv"], gk=s["g"], h0=s["h0"],
                      dht=s["dht"], scale=s["scale"], chunk_size=CHUNK, **kw)


def fla_dav(fla, s, Aqk, cu=None, ci=None):
    """fla's chunk_kda_bwd_dAv as chunk_kda_bwd calls it (v = v_new) on an input set of make_wy -> (dA, dv)."""
    kw = {} if cu is None else dict(cu_seqlens=cu, chunk_indices=ci)
    return fla["dav"](s["q"], s["k"], s["v_new"], s["do"], A=Aqk, scale=s["scale"], chunk_size=CHUNK, **kw)


def fla_gate_rwu(fla, s, cu=None, ci=None):
    """fla's kda_gate_chunk_cumsum (the safe gate, bound -5) and recompute_w_u_fwd as chunk_kda_bwd calls them,
    on a make_wy set with g_raw, A_log, dt_bias -> (gk, w, u, qg, kg)."""
    kw = {} if cu is None else dict(cu_seqlens=cu, chunk_indices=ci)
    gk = fla["gate"](g=s["g_raw"], A_log=s["A_log"], dt_bias=s["dt_bias"], scale=RCP_LN2, chunk_size=CHUNK,
                     lower_bound=-5.0, **kw)
    return (gk,) + tuple(fla["rwu"](q=s["q"], k=s["k"], v=s["v"], beta=s["beta"], A=s["A"], gk=gk, **kw))


def fla_fwdh(fla, s, cu=None, ci=None, co=None):
    """fla's chunk_gated_delta_rule_fwd_h as chunk_kda_bwd calls it, on a make_fwdh set -> (h, v_new, None)."""
    kw = {} if cu is None else dict(cu_seqlens=cu, chunk_indices=ci, chunk_offsets=co)
    return fla["fwdh"](k=s["kg"], w=s["w"], u=s["u"], gk=s["g"], initial_state=s["h0"], output_final_state=False,
                       chunk_size=CHUNK, **kw)


def fla_wy(fla, s, cu=None, ci=None, co=None):
    """fla's chunk_kda_bwd_wy_dqkg_fused on an input set of make_wy -> (dq, dk, dv, db, dg, dA)."""
    kw = {} if cu is None else dict(cu_seqlens=cu, chunk_indices=ci, chunk_offsets=co)
    return fla["wy"](s["q"], s["k"], s["v"], s["v_new"], s["g"], s["beta"], s["A"], s["h"], s["do"], s["dh"],
                     s["dv"], scale=s["scale"], chunk_size=CHUNK, **kw)


# ------------------------------------------------------------------- timing

class Timer:
    def __init__(self, iters, warmup, pad_cycles):
        self.iters, self.warmup, self.pad = iters, warmup, pad_cycles

    def __call__(self, fns):
        """Median and min ms of fns[i % len(fns)]() over self.iters, after self.warmup calls.
        Each timed call is preceded by a GPU spin (torch.cuda._sleep) so that the host's launch
        overhead is hidden behind it and only device time is counted (as triton's do_bench)."""
        import torch
        n = len(fns)
        for i in range(max(self.warmup, n)):
            fns[i % n]()
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(self.iters)]
        sleep = getattr(torch.cuda, "_sleep", None)
        for i, (s, e) in enumerate(ev):
            if sleep is not None and self.pad > 0:
                sleep(self.pad)
            s.record()
            fns[i % n]()
            e.record()
        torch.cuda.synchronize()
        ts = sorted(s.elapsed_time(e) for s, e in ev)
        return ts[len(ts) // 2], ts[0]


def nsets_for(nbytes, L2=50e6):
    """Input sets to rotate through: several when one set is small enough that L2 could flatter."""
    return 1 if nbytes >= 20 * L2 else 3


# ---------------------------------------------------------------- fla import

def import_fla():
    os.environ.setdefault("FLA_DISABLE_BACKEND_DISPATCH", "1")
    try:
        import inspect
        from fla.ops.kda.chunk_intra import chunk_kda_bwd_intra
        from fla.ops.common.chunk_delta_h import chunk_gated_delta_rule_bwd_dhu, chunk_gated_delta_rule_fwd_h
        from fla.ops.kda.chunk_bwd import chunk_kda_bwd_dAv, chunk_kda_bwd_wy_dqkg_fused
        from fla.ops.utils import chunk_local_cumsum
        from fla.ops.utils.index import prepare_chunk_indices, prepare_chunk_offsets
        from fla.ops.kda.gate import kda_gate_chunk_cumsum
        from fla.ops.kda.wy_fast import recompute_w_u_fwd
        try:
            import fla
            ver = getattr(fla, "__version__", "?")
        except Exception:
            ver = "?"
        si = inspect.signature(chunk_kda_bwd_intra)
        sd = inspect.signature(chunk_gated_delta_rule_bwd_dhu)
        for name, sig, need in (("chunk_kda_bwd_intra", si, ("q", "k", "g", "beta", "dAqk", "dAkk", "dq", "dk",
                                                            "db", "dg", "chunk_size", "safe_gate", "cu_seqlens",
                                                            "chunk_indices")),
                                ("chunk_gated_delta_rule_bwd_dhu", sd, ("q", "k", "w", "do", "dv", "gk", "h0",
                                                                       "dht", "scale", "chunk_size", "cu_seqlens",
                                                                       "chunk_indices", "chunk_offsets"))):
            missing = [p for p in need if p not in sig.parameters]
            if missing:
                raise ImportError(f"fla {ver}: {name}{sig} lacks {missing}")
        order = list(si.parameters)[:10]
        if order != ["q", "k", "g", "beta", "dAqk", "dAkk", "dq", "dk", "db", "dg"]:
            raise ImportError(f"fla {ver}: chunk_kda_bwd_intra positional order changed: {order}")
        print(f"fla {ver}: chunk_kda_bwd_intra{si}")
        print(f"fla {ver}: chunk_gated_delta_rule_bwd_dhu{sd}")
        return dict(intra=chunk_kda_bwd_intra, dhu=chunk_gated_delta_rule_bwd_dhu, cumsum=chunk_local_cumsum,
                    wy=chunk_kda_bwd_wy_dqkg_fused, dav=chunk_kda_bwd_dAv, gate=kda_gate_chunk_cumsum,
                    rwu=recompute_w_u_fwd, fwdh=chunk_gated_delta_rule_fwd_h,
                    chunk_indices=prepare_chunk_indices, chunk_offsets=prepare_chunk_offsets, version=ver)
    except Exception as e:  # ImportError, or triton/torch trouble inside fla's import
        print(f"fla not available ({type(e).__name__}: {e}); running kdart only")
        return None


# ------------------------------------------------------------------- output

def dump_json(path, meta, results):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(dict(meta, results=results), f, indent=1)
    os.replace(tmp, path)


def fmt(x, f):
    return "-" if x is None else format(x, f)


def print_table(hdr, lines):
    """A markdown table of the rows lines (tuples of str) under hdr, columns padded."""
    w = [max(len(str(x)) for x in col) for col in zip(hdr, *lines)]
    print("| " + " | ".join(h.ljust(n) for h, n in zip(hdr, w)) + " |")
    print("|" + "|".join("-" * (n + 2) for n in w) + "|")
    for ln in lines:
        print("| " + " | ".join(str(x).ljust(n) for x, n in zip(ln, w)) + " |")


# ---------------------------------------------------------------------- CUDA

def cuda_setup():
    """torch, the CUDA device and kdart's environment (kernel sources of this tree), or None without a GPU."""
    import torch
    if not torch.cuda.is_available():
        print("no CUDA device: this benchmark runs on the GPU machine", file=sys.stderr)
        return None
    # The library finds its kernel sources through KDART_KERNEL_DIR when the
    # build-time source path does not exist here (a tree copied to another machine).
    os.environ.setdefault("KDART_KERNEL_DIR", os.path.join(ROOT, "kernel_src"))
    os.environ.setdefault("KDART_LOG", "warn")  # cache trouble and the like go to stderr
    dev = torch.device("cuda")
    torch.cuda.init()
    torch.empty(1, device=dev)  # make the primary context current before kdart looks for one
    return dev
