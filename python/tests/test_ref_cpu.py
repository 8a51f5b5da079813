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


def intra_loops_varlen(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, cu):
    """The spec's loops on one packed row: per sequence chunk, only its valid rows (r, s < nv)."""
    K, H, HV = q.shape[3], q.shape[2], g.shape[2]
    G = HV // H
    oq, ok, og, ob = (t.double().clone() for t in (dq, dk, dg, db))
    q, k, g, beta, dAqk, dAkk = (t.double()[0].tolist() for t in (q, k, g, beta, dAqk, dAkk))
    for a, b in R.seq_bounds(cu):
        for t0 in range(a, b, 64):
            nv = min(64, b - t0)
            for hv in range(HV):
                h = hv // G
                for r in range(nv):
                    tr, dbacc = t0 + r, 0.0
                    for d in range(K):
                        Aq = Ak = Ct = 0.0
                        gr = g[tr][hv][d]
                        for s in range(r + 1):
                            e = 2.0 ** (gr - g[t0 + s][hv][d])
                            Aq += dAqk[tr][hv][s] * k[t0 + s][h][d] * e
                            Ak += dAkk[tr][hv][s] * k[t0 + s][h][d] * e
                        for r2 in range(r, nv):
                            t2 = t0 + r2
                            e = 2.0 ** (g[t2][hv][d] - gr)
                            Ct += (dAqk[t2][hv][r] * q[t2][h][d] + dAkk[t2][hv][r] * beta[t2][hv] * k[t2][h][d]) * e
                        qr, kr, br = q[tr][h][d], k[tr][h][d], beta[tr][hv]
                        oq[0, tr, hv, d] += Aq
                        ok[0, tr, hv, d] += br * Ak + Ct
                        og[0, tr, hv, d] += qr * Aq + (br * Ak - Ct) * kr
                        dbacc += kr * Ak
                    ob[0, tr, hv] += dbacc
    return oq, ok, ob, og


CU = torch.tensor([0, 70, 70, 100, 101], dtype=torch.int64)  # a partial chunk, a zero-length sequence, one token


def test_intra_ref_varlen_matches_loops():
    torch.manual_seed(5)
    a = R.varlen_intra_inputs(CU, 110, 1, 2, 3, torch.bfloat16, "cpu")
    got = R.bwd_intra_ref_varlen(*a, CU)
    want = intra_loops_varlen(*a, CU)
    for x, y in zip(got, want):
        assert torch.allclose(x[:, :101], y[:, :101], rtol=1e-10, atol=1e-10)
        assert not x[:, 101:].any()  # past cu[N]: zeros
    folded = R.bwd_intra_ref_varlen(*a, CU, fold_dg=True)[3]  # suffix sums over the valid rows only
    assert torch.allclose(folded[:, 80], want[3][:, 80:100].sum(1), rtol=1e-10, atol=1e-10)
    assert torch.allclose(folded[:, 64], want[3][:, 64:70].sum(1), rtol=1e-10, atol=1e-10)


