"""chunk_kda forward + backward with kdart.fla enabled, fla's test recipe (tests/ops/test_kda.py::test_chunk):
every gradient against fla's naive recurrence (fla.ops.kda.naive, fed float64 leaves; it runs its
recurrence in fp32, as in fla's own test) within fla's own tolerances, and the stats say
kdart served both stages; T = 1000 gives fla's result through a counted fallback.  Skips without CUDA or fla."""
import os

import pytest

os.environ.setdefault("FLA_DISABLE_BACKEND_DISPATCH", "1")
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
pytest.importorskip("fla")
import torch.nn.functional as F  # noqa: E402
from fla.ops.kda import chunk_kda  # noqa: E402
from fla.ops.kda.gate import naive_kda_gate  # noqa: E402
from fla.ops.kda.naive import naive_recurrent_kda  # noqa: E402
from fla.utils import assert_close  # noqa: E402

import kdart.fla as kf  # noqa: E402

CASES = [  # B, T, H, HV, D, scale, gate_logit_normalizer, dtype, use_gate_in_kernel, safe_gate, disable_recompute
    (4, 1024, 4, 4, 128, 0.1, 1, torch.float16, False, False, False),
    (4, 1024, 4, 4, 128, 0.1, 1, torch.bfloat16, False, False, True),
    (2, 1024, 2, 8, 64, 1.0, 1, torch.float16, False, False, False),
    (2, 1024, 2, 8, 64, 0.1, 0.1, torch.bfloat16, True, False, False),
    (2, 1024, 4, 4, 128, 0.1, 1, torch.bfloat16, True, True, False),
    (2, 1024, 4, 4, 64, 0.1, 1, torch.float16, False, True, False),
]


def run(B, T, H, HV, D, scale, norm, dtype, gate_in_kernel, safe_gate, disable_recompute):
    torch.manual_seed(42)
    q = torch.rand(B, T, H, D, dtype=dtype)
    k = torch.rand(B, T, H, D, dtype=dtype)
    v = torch.rand(B, T, HV, D, dtype=dtype)
    g = torch.randn(B, T, HV, D, dtype=torch.float)
    A_log = dt_bias = None
    if gate_in_kernel:
        A_log = torch.randn(HV, dtype=torch.float)
        dt_bias = torch.randn(HV * D, dtype=torch.float)
    else:
        g = F.logsigmoid(g) / norm
        if safe_gate:
            g = g.clamp(-5, 0)
    beta = torch.randn(B, T, HV, dtype=dtype).sigmoid()
    h0 = torch.randn(B, HV, D, D, dtype=torch.float32)
    leaves = [q, k, v, g, beta, h0] + ([A_log, dt_bias] if gate_in_kernel else [])
    leaves = [x.cuda().requires_grad_(True) for x in leaves]
    q, k, v, g, beta, h0 = leaves[:6]
    if gate_in_kernel:
        A_log, dt_bias = leaves[6:]
    do = torch.randn_like(v)
    dht = torch.randn_like(h0)

    # fla's naive recurrence on float64 copies of the leaves
    d64 = [x.detach().double().requires_grad_(True) for x in leaves]
    q6, k6, v6, g6, b6, h6 = d64[:6]
    if gate_in_kernel and safe_gate:  # lower_bound * sigmoid(exp(A_log) * (g + dt_bias)), spec section 2
        gate6 = -5.0 * torch.sigmoid(d64[6].exp()[:, None] * (g6 + d64[7].view(HV, D)))
    elif gate_in_kernel:
        gate6 = naive_kda_gate(g6, d64[6], d64[7], output_dtype=torch.float64)
    else:
        gate6 = g6
    ref, ref_ht = naive_recurrent_kda(F.normalize(q6, p=2, dim=-1), F.normalize(k6, p=2, dim=-1), v6, gate6, b6,
                                      scale=scale, initial_state=h6, output_final_state=True)
    ((ref * do.double()).sum() + (ref_ht * dht.double()).sum()).backward()
    ref_grads = [x.grad for x in d64]

    extra = dict(A_log=A_log, dt_bias=dt_bias) if gate_in_kernel else {}
    if safe_gate and gate_in_kernel:
        extra["lower_bound"] = -5.0
    tri, tri_ht = chunk_kda(F.normalize(q, p=2, dim=-1), F.normalize(k, p=2, dim=-1), v, g, beta, scale=scale,
                            initial_state=h0, output_final_state=True, use_gate_in_kernel=gate_in_kernel,
                            safe_gate=safe_gate, disable_recompute=disable_recompute, **extra)
    ((tri * do).sum() + (tri_ht * dht).sum()).backward()
    return ref, ref_ht, ref_grads, tri, tri_ht, [x.grad for x in leaves]


def check(ref, ref_ht, ref_grads, tri, tri_ht, grads):
    assert_close("o", ref, tri, 0.005)
    assert_close("ht", ref_ht, tri_ht, 0.005)
    for name, r, t, tol in zip(("dq", "dk", "dv", "dg", "db", "dh0", "dA", "dbias"), ref_grads, grads,
                               (0.008, 0.008, 0.008, 0.02, 0.02, 0.008, 0.001, 0.001)):
        assert_close(name, r, t, tol)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "B{}-T{}-H{}-HV{}-D{}-s{}-n{}-{}-gate{}-safe{}-norec{}".format(
    *c[:7], str(c[7])[6:], *c[8:]))
def test_chunk_kda_with_kdart(case):
    kf.reset_stats()
    with kf.enabled():
        out = run(*case)
        st = kf.stats()
    check(*out)
    assert st["served"]["bwd_intra"] == 1 and st["served"]["bwd_dhu"] == 1, st
    assert st["served"]["dg_cumsum_folded"] == 1 and not st["fallbacks"], st


def test_t1000_falls_back():
    case = (2, 1000, 2, 2, 64, 0.1, 1, torch.float16, False, False, False)
    kf.reset_stats()
    with pytest.warns(RuntimeWarning, match="falls back"):
        with kf.enabled():
            out = run(*case)
            st = kf.stats()
    check(*out)
    assert st["served"]["bwd_intra"] == 0 and st["served"]["bwd_dhu"] == 0
    assert st["fallbacks"] == {"bwd_intra: T % 64 != 0": 1, "bwd_dhu: T % 64 != 0": 1}
    assert st["served"]["dg_cumsum_folded"] == 0
