"""lab/calls/onecache_e2e.py: one cache for every door, seen from a training script (H200 image).

Run in a fresh process after `python3 -m kdart prewarm` filled KDART_CACHE_DIR, with FLA_KDART=1 and
kdart-autoload.pth in the user site (no kdart.fla.enable() in this script): chunk_kda forward + backward in
the production configuration on two shapes; prints kdart.fla.stats(), the cache's entry count before and
after (equal: nothing compiled), and the gradients' largest relative difference from fla alone."""
import os
import sys

import torch

import kdart

k0 = {e["key"] for e in kdart.cache_list()}
n0 = len(k0)
from fla.ops.kda import chunk_kda  # noqa: E402  (the autoload enables kdart.fla here)

import kdart.fla as kf  # noqa: E402


def step(B, T, H, K, V, cu, io=torch.bfloat16, seed=0):
    torch.manual_seed(seed)
    dev = "cuda"
    N = len(cu) - 1 if cu else B
    q = torch.randn(B, T, H, K, device=dev).to(io)
    k = torch.randn(B, T, H, K, device=dev).to(io)
    v = torch.randn(B, T, H, V, device=dev).to(io)
    g = torch.randn(B, T, H, K, device=dev).to(io)
    beta = torch.randn(B, T, H, device=dev).to(io)
    A_log = torch.log(torch.empty(H, device=dev).uniform_(1, 16))
    dt_bias = torch.randn(H * K, device=dev)
    h0 = torch.randn(N, H, K, V, device=dev)
    leaves = [x.requires_grad_(True) for x in (q, k, v, g, beta, A_log, dt_bias, h0)]
    do = torch.randn(B, T, H, V, device=dev).to(io)
    cu_t = torch.tensor(cu, dtype=torch.long, device=dev) if cu else None

    def run():
        for x in leaves:
            x.grad = None
        o, ht = chunk_kda(q, k, v, g, beta, scale=K ** -0.5, initial_state=h0, output_final_state=True,
                          use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias,
                          use_beta_sigmoid_in_kernel=True, safe_gate=True, lower_bound=-5.0, cu_seqlens=cu_t)
        ((o.float() * do.float()).sum() + ht.sum()).backward()
        return [x.grad.clone() for x in leaves]
    served = run()
    kf.disable()
    alone = run()
    kf.enable()
    d = max((a.double() - b.double()).norm().item() / max(b.double().norm().item(), 1e-30)
            for a, b in zip(served, alone))
    return d


print("FLA_KDART", os.environ.get("FLA_KDART"), "KDART_FLA_VIA", os.environ.get("KDART_FLA_VIA"),
      "enabled at import:", kf.is_enabled())
for shape in [(1, 1500, 4, 128, 128, [0, 1, 63, 64, 200, 1000, 1001, 1500]), (2, 512, 4, 128, 128, None)]:
    d = step(*shape)
    print("shape", shape[:5], "packed" if shape[5] else "fixed", "max rel diff kdart vs fla alone %.2e" % d)
n1 = len(kdart.cache_list())
print("stats", kf.stats())
print("cache entries before %d after %d -> %s" % (n0, n1, "nothing compiled" if n0 == n1 else "COMPILED"))
for e in kdart.cache_list():
    if e["key"] not in k0:
        print("compiled:", e["kernel"], e["spec"], e["arch"])
sys.exit(0 if n0 == n1 and kf.stats()["served"] and not kf.stats()["fallbacks"] else 1)
