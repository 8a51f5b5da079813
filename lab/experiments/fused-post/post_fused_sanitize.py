"""kdart.torch.chunk_kda_bwd (one kdart_kda_chunk_bwd call) on small shapes under compute-sanitizer (memcheck /
racecheck), each head its own value head, so that bwd_post's work runs in wy_dqkg's launch (post=1): fixed length
at K 64 and 128 (T a multiple of 64, and not: the varlen body over B rows), 3 packed documents (one of a single
token) at K 128 and a partial last chunk, the softplus gate too; two calls each (the second finds the counters the
first left at zero).  Usage (repository root, lent GPU): PYTHONPATH=python:python/tests python3 THIS"""
import torch

import kdart.torch as kt
from kda_ref import chunk_indices, whole_inputs

CASES = [  # B, T, H, K, V, cu, safe gate
    (2, 256, 2, 64, 64, None, True),
    (1, 300, 2, 128, 128, None, True),
    (1, 0, 2, 128, 128, [0, 100, 101, 300], True),
    (2, 192, 2, 128, 64, None, False),
]
for B, T, H, K, V, cu, safe in CASES:
    dev = "cuda"
    ci = None
    if cu is not None:
        T = cu[-1]
        cu = torch.tensor(cu, dtype=torch.int32, device=dev)
        ci = chunk_indices(cu)
    N = B if cu is None else cu.shape[0] - 1
    t = whole_inputs(B, T, H, H, K, V, N, torch.bfloat16, dev)
    kw = dict(scale=K ** -0.5, initial_state=t["h0"], q_rstd=t["q_rstd"], k_rstd=t["k_rstd"],
              beta_raw=t["beta_raw"], A_log=t["A_log"], dt_bias=t["dt_bias"], use_gate_in_kernel=True,
              lower_bound=-5.0 if safe else None, use_beta_sigmoid_in_kernel=True, cu_seqlens=cu, chunk_indices=ci)
    for _ in range(2):
        out = kt.chunk_kda_bwd(t["q"], t["k"], t["v"], t["g"], t["beta"], t["Aqk"], t["Akk"], t["d_o"], t["dht"],
                               **kw)
    torch.cuda.synchronize()
    print(B, T, H, K, V, None if cu is None else cu.tolist(), safe,
          [bool(torch.isfinite(x).all()) for x in out if x is not None])
