"""lab/experiments/intra-diag-mma/emulate.py: the tensor-core form of phase C (diag_mma.diff) checked on the CPU
for its index logic: each lane's A and B fragments gathered with the diff's formulas, the m16n8k8 products
done by the PTX fragment layouts (a0 (gid, tig), a1 (gid + 8, tig), a2 (gid, tig + 4), a3 (gid + 8, tig + 4);
b0 (tig, gid), b1 (tig + 4, gid); c0 (gid, 2 tig), c1 (gid, 2 tig + 1), c2 (gid + 8, 2 tig), c3 (gid + 8,
2 tig + 1)), the outer factors and outputs as the diff writes them, against the SIMT form's sums
(float64, no tf32 rounding: this checks indices and masks, precision.py checks precision).  Usage: emulate.py"""
import numpy as np

rng = np.random.default_rng(0)
DAP = 72


def check(blk):
    R0 = 16 * blk
    g = np.cumsum(-rng.random((16, 32)) * 3, axis=0)          # one warp's 32 columns, non-increasing
    k, q = rng.standard_normal((16, 32)), rng.standard_normal((16, 32))
    beta = rng.random(16)
    dAq = rng.standard_normal((16, 16)) + np.triu(np.full((16, 16), np.nan), 1)   # garbage above the diagonal
    dAk = rng.standard_normal((16, 16)) + np.triu(np.full((16, 16), np.nan), 0)   # ... and on it
    # SIMT form (the kernel's loop, in float64)
    Aq, Ak, Ct = np.zeros((16, 32)), np.zeros((16, 32)), np.zeros((16, 32))
    for r in range(16):
        for s in range(16):
            E = np.exp2(g[r] - g[s])
            if s < r:
                Aq[r] += dAq[r, s] * k[s] * E
                Ak[r] += dAk[r, s] * k[s] * E
                Ct[s] += dAq[r, s] * q[r] * E + dAk[r, s] * beta[r] * k[r] * E
            elif s == r:
                Aq[r] += dAq[r, s] * k[s]
                Ct[s] += dAq[r, s] * q[r]
    # tensor-core form, lane by lane
    qa = lambda m, c: dAq[m, c]
    ka = lambda m, c: dAk[m, c]
    rn = 8
    cq, ck, cc = (np.zeros((32, 4, 4)) for _ in range(3))   # [lane][nt][c0..c3]
    for nt in range(4):
        for kk in range(2):
            A = {n: np.zeros((16, 8)) for n in ("aq", "ak", "aqt", "akt")}
            B = {n: np.zeros((8, 8)) for n in ("b1", "b3", "b4")}
            for lane in range(32):
                gid, tig = lane >> 2, lane & 3
                m0, m1, k0, k1 = gid, gid + 8, 8 * kk + tig, 8 * kk + tig + 4
                aq = [qa(m0, k0) if k0 <= m0 else 0, qa(m1, k0) if k0 <= m1 else 0,
                      qa(m0, k1) if k1 <= m0 else 0, qa(m1, k1) if k1 <= m1 else 0]
                ak = [ka(m0, k0) if k0 < m0 else 0, ka(m1, k0) if k0 < m1 else 0,
                      ka(m0, k1) if k1 < m0 else 0, ka(m1, k1) if k1 < m1 else 0]
                aqt = [qa(k0, m0) if k0 >= m0 else 0, qa(k0, m1) if k0 >= m1 else 0,
                       qa(k1, m0) if k1 >= m0 else 0, qa(k1, m1) if k1 >= m1 else 0]
                akt = [ka(k0, m0) if k0 > m0 else 0, ka(k0, m1) if k0 > m1 else 0,
                       ka(k1, m0) if k1 > m0 else 0, ka(k1, m1) if k1 > m1 else 0]
                for n, a in (("aq", aq), ("ak", ak), ("aqt", aqt), ("akt", akt)):
                    A[n][gid, tig], A[n][gid + 8, tig], A[n][gid, tig + 4], A[n][gid + 8, tig + 4] = a
                cb = 8 * nt + gid
                gnb, g0, g1 = g[rn, cb], g[k0, cb], g[k1, cb]
                e0, e1, f0, f1 = np.exp2(gnb - g0), np.exp2(gnb - g1), np.exp2(g0 - gnb), np.exp2(g1 - gnb)
                for n, (v0, v1) in (("b1", (k[k0, cb] * e0, k[k1, cb] * e1)), ("b3", (q[k0, cb] * f0, q[k1, cb] * f1)),
                                    ("b4", (beta[k0] * k[k0, cb] * f0, beta[k1] * k[k1, cb] * f1))):
                    B[n][tig, gid], B[n][tig + 4, gid] = v0, v1
            D = {"cq": A["aq"] @ B["b1"], "ck": A["ak"] @ B["b1"], "cc": A["aqt"] @ B["b3"] + A["akt"] @ B["b4"]}
            for lane in range(32):
                gid, tig = lane >> 2, lane & 3
                for n, acc in (("cq", cq), ("ck", ck), ("cc", cc)):
                    acc[lane, nt] += [D[n][gid, 2 * tig], D[n][gid, 2 * tig + 1], D[n][gid + 8, 2 * tig],
                                      D[n][gid + 8, 2 * tig + 1]]
    # outer factors and placement back into (row, column)
    oq, ok_, oc = np.full((16, 32), np.nan), np.full((16, 32), np.nan), np.full((16, 32), np.nan)
    for lane in range(32):
        gid, tig = lane >> 2, lane & 3
        for nt in range(4):
            c0 = 8 * nt + 2 * tig
            for h in range(2):
                r = gid + 8 * h
                for e in range(2):
                    c = c0 + e
                    fa = np.exp2(g[r, c] - g[rn, c])
                    oq[r, c] = cq[lane, nt, 2 * h + e] * fa
                    ok_[r, c] = ck[lane, nt, 2 * h + e] * fa
                    oc[r, c] = cc[lane, nt, 2 * h + e] * np.exp2(g[rn, c] - g[r, c])
    err = max(np.abs(oq - Aq).max() / np.abs(Aq).max(), np.abs(ok_ - Ak).max() / np.abs(Ak).max(),
              np.abs(oc - Ct).max() / np.abs(Ct).max())
    return err


worst = max(check(b) for b in range(4) for _ in range(5))
print(f"tensor-core form against the SIMT form (float64, indices and masks): worst relative error {worst:.2e}")
assert worst < 1e-12, worst
