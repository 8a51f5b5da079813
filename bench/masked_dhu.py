#!/usr/bin/env python3
"""bench/masked_dhu.py: bwd_dhu's masked cases, kdart.torch.bwd_dhu against fla's
chunk_gated_delta_rule_bwd_dhu in one process: head dims below their K
tile with 8-byte, 4-byte and element granules, the K tile 256's masked path, and
the V-first state.  Both get the same inputs (fixed length, dht and h0 given);
CUDA-event medians after warm-up; dv2 and dh compared (rel RMS, kdart vs fla).
This is the measurement behind kdart.fla's routing of masked bwd_dhu
(python/kdart/fla.py, dhu_refusal).  --warm-only runs each fla shape once (the
workload of tools/triton_warm.py).  Needs torch, fla and a GPU."""
import argparse
import sys

# (K, V, state_v_first): 8-byte granules at the K tiles 128 / 64, 4-byte and element ones, the K tile 192
# (native at 192, masked at 160 in 16-byte granules, the V-first state at both), the K tile 256's masked
# path (16-byte granules at 200, 8-byte ones at 196, a partial V tile at K = 256), the V-first state at
# native dims (the native copies) and at masked ones; odd dims (kdart.torch pads them to a multiple of 8)
CASES = [(100, 100, False), (60, 60, False), (128, 128, True), (64, 64, True), (256, 256, True),
         (100, 100, True), (192, 192, False), (160, 160, False), (192, 192, True), (160, 160, True),
         (200, 200, False), (196, 196, False), (256, 200, False), (200, 200, True), (18, 18, False),
         (63, 63, False), (130, 128, False), (144, 144, False), (250, 250, True), (256, 96, True),
         (101, 101, False)]


def pick(spec):
    """--cases K:V[:v],...: those of CASES (v: the V-first state); empty: all of them"""
    if not spec:
        return CASES
    want = []
    for item in spec.split(","):
        f = item.split(":")
        want.append((int(f[0]), int(f[1]), len(f) > 2 and f[2] == "v"))
    return want


def make(B, T, H, K, V, svf, dev):
    import torch
    bf = torch.bfloat16
    r = lambda *s: torch.randn(*s, device=dev)
    g = -torch.rand(B, T // 64, 64, H, K, device=dev).mul(0.1).cumsum(2).reshape(B, T, H, K)  # chunk-local
    st = (B, H, V, K) if svf else (B, H, K, V)
    return dict(q=(r(B, T, H, K) * 0.1).to(bf), k=(r(B, T, H, K) * 0.1).to(bf), w=(r(B, T, H, K) * 0.1).to(bf),
                do=r(B, T, H, V).to(bf), dv=r(B, T, H, V).to(bf), gk=g, h0=r(*st), dht=r(*st), scale=K ** -0.5)


def median_ms(f, iters, warmup=3):
    """The median of iters CUDA-event timings of f() after warmup untimed calls."""
    import torch
    for _ in range(warmup):
        f()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for e0, e1 in ev:
        e0.record()
        f()
        e1.record()
    torch.cuda.synchronize()
    return sorted(e0.elapsed_time(e1) for e0, e1 in ev)[iters // 2]


def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="2,8192,16", help="B,T,H (default 2,8192,16)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warm-only", action="store_true")
    ap.add_argument("--cases", default="", help="K:V[:v],... (v: state_v_first); default: every case")
    a = ap.parse_args()
    cases = pick(a.cases)
    import torch
    from fla.ops.common.chunk_delta_h import chunk_gated_delta_rule_bwd_dhu as fla_dhu
    B, T, H = (int(x) for x in a.shape.split(","))
    dev = "cuda"
    if a.warm_only:
        for K, V, svf in cases:
            s = make(B, min(T, 1024), H, K, V, svf, dev)
            fla_dhu(state_v_first=svf, chunk_size=64, **s)
            torch.cuda.synchronize()
            print(f"[K{K} V{V} svf{int(svf)}] warm", flush=True)
        return 0
    import kdart.torch as kt

    timed = lambda f: median_ms(f, a.iters)  # noqa: E731

    print(f"B{B} T{T} H{H}, bf16; median of {a.iters} CUDA-event timings after 3 warm-up calls")
    print("| K | V | state_v_first | fla ms | kdart ms | fla/kdart | dv2 rel | dh rel |")
    print("|---|---|---|---|---|---|---|---|")
    for K, V, svf in cases:
        s = make(B, T, H, K, V, svf, dev)
        f = lambda: fla_dhu(state_v_first=svf, chunk_size=64, **s)
        k = lambda: kt.bwd_dhu(s["q"], s["k"], s["w"], s["do"], s["dv"], s["gk"], h0=s["h0"], dht=s["dht"],
                               scale=s["scale"], state_v_first=svf)
        dh_f, _, dv2_f = f()
        dh_k, _, dv2_k = k()
        torch.cuda.synchronize()
        tf, tk = timed(f), timed(k)
        print(f"| {K} | {V} | {int(svf)} | {tf:.3f} | {tk:.3f} | {tf / tk:.2f}x | {rel(dv2_k, dv2_f):.1e} | "
              f"{rel(dh_k, dh_f):.1e} |", flush=True)
        del s, dh_f, dv2_f, dh_k, dv2_k
    return 0


if __name__ == "__main__":
    sys.exit(main())
