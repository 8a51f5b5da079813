"""chunk_kda forward + backward with kdart.fla enabled, fla's test recipe (tests/ops/test_kda.py::test_chunk):
every gradient against fla's naive recurrence (fla.ops.kda.naive, fed float64 leaves; it runs its
recurrence in fp32, as in fla's own test) within fla's own tolerances, and the stats say
kdart served both stages, also at T = 1000 (a partial chunk) and on packed variable-length batches; a
head dim kdart refuses is fla's, counted as a fallback.  Skips without CUDA or fla.

fla autotunes every kernel at each new shape (minutes here); tools/gpu_check.sh runs this file with
PYTEST_TRITON=first (tools/triton_warm/sitecustomize.py), which has each autotuner take its first config
that compiles, untimed: every config is one of fla's valid kernels, so the checks mean the same."""
import logging
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
from fla.utils.testing import get_err_ratio  # noqa: E402

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


GRAD_TOLS = (("dq", 0.008), ("dk", 0.008), ("dv", 0.008), ("dg", 0.02), ("db", 0.02), ("dh0", 0.008),
             ("dA", 0.001), ("dbias", 0.001))


def check(ref, ref_ht, ref_grads, tri, tri_ht, grads, fla_grads=None):
    """fla's tolerances against the float64 recurrence.  Where fla itself, on the same inputs, misses a
    tolerance (the gate-in-kernel parameter grads dA, dbias: fla's CI only warns there, below a 0.01 ratio
    or 0.3 absolute), kdart must be no worse than 1.5 times fla's own error ratio."""
    assert_close("o", ref, tri, 0.005)
    assert_close("ht", ref_ht, tri_ht, 0.005)
    for i, ((name, tol), r, t) in enumerate(zip(GRAD_TOLS, ref_grads, grads)):
        if r is None or t is None:
            continue
        if fla_grads is not None:
            tol = max(tol, 1.5 * get_err_ratio(r, fla_grads[i]))
        assert_close(name, r, t, tol)


ROUTES = ("whole", "stages")  # kdart.fla's routes: the whole backward (one C call), or kdart's stages inside fla's


def run_with_kdart_and_check(case, route="stages"):
    """The recipe with kdart.fla enabled on route, checked within fla's tolerances (and against fla's own error
    on the same inputs, run again without kdart); kdart.fla's stats of the kdart run."""
    kf.reset_stats()
    with kf.enabled(fwd_h=True, whole=route == "whole"):
        out = run(*case)
        st = kf.stats()
    # each gradient's error ratio against the float64 recurrence, kdart's next to fla's own (printed for
    # the record; -s or -rP shows it)
    fla_out = run(*case)
    line = " ".join(f"{n} {get_err_ratio(r, t):.2e}/{get_err_ratio(r, f):.2e}"
                    for (n, _), r, t, f in zip(GRAD_TOLS, out[2], out[5], fla_out[5])
                    if r is not None and t is not None)
    print(f"\nerror ratio vs float64 (kdart/fla): {line}")
    check(*out, fla_grads=fla_out[5])
    return st


@pytest.mark.parametrize("case", CASES, ids=lambda c: "B{}-T{}-H{}-HV{}-D{}-s{}-n{}-{}-gate{}-safe{}-norec{}".format(
    *c[:7], str(c[7])[6:], *c[8:]))
@pytest.mark.parametrize("route", ROUTES)
def test_chunk_kda_with_kdart(case, route):
    st = run_with_kdart_and_check(case, route)
    assert_served(st, recompute=not case[10], route=route)


def test_t1000_served():
    """T % 64 != 0 (a partial last chunk) is kdart's (bwd_intra's varlen body included)."""
    case = (2, 1000, 2, 2, 64, 0.1, 1, torch.float16, False, False, False)
    kf.reset_stats()
    with kf.enabled(fwd_h=True, whole=False):
        out = run(*case)
        st = kf.stats()
    check(*out)
    assert_served(st)


def _run_refused(caplog, whole):
    """fla's recipe in float32 (an io dtype kdart does not take) with kdart.fla enabled on one route: fla's
    results within its tolerances, a fallback logged; kdart.fla's stats."""
    case = (2, 256, 2, 2, 64, 0.1, 1, torch.float32, False, False, False)
    kf.reset_stats()
    with caplog.at_level(logging.WARNING, logger="kdart"), kf.enabled(fwd_h=True, whole=whole):
        out = run(*case)
        st = kf.stats()
    check(*out)
    assert any("falls back" in r.getMessage() for r in caplog.records if r.name == "kdart.fla")
    return st


