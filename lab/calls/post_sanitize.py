"""bwd_post on small shapes under compute-sanitizer (memcheck / racecheck): l2norm + both gate forms + the
sigmoid with GVA and a head-dim tail, two launches each (the second reuses the workspace's counters)."""
import torch

import kdart.torch as kt

for (B, T, H, HV, K, lb) in ((1, 100, 2, 4, 64, -5.0), (2, 70, 2, 2, 63, None), (1, 3000, 1, 2, 128, -5.0)):
    dev = "cuda"
    dq, dk, dg = (torch.randn(B, T, HV, K, device=dev) for _ in range(3))
    db = torch.randn(B, T, HV, device=dev)
    q = torch.randn(B, T, H, K, device=dev).to(torch.bfloat16)
    r = torch.rand(B, T, H, device=dev)
    g = torch.randn(B, T, HV, K, device=dev).to(torch.bfloat16)
    A_log, dt_bias = torch.randn(HV, device=dev), torch.randn(HV * K, device=dev)
    beta = torch.randn(B, T, HV, device=dev).to(torch.bfloat16)
    for _ in range(2):
        out = kt.bwd_post(dq, dk, dg, db, q, q, r, r, g, A_log, dt_bias, beta, lb)
    torch.cuda.synchronize()
    print(B, T, H, HV, K, lb, [tuple(x.shape) for x in out])
