#!/usr/bin/env python3
"""bench/varlen.py: kdart against fla on variable-length (packed, cu_seqlens) batches and any T.

The rows: B1 T65536 HK16 HV32 of documents averaging 1K tokens, B1 T32768 H32 of 8 sequences,
1000 sequences of 1..200 tokens (H = HV = 16), and the fixed-length B2 T8191 and T4160 (H16), all
K = V = 128, bf16 io.  For each row and stage (bwd_intra, bwd_intra with fold_dg, bwd_dhu) it runs fla's
varlen path (cu_seqlens with fla's prepare_chunk_indices / prepare_chunk_offsets passed, so fla does not
synchronize either) and kdart through the public package kdart.torch with the same index tensors,
checks the outputs (relative RMS vs fla; fold_dg's dg vs fla's dg after
chunk_local_cumsum(dg, 64, reverse=True, cu_seqlens=...)), times both with CUDA events (median of
--iters), and times kdart on a fixed-length batch of the same total tokens (the row's "fixed" reference,
B1 without cu_seqlens) in the same run, to give kdart's time per token relative to fixed length.
Targets printed next to the ratios: bwd_intra >= 4x fla, bwd_dhu >= 1.3x, varlen within 5% of fixed per token.

Shares the input recipe, timer, fla calls and table with bench/side_by_side.py through bench/common.py
(also reachable as `side_by_side.py --varlen`).  `--help` and `--list` work without torch; `--check-inputs` checks the
input builders on the CPU (torch, and fla's prepare_chunk_indices if fla imports) without a GPU.
"""
import argparse
import math
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import (CHUNK, MISMATCH_AT, ROOT, Row, Timer, all_finite, cuda_setup, dhu_bytes, dump_json,  # noqa: E402
                    fla_dhu, fla_intra, fmt, import_fla, intra_bytes, make_dhu, make_intra, nsets_for, print_table,
                    rel_rms, seq_layout)

TARGET = {"bwd_intra": 4.0, "bwd_intra fold": 4.0, "bwd_dhu": 1.3}
PER_TOKEN_TARGET = 1.05  # varlen time per token within 5% of fixed length's


# ------------------------------------------------------------ sequence lengths (seeded, host-side)

def doc_lengths(total, mean, seed):
    """Document lengths drawn from a lognormal of mean `mean` (sigma 1), the last one cut so the sum is total."""
    rng = random.Random(seed)
    sigma = 1.0
    mu = math.log(mean) - sigma * sigma / 2
    out, left = [], total
    while left > 0:
        n = min(left, max(1, int(round(rng.lognormvariate(mu, sigma)))))
        out.append(n)
        left -= n
    return out


def split_lengths(total, n, seed):
    """n sequences of sum total at seeded random cuts (not multiples of 64, so chunks end mid-sequence)."""
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, total), n - 1))
    return [b - a for a, b in zip([0] + cuts, cuts + [total])]


def uniform_lengths(n, lo, hi, seed):
    rng = random.Random(seed)
    return [rng.randint(lo, hi) for _ in range(n)]


class VRow(Row):
    """A shape row; lens: packed sequence lengths (B = 1, sum T) or None (B sequences of T);
    ref: the fixed-length row of the same total tokens whose kdart time per token is the reference."""

    def __init__(self, name, B, T, H, HV, K, V, lens=None, ref=None, note=""):
        super().__init__(name, B, T, H, HV, K, V, note=note)
        self.lens, self.ref = lens, ref

    def shape_str(self):
        s = super().shape_str()
        if self.lens is None:
            return s
        return f"{s},N{len(self.lens)}"


def fixed(name, B, T, H, HV, K=128, V=128):
    return VRow(name, B, T, H, HV, K, V)


