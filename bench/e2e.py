#!/usr/bin/env python3
"""bench/e2e.py: fla's chunk_kda forward + backward with and without kdart.fla, in one process.

For each configuration and shape: builds chunk_kda's inputs, warms both ways once (fla autotunes for
minutes on a new shape), then times the backward (CUDA events around .backward(), median of --iters)
without kdart and with kdart.fla enabled, and prints both and the ratio: first from an idle GPU (the
events then also hold the host's gaps between launches), then with the launches queued behind a spin
kernel (device time alone, as in a training step whose host runs ahead), with the host's own time per
backward call, the backward's peak memory (allocations over what its start held), and the share of the byte
floors (byte_floor: the backward's own inputs and gradients; kdart's whole-route layout); with --profile, also each
kernel's CUDA time per backward (torch.profiler, --profile-iters steps) of fla alone and with kdart,
grouped by stage, so that the share of what is left is visible.  Then the Python call overhead of each
op: kdart.torch.bwd_intra / bwd_dhu against the raw C call through ctypes with a prebuilt argument
struct (host time per call, median of batches; the GPU work queues behind).

Configurations (--configs):
  recipe  fla's test recipe: pre-computed fp32 log-space gates, post-sigmoid bf16 beta, no l2norm
  prod    the configuration people train with: use_qk_l2norm_in_kernel, use_gate_in_kernel with A_log
          and dt_bias, safe_gate with lower_bound -5, use_beta_sigmoid_in_kernel (bwd_intra gets fp32
          beta), initial and final state
  cudnn   the configuration cuDNN frontend's sm_90 KDA backward serves: fp32 log-space gates, post-sigmoid
          fp32 beta, no l2norm or gate in the kernel, K = V = 128, every shape packed (B rows of T tokens
          become B documents of one row, as its THD layout has them).  When cuDNN frontend 1.32
          (nvidia-cudnn-frontend, an optional peer: never a dependency of kdart) is importable, its
          kimi_delta_attention backward is timed beside fla's and kdart's on the same inputs.

Shapes (--shapes): b2_t8192_h32, prod8192 (B16 T8192 H16 K128 V256), packed_t32768_hv32 (B1, 7 packed
documents), b1_t32768_h32, b4_t4096_h16_hv32.

Needs torch, fla-core 0.6.0 and the kdart package (pip install ./python, or PYTHONPATH=python with
KDART_LIBRARY=build/libkdart.so).  `--help` works without torch.
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
os.environ.setdefault("FLA_DISABLE_BACKEND_DISPATCH", "1")

SHAPES = {  # name: B, T, H, HV, K, V, document lengths (packed into one row of T tokens) or None
    "b2_t8192_h32": (2, 8192, 32, 32, 128, 128, None),
    "prod8192": (16, 8192, 16, 16, 128, 256, None),
    "packed_t32768_hv32": (1, 32768, 32, 32, 128, 128, (8192, 2048, 6144, 4096, 1000, 7000, 4288)),
    "b1_t32768_h32": (1, 32768, 32, 32, 128, 128, None),
    "b4_t4096_h16_hv32": (4, 4096, 16, 32, 128, 128, None),
}
CONFIGS = ("recipe", "prod", "cudnn")
LOWER = -5.0

# kernel name fragments -> stage, for the per-stage profile (fla 0.6.0's Triton kernels and kdart's)
STAGES = (("kdart_bwd_intra", "bwd_intra (kdart)"), ("kdart_bwd_dhu", "bwd_dhu (kdart)"),
          ("kdart_chunk_rcumsum", "dg cumsum (kdart)"), ("kdart_wy_dqkg", "wy_dqkg (kdart)"),
          ("kdart_recompute_wu", "gate cumsum + recompute_w_u (kdart)"), ("kdart_bwd_dav", "bwd_dAv (kdart)"),
          ("kdart_fwd_h", "fwd_h (kdart; the forward's and the recompute's)"),
          ("kdart_bwd_post", "bwd_post: l2norm, gate, sigmoid bwd (kdart)"),
          ("wy_dqkg", "wy_dqkg_fused"), ("bwd_kernel_intra", "bwd_intra"),
          ("bwd_kernel_dhu", "bwd_dhu"), ("dAv", "bwd_dAv"), ("fwd_kernel_h", "fwd_h (recompute)"),
          ("recompute_w_u", "recompute_w_u"), ("gate_chunk_cumsum", "gate cumsum"), ("gate_bwd", "kda_gate_bwd"),
          ("l2norm_bwd", "l2norm_bwd"), ("l2norm_fwd", "l2norm_fwd"), ("beta_sigmoid", "beta sigmoid"),
          ("chunk_local_cumsum", "dg cumsum"), ("cumsum", "cumsum"))


def inputs(B, T, H, HV, K, V, docs=None, config="recipe"):
    """(leaves, do, dht, kwargs of chunk_kda)."""
    import torch
    import torch.nn.functional as F
    dev, bf = "cuda", torch.bfloat16
    N = len(docs) if docs else B
    kw = dict(initial_state=None, output_final_state=True)
    if docs:
        assert sum(docs) <= T
        cu = [0]
        for n in docs:
            cu.append(cu[-1] + n)
        kw["cu_seqlens"] = torch.tensor(cu, dtype=torch.long, device=dev)
    h0 = torch.randn(N, HV, K, V, device=dev).requires_grad_(True)
    do = torch.randn(B, T, HV, V, device=dev).to(bf)
    dht = torch.randn(N, HV, K, V, device=dev)
    if config in ("recipe", "cudnn"):
        q = F.normalize(torch.rand(B, T, H, K, device=dev), dim=-1).to(bf).requires_grad_(True)
        k = F.normalize(torch.rand(B, T, H, K, device=dev), dim=-1).to(bf).requires_grad_(True)
        v = torch.rand(B, T, HV, V, device=dev).to(bf).requires_grad_(True)
        g = F.logsigmoid(torch.randn(B, T, HV, K, device=dev)).requires_grad_(True)
        beta = torch.randn(B, T, HV, device=dev).sigmoid()
        beta = (beta if config == "cudnn" else beta.to(bf)).requires_grad_(True)  # (cuDNN's: fp32)
        leaves = [q, k, v, g, beta, h0]
    else:  # the production flags: raw projections in bf16, the gate's parameters in fp32
        q = torch.randn(B, T, H, K, device=dev).to(bf).requires_grad_(True)
        k = torch.randn(B, T, H, K, device=dev).to(bf).requires_grad_(True)
        v = torch.randn(B, T, HV, V, device=dev).to(bf).requires_grad_(True)
        g = torch.randn(B, T, HV, K, device=dev).to(bf).requires_grad_(True)
        beta = torch.randn(B, T, HV, device=dev).to(bf).requires_grad_(True)
        A_log = torch.log(torch.empty(HV, device=dev).uniform_(1, 16)).requires_grad_(True)
        dt_bias = torch.randn(HV * K, device=dev).requires_grad_(True)
        leaves = [q, k, v, g, beta, h0, A_log, dt_bias]
        kw.update(A_log=A_log, dt_bias=dt_bias, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                  safe_gate=True, lower_bound=LOWER, use_beta_sigmoid_in_kernel=True)
    kw["initial_state"] = h0
    return leaves, do, dht, kw


COPY_TBS = 4.25  # the H200's copy bandwidth, TB/s (the floors' unit of time)


def byte_floor(B, T, H, HV, K, V, docs=None, config="prod"):
    """The backward's bytes, each tensor read or written once (analytic, in GB), as (io, layout):
    io: what any backward must read and write: q, k, v, the gate, beta, Aqk, Akk, do, dht, h0 (and the rstd's
    with l2norm in the kernel) in; dq, dk, dv, dg, dbeta, dh0 out.
    layout: what kdart's whole route moves, kernel by kernel (recompute_wu with the gate, fwd_h, bwd_dhu with
    the dAv fused, wy_dqkg with bwd_intra's terms, bwd_post), each of its tensors once per kernel: the floor
    of kdart's own stage layout (the intermediates w, u, qg, kg, h, v_new, dh, dv2 and the fp32 gradients
    included; the dA tiles that stay in L2 not)."""
    io = 2
    prod = config == "prod"
    N = len(docs) if docs else B
    n = B * T
    chunks = sum((d + 63) // 64 for d in docs) if docs else B * ((T + 63) // 64)
    qk, gk, vv, bb, aa = n * H * K, n * HV * K, n * HV * V, n * HV, n * HV * 64
    st, s0 = chunks * HV * K * V, N * HV * K * V
    g_in = io if prod else 4           # the raw gate (bf16) or the log gate / its cumsum (fp32)
    b_in = io if config != "cudnn" else 4  # beta as the user passes it
    b_k = 4 if config != "recipe" else io  # beta as the kernels read it (after the sigmoid: fp32)
    rstd = 2 * n * H * 4 if prod else 0
    io_bytes = (2 * qk + vv) * io + gk * g_in + bb * b_in + 2 * aa * io + vv * io + 2 * s0 * 4 + rstd \
        + (2 * qk + vv) * io + gk * g_in + bb * b_in + s0 * 4
    last = chunks * HV * K * 4  # the g row at each chunk's end (fwd_h, bwd_dhu)
    rwu = 2 * qk * io + vv * io + gk * g_in + bb * b_k + aa * io + (gk * 4 if prod else 0) + 3 * gk * io + vv * io
    fwdh = 2 * gk * io + vv * io + s0 * 4 + last + st * io + vv * io
    dhu = 3 * gk * io + vv * io + aa * io + s0 * 4 + last + st * io + vv * io + s0 * 4
    wy = 2 * qk * io + 4 * vv * io + gk * 4 + bb * b_k + aa * io + 2 * st * io + 3 * gk * 4 + vv * io + bb * 4
    post = 3 * gk * 4 + bb * 4 + 2 * qk * io + gk * g_in + bb * b_in  # the fp32 sums in, the gradients out
    if prod:  # the l2norm, gate and sigmoid backwards read q, k, the rstd's, the raw gate and beta's logits
        post += 2 * qk * io + rstd + gk * g_in + bb * b_in
    return io_bytes / 1e9, (rwu + fwdh + dhu + wy + post) / 1e9


def floor_ms(gb):
    return gb / COPY_TBS


def step(leaves, do, dht, kw):
    """One forward; returns a function running its backward from do and dht (the gradients of o and the final
    state, handed to autograd directly: a loss such as (o * do).sum() would add its own kernels)."""
    import torch
    from fla.ops.kda import chunk_kda
    q, k, v, g, beta = leaves[:5]
    o, ht = chunk_kda(q, k, v, g, beta, **kw)
    return lambda: torch.autograd.backward((o, ht), (do, dht))


QUEUE_SLEEP = 40_000_000  # torch.cuda._sleep cycles, about 20 ms: longer than any backward takes to enqueue


def cudnn_step(leaves, do, dht, kw):
    """As step, through cuDNN frontend's kimi_delta_attention (THD views of the same leaves, its [N, H, V, K]
    state as a transposed copy; do and dht laid out for it before the backward is timed)."""
    import torch
    from cudnn.linear_attention.ops import kimi_delta_attention
    q, k, v, g, beta, h0 = leaves[:6]
    thd = lambda x: x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])  # noqa: E731
    cu = kw["cu_seqlens"].to(torch.int32)
    o, ht = kimi_delta_attention(thd(q), thd(k), thd(v), thd(g), thd(beta), cu,
                                 initial_state=h0.transpose(-1, -2).contiguous(), output_final_state=True)
    do_t, dht_t = thd(do), dht.transpose(-1, -2).contiguous()
    return lambda: torch.autograd.backward((o, ht), (do_t, dht_t))


def cudnn_peer():
    """cuDNN frontend's KDA (when importable), else None with the reason printed once."""
    try:
        from cudnn.linear_attention.ops import kimi_delta_attention  # noqa: F401
    except Exception as e:  # noqa: BLE001  (an optional peer: any import failure means absent)
        print(f"  (cuDNN frontend not importable: {type(e).__name__}: {e}; its column is left out)", flush=True)
        return None
    return cudnn_step


