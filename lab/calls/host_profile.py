# lab/calls/host_profile.py: where the host time of kdart.fla's whole backward goes (production flags, one
# shape, fla's forward).  bench/e2e.py measured 1.14 ms of host time per backward with kdart (H100, B2 T8192
# H32) against 0.19 ms for kdart.torch.chunk_kda_bwd alone (whole_ab.py), and 0.70 ms between the idle-GPU
# and the queued timings.  This splits the backward() call: the ChunkKDAFunction backward (kdart.fla's
# _whole_backward) and inside it whole_refusal and chunk_kda_bwd, the rest the autograd engine; then the
# allocator's segment and retry counts over the loop, and torch.profiler's CPU ops by self time.
# Runs from the repository root on the lent GPU (PYTHONPATH with fla and python/, KDART_LIBRARY set).
# Usage: host_profile.py [shape] (bench/e2e.py's SHAPES; default b2_t8192_h32)
import statistics
import sys
import time

import torch

sys.path.insert(0, "bench")
import e2e  # noqa: E402
import kdart.fla as kf  # noqa: E402
import kdart.torch as kt  # noqa: E402

name = sys.argv[1] if len(sys.argv) > 1 else "b2_t8192_h32"
B, T, H, HV, K, V, docs = e2e.SHAPES[name]
leaves, do, dht, kw = e2e.inputs(B, T, H, HV, K, V, docs, "prod")
t0 = time.time()
e2e.backward_ms(leaves, do, dht, kw, 1)  # fla's autotuning (restored results skip it)
print(f"fla warm {time.time() - t0:.1f} s", flush=True)

acc = {"refusal": [], "kdart_bwd": [], "fn": []}


def timed(key, f):
    def g(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            acc[key].append((time.perf_counter() - t) * 1e3)
    return g


with kf.enabled(whole=True):
    e2e.backward_ms(leaves, do, dht, kw, 2)  # kdart prepared
    cls = kf._state["whole"][0]
    kf.whole_refusal = timed("refusal", kf.whole_refusal)
    kt.chunk_kda_bwd = timed("kdart_bwd", kt.chunk_kda_bwd)
    cls.backward = staticmethod(timed("fn", kf._whole_backward))
    for k in acc:
        acc[k].clear()
    st0 = torch.cuda.memory_stats()
    ms, host = e2e.backward_ms(leaves, do, dht, kw, 10, queued=True)
    st1 = torch.cuda.memory_stats()
    med = {k: statistics.median(v) for k, v in acc.items() if v}
    print(f"{name}: queued {ms:.3f} ms, host per backward() {host:.3f} ms; medians (ms): "
          + ", ".join(f"{k} {v:.3f}" for k, v in med.items()))
    print(f"  autograd engine and the rest: {host - med['fn']:.3f} ms; _whole_backward outside the two: "
          f"{med['fn'] - med['refusal'] - med['kdart_bwd']:.3f} ms")
    for s in ("num_alloc_retries", "segment.all.allocated", "segment.all.freed", "num_device_alloc",
              "num_device_free"):
        if s in st1:
            print(f"  allocator {s}: {st1[s] - st0.get(s, 0)} over 10 backwards")
    idle, host2 = e2e.backward_ms(leaves, do, dht, kw, 5)
    print(f"  idle-GPU {idle:.3f} ms (host {host2:.3f})")
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            b = e2e.step(leaves, do, dht, kw)
            torch.cuda.synchronize()
            with torch.profiler.record_function("BACKWARD"):
                b()
            torch.cuda.synchronize()
            for x in leaves:
                x.grad = None
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=70))
    prof.export_chrome_trace(sys.argv[2] if len(sys.argv) > 2 else "/tmp/host_trace.json")
