"""The GPU tests' float64 references (kda_ref.py) against plain loops of the spec's section 5 algorithms,
on tiny shapes (CPU, torch only)."""
import math

import pytest

torch = pytest.importorskip("torch")
import kda_ref as R  # noqa: E402


def intra_loops(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg):
    B, T, H, K = q.shape
    HV = g.shape[2]
    G = HV // H
    oq, ok, og, ob = dq.double().clone(), dk.double().clone(), dg.double().clone(), db.double().clone()
    q, k, g, beta, dAqk, dAkk = (t.double().tolist() for t in (q, k, g, beta, dAqk, dAkk))
    for b in range(B):
        for hv in range(HV):
            h = hv // G
            for c in range(T // 64):
                t0 = 64 * c
                for r in range(64):
                    tr, dbacc = t0 + r, 0.0
                    for d in range(K):
                        Aq = Ak = Ct = 0.0
                        gr = g[b][tr][hv][d]
                        for s in range(r + 1):
                            e = 2.0 ** (gr - g[b][t0 + s][hv][d])
                            ks = k[b][t0 + s][h][d]
                            Aq += dAqk[b][tr][hv][s] * ks * e
                            Ak += dAkk[b][tr][hv][s] * ks * e
                        for r2 in range(r, 64):
                            t2 = t0 + r2
                            e = 2.0 ** (g[b][t2][hv][d] - gr)
                            Ct += (dAqk[b][t2][hv][r] * q[b][t2][h][d]
                                   + dAkk[b][t2][hv][r] * beta[b][t2][hv] * k[b][t2][h][d]) * e
                        qr, kr, br = q[b][tr][h][d], k[b][tr][h][d], beta[b][tr][hv]
                        oq[b, tr, hv, d] += Aq
                        ok[b, tr, hv, d] += br * Ak + Ct
                        og[b, tr, hv, d] += qr * Aq + (br * Ak - Ct) * kr
                        dbacc += kr * Ak
                    ob[b, tr, hv] += dbacc
    return oq, ok, ob, og


def test_intra_ref_matches_loops():
    torch.manual_seed(3)
    a = R.intra_inputs(1, 64, 1, 2, 3, torch.bfloat16, "cpu")
    got = R.bwd_intra_ref(*a)
    want = intra_loops(*a)
    for x, y in zip(got, want):
        assert torch.allclose(x, y, rtol=1e-10, atol=1e-10)
    folded = R.bwd_intra_ref(*a, fold_dg=True)[3]
    assert torch.allclose(folded[:, 10], want[3][:, 10:64].sum(1), rtol=1e-10, atol=1e-10)


def test_dhu_ref_matches_loops():
    torch.manual_seed(4)
    (qg, kg, w, do, dv, gk), h0, dht = R.dhu_inputs(1, 128, 1, 3, 2, torch.bfloat16, "cpu")
    scale = 0.5
    dh, dh0, dv2 = R.bwd_dhu_ref(qg, kg, w, do, dv, gk, h0=h0, dht=dht, scale=scale)
    qg, kg, w, do, dv, gk = (t.double()[0, :, 0].tolist() for t in (qg, kg, w, do, dv, gk))
    dH = dht.double()[0, 0].tolist()
    for c in (1, 0):
        t0 = 64 * c
        assert torch.allclose(dh[0, c, 0], torch.tensor(dH, dtype=torch.float64), rtol=1e-10, atol=1e-12)
        v2 = [[dv[t0 + i][v] + sum(kg[t0 + i][d] * dH[d][v] for d in range(3)) for v in range(2)]
              for i in range(64)]
        assert torch.allclose(dv2[0, t0:t0 + 64, 0], torch.tensor(v2, dtype=torch.float64), rtol=1e-10)
        dH = [[math.pow(2.0, gk[t0 + 63][d]) * dH[d][v]
               + scale * sum(qg[t0 + i][d] * do[t0 + i][v] for i in range(64))
               - sum(w[t0 + i][d] * v2[i][v] for i in range(64)) for v in range(2)] for d in range(3)]
    assert torch.allclose(dh0[0, 0], torch.tensor(dH, dtype=torch.float64), rtol=1e-10, atol=1e-12)
