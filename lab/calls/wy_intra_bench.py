# lab/calls/wy_intra_bench.py: wy_dqkg with bwd_intra's terms in the same launch (wy_dqkg(..., dAqk=True,
# intra=True)) against the two launches it replaces (wy_dqkg(..., dAqk=True), then bwd_intra(..., fold_dg=True)),
# timed alone with CUDA events at the benchmark shapes; also each of the two alone.  Runs on the lent GPU
# from the repository root (PYTHONPATH=python:python/tests, KDART_LIBRARY set).  Usage: wy_intra_bench.py [rows]
import sys
import torch
import kdart.torch as kt
from kda_ref import wy_inputs, chunk_indices
from labtime import timed

ROWS = {  # name: (B, T, H, HV, K, V, cu)
    "b2_t8192_h32": (2, 8192, 32, 32, 128, 128, None),
    "prod8192": (16, 8192, 16, 16, 128, 256, None),
    "packed32768": (1, 32768, 32, 32, 128, 128, [0, 3000, 8192, 9000, 17000, 24000, 30001, 32768]),
    "b2_t8192_h32_k64": (2, 8192, 32, 32, 64, 64, None),
}


def main():
    names = sys.argv[1].split(",") if len(sys.argv) > 1 else list(ROWS)
    print(f"{'row':<20} {'wy+dAqk':>9} {'intra':>9} {'two':>9} {'fused':>9} {'two/fused':>10}")
    for name in names:
        B, T, H, HV, K, V, cu = ROWS[name]
        torch.manual_seed(0)
        cu_t = None if cu is None else torch.tensor(cu, dtype=torch.int32, device="cuda")
        a = wy_inputs(B, T, H, HV, K, V, torch.bfloat16, "cuda", cu=cu_t)
        ci = None if cu_t is None else chunk_indices(cu_t)
        kw = dict(scale=K ** -0.5, cu_seqlens=cu_t, chunk_indices=ci)
        q, k, g, beta = a[0], a[1], a[4], a[5]
        o = kt.wy_dqkg(*a, dAqk=True, **kw)

        def wy():
            return kt.wy_dqkg(*a, dAqk=True, **kw)

        def intra():
            return kt.bwd_intra(q, k, g, beta, o[6], o[5], o[0], o[1], o[3], o[4], fold_dg=True, cu_seqlens=cu_t,
                                chunk_indices=ci)

        def two():
            dq, dk, dv, db, dg, dA, dAqk = wy()
            return kt.bwd_intra(q, k, g, beta, dAqk, dA, dq, dk, db, dg, fold_dg=True, cu_seqlens=cu_t,
                                chunk_indices=ci)

        def fused():
            return kt.wy_dqkg(*a, dAqk=True, intra=True, **kw)
        t = [timed(f) for f in (wy, intra, two, fused)]
        print(f"{name:<20} {t[0]:9.3f} {t[1]:9.3f} {t[2]:9.3f} {t[3]:9.3f} {t[2] / t[3]:9.2f}x", flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
