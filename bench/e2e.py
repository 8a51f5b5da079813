#!/usr/bin/env python3
"""bench/e2e.py: fla's chunk_kda forward + backward with and without kdart.fla, in one process.

For each shape: builds chunk_kda's inputs (bf16, fla's test recipe), warms both ways once (fla autotunes
for minutes on a new shape), then times the backward (CUDA events around .backward(), median of --iters)
without kdart and with kdart.fla enabled, and prints both and the ratio.  Then the Python call overhead of
each op: kdart.torch.bwd_intra / bwd_dhu against the raw C call through ctypes with a prebuilt argument
struct (host time per call, median of batches; the GPU work queues behind).

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

SHAPES = {  # name: B, T, H, HV, K, V
    "b2_t8192_h32": (2, 8192, 32, 32, 128, 128),
    "prod8192": (16, 8192, 16, 16, 128, 256),
    "b1_t32768_h32": (1, 32768, 32, 32, 128, 128),
    "b4_t4096_h16_hv32": (4, 4096, 16, 32, 128, 128),
}


def inputs(B, T, H, HV, K, V):
    import torch
    import torch.nn.functional as F
    dev, bf = "cuda", torch.bfloat16
    q = F.normalize(torch.rand(B, T, H, K, device=dev), dim=-1).to(bf).requires_grad_(True)
    k = F.normalize(torch.rand(B, T, H, K, device=dev), dim=-1).to(bf).requires_grad_(True)
    v = torch.rand(B, T, HV, V, device=dev).to(bf).requires_grad_(True)
    g = F.logsigmoid(torch.randn(B, T, HV, K, device=dev)).requires_grad_(True)
    beta = torch.randn(B, T, HV, device=dev).sigmoid().to(bf).requires_grad_(True)
    h0 = torch.randn(B, HV, K, V, device=dev).requires_grad_(True)
    do = torch.randn(B, T, HV, V, device=dev).to(bf)
    dht = torch.randn(B, HV, K, V, device=dev)
    return (q, k, v, g, beta, h0), do, dht


def backward_ms(leaves, do, dht, iters):
    import torch
    from fla.ops.kda import chunk_kda
    q, k, v, g, beta, h0 = leaves
    ts = []
    for _ in range(iters):
        o, ht = chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True)
        loss = (o * do).sum() + (ht * dht).sum()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        loss.backward()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
        for x in leaves:
            x.grad = None
    return statistics.median(ts)


def host_us(fn, n=200, batches=15):
    """Host time per call, the GPU kept busy by a sleep kernel queued first: every call only enqueues (no
    wait on a full launch queue), so what is timed is the host side alone."""
    import torch
    out = []
    for _ in range(batches):
        torch.cuda.synchronize()
        torch.cuda._sleep(40_000_000)  # ~20 ms of GPU time, longer than n calls take to enqueue
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
    B, T, H, HV, K, V = row
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
        plan = [p for kk, p in kt._thread_plans().items() if kk[-2] == key][-1]  # the newest: these shapes
        st = kt._fast()
        fn, h, addr = st[key], st["handle"], plan.addr
        stream = torch.cuda.current_stream().cuda_stream
        raw = host_us(lambda: fn(h, addr, stream))
        op = host_us(call)
        alloc = host_us(lambda: [torch.empty(sh, dtype=dt, device="cuda") for sh, dt in plan.outs])
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
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma list of: " + ", ".join(SHAPES))
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warm-only", action="store_true",
                    help="one forward+backward per shape each way at T <= 1024 (the same Triton specializations), "
                         "no timing: the workload of tools/triton_warm.py")
    ap.add_argument("--overhead-only", action="store_true", help="only the Python call overhead (no fla needed)")
    args = ap.parse_args()
    import torch
    if args.overhead_only:
        args.shapes = ""
    else:
        import kdart.fla as kf
    if args.warm_only:
        for name in args.shapes.split(","):
            B, T, H, HV, K, V = SHAPES[name]
            leaves, do, dht = inputs(B, min(T, 1024), H, HV, K, V)
            backward_ms(leaves, do, dht, 1)
            with kf.enabled():
                backward_ms(leaves, do, dht, 1)
        return
    print(f"torch {torch.__version__}, device {torch.cuda.get_device_name()}", flush=True)
    print(f"{'shape':24s} {'fla bwd ms':>11s} {'kdart bwd ms':>13s} {'ratio':>6s}  served / fallbacks")
    for name in filter(None, args.shapes.split(",")):
        row = SHAPES[name]
        leaves, do, dht = inputs(*row)
        t0 = time.time()
        backward_ms(leaves, do, dht, 1)  # warm fla (autotune)
        t1 = time.time()
        with kf.enabled():
            backward_ms(leaves, do, dht, 1)  # warm kdart (prepare) and fla's other stages
        print(f"  ({name}: first fla forward+backward {t1 - t0:.1f} s, first with kdart {time.time() - t1:.1f} s)",
              flush=True)
        base = backward_ms(leaves, do, dht, args.iters)
        kf.reset_stats()
        with kf.enabled():
            ours = backward_ms(leaves, do, dht, args.iters)
        st = kf.stats()
        print(f"{name:24s} {base:11.3f} {ours:13.3f} {base / ours:6.2f}  {st['served']} {st['fallbacks']}",
              flush=True)
        del leaves, do, dht
        torch.cuda.empty_cache()
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