def test_refused_input_falls_back(caplog):
    """An io dtype kdart does not take (float32; kdart's kernels are bf16/fp16): fla's own result, within
    fla's tolerances, and a counted fallback of each stage with its reason."""
    st = _run_refused(caplog, whole=False)
    assert not st["served"]["bwd_intra"] and not st["served"]["bwd_dhu"], st
    assert sum(n for r, n in st["fallbacks"].items() if r.startswith("bwd_intra")) == 1, st
    assert sum(n for r, n in st["fallbacks"].items() if r.startswith("bwd_dhu")) == 1, st
    assert st["fallbacks"].get("bwd_dAv: io dtype torch.float32") == 1 and not st["served"]["bwd_dAv"], st
    # the state scan: the forward's call and the backward's recompute
    assert st["fallbacks"].get("fwd_h: io dtype torch.float32") == 2 and not st["served"]["fwd_h"], st
    print(f"\nfallbacks: {st['fallbacks']}")


def test_refused_input_falls_back_whole(caplog):
    """The whole route on an io dtype kdart does not take: fla's own backward, within fla's tolerances, and
    one counted fallback of the whole backward with its reason."""
    st = _run_refused(caplog, whole=True)
    assert not st["served"]["whole_backward"], st
    assert sum(n for r, n in st["fallbacks"].items() if r.startswith("whole_backward")) == 1, st


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("cu", [[0, 15], [0, 256, 500, 1000], [0, 15, 100, 300, 1200, 2000]],
                         ids=lambda c: f"N{len(c) - 1}")
@pytest.mark.parametrize("route", ROUTES)
def test_chunk_kda_varlen_with_kdart(cu, D, route):
    """fla's varlen recipe (tests/ops/test_kda.py::test_chunk_varlen): packed sequences against the naive
    recurrence run per sequence; kdart serves both stages and the folded cumsum (or the whole backward)."""
    _varlen_recipe(cu, D, route=route)


HEAD_DIM_CASES = [  # fla's head dims beyond 64 / 128 (its tests' D = 60, 100, 256), fixed length
    (2, 1024, 2, 4, 60, 0.1, 1, torch.float16, False, False, False),
    (2, 1024, 2, 2, 100, 0.1, 1, torch.bfloat16, False, False, False),
    (2, 1024, 2, 2, 256, 0.1, 1, torch.bfloat16, False, False, False),
    (2, 1000, 2, 4, 100, 0.1, 1, torch.float16, True, True, False),
    (2, 1024, 2, 2, 192, 0.1, 1, torch.bfloat16, False, False, False),   # bwd_dhu's K tile 192
    (2, 1024, 2, 2, 160, 0.1, 1, torch.bfloat16, False, False, False),   # the K tile 192 masked
]


@pytest.mark.parametrize("case", HEAD_DIM_CASES, ids=lambda c: "B{}-T{}-H{}-HV{}-D{}-{}-gate{}".format(
    *c[:5], str(c[7])[6:], c[8]))
@pytest.mark.parametrize("route", ROUTES)
def test_head_dims_with_kdart(case, route):
    """fla's test_chunk recipe at D = 60, 100, 256, 192 and 160 (HV = 2H at 60 and at 100 with the gate in fla's
    kernel): kdart serves both stages (K in the next tile up with masked tails, or the K tile 256 / 192), and every
    gradient is within fla's tolerances of the float64 recurrence (kdart's error ratio printed next to
    fla's)."""
    st = run_with_kdart_and_check(case, route)
    assert_served(st, route=route)


@pytest.mark.parametrize("D", [60, 100, 160, 192, 256])
@pytest.mark.parametrize("route", ROUTES)
def test_head_dims_varlen_with_kdart(D, route):
    """fla's varlen recipe at D = 60, 100, 256, 192 (bwd_dhu's K tile 192) and 160 (its masked
    path)."""
    _varlen_recipe([0, 15, 100, 300, 1200, 2000], D, route=route)


