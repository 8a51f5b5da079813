#!/usr/bin/env python3
"""lab/calls/dhu_probe.py: kdart.torch.bwd_dhu alone on named cases (no fla), for A/B runs of kernel
source variants (KDART_KERNEL_DIR, one process each) and as an ncu target (--iters 1).  Prints one line per
case: the median of --iters CUDA-event timings after 3 warm-up calls.  Session 12's probes of the masked
path (the V-first state, the K tile 256) and of the K = V = 256 varlen row.  PROBE_BV=16|32|64: every case
at that V tile (the C API's v_tile) instead of the one kdart picks."""
import argparse
import math
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))


def docs(total, mean, seed):
    import varlen
    return varlen.doc_lengths(total, mean, seed)


# name: (B, T, H, K, V, svf, lens or None)
def cases():
    d256 = docs(32768, 1024, 36)
    return {
        "k128": (2, 8192, 16, 128, 128, False, None),
        "svf128": (2, 8192, 16, 128, 128, True, None),
        "k256": (2, 8192, 16, 256, 256, False, None),
        "k200": (2, 8192, 16, 200, 200, False, None),
        "k192": (2, 8192, 16, 192, 192, False, None),
        "svf192": (2, 8192, 16, 192, 192, True, None),
        "k160": (2, 8192, 16, 160, 160, False, None),
        "docs192": (1, 32768, 16, 192, 192, False, d256),
        "k100": (2, 8192, 16, 100, 100, False, None),
        "k60": (2, 8192, 16, 60, 60, False, None),
        "fix256": (1, 32768, 16, 256, 256, False, None),
        "one256": (1, 32768, 16, 256, 256, False, [32768]),
        "docs256": (1, 32768, 16, 256, 256, False, d256),
        "eq256": (1, 45 * 728, 16, 256, 256, False, [728] * 45),
        "eq256x": (1, 45 * 768, 16, 256, 256, False, [768] * 45),   # whole chunks
        "docs128": (1, 32768, 16, 128, 128, False, d256),
        "svf256": (2, 8192, 16, 256, 256, True, None),
        "k256x": (4, 8192, 16, 256, 256, False, None),
        "docs256v": (1, 32768, 16, 256, 256, True, d256),
        "w256": (1, 8192, 4, 256, 256, False, None),   # one wave at every BV: the per-chunk times
        # odd dims (kdart.torch pads them to a multiple of 8) next to the padded dims themselves
        "k63": (2, 8192, 16, 63, 63, False, None),
        "k64": (2, 8192, 16, 64, 64, False, None),
        "k63v64": (2, 8192, 16, 63, 64, False, None),
        "k101": (2, 8192, 16, 101, 101, False, None),
        "k104": (2, 8192, 16, 104, 104, False, None),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--iters", type=int, default=30)
    a = ap.parse_args()
    import torch
    import kdart.torch as kt
    force = int(os.environ.get("PROBE_BV", "0"))
    if force:   # every plan launches that V tile (the C API's v_tile) instead of the picker's
        import re
        make = kt._dhu_plan

        def forced(*args, **kwargs):
            plan = make(*args, **kwargs)
            plan.args.v_tile = force
            plan.spec = re.sub(r"BV=\d+", f"BV={force}", plan.spec)
            return plan
        kt._dhu_plan = forced
    from masked_dhu import median_ms
    bf = torch.bfloat16
    dev = "cuda"
    tab = cases()
    for name in a.cases:
        B, T, H, K, V, svf, lens = tab[name]
        torch.manual_seed(0)
        r = lambda *s: torch.randn(*s, device=dev)
        N = len(lens) if lens else B
        g = -torch.rand(B, T, H, K, device=dev).mul(0.01)
        st = (N, H, V, K) if svf else (N, H, K, V)
        s = dict(q=(r(B, T, H, K) * 0.1).to(bf), k=(r(B, T, H, K) * 0.1).to(bf), w=(r(B, T, H, K) * 0.1).to(bf),
                 do=r(B, T, H, V).to(bf), dv=r(B, T, H, V).to(bf), gk=g, h0=r(*st), dht=r(*st))
        kw = {}
        if lens:
            cu = torch.tensor([0] + list(__import__("itertools").accumulate(lens)), device=dev, dtype=torch.int32)
            nt = sum(math.ceil(x / 64) for x in lens)
            idx = [(i, j) for i, x in enumerate(lens) for j in range(math.ceil(x / 64))]
            kw = dict(cu_seqlens=cu, chunk_indices=torch.tensor(idx, device=dev, dtype=torch.int32),
                      chunk_offsets=torch.tensor([0] + list(__import__("itertools").accumulate(
                          math.ceil(x / 64) for x in lens)), device=dev, dtype=torch.int32))
        f = lambda: kt.bwd_dhu(s["q"], s["k"], s["w"], s["do"], s["dv"], s["gk"], h0=s["h0"], dht=s["dht"],
                               state_v_first=svf, **kw)
        t = median_ms(f, a.iters, 3 if a.iters > 1 else 1)
        print(f"{os.environ.get('PROBE_TAG', '-'):8s} {name:8s} {t:.4f} ms", flush=True)
        del s, kw
    return 0


if __name__ == "__main__":
    sys.exit(main())