def backward_ms(leaves, do, dht, kw, iters, queued=False, stepper=None):
    """Median ms of the backward between CUDA events.  queued=False: from an idle GPU, so the events also
    hold every gap in which the GPU waits for the host to launch the next kernel.  queued=True: a spin kernel
    is queued first and the start event behind it, so the backward's launches are all enqueued before the
    GPU reaches them (as in a training step whose host runs ahead): device time alone, kernels and their
    launch latencies.  Returns (ms, host ms per backward: the time the call takes on the host, which, with
    queued=True, is the host work alone; None when the spin ran out first)."""
    import torch
    ts, hs = [], []
    for _ in range(iters):
        backward = (stepper or step)(leaves, do, dht, kw)
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if queued:
            torch.cuda._sleep(QUEUE_SLEEP)
        s.record()
        t0 = time.perf_counter()
        backward()
        hs.append((time.perf_counter() - t0) * 1e3)
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
        for x in leaves:
            x.grad = None
    return statistics.median(ts), statistics.median(hs)


def backward_peak_mb(leaves, do, dht, kw, stepper=None):
    """The backward's peak memory: torch.cuda.max_memory_allocated during one backward over what was allocated
    when it started (the forward's saved tensors, the inputs), in MB; the issue's bar is kdart's at most fla's."""
    import torch
    backward = (stepper or step)(leaves, do, dht, kw)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    for x in leaves:
        x.grad = None
    return peak / 2**20


