#!/usr/bin/env python3
"""tools/triton_warm.py [-j N] [--log DIR] -- CMD...: fill Triton's compile cache for CMD's workload in parallel.

fla autotunes every new shape by compiling each of its Triton configs in turn, which on the GPU machine takes
minutes per shape (docs/performance.md) while 15 of its 16 cores idle.  This runs CMD N times side by side, worker
i with KDART_TRITON_WARM=i/N and tools/triton_warm/ first on PYTHONPATH (its sitecustomize.py makes each
autotuner compile and run only configs i, i+N, ...), all writing the same cache (TRITON_CACHE_DIR, or
Triton's default).  The real run that follows still autotunes (benchmarks every config, keeps the fastest,
as fla does for any user) but finds every config compiled.  Nothing here changes what fla computes or
which config it picks; the workers' own outputs are thrown away (logs in --log).
Exit status: 0 when every worker exited 0, else 1 (a worker's failure only leaves part of the cache cold).
"""
import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-j", type=int, default=min(12, os.cpu_count() or 1), help="workers (default min(12, cores))")
    ap.add_argument("--log", default=None, help="folder for the workers' output (default: discarded)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds before the workers are killed")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("no command")
    site = os.path.join(HERE, "triton_warm")
    t0 = time.time()
    procs = []
    for i in range(a.j):
        env = dict(os.environ, KDART_TRITON_WARM=f"{i}/{a.j}", FLA_CACHE_RESULTS="0",
                   PYTHONPATH=os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH")) if p))
        out = subprocess.DEVNULL
        if a.log:
            os.makedirs(a.log, exist_ok=True)
            out = open(os.path.join(a.log, f"warm{i}.txt"), "w")
        procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT))
    rcs = []
    for p in procs:
        try:
            left = None if a.timeout is None else max(1.0, a.timeout - (time.time() - t0))
            rcs.append(p.wait(timeout=left))
        except subprocess.TimeoutExpired:
            p.kill()
            rcs.append("timeout")
    print(f"triton_warm: {a.j} workers of {' '.join(cmd)[:120]} in {time.time() - t0:.1f} s, exit {rcs}", flush=True)
    return 0 if all(rc == 0 for rc in rcs) else 1


if __name__ == "__main__":
    sys.exit(main())