def test_dhu_ref_varlen_matches_loops():
    torch.manual_seed(6)
    (qg, kg, w, do, dv, gk), h0, dht = R.varlen_dhu_inputs(CU, 110, 1, 3, 2, torch.bfloat16, "cpu")
    scale = 0.5
    dh, dh0, dv2 = R.bwd_dhu_ref_varlen(qg, kg, w, do, dv, gk, CU, h0=h0, dht=dht, scale=scale)
    co = R.chunk_offsets(CU)
    assert co == [0, 2, 2, 3, 4] and dh.shape[1] == 4
    assert R.chunk_indices(CU).tolist() == [[0, 0], [0, 1], [2, 0], [3, 0]]
    qg, kg, w, do, dv, gk = (t.double()[0, :, 0].tolist() for t in (qg, kg, w, do, dv, gk))
    for n, (a, b) in enumerate(R.seq_bounds(CU)):
        dH = dht.double()[n, 0].tolist()
        for c in reversed(range((b - a + 63) // 64)):
            t0, nv = a + 64 * c, min(64, b - a - 64 * c)
            assert torch.allclose(dh[0, co[n] + c, 0], torch.tensor(dH, dtype=torch.float64), rtol=1e-10, atol=1e-12)
            v2 = [[dv[t0 + i][v] + sum(kg[t0 + i][d] * dH[d][v] for d in range(3)) for v in range(2)]
                  for i in range(nv)]
            assert torch.allclose(dv2[0, t0:t0 + nv, 0], torch.tensor(v2, dtype=torch.float64), rtol=1e-10)
            dH = [[math.pow(2.0, gk[t0 + nv - 1][d]) * dH[d][v]
                   + scale * sum(qg[t0 + i][d] * do[t0 + i][v] for i in range(nv))
                   - sum(w[t0 + i][d] * v2[i][v] for i in range(nv)) for v in range(2)] for d in range(3)]
        assert torch.allclose(dh0[n, 0], torch.tensor(dH, dtype=torch.float64), rtol=1e-10, atol=1e-12)
    assert not dv2[:, 101:].any()


def test_varlen_refs_equal_fixed_length():
    """cu = [0, T, 2T] with T % 64 == 0 is the fixed-length B = 2 batch."""
    torch.manual_seed(7)
    cu = torch.tensor([0, 128, 256])
    a = R.intra_inputs(2, 128, 1, 2, 4, torch.float16, "cpu")
    packed = [t.reshape(1, 256, *t.shape[2:]) for t in a]
    for x, y in zip(R.bwd_intra_ref_varlen(*packed, cu, fold_dg=True), R.bwd_intra_ref(*a, fold_dg=True)):
        assert torch.equal(x.reshape(y.shape), y)
    (d, h0, dht) = R.dhu_inputs(2, 128, 1, 4, 3, torch.float16, "cpu")
    pd = [t.reshape(1, 256, *t.shape[2:]) for t in d]
    v = R.bwd_dhu_ref_varlen(*pd, cu, h0=h0, dht=dht, scale=0.3)
    f = R.bwd_dhu_ref(*d, h0=h0, dht=dht, scale=0.3)
    assert torch.equal(v[0].reshape(f[0].shape), f[0]) and torch.equal(v[1], f[1])
    assert torch.equal(v[2].reshape(f[2].shape), f[2])


def test_wy_ref_is_the_gradient():
    """wy_dqkg_ref against autograd (float64) of the scalar the stage differentiates, per chunk:
    sum do * scale (q ge) h  +  sum dh * (h exp2(gn) + (k exp2(gn - g))^T v_new)  +  sum dv * (u - w h),
    u = A (v beta), w = A (k ge beta), A = (I + L)^-1 with L strictly lower: dq, dk, dv2 (= d/dv), dg (per
    natural-log unit of g, which is in log2 units), db and dA (= d/dL) in both state layouts."""
    torch.manual_seed(3)
    B, T, H, K, V, C = 1, 128, 2, 8, 6, R.CHUNK
    NT = T // C
    dd = dict(dtype=torch.float64)
    q, k = torch.randn(B, T, H, K, **dd), torch.randn(B, T, H, K, **dd)
    v, vn, do, dv = (torch.randn(B, T, H, V, **dd) for _ in range(4))
    g = (torch.nn.functional.logsigmoid(torch.randn(B, NT, C, H, K, **dd)).cumsum(2) * R.RCP_LN2).reshape(B, T, H, K)
    beta = torch.rand(B, T, H, **dd)
    Lm = torch.randn(B, NT, H, C, C, **dd) * 0.1 * torch.tril(torch.ones(C, C, **dd), -1)
    h, dh = torch.randn(B, NT, H, K, V, **dd), torch.randn(B, NT, H, K, V, **dd)
    scale = 0.3
    leaves = [t.clone().requires_grad_() for t in (q, k, v, g, beta, Lm)]
    q_, k_, v_, g_, b_, L_ = leaves
    A = torch.linalg.inv(torch.eye(C, **dd) + L_)                          # [B,NT,H,t,s]: row = token
    qc, kc, vc, gc, vnc, doc, dvc = (R.chunks(t) for t in (q_, k_, v_, g_, vn, do, dv))
    bc = R.chunks(b_[..., None])                                             # [B,NT,H,64,1]
    ge, gn = torch.exp2(gc), gc[..., -1:, :]
    o = scale * (qc * ge) @ h
    hn = h * torch.exp2(gn).transpose(-1, -2) + (kc * torch.exp2(gn - gc)).transpose(-1, -2) @ vnc
    w = A @ (kc * ge * bc)
    vn2 = A @ (vc * bc) - w @ h
    loss = (doc * o).sum() + (dh * hn).sum() + (dvc * vn2).sum()
    loss.backward()
    A_tok = R.unchunk(A.detach())                                            # [B,T,H,64]
    for svf in (False, True):
        hh, dhh = (h, dh) if not svf else (h.transpose(-1, -2).contiguous(), dh.transpose(-1, -2).contiguous())
        dq, dk, dv2, db, dg, dA = R.wy_dqkg_ref(q, k, v, vn, g, beta, A_tok, hh, do, dhh, dv, scale, svf)
        for name, got, want in (("dq", dq, q_.grad), ("dk", dk, k_.grad), ("dv2", dv2, v_.grad),
                                ("dg", dg, g_.grad / math.log(2)),  # per natural-log unit of the gate, as fla's
                                ("db", db, b_.grad),
                                ("dA", dA, R.unchunk(L_.grad * torch.tril(torch.ones(C, C, **dd), -1)))):
            assert R.rel_rms(got, want) < 1e-10, (name, svf, R.rel_rms(got, want))


def test_wy_ref_varlen_is_the_gradient():
    """wy_dqkg_ref_varlen on packed sequences with one-token and partial chunks against autograd of the same
    scalar as above, chunk by chunk over each chunk's valid rows (gn: its last valid row)."""
    torch.manual_seed(4)
    cu = torch.tensor([0, 1, 100, 164, 200])
    T, H, K, V = 200, 2, 8, 6
    dd = dict(dtype=torch.float64)
    a = [t.double() for t in R.wy_inputs(1, T, H, H, K, V, torch.float64, "cpu", cu=cu)]
    q, k, v, vn, g, beta, A, h, do, dh, dv = a
    scale = 0.3
    leaves = [t.clone().requires_grad_() for t in (q, k, v, g, beta)]
    q_, k_, v_, g_, b_ = leaves
    Lgrad = torch.zeros(1, T, H, R.CHUNK, **dd)
    loss, row = 0, 0
    Ls = []
    for s, e in R.seq_bounds(cu):
        for c0 in range(s, e, R.CHUNK):
            c1 = min(c0 + R.CHUNK, e)
            n = c1 - c0
            At = A[0, c0:c1, :, :n].movedim(1, 0)                          # [H, n(token), n]
            Lm = (torch.linalg.inv(At) - torch.eye(n, **dd)).detach().requires_grad_()
            Ls.append((Lm, c0, c1))
            Ac = torch.linalg.inv(torch.eye(n, **dd) + Lm)
            sl = lambda t: t[0, c0:c1].movedim(1, 0)                       # noqa: E731  [H, n, X]
            qc, kc, vc, gc, vnc, doc, dvc = (sl(t) for t in (q_, k_, v_, g_, vn, do, dv))
            bc = b_[0, c0:c1].movedim(1, 0)[..., None]
            ge, gn = torch.exp2(gc), gc[:, -1:, :]
            hc, dhc = h[0, row].double(), dh[0, row].double()                # [H, K, V]
            o = scale * (qc * ge) @ hc
            hn = hc * torch.exp2(gn).transpose(-1, -2) + (kc * torch.exp2(gn - gc)).transpose(-1, -2) @ vnc
            vn2 = Ac @ (vc * bc) - (Ac @ (kc * ge * bc)) @ hc
            loss = loss + (doc * o).sum() + (dhc * hn).sum() + (dvc * vn2).sum()
            row += 1
    loss.backward()
    for Lm, c0, c1 in Ls:
        n = c1 - c0
        Lgrad[0, c0:c1, :, :n] = (Lm.grad * torch.tril(torch.ones(n, n, **dd), -1)).movedim(0, 1)
    out = R.wy_dqkg_ref_varlen(*a, scale, cu)
    wants = (q_.grad, k_.grad, v_.grad, b_.grad, g_.grad / math.log(2), Lgrad)
    for name, got, want in zip(("dq", "dk", "dv2", "db", "dg", "dA"), out, wants):
        assert R.rel_rms(got, want) < 1e-10, (name, R.rel_rms(got, want))