def stage_of(name):
    for frag, stage in STAGES:
        if frag in name:
            return stage
    return "other: " + name[:48]


def profile_backward(leaves, do, dht, kw, iters, stepper=None):
    """{stage: ms per backward}, the sum of each kernel's CUDA time in the backward (torch.profiler)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    backwards = [(stepper or step)(leaves, do, dht, kw) for _ in range(iters)]
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for backward in backwards:
            backward()
            for x in leaves:
                x.grad = None
        torch.cuda.synchronize()
    out = {}
    for ev in prof.key_averages():
        t = getattr(ev, "device_time_total", None)
        if t is None:
            t = getattr(ev, "cuda_time_total", 0)
        if t <= 0 or ev.key.startswith("ProfilerStep"):
            continue
        st = stage_of(ev.key)
        out[st] = out.get(st, 0.0) + t / 1e3 / iters
    return out


def gap_report(leaves, do, dht, kw, path):
    """One backward from an idle GPU under torch.profiler (host and device): writes the Chrome trace to path
    and returns (kernel ms, span ms from the first kernel's start to the last one's end, [(gap us, kernel
    before, kernel after)] of the idle gaps over 10 us, longest first)."""
    import json
    import torch
    from torch.profiler import ProfilerActivity, profile
    backward = step(leaves, do, dht, kw)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        backward()
        torch.cuda.synchronize()
    for x in leaves:
        x.grad = None
    prof.export_chrome_trace(path)
    with open(path) as f:
        evs = json.load(f)["traceEvents"]
    ks = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in evs
                if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    if not ks:
        return 0.0, 0.0, []
    gaps, end = [], ks[0][1]
    for (s0, e0, n0), (s1, e1, n1) in zip(ks, ks[1:]):
        if s1 - end > 10:
            gaps.append((s1 - end, stage_of(n0), stage_of(n1)))
        end = max(end, e1)
    busy = sum(e - s for s, e, _ in ks) / 1e3
    return busy, (end - ks[0][0]) / 1e3, sorted(gaps, reverse=True)


def print_profile(name, base, ours):
    stages = sorted(set(base) | set(ours), key=lambda s: -max(base.get(s, 0), ours.get(s, 0)))
    tb, to = sum(base.values()), sum(ours.values())
    print(f"  per-stage kernel time per backward, {name} (ms; fla alone | with kdart):")
    for s in stages:
        b, o = base.get(s, 0.0), ours.get(s, 0.0)
        print(f"    {s:34s} {b:8.3f} {100 * b / tb:5.1f}% | {o:8.3f} {100 * o / to:5.1f}%")
    print(f"    {'kernel total':34s} {tb:8.3f}        | {to:8.3f}         ratio {tb / to:.2f}", flush=True)


def host_us(fn, n=200, batches=15):
    """Host time per call, the GPU kept busy by a sleep kernel queued first: every call only enqueues (no
    wait on a full launch queue), so what is timed is the host side alone."""
    import torch
    out = []
    for _ in range(batches):
        torch.cuda.synchronize()
        torch.cuda._sleep(QUEUE_SLEEP)  # longer than n calls take to enqueue
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return statistics.median(out)


def overhead(row):
    """Host us per call: kdart.torch op vs the raw C call with a prebuilt struct (same shapes)."""
    import torch
    import kdart.torch as kt
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python", "tests"))
    from kda_ref import dhu_inputs, intra_inputs
    B, T, H, HV, K, V = row[:6]
    T = 1024  # (the host side does not depend on the shape)
    a = intra_inputs(B, T, H, HV, K, torch.bfloat16, "cuda")
    d, h0, dht = dhu_inputs(B, T, HV, K, V, torch.bfloat16, "cuda")
    kt.bwd_intra(*a)
    kt.bwd_dhu(*d, h0=h0, dht=dht, scale=0.1)
    torch.cuda.synchronize()
    res = {}
    for name, call, py_call, key in (
            ("bwd_intra", lambda: kt.bwd_intra(*a), lambda: kt._bwd_intra_impl(*a), "intra"),
            ("bwd_dhu", lambda: kt.bwd_dhu(*d, h0=h0, dht=dht, scale=0.1),
             lambda: kt._bwd_dhu_impl(*d, h0=h0, dht=dht, scale=0.1), "dhu")):
        # the Python path's plan holds the prebuilt struct of the raw calls; its last call's outputs, kept
        # alive here, are what the struct points at while the raw calls write them
        keep = py_call()
        plan = [p for kk, p in kt._thread_plans().items() if kk[3] == key][-1]  # the newest: these shapes
        st = kt._fast()
        fn, h, addr = st[key], st["handle"], plan.addr
        stream = torch.cuda.current_stream().cuda_stream
        raw = host_us(lambda: fn(h, addr, stream))
        op = host_us(call)
        outs = list(plan.outs.values()) if isinstance(plan.outs, dict) else plan.outs  # (bwd_dhu's: by name)
        alloc = host_us(lambda: [torch.empty(sh, dtype=dt, device="cuda") for sh, dt in outs])
        # the direct entry's own cost without kdart's call or the outputs: the same arguments with the last
        # tensor replaced by an int, which it refuses (None) after unpacking all the others
        direct = kt._XI if key == "intra" else kt._XD
        if direct is not None:
            args = list(a) + [False, False, None, None] if key == "intra" else list(d) + [h0, dht, 0.1, None, None, None, False]
            args[9 if key == "intra" else 5] = 3
            entry = host_us(lambda: direct(*args))
        else:
            entry = float("nan")
        res[name] = (op, raw, alloc, entry)
        del keep
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="b2_t8192_h32,prod8192,packed_t32768_hv32",
                    help="comma list of: " + ", ".join(SHAPES))
    ap.add_argument("--configs", default="prod,recipe", help="comma list of: " + ", ".join(CONFIGS))
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--profile", action="store_true", help="also the per-stage kernel times (torch.profiler)")
    ap.add_argument("--profile-iters", type=int, default=4)
    ap.add_argument("--trace", metavar="PREFIX",
                    help="also one backward each way under torch.profiler (host and device): the Chrome trace to "
                         "PREFIX_<config>_<shape>_<fla|kdart>.json and the GPU's idle gaps between kernels")
    ap.add_argument("--warm-only", action="store_true",
                    help="one forward+backward per shape each way at T <= 1024 (the same Triton specializations), "
                         "no timing: the workload of tools/triton_warm.py")
    ap.add_argument("--overhead-only", action="store_true", help="only the Python call overhead (no fla needed)")
    ap.add_argument("--no-overhead", action="store_true", help="skip the Python call overhead")
    ap.add_argument("--route", choices=("stages", "whole", "both"), default="both",
                    help="kdart.fla's route: its stage wrappers inside fla's backward, enable(whole=True): the "
                         "whole backward kdart's (kdart.torch.chunk_kda_bwd), or both, one after the other "
                         "(default)")
    args = ap.parse_args()
    routes = ("stages", "whole") if args.route == "both" else (args.route,)
    kopts = dict(whole=routes[-1] == "whole")  # kdart.fla.enabled's options (the route being timed)
    configs = [c for c in args.configs.split(",") if c]
    for c in configs:
        if c not in CONFIGS:
            ap.error(f"unknown configuration {c!r} (one of {', '.join(CONFIGS)})")
    shapes = [s for s in args.shapes.split(",") if s] if not args.overhead_only else []
    for s in shapes:
        if s not in SHAPES:
            ap.error(f"unknown shape {s!r} (one of {', '.join(SHAPES)})")
    import torch
    if not args.overhead_only:
        import kdart.fla as kf
    if args.warm_only:
        for name in shapes:
            B, T, H, HV, K, V, docs = SHAPES[name]
            small = min(T, 1024)
            docs = (200, 300, 524) if docs else None
            for config in configs:
                leaves, do, dht, kw = inputs(B, small, H, HV, K, V, docs, config)
                backward_ms(leaves, do, dht, kw, 1)
                with kf.enabled(**kopts):
                    backward_ms(leaves, do, dht, kw, 1)
        return
    print(f"torch {torch.__version__}, device {torch.cuda.get_device_name()}", flush=True)
    print(f"{'config':7s} {'shape':22s} {'fla bwd ms':>11s} {'kdart bwd ms':>13s} {'ratio':>6s}  served / fallbacks")
    peer = cudnn_peer() if "cudnn" in configs else None
    for name in shapes:
        for config in configs:
            B, T, H, HV, K, V, docs = SHAPES[name]
            if config == "cudnn" and docs is None:  # (its THD layout: B rows become B documents)
                B, T, docs = 1, B * T, (T,) * B
            leaves, do, dht, kw = inputs(B, T, H, HV, K, V, docs, config)
            t0 = time.time()
            backward_ms(leaves, do, dht, kw, 1)  # warm fla (autotune)
            t1 = time.time()
            with kf.enabled(**kopts):
                backward_ms(leaves, do, dht, kw, 1)  # warm kdart (prepare) and fla's other stages
            print(f"  ({config} {name}: first fla forward+backward {t1 - t0:.1f} s, first with kdart "
                  f"{time.time() - t1:.1f} s)", flush=True)
            base, _ = backward_ms(leaves, do, dht, kw, args.iters)
            qb, hb = backward_ms(leaves, do, dht, kw, args.iters, queued=True)
            fio, flay = byte_floor(B, T, H, HV, K, V, docs, config)
            mb = backward_peak_mb(leaves, do, dht, kw)
            pb = profile_backward(leaves, do, dht, kw, args.profile_iters) if args.profile else None
            qos = []
            for route in routes:
                kopts.update(whole=route == "whole")
                with kf.enabled(**kopts):
                    backward_ms(leaves, do, dht, kw, 1)  # (warm this route: its kernels prepared)
                kf.reset_stats()
                with kf.enabled(**kopts):
                    ours, _ = backward_ms(leaves, do, dht, kw, args.iters)
                st = kf.stats()
                print(f"{config:7s} {name:22s} {base:11.3f} {ours:13.3f} {base / ours:6.2f}  [{route}] "
                      f"{ {k: n for k, n in st['served'].items() if n} } {st['fallbacks']}", flush=True)
                with kf.enabled(**kopts):
                    qo, ho = backward_ms(leaves, do, dht, kw, args.iters, queued=True)
                qos.append(qo)
                print(f"{'':7s} {'  launches queued ahead':22s} {qb:11.3f} {qo:13.3f} {qb / qo:6.2f}  "
                      f"(host ms per backward call: fla {hb:.3f}, with kdart {ho:.3f})", flush=True)
                sb, so = 100 * floor_ms(fio) / qb, 100 * floor_ms(fio) / qo
                print(f"{'':7s} {'  share of byte floors':22s} {sb:10.1f}% {so:12.1f}%"
                      f"         (queued times against the backward's own inputs and gradients, {fio:.2f} GB = "
                      f"{floor_ms(fio):.3f} ms at {COPY_TBS} TB/s; kdart's whole-route layout moves {flay:.2f} GB = "
                      f"{floor_ms(flay):.3f} ms: {100 * floor_ms(flay) / qo:.0f}% of kdart's time)", flush=True)
                with kf.enabled(**kopts):
                    mo = backward_peak_mb(leaves, do, dht, kw)
                print(f"{'':7s} {'  peak memory, MB':22s} {mb:11.1f} {mo:13.1f} {mb / max(mo, 1e-9):6.2f}  "
                      f"(the backward's allocations over what its start held)", flush=True)
                if args.profile:
                    with kf.enabled(**kopts):
                        po = profile_backward(leaves, do, dht, kw, args.profile_iters)
                    print_profile(f"{config} {name} [{route}]", pb, po)
            if config == "cudnn" and peer is not None:
                try:
                    backward_ms(leaves, do, dht, kw, 1, stepper=peer)  # (its NVRTC compile, cached on disk)
                    pc, _ = backward_ms(leaves, do, dht, kw, args.iters, stepper=peer)
                    pq, ph = backward_ms(leaves, do, dht, kw, args.iters, queued=True, stepper=peer)
                    pm = backward_peak_mb(leaves, do, dht, kw, stepper=peer)
                except Exception as e:  # noqa: BLE001  (a declined configuration, or a failure of the peer's)
                    print(f"  cuDNN frontend: {type(e).__name__}: {e}", flush=True)
                else:
                    print(f"{config:7s} {name:22s} {base:11.3f} {pc:13.3f} {base / pc:6.2f}  [cuDNN frontend] "
                          f"queued {pq:.3f} ms ({qb / pq:.2f}x fla), host ms per backward {ph:.3f}, peak {pm:.1f} MB; "
                          f"kdart's faster route against cuDNN (queued): {pq / min(qos):.2f}x", flush=True)
                    if args.profile:
                        print_profile(f"{config} {name} [cuDNN frontend]", pb,
                                      profile_backward(leaves, do, dht, kw, args.profile_iters, stepper=peer))
            if args.trace:
                for who, on in (("fla", False), ("kdart", True)):
                    path = f"{args.trace}_{config}_{name}_{who}.json"
                    if on:
                        with kf.enabled(**kopts):
                            busy, span, gaps = gap_report(leaves, do, dht, kw, path)
                    else:
                        busy, span, gaps = gap_report(leaves, do, dht, kw, path)
                    print(f"  {who}: one backward under the profiler: kernels {busy:.3f} ms over a {span:.3f} ms "
                          f"span, {sum(g for g, _, _ in gaps) / 1e3:.3f} ms in {len(gaps)} idle gaps over 10 us "
                          f"({path})", flush=True)
                    for g, a, b in gaps[:8]:
                        print(f"    {g:8.1f} us  after {a} -> before {b}")
            del leaves, do, dht, kw
            torch.cuda.empty_cache()
    if args.no_overhead:
        return
    import kdart.torch as kt
    path = "the C++ fast path (kdart.torch_ext)" if kt._EXT is not None else "the Python path (no kdart.torch_ext)"
    print(f"\nPython call overhead through {path} (host us per call; op allocates its outputs, raw = ctypes call "
          "of the C function with a prebuilt struct)")
    for name, (op, raw, alloc, entry) in overhead(SHAPES["b2_t8192_h32"]).items():
        print(f"  {name}: kdart.torch {op:.2f} us, raw C {raw:.2f} us, overhead {op - raw:.2f} us "
              f"(Python's torch.empty of the outputs alone: {alloc:.2f} us; the direct entry refusing after "
              f"unpacking its arguments: {entry:.2f} us)")


if __name__ == "__main__":
    main()