def make_rows():
    docs = doc_lengths(65536, 1024, seed=35)  # 63 documents, mean 1040
    seq8 = split_lengths(32768, 8, seed=2)
    short = uniform_lengths(1000, 1, 200, seed=3)
    docs256 = doc_lengths(32768, 1024, seed=36)
    return [
        VRow("docs_t65536_hk16_hv32", 1, 65536, 16, 32, 128, 128, lens=docs,
             ref=fixed("fixed_t65536_hk16_hv32", 1, 65536, 16, 32),
             note=f"documents of mean ~1K (lognormal sigma 1, seed 35): {len(docs)} of {min(docs)}..{max(docs)}"),
        VRow("seq8_t32768_h32", 1, 32768, 32, 32, 128, 128, lens=seq8,
             ref=fixed("fixed_t32768_h32", 1, 32768, 32, 32), note=f"8 sequences (seed 2): {seq8}"),
        VRow("seq1000_1to200_h16", 1, sum(short), 16, 16, 128, 128, lens=short,
             ref=fixed(f"fixed_t{sum(short)}_h16", 1, sum(short), 16, 16),
             note=f"1000 sequences uniform 1..200 (seed 3), T = {sum(short)}"),
        VRow("b2_t8191_h16", 2, 8191, 16, 16, 128, 128, ref=fixed("b2_t8192_h16", 2, 8192, 16, 16),
             note="fixed length, partial last chunk (63 rows); reference T8192 (per token)"),
        VRow("b2_t4160_h16", 2, 4160, 16, 16, 128, 128,
             note="fixed length T = 65 x 64 (no power of two; no reference row)"),
        VRow("docs_t32768_h16_k256", 1, 32768, 16, 16, 256, 256, lens=docs256,
             ref=fixed("fixed_t32768_h16_k256", 1, 32768, 16, 16, 256, 256),
             note=f"K = V = 256, documents of mean ~1K (seed 36): {len(docs256)} of "
                  f"{min(docs256)}..{max(docs256)}"),
    ]


def select(rows, spec):
    if not spec:
        return rows
    out = []
    for tok in (t.strip() for t in spec.split(",") if t.strip()):
        m = [r for i, r in enumerate(rows) if tok == str(i) or tok.lower() == r.name.lower()]
        if not m:
            raise SystemExit(f"--rows: no row {tok!r} (see --list)")
        out += [r for r in m if r not in out]
    return out


# ------------------------------------------------------------ index tensors

def cu_tensor(lens, dtype, device):
    import torch
    c = [0]
    for n in lens:
        c.append(c[-1] + n)
    return torch.tensor(c, dtype=dtype, device=device)


