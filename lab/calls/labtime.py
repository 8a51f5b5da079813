# lab/calls/labtime.py: the lab benchmarks' one timing helper (CUDA events around one call, after warm-ups;
# the median of reps).  Imported by the scripts beside it and by lab/experiments/rwu/rwu_bench.py.
import torch


def timed(fn, reps=20, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]
