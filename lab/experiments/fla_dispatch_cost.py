"""lab/experiments/fla_dispatch_cost.py: what a call through fla 0.6.0's backend registry (fla.backends) costs
on the host, against the same function called directly and against kdart.fla's module-name wrapper's
pass-through, on the CPU (no kernel runs: the functions are stand-ins that return at once).

    FLA_DISABLE_BACKEND_DISPATCH=0 python lab/experiments/fla_dispatch_cost.py
"""
import os
import time

os.environ.pop("FLA_DISABLE_BACKEND_DISPATCH", None)

from fla import backends  # noqa: E402


def bench(fn, n=200000):
    fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def stand_in(x=None):
    return x


class KdartLike(backends.BaseBackend):
    backend_type = "kdart_probe"
    env_var = "FLA_KDART_PROBE"
    priority = 1

    def stand_in(self, x=None):
        return x

    def stand_in_verifier(self, x=None):
        return True, None


dispatched = backends.dispatch(stand_in)                     # a function registry, as chunk_local_cumsum's
direct = bench(stand_in)
empty = bench(dispatched)                                    # no backend registered: fla's own function
backends.register(stand_in)(KdartLike)
with_backend = bench(dispatched)                             # one backend: verify, then its implementation
print(f"direct call            {direct:6.2f} us")
print(f"registry, no backend   {empty:6.2f} us  (+{empty - direct:.2f})")
print(f"registry, one backend  {with_backend:6.2f} us  (+{with_backend - direct:.2f})")