def chunk_index_tensors(lens, dtype, device):
    """(chunk_indices [NT,2], chunk_offsets [N+1]) as fla defines them, built on the host from lens."""
    import torch
    ci, co = [], [0]
    for n, L in enumerate(lens):
        nc = -(-L // CHUNK)
        ci += [(n, c) for c in range(nc)]
        co.append(co[-1] + nc)
    return (torch.tensor(ci, dtype=dtype, device=device).reshape(-1, 2),
            torch.tensor(co, dtype=dtype, device=device))


def indices(r, fla, dtype, device, res):
    """cu_seqlens, chunk_indices, chunk_offsets for row r (None x 3 at fixed length); fla's own
    prepare_chunk_indices/offsets when fla is there (checked against ours: flag INDEX_DIFF)."""
    if r.lens is None:
        return None, None, None
    cu = cu_tensor(r.lens, dtype, device)
    ci, co = chunk_index_tensors(r.lens, dtype, device)
    if fla is not None and "chunk_indices" in fla:
        fci, fco = fla["chunk_indices"](cu, CHUNK), fla["chunk_offsets"](cu, CHUNK)
        if not (fci.shape == ci.shape and bool((fci.long() == ci.long()).all()) and fco.shape == co.shape
                and bool((fco.long() == co.long()).all())):
            res["flags"].append("INDEX_DIFF")
        ci, co = fci.to(dtype).contiguous(), fco.to(dtype).contiguous()
    return cu, ci, co


# ------------------------------------------------------------ the stages

def kdart_intra(kt, s, fold, cu, ci):
    return kt.bwd_intra(s["q"], s["k"], s["g"], s["beta"], s["dAqk"], s["dAkk"], s["dq"], s["dk"], s["db"],
                        s["dg"], fold_dg=fold, cu_seqlens=cu, chunk_indices=ci)


def kdart_dhu(kt, s, cu, ci, co):
    return kt.bwd_dhu(s["qg"], s["kg"], s["w"], s["do"], s["dv"], s["g"], h0=s["h0"], dht=s["dht"],
                      scale=s["scale"], cu_seqlens=cu, chunk_indices=ci, chunk_offsets=co)


STAGES = {  # name: (input builder, bytes, output names in return order)
    "bwd_intra": (make_intra, lambda r, lay: intra_bytes(r), ("dq", "dk", "db", "dg")),
    "bwd_intra fold": (make_intra, lambda r, lay: intra_bytes(r), ("dq", "dk", "db", "dg")),
    "bwd_dhu": (make_dhu, lambda r, lay: dhu_bytes(r, NT=lay["NT"], N=lay["N"]), ("dh", "dh0", "dv2")),
}


def calls(stage, ctx, cu, ci, co):
    """(kdart call, fla call) of one input set for this stage."""
    kt, fla = ctx["kt"], ctx["fla"]
    if stage == "bwd_dhu":
        return (lambda s: kdart_dhu(kt, s, cu, ci, co)), (lambda s: fla_dhu(fla, s, cu, ci, co))
    if stage == "bwd_intra":
        return (lambda s: kdart_intra(kt, s, False, cu, ci)), (lambda s: fla_intra(fla, s, cu, ci))

    def fla_fold(s):  # what fold_dg fuses: fla's intra, then its reverse chunk-local cumsum of dg
        dq, dk, db, dg = fla_intra(fla, s, cu, ci)
        return dq, dk, db, fla["cumsum"](dg, CHUNK, reverse=True, cu_seqlens=cu, chunk_indices=ci)
    return (lambda s: kdart_intra(kt, s, True, cu, ci)), fla_fold


def kdart_ms(stage, r, ctx, cu=None, ci=None, co=None):
    """kdart's median ms for row r (no fla, no checks): the fixed-length reference."""
    import torch
    build, nbytes, _ = STAGES[stage]
    lay = seq_layout(r.B, r.T, r.lens, ctx["device"])
    sets = [build(r, ctx["device"], lay) for _ in range(nsets_for(nbytes(r, lay)))]
    kd, _ = calls(stage, ctx, cu, ci, co)
    ms, _ = ctx["timer"]([lambda s=s: kd(s) for s in sets])
    del sets
    torch.cuda.empty_cache()
    return ms


def run_stage(stage, r, ctx):
    import torch
    fla, dev, timer = ctx["fla"], ctx["device"], ctx["timer"]
    build, nbytes, names = STAGES[stage]
    lay = seq_layout(r.B, r.T, r.lens, dev)
    res = dict(stage=stage, row=r.name, shape=r.shape_str(), N=lay["N"], NT=lay["NT"], tokens=r.B * r.T,
               bytes=nbytes(r, lay), checks={}, flags=[])
    cu, ci, co = indices(r, fla, ctx["idx_dtype"], dev, res)
    sets = [build(r, dev, lay) for _ in range(nsets_for(res["bytes"]))]
    res["nsets"] = len(sets)
    kd, fl = calls(stage, ctx, cu, ci, co)
    t0 = time.perf_counter()
    ko = kd(sets[0])  # prepares (compiles or loads) the specialization
    torch.cuda.synchronize()
    res["kdart_first_call_s"] = time.perf_counter() - t0
    st = ctx["kt"].device_status()
    if st:
        res["flags"].append(f"DEVERR:{st}")
    for n, t in zip(names, ko):
        if t is not None and not all_finite(t):
            res["flags"].append(f"NONFINITE:{n}")
    res["kdart_ms"], res["kdart_min_ms"] = timer([lambda s=s: kd(s) for s in sets])
    if fla is not None:
        try:
            t0 = time.perf_counter()
            fo = fl(sets[0])  # autotunes on a new shape
            torch.cuda.synchronize()
            res["fla_first_call_s"] = time.perf_counter() - t0
            for n, a, b in zip(names, ko, fo):
                if a is not None and b is not None:
                    res["checks"][n] = rel_rms(a, b)
            del fo
            res["fla_ms"], res["fla_min_ms"] = timer([lambda s=s: fl(s) for s in sets])
        except Exception as e:  # fla broke on this row: keep kdart's numbers
            print(f"  fla failed: {type(e).__name__}: {e}", flush=True)
            res["fla_error"] = f"{type(e).__name__}: {e}"
            res["flags"].append("FLA_ERROR")
            res.pop("fla_ms", None)
    del ko, sets
    torch.cuda.empty_cache()
    if r.ref is not None:
        key = (stage, r.ref.name)
        if key not in ctx["ref_ms"]:
            ctx["ref_ms"][key] = kdart_ms(stage, r.ref, ctx)
        res["fixed_row"], res["fixed_kdart_ms"] = r.ref.name, ctx["ref_ms"][key]
        res["fixed_tokens"] = r.ref.B * r.ref.T
        res["per_token_vs_fixed"] = (res["kdart_ms"] / res["tokens"]) / (res["fixed_kdart_ms"] / res["fixed_tokens"])
    return res


# ------------------------------------------------------------ the CPU check of the input builders

def check_inputs(rows, idx_dtype_name):
    """Builds every row's layout, index tensors and (at reduced heads) inputs on the CPU and checks them."""
    import torch
    dt = getattr(torch, idx_dtype_name)
    fla = None
    try:
        os.environ.setdefault("FLA_DISABLE_BACKEND_DISPATCH", "1")
        from fla.ops.utils.index import prepare_chunk_indices, prepare_chunk_offsets
        fla = dict(chunk_indices=prepare_chunk_indices, chunk_offsets=prepare_chunk_offsets)
    except Exception as e:
        print(f"fla's prepare_chunk_indices not importable ({type(e).__name__}: {e}): own helper only")
    bad = 0

    def ok(cond, what):
        nonlocal bad
        if not cond:
            bad += 1
        print(f"  {'ok  ' if cond else 'FAIL'} {what}")

    torch.manual_seed(0)
    for r in rows:
        print(f"[{r.name}] {r.shape_str()}: {r.note}")
        lay = seq_layout(r.B, r.T, r.lens)
        lens = r.lens or [r.T] * r.B
        ok(sum(lens) == r.B * r.T and min(lens) >= 1, f"lengths sum {sum(lens)} == B*T {r.B * r.T}, "
           f"N {len(lens)}, mean {sum(lens) / len(lens):.0f}")
        ok(lay["NT"] == sum(-(-n // CHUNK) for n in lens), f"NT {lay['NT']}")
        if r.lens is not None:
            res = dict(flags=[])
            cu, ci, co = indices(r, fla, dt, "cpu", res)
            ok(int(cu[-1]) == r.T and cu.dtype == dt and cu.shape[0] == len(lens) + 1, "cu_seqlens")
            ok(ci.shape == (lay["NT"], 2) and co.shape == (len(lens) + 1,) and int(co[-1]) == lay["NT"],
               f"chunk_indices {tuple(ci.shape)}, chunk_offsets {tuple(co.shape)}")
            _, own_co = chunk_index_tensors(r.lens, dt, "cpu")
            ok(not res["flags"], "own chunk_indices/offsets == fla's" if fla else "fla not there: not compared")
            rows_of = own_co[ci[:, 0].long()] + ci[:, 1]
            ok(bool((rows_of == torch.arange(lay["NT"])).all()), "chunk_offsets[n] + c == row")
            ok(bool((lay["row"] == own_co[torch.repeat_interleave(torch.arange(len(lens)), torch.tensor(lens))]
                     + (torch.arange(r.T) - cu[:-1].long().repeat_interleave(torch.tensor(lens))) // CHUNK).all()),
               "token -> chunk row")
        # inputs at reduced size (2 value heads, K = V = 16 would break nothing in the builders)
        small = VRow(r.name, r.B, r.T, min(r.H, 2), min(r.H, 2) * (r.HV // r.H), 16, 16, r.lens)
        s = make_intra(small, "cpu", lay)
        ok(s["q"].shape == (r.B, r.T, small.H, 16) and s["g"].shape == (r.B, r.T, small.HV, 16)
           and s["dAqk"].shape == (r.B, r.T, small.HV, CHUNK) and s["db"].shape == (r.B, r.T, small.HV),
           "intra shapes")
        g = s["g"].reshape(-1, small.HV, 16)
        pos = lay["pos"]
        first = pos == 0
        # the gate restarts at every chunk start: g there is one step (-0.13..-6 in log2 units, about)
        ok(bool((g[first] < 0).all() and (g[first] > -12).all()), "g restarts at each chunk start")
        nxt = torch.nonzero(~first[1:]).squeeze(1) + 1  # tokens continuing their chunk
        ok(bool((g[nxt] < g[nxt - 1]).all()), "g decreases inside a chunk")
        col = torch.arange(CHUNK)
        dA = s["dAqk"].reshape(-1, small.HV, CHUNK)
        ok(bool((dA[(col[None, None, :] > pos[:, None, None]).expand_as(dA)] == 0).all()),
           "dAqk zero for s > r (own chunk)")
        dA = s["dAkk"].reshape(-1, small.HV, CHUNK)
        ok(bool((dA[(col[None, None, :] >= pos[:, None, None]).expand_as(dA)] == 0).all()), "dAkk zero for s >= r")
        d = make_dhu(small, "cpu", lay)
        ok(d["h0"].shape == (len(lens), small.HV, 16, 16) and d["dht"].shape == d["h0"].shape
           and d["do"].shape == (r.B, r.T, small.HV, 16), "dhu shapes (h0, dht [N,HV,K,V])")
        del s, d, g
    print(f"check-inputs: {bad} failure(s)")
    return 1 if bad else 0


# ------------------------------------------------------------ main

def main(argv=None):
    ap = argparse.ArgumentParser(
        description="kdart vs fla on variable-length batches (cu_seqlens) and odd T: bwd_intra, bwd_intra "
                    "fold_dg, bwd_dhu; fla's varlen path and kdart.torch with fla's chunk_indices, plus kdart on "
                    "a fixed-length batch of the same tokens.")
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "libkdart.so"),
                    help="libkdart.so for kdart.torch (sets KDART_LIBRARY unless set; default build/libkdart.so)")
    ap.add_argument("--rows", default="", help="comma-separated row indices or names (see --list); default: all")
    ap.add_argument("--stage", choices=("all", "intra", "fold", "dhu"), default="all",
                    help="which stages (default all: bwd_intra, bwd_intra fold, bwd_dhu)")
    ap.add_argument("--no-fla", action="store_true", help="kdart only (no fla runs, no agreement checks)")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE (rewritten after every stage)")
    ap.add_argument("--iters", type=int, default=20, help="timed iterations per measurement (median; default 20)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed calls before timing (default 1, at least one "
                    "per input set)")
    ap.add_argument("--pad-cycles", type=int, default=1_000_000,
                    help="GPU spin before each timed call to hide host launch overhead (default 1e6); 0 disables")
    ap.add_argument("--budget-s", type=float, default=0,
                    help="start no new row (or stage) after this many seconds and print what was skipped; 0: none")
    ap.add_argument("--idx-dtype", choices=("int32", "int64"), default="int32",
                    help="dtype of cu_seqlens / chunk_indices / chunk_offsets (default int32)")
    ap.add_argument("--list", action="store_true", help="list the rows and exit")
    ap.add_argument("--check-inputs", action="store_true",
                    help="check the input builders and index tensors on the CPU (no GPU needed) and exit")
    args = ap.parse_args(argv)

    rows = select(make_rows(), args.rows)
    if args.list:
        for i, r in enumerate(make_rows()):
            ref = f"fixed ref {r.ref.name}" if r.ref else "no fixed ref"
            print(f"{i}  {r.name:22s} {r.shape_str():26s} {ref}; {r.note[:90]}")
        return 0
    if args.check_inputs:
        return check_inputs(rows, args.idx_dtype)

    import torch
    dev = cuda_setup()
    if dev is None:
        return 3
    os.environ.setdefault("KDART_LIBRARY", os.path.abspath(args.lib))
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import kdart.torch as kt
    fla = None if args.no_fla else import_fla()
    props = torch.cuda.get_device_properties(dev)
    print(f"device {props.name}; torch {torch.__version__}; kdart.torch ({os.environ['KDART_LIBRARY']}); "
          f"fla {fla['version'] if fla else 'off'}; KDART_CACHE_DIR={os.environ.get('KDART_CACHE_DIR', '(default)')}",
          flush=True)
    timer = Timer(args.iters, args.warmup, args.pad_cycles)
    ctx = dict(kt=kt, fla=fla, timer=timer, device=dev, idx_dtype=getattr(torch, args.idx_dtype), ref_ms={})
    stages = [s for s, k in (("bwd_intra", "intra"), ("bwd_intra fold", "fold"), ("bwd_dhu", "dhu"))
              if args.stage in ("all", k)]
    meta = dict(device=props.name, torch=torch.__version__, fla=fla["version"] if fla else None, iters=args.iters,
                warmup=args.warmup, pad_cycles=args.pad_cycles, mismatch_at=MISMATCH_AT, targets=TARGET,
                per_token_target=PER_TOKEN_TARGET, idx_dtype=args.idx_dtype,
                rows={r.name: dict(shape=r.shape_str(), lens=r.lens, note=r.note,
                                   fixed=r.ref.name if r.ref else None) for r in rows}, skipped=[])
    results, failed, fatal = [], False, False
    t_start = time.time()
    todo = [(r, st) for r in rows for st in stages]
    for i, (r, st) in enumerate(todo):
        if fatal:
            break
        if args.budget_s and time.time() - t_start > args.budget_s:
            meta["skipped"] = [f"{x.name}:{s}" for x, s in todo[i:]]
            print(f"--budget-s {args.budget_s:.0f} spent: skipping {', '.join(meta['skipped'])}", flush=True)
            break
        print(f"[{r.name}] {r.shape_str()} {st} (t={time.time() - t_start:.0f} s)", flush=True)
        try:
            res = run_stage(st, r, ctx)
        except Exception as e:  # report and go on
            failed = True
            res = dict(stage=st, row=r.name, shape=r.shape_str(), error=f"{type(e).__name__}: {e}")
            print(f"  ERROR {res['error']}", flush=True)
        try:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        except Exception as e:  # a kernel fault poisons the context
            print(f"  CUDA context lost ({type(e).__name__}: {e}); stopping", flush=True)
            res.setdefault("error", f"context lost: {e}")
            fatal = failed = True
        if "error" not in res:
            res["ratio"] = res["fla_ms"] / res["kdart_ms"] if "fla_ms" in res else None
            for n, v in res["checks"].items():
                if not math.isfinite(v) or v > MISMATCH_AT:
                    res["flags"].append(f"MISMATCH:{n}")
            if any(f.startswith(("MISMATCH", "NONFINITE", "DEVERR", "INDEX_DIFF")) for f in res["flags"]):
                failed = True
            chk = " ".join(f"{n}={v:.2e}" for n, v in res["checks"].items())
            print(f"  kdart {res['kdart_ms']:.3f} ms, fla {fmt(res.get('fla_ms'), '.3f')} ms, "
                  f"fixed {fmt(res.get('fixed_kdart_ms'), '.3f')} ms; rel-RMS vs fla: {chk or '-'} "
                  f"{' '.join(res['flags'])}", flush=True)
        results.append(res)
        if args.json:
            dump_json(args.json, meta, results)
    elapsed = time.time() - t_start

    def verdict(x, target, more_is_better=True):
        if x is None:
            return "-"
        good = x >= target if more_is_better else x <= target
        return f"{'ok' if good else 'MISS'} ({'>=' if more_is_better else '<='}{target:g})"

    print()
    hdr = ("stage", "row", "shape", "NT", "fla ms", "kdart ms", "fla/kdart", "target", "fixed kdart ms",
           "per token vs fixed", "target", "worst rel-RMS", "flags")
    lines = []
    for res in results:
        if "error" in res:
            lines.append((res["stage"], res["row"], res["shape"]) + ("-",) * 9 + ("ERROR",))
            continue
        worst = max((v if math.isfinite(v) else math.inf) for v in res["checks"].values()) if res["checks"] else None
        pt = res.get("per_token_vs_fixed")
        lines.append((res["stage"], res["row"], res["shape"], str(res["NT"]), fmt(res.get("fla_ms"), ".3f"),
                      f"{res['kdart_ms']:.3f}", fmt(res.get("ratio"), ".2f") + ("x" if res.get("ratio") else ""),
                      verdict(res.get("ratio"), TARGET[res["stage"]]), fmt(res.get("fixed_kdart_ms"), ".3f"),
                      fmt(pt, ".3f"), verdict(pt, PER_TOKEN_TARGET, False), fmt(worst, ".1e"),
                      ",".join(res["flags"])))
    print_table(hdr, lines)
    print(f"\nbf16 io, K = V = 128 (the last row 256), cu_seqlens {args.idx_dtype} with fla's chunk_indices/offsets passed to both; "
          f"median of {args.iters} CUDA-event timings after warm-up; 'bwd_intra fold': kdart fold_dg=1 vs fla intra + "
          f"chunk_local_cumsum(dg, reverse, cu_seqlens); per token vs fixed: (kdart ms / tokens) over the same for "
          f"the fixed-length row (B1 without cu_seqlens, same tokens; T8191: B2 T8192); {elapsed:.0f} s")
    if meta["skipped"]:
        print(f"skipped (budget): {', '.join(meta['skipped'])}")
    if args.json:
        meta["elapsed_s"] = elapsed
        dump_json(args.json, meta, results)
        print(f"wrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