def test_chunk_kda_use_graph_with_kdart():
    """fla's use_graph mode, eager (the step a user warms up before capture): cu_seqlens padded with two
    zero-length sequences to max_num_seqs, static chunk indices with sentinel rows; kdart serves both stages
    and the folded cumsum, and every gradient matches the naive recurrence per sequence (a padding
    sequence's final state is its initial state, so its dh0 is its dht)."""
    _varlen_recipe([0, 15, 100, 300, 1200, 2000, 2000, 2000], 64, use_graph=True)
    _varlen_recipe([0, 15, 100, 300, 1200, 2000, 2000, 2000], 64, use_graph=True, route="whole")


def assert_served(st, recompute=True, route="stages"):
    """Every stage (and the folded cumsum) served by kdart, at every head dim, fla's chunk_kda_bwd_dAv too:
    fused into bwd_dhu and wy_dqkg at D = K = V of 64 and 128 on grids where bwd_dhu picks its V tile 64
    (kdart.fla.dav_grid_refusal), run by kdart's own dAv kernel elsewhere; fla's state scan
    (chunk_gated_delta_rule_fwd_h) in chunk_kda's forward and, unless the forward saved its outputs
    (disable_recompute), in the backward's recompute; no fallback.  route "whole": the backward is kdart's
    whole, and only the forward's state scan is a stage call."""
    if route == "whole":
        assert st["served"]["whole_backward"] == 1 and st["served"]["fwd_h"] == 1, st
        assert st["fallbacks"] == {}, st
        return
    assert st["served"]["bwd_intra"] == 1 and st["served"]["dg_cumsum_folded"] == 1, st
    assert st["served"]["bwd_dhu"] == 1 and st["served"]["wy_dqkg"] == 1, st
    assert st["served"]["bwd_dAv"] == 1, st
    assert st["served"]["fwd_h"] == 1 + int(recompute), st
    assert st["fallbacks"] == {}, st


def _varlen_recipe(cu, D, use_graph=False, route="stages"):
    torch.manual_seed(43)
    H, dtype = 2, torch.bfloat16
    T, N = cu[-1], len(cu) - 1
    cu_t = torch.tensor(cu, dtype=torch.long, device="cuda")
    q, k, v = (torch.rand(1, T, H, D, dtype=dtype) for _ in range(3))
    g = F.logsigmoid(torch.randn(1, T, H, D, dtype=torch.float))
    beta = torch.randn(1, T, H, dtype=dtype).sigmoid()
    h0 = torch.randn(N, H, D, D, dtype=torch.float32)
    leaves = [x.cuda().requires_grad_(True) for x in (q, k, v, g, beta, h0)]
    q, k, v, g, beta, h0 = leaves
    do, dht = torch.randn_like(v), torch.randn_like(h0)
    d64 = [x.detach().double().requires_grad_(True) for x in leaves]
    refs, hts = [], []
    for n in range(N):
        s = slice(cu[n], cu[n + 1])
        if cu[n] == cu[n + 1]:  # a zero-length (padding) sequence: no output, the state passes through
            hts.append(d64[5][n:n + 1])
            continue
        o, ht = naive_recurrent_kda(F.normalize(d64[0][:, s], p=2, dim=-1), F.normalize(d64[1][:, s], p=2, dim=-1),
                                    d64[2][:, s], d64[3][:, s], d64[4][:, s], scale=0.1,
                                    initial_state=d64[5][n:n + 1], output_final_state=True)
        refs.append(o)
        hts.append(ht)
    ref, ref_ht = torch.cat(refs, 1), torch.cat(hts, 0)
    ((ref * do.double()).sum() + (ref_ht * dht.double()).sum()).backward()
    kf.reset_stats()
    extra = dict(use_graph=True, max_num_seqs=N) if use_graph else {}
    with kf.enabled(fwd_h=True, whole=route == "whole"):
        tri, tri_ht = chunk_kda(F.normalize(q, p=2, dim=-1), F.normalize(k, p=2, dim=-1), v, g, beta, scale=0.1,
                                initial_state=h0, output_final_state=True, cu_seqlens=cu_t, **extra)
        ((tri * do).sum() + (tri_ht * dht).sum()).backward()
        st = kf.stats()
    assert_close("o", ref, tri, 0.005)
    assert_close("ht", ref_ht, tri_ht, 0.005)
    for (name, tol), x, t in zip(GRAD_TOLS, d64, leaves):  # the six leaves: dq .. dh0
        assert_close(name, x.grad, t.grad, tol)
    assert_served(st, route=route)
