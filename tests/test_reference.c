/*
 * test_reference.c: proves the float64 references of tests/ref/kda_ref.c
 * right, so that the kernel tests can trust them.
 *
 * What it guarantees when it passes: kref_bwd_intra equals, to 1e-6
 * relative, the central finite differences of Loss = sum dAqk*P + sum
 * dAkk*L_mat (spec 3.2) with respect to q, k, beta, the natural-log
 * cumulative gate and (fold_dg) the per-token natural-log gate, over five
 * gate families and with GVA (HV = 2H); kref_bwd_dhu equals the finite
 * differences of the spec 4.6 forward scan for dh, dv2 and dh0, and its
 * fla-faithful mode differs from the exact one by a bf16/fp16-sized amount;
 * kref_wy_dqkg_varlen equals the finite differences of the scalar wy_dqkg
 * differentiates (dq, dk, dv2, dg, db and dA through A = (I + L)^-1) on packed
 * sequences with a one-token and a partial chunk and grouped value heads;
 * the chunked forward recompute (Akk, w, u, the states entering each chunk)
 * equals the token-by-token recurrence, fixed and packed; the whole backward
 * composed of these references (kref_kda_bwd_varlen, and with l2norm, the
 * gate and beta's sigmoid, kref_kda_bwd_prod_varlen) equals the finite
 * differences of that recurrence's loss for every input, on packed
 * documents with grouped value heads and with both gate forms; the gate inside
 * chunk_kda (both forms, with its A_log and dt_bias sums),
 * the l2norm and beta's sigmoid equal the finite differences of their
 * forwards; the generators keep their invariants; the bf16/fp16 conversions round to
 * nearest even.  Inputs are fresh each run; the seed is printed and
 * KREF_SEED=<seed> replays a run.
 */
#include "kda_ref.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BT KREF_BT

static uint64_t g_seed;

/* Check's ck_assert records a checkpoint through the runner on every call,
 * which is slow in tight loops; these call it only when the condition
 * fails (the arguments are pure and may be evaluated twice). */
#define CHK(cond)                                                         \
    do {                                                                  \
        if (!(cond)) ck_assert_msg(0, "failed: %s (seed %llu)", #cond,    \
                                   (unsigned long long)g_seed);           \
    } while (0)
#define CHK_U(x, y)                                                       \
    do {                                                                  \
        if ((x) != (y)) ck_assert_uint_eq((x), (y));                      \
    } while (0)

static double *dalloc(size_t n)
{
    double *p = calloc(n ? n : 1, sizeof(double));
    ck_assert_ptr_nonnull(p);
    return p;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Relative error of one finite-difference sample: measured against the
 * larger of |analytic| and the RMS of the whole analytic gradient, so that
 * near-zero components are judged on the gradient's scale; INFINITY when
 * anything is not finite. */
static double fd_rel(double fd, double an, double rms)
{
    /* A non-finite scale (e.g. a poisoned gradient whose RMS overflows)
     * must fail, not divide every error down to zero. */
    if (!isfinite(fd) || !isfinite(an) || !isfinite(rms)) return INFINITY;
    double den = fmax(fabs(an), rms);
    if (den == 0.0) return fabs(fd - an);
    return fabs(fd - an) / den;
}

static double rms_of(const double *x, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += x[i] * x[i];
    return sqrt(s / (double)n);
}

/* ------------------------------------------------- packed-batch tools --- */

/* Outputs are filled with this before a reference call; entries the
 * reference must not write are compared against it bitwise. */
#define POISON (-0x1.5555p+999)

/* cu = [0, T, .., BT] for the fixed-length calls (the caller frees it). */
static int64_t *fixed_cu(int B, int T)
{
    int64_t *cu = calloc((size_t)B + 1, sizeof(int64_t));
    ck_assert_ptr_nonnull(cu);
    for (int b = 0; b <= B; b++) cu[b] = (int64_t)b * T;
    return cu;
}

/* First and one-past-last token of the chunk that holds valid token t (the
 * test's own reading of the contract: chunks start at cu[n] + 64c and stop
 * at the sequence end). */
static void chunk_of(int N, const int64_t *cu, int64_t t, int64_t *start, int64_t *end)
{
    int n = 0;
    while (n < N && t >= cu[n + 1]) n++;
    ck_assert_int_lt(n, N);
    *start = cu[n] + (t - cu[n]) / BT * BT;
    *end = *start + BT < cu[n + 1] ? *start + BT : cu[n + 1];
}

static void fill(double *x, size_t n, double v)
{
    for (size_t i = 0; i < n; i++) x[i] = v;
}

/* Entries [from, to) of rows of `width` doubles must still be POISON. */
static int untouched(const double *x, size_t from, size_t to, size_t width)
{
    const double p = POISON;
    for (size_t i = from * width; i < to * width; i++)
        if (memcmp(&x[i], &p, sizeof p) != 0) return 0;
    return 1;
}

/* "B2 T100" for a fixed-length case (cu == NULL), else "varlen T320 cu [..]". */
static void shape_label(char *buf, size_t size, int B, int T, int N, const int64_t *cu)
{
    if (!cu) {
        snprintf(buf, size, "B%d T%d", B, T);
        return;
    }
    int w = snprintf(buf, size, "varlen T%d cu [", T);
    for (int n = 0; n <= N && w < (int)size - 24; n++)
        w += snprintf(buf + w, size - w, n ? ",%lld" : "%lld", (long long)cu[n]);
    snprintf(buf + w, size - w, "]");
}

static int all_finite(const double *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

/* Sets a fraction of the per-token gates to `mask` (fla's masked gates). */
static void mask_gates(kref_rng *rng, double *a, size_t n, double frac, double mask)
{
    for (size_t i = 0; i < n; i++)
        if (kref_rng_uniform(rng) < frac) a[i] = mask;
}

/* ------------------------------------------------------ bwd_intra FD --- */

/* A packed batch of T storage tokens: sequences per cu [N+1]. */
typedef struct intra_prob {
    int T, H, HV, K, N;
    const int64_t *cu;
    double *q, *k, *g, *beta, *dAqk, *dAkk;
} intra_prob;

/* Plain float64 forward of spec 3.2: the loss sum dAqk*P + sum dAkk*L_mat
 * over every (sequence, hv, chunk), P over s <= r and L_mat over s < r, both
 * inside the chunk's valid rows. */
static double intra_loss(const intra_prob *p)
{
    const int G = p->HV / p->H, K = p->K, H = p->H, HV = p->HV;
    double loss = 0.0;
    for (int n = 0; n < p->N; n++)
        for (int hv = 0; hv < HV; hv++) {
            int h = hv / G;
            for (int64_t c0 = p->cu[n]; c0 < p->cu[n + 1]; c0 += BT) {
                int64_t nr = p->cu[n + 1] - c0 < BT ? p->cu[n + 1] - c0 : BT;
                for (int r = 0; r < nr; r++) {
                    size_t tr = (size_t)c0 + r;
                    double br = p->beta[tr * HV + hv];
                    for (int s = 0; s <= r; s++) {
                        size_t ts = (size_t)c0 + s;
                        double P = 0.0, Lm = 0.0;
                        for (int d = 0; d < K; d++) {
                            double e = exp2(p->g[(tr * HV + hv) * K + d] -
                                            p->g[(ts * HV + hv) * K + d]);
                            double ks = p->k[(ts * H + h) * K + d];
                            P += p->q[(tr * H + h) * K + d] * ks * e;
                            Lm += p->k[(tr * H + h) * K + d] * ks * e;
                        }
                        loss += p->dAqk[(tr * HV + hv) * BT + s] * P;
                        if (s < r) loss += p->dAkk[(tr * HV + hv) * BT + s] * br * Lm;
                    }
                }
            }
        }
    return loss;
}

/* Central difference of the loss in one scalar x, with step h. */
static double fd_scalar(intra_prob *p, double *x, double h)
{
    double x0 = *x;
    *x = x0 + h;
    double lp = intra_loss(p);
    *x = x0 - h;
    double lm = intra_loss(p);
    *x = x0;
    return (lp - lm) / (2 * h);
}

/* Central difference in the per-token natural-log gate a[t,hv,d]: it shifts
 * the natural-log cumulative gate of rows t..chunk end (the chunk's last
 * valid row) by h, i.e. g2 by h/ln2 (exactly log2(e)). */
static double fd_token_gate(intra_prob *p, int64_t t, int hv, int d, double h,
                            int whole_suffix)
{
    int64_t cs, ce;
    chunk_of(p->N, p->cu, t, &cs, &ce);
    int64_t tend = whole_suffix ? ce : t + 1;
    double lp, lm;
    for (int sgn = 0; sgn < 2; sgn++) {
        double dlt = (sgn == 0 ? h : -h) * M_LOG2E;
        double *save = dalloc((size_t)(tend - t));
        for (int64_t tt = t; tt < tend; tt++) {
            double *x = &p->g[((size_t)tt * p->HV + hv) * p->K + d];
            save[tt - t] = *x;
            *x += dlt;
        }
        double l = intra_loss(p);
        for (int64_t tt = t; tt < tend; tt++)
            p->g[((size_t)tt * p->HV + hv) * p->K + d] = save[tt - t];
        free(save);
        if (sgn == 0) lp = l; else lm = l;
    }
    return (lp - lm) / (2 * h);
}

/* One bwd_intra FD case.  cu == NULL: the fixed-length API on B rows of T
 * tokens; else the varlen API on T storage tokens with sequences per cu [N+1]
 * (every input beyond cu[N] is NaN, every output there must stay POISON).
 * A fraction mask_frac of the per-token gates is set to `mask`. */
static void intra_fd_run(kref_gate_family fam, uint64_t salt, int B, int T, int N,
                         const int64_t *cu_in, int H, int HV, int K, double mask_frac,
                         double mask)
{
    kref_rng rng;
    kref_rng_seed(&rng, g_seed ^ salt);
    int64_t *cu_fix = cu_in ? NULL : fixed_cu(B, T);
    intra_prob p = {.T = cu_in ? T : B * T, .H = H, .HV = HV, .K = K,
                    .N = cu_in ? N : B, .cu = cu_in ? cu_in : cu_fix};
    const int TT = p.T, G = HV / H;
    const int64_t nt = p.cu[p.N]; /* valid tokens */
    size_t nqk = (size_t)TT * H * K, nv = (size_t)TT * HV * K, nb = (size_t)TT * HV,
           nA = (size_t)TT * HV * BT;
    p.q = dalloc(nqk); p.k = dalloc(nqk); p.g = dalloc(nv);
    p.beta = dalloc(nb); p.dAqk = dalloc(nA); p.dAkk = dalloc(nA);
    double *a = dalloc(nv);
    kref_gen_unit_rows(&rng, (size_t)TT * H, K, p.q);
    kref_gen_unit_rows(&rng, (size_t)TT * H, K, p.k);
    kref_gen_gate(&rng, fam, 1, TT, HV, K, a);
    mask_gates(&rng, a, nv, mask_frac, mask);
    kref_gen_beta(&rng, nb, p.beta);
    double *dq_in = dalloc(nv), *dk_in = dalloc(nv), *dg_in = dalloc(nv),
           *db_in = dalloc(nb);
    kref_gen_normal(&rng, nv, 1.0, dq_in);
    kref_gen_normal(&rng, nv, 1.0, dk_in);
    kref_gen_normal(&rng, nv, 1.0, dg_in);
    kref_gen_normal(&rng, nb, 1.0, db_in);
    if (cu_in) {
        fill(p.g, nv, NAN); /* the cumsum writes only valid tokens */
        kref_gate_cumsum_varlen(TT, HV, K, N, cu_in, a, p.g);
        kref_gen_dA_varlen(&rng, TT, HV, N, cu_in, 0, NAN, p.dAqk);
        kref_gen_dA_varlen(&rng, TT, HV, N, cu_in, 1, NAN, p.dAkk);
        size_t v0 = (size_t)nt;
        fill(p.q + v0 * H * K, nqk - v0 * H * K, NAN);
        fill(p.k + v0 * H * K, nqk - v0 * H * K, NAN);
        fill(p.beta + v0 * HV, nb - v0 * HV, NAN);
        fill(dq_in + v0 * HV * K, nv - v0 * HV * K, NAN);
        fill(dk_in + v0 * HV * K, nv - v0 * HV * K, NAN);
        fill(dg_in + v0 * HV * K, nv - v0 * HV * K, NAN);
        fill(db_in + v0 * HV, nb - v0 * HV, NAN);
    } else {
        kref_gate_cumsum(B, T, HV, K, a, p.g);
        kref_gen_dA(&rng, B, T, HV, 0, NAN, p.dAqk);
        kref_gen_dA(&rng, B, T, HV, 1, NAN, p.dAkk);
    }
    double *dq = dalloc(nv), *dk = dalloc(nv), *dg = dalloc(nv), *db = dalloc(nb);
    double *dgf = dalloc(nv), *dq2 = dalloc(nv), *dk2 = dalloc(nv), *db2 = dalloc(nb);
#define RUN_INTRA(fold, oq, ok, og, ob)                                                    \
    do {                                                                                   \
        fill(oq, nv, POISON); fill(ok, nv, POISON); fill(og, nv, POISON);                  \
        fill(ob, nb, POISON);                                                              \
        if (cu_in)                                                                         \
            kref_bwd_intra_varlen(TT, H, HV, K, N, cu_in, p.q, p.k, p.g, p.beta, p.dAqk,   \
                                  p.dAkk, dq_in, dk_in, dg_in, db_in, fold, oq, ok, og, ob); \
        else                                                                               \
            kref_bwd_intra(B, T, H, HV, K, p.q, p.k, p.g, p.beta, p.dAqk, p.dAkk, dq_in,   \
                           dk_in, dg_in, db_in, fold, oq, ok, og, ob);                     \
    } while (0)
    RUN_INTRA(0, dq, dk, dg, db);
    RUN_INTRA(1, dq2, dk2, dgf, db2);
    /* Valid tokens finite (no NaN garbage reached them), slack untouched. */
    CHK(all_finite(dq, (size_t)nt * HV * K) && all_finite(dk, (size_t)nt * HV * K) &&
        all_finite(dg, (size_t)nt * HV * K) && all_finite(db, (size_t)nt * HV) &&
        all_finite(dgf, (size_t)nt * HV * K));
    CHK(untouched(dq, nt, TT, (size_t)HV * K) && untouched(dk, nt, TT, (size_t)HV * K) &&
        untouched(dg, nt, TT, (size_t)HV * K) && untouched(db, nt, TT, HV) &&
        untouched(dgf, nt, TT, (size_t)HV * K) && untouched(db2, nt, TT, HV));
    /* The analytic gradients: dq/dk summed over the value heads of the group
     * (per qk head), db and dg per value head, fold_dg minus the suffix sum
     * of dg_in over the chunk's valid rows. */
    size_t nqv = (size_t)nt * H * K, nvv = (size_t)nt * HV * K, nbv = (size_t)nt * HV;
    double *gq = dalloc(nqk), *gk = dalloc(nqk), *gb = dalloc(nb), *gg = dalloc(nv),
           *ga = dalloc(nv);
    for (int64_t t = 0; t < nt; t++) {
        int64_t cs, ce;
        chunk_of(p.N, p.cu, t, &cs, &ce);
        for (int hv = 0; hv < HV; hv++) {
            size_t i3 = (size_t)t * HV + hv;
            gb[i3] = db[i3] - db_in[i3];
            for (int d = 0; d < K; d++) {
                size_t o = i3 * K + d, oq = ((size_t)t * H + hv / G) * K + d;
                gq[oq] += dq[o] - dq_in[o];
                gk[oq] += dk[o] - dk_in[o];
                gg[o] = dg[o] - dg_in[o];
                double sfx = 0.0;
                for (int64_t tt = t; tt < ce; tt++)
                    sfx += dg_in[((size_t)tt * HV + hv) * K + d];
                ga[o] = dgf[o] - sfx;
            }
        }
    }
    /* fold_dg must not change dq, dk, db. */
    CHK(kref_max_abs(dq, dq2, nvv) == 0.0);
    CHK(kref_max_abs(dk, dk2, nvv) == 0.0);
    CHK(kref_max_abs(db, db2, nbv) == 0.0);

    const double h = (fam == KREF_GATE_STRONG || fam == KREF_GATE_FUSED) ? 2e-6 : 1e-5;
    /* 12 random tokens, then the last token of every sequence (where a
     * partial chunk ends) and the first one of its last chunk. */
    const int NS = 12;
    double rq = rms_of(gq, nqv), rk = rms_of(gk, nqv), rb = rms_of(gb, nbv),
           rg = rms_of(gg, nvv), ra = rms_of(ga, nvv);
    double eq = 0, ek = 0, eb = 0, eg = 0, ea = 0;
    int nsamp = 0;
    for (int it = 0; it < NS + 2 * p.N; it++) {
        int64_t t;
        if (it < NS) {
            t = (int64_t)(kref_rng_u64(&rng) % (uint64_t)nt);
        } else {
            int n = (it - NS) / 2;
            if (p.cu[n + 1] == p.cu[n]) continue;
            int64_t cs, ce;
            chunk_of(p.N, p.cu, p.cu[n + 1] - 1, &cs, &ce);
            t = (it - NS) % 2 ? cs : ce - 1;
        }
        nsamp++;
        /* q and k at the qk head: the loss sums over the group's value heads. */
        int hq = (int)(kref_rng_u64(&rng) % (uint64_t)H),
            hv = (int)(kref_rng_u64(&rng) % (uint64_t)HV),
            d = (int)(kref_rng_u64(&rng) % (uint64_t)K);
        size_t i = ((size_t)t * H + hq) * K + d, o = ((size_t)t * HV + hv) * K + d;
        eq = fmax(eq, fd_rel(fd_scalar(&p, &p.q[i], h), gq[i], rq));
        ek = fmax(ek, fd_rel(fd_scalar(&p, &p.k[i], h), gk[i], rk));
        eb = fmax(eb, fd_rel(fd_scalar(&p, &p.beta[(size_t)t * HV + hv], h),
                             gb[(size_t)t * HV + hv], rb));
        eg = fmax(eg, fd_rel(fd_token_gate(&p, t, hv, d, h, 0), gg[o], rg));
        ea = fmax(ea, fd_rel(fd_token_gate(&p, t, hv, d, h, 1), ga[o], ra));
    }
    char shape[160];
    shape_label(shape, sizeof shape, B, T, N, cu_in);
    printf("  bwd_intra FD %-6s%s (%s H%d HV%d K%d, %d samples each): max rel err "
           "dq %.2e dk %.2e db %.2e dg %.2e dg_folded(per-token) %.2e\n",
           kref_gate_name(fam), mask_frac > 0 ? "+mask" : "", shape, H, HV, K, nsamp, eq, ek,
           eb, eg, ea);
    ck_assert_msg(eq <= 1e-6 && ek <= 1e-6 && eb <= 1e-6 && eg <= 1e-6 && ea <= 1e-6,
                  "bwd_intra FD mismatch (%s, %s, seed %llu)", kref_gate_name(fam), shape,
                  (unsigned long long)g_seed);

    /* The reference never reads the strictly-upper halves (nor, in a partial
     * chunk, the columns beyond its valid rows, nor anything beyond cu[N]):
     * zeros there give bitwise the same results as the NaN garbage. */
    for (int64_t t = 0; t < TT; t++) {
        int64_t cs = TT, ce;
        if (t < nt) chunk_of(p.N, p.cu, t, &cs, &ce);
        for (int hv = 0; hv < HV; hv++)
            for (int s = t < nt ? (int)(t - cs) + 1 : 0; s < BT; s++) {
                p.dAqk[((size_t)t * HV + hv) * BT + s] = 0.0;
                p.dAkk[((size_t)t * HV + hv) * BT + s] = 0.0;
            }
    }
    RUN_INTRA(0, dq2, dk2, dgf, db2);
#undef RUN_INTRA
    CHK(kref_max_abs(dq, dq2, nvv) == 0.0 && kref_max_abs(dk, dk2, nvv) == 0.0 &&
        kref_max_abs(dg, dgf, nvv) == 0.0 && kref_max_abs(db, db2, nbv) == 0.0);

    free(p.q); free(p.k); free(p.g); free(p.beta); free(p.dAqk); free(p.dAkk); free(a);
    free(dq_in); free(dk_in); free(dg_in); free(db_in); free(dq); free(dk); free(dg);
    free(db); free(dgf); free(dq2); free(dk2); free(db2); free(gq); free(gk); free(gb);
    free(gg); free(ga); free(cu_fix);
}

static void intra_fd_family(kref_gate_family fam)
{
    intra_fd_run(fam, 0x1000u + (unsigned)fam, 1, 128, 0, NULL, 1, 2, 4, 0.0, 0.0);
}

START_TEST(test_intra_fd)
{
    intra_fd_family((kref_gate_family)_i);
}
END_TEST

/* A production-sized call must be finite and fast enough for the kernel
 * tests (K = 128, T = 1024, B*HV = 4, strongest gates). */
START_TEST(test_intra_speed)
{
    kref_rng rng;
    kref_rng_seed(&rng, g_seed ^ 0x2000u);
    const int B = 2, T = 1024, H = 1, HV = 2, K = 128;
    size_t nqk = (size_t)B * T * H * K, nv = (size_t)B * T * HV * K,
           nb = (size_t)B * T * HV, nA = (size_t)B * T * HV * BT;
    double *q = dalloc(nqk), *k = dalloc(nqk), *a = dalloc(nv), *g = dalloc(nv),
           *beta = dalloc(nb), *dAqk = dalloc(nA), *dAkk = dalloc(nA), *z = dalloc(nv),
           *zb = dalloc(nb), *dq = dalloc(nv), *dk = dalloc(nv), *dg = dalloc(nv),
           *db = dalloc(nb);
    kref_gen_unit_rows(&rng, (size_t)B * T * H, K, q);
    kref_gen_unit_rows(&rng, (size_t)B * T * H, K, k);
    kref_gen_gate(&rng, KREF_GATE_CONST5, B, T, HV, K, a);
    kref_gate_cumsum(B, T, HV, K, a, g);
    kref_gen_beta(&rng, nb, beta);
    kref_gen_dA(&rng, B, T, HV, 0, 1e30, dAqk);
    kref_gen_dA(&rng, B, T, HV, 1, 1e30, dAkk);
    double t0 = now_s();
    kref_bwd_intra(B, T, H, HV, K, q, k, g, beta, dAqk, dAkk, z, z, z, zb, 1, dq, dk, dg, db);
    double el = now_s() - t0;
    printf("  bwd_intra speed: B2 T1024 HV2 K128 took %.2f s (this build)\n", el);
    CHK(kref_rel_rms(dq, dq, nv) == 0.0 && kref_rel_rms(dk, dk, nv) == 0.0 &&
              kref_rel_rms(dg, dg, nv) == 0.0 && kref_rel_rms(db, db, nb) == 0.0);
    free(q); free(k); free(a); free(g); free(beta); free(dAqk); free(dAkk); free(z);
    free(zb); free(dq); free(dk); free(dg); free(db);
}
END_TEST

/* -------------------------------------------------------- bwd_dhu FD --- */

typedef struct dhu_prob {
    int T, HV, K, V, N;      /* packed: T storage tokens, sequences per cu */
    const int64_t *cu, *off; /* cu [N+1], chunk offsets [N+1] */
    double *qg, *kg, *w, *g, *u, *h0, *dout, *dv, *dht; /* dht may be NULL */
    double scale;
    /* Perturbation injected into the state leaving global chunk row inj_row
     * at value head inj_hv. */
    int64_t inj_row;
    int inj_hv;
    size_t inj_i;
    double inj;
} dhu_prob;

/* The spec 4.6 forward scan and loss, per sequence n: S_0 = h0[n]; per chunk
 * (its valid rows only) o_c = qg_c S_c contributes scale <do_c, o_c>;
 * v_new_c = u_c - w_c S_c contributes <dv_c, v_new_c>; S_{c+1} =
 * diag(exp2(g2 of the chunk's last valid row)) S_c + kg_c^T v_new_c;
 * finally <dht[n], S_final>. */
static double dhu_loss(const dhu_prob *p)
{
    const int HV = p->HV, K = p->K, V = p->V;
    const size_t KV = (size_t)K * V;
    double *S = dalloc(KV), *Sn = dalloc(KV), *vn = dalloc(V);
    double loss = 0.0;
    for (int n = 0; n < p->N; n++)
        for (int hv = 0; hv < HV; hv++) {
            size_t so = ((size_t)n * HV + hv) * KV;
            memcpy(S, p->h0 + so, sizeof(double) * KV);
            int64_t row = p->off[n];
            for (int64_t c0 = p->cu[n]; c0 < p->cu[n + 1]; c0 += BT, row++) {
                int64_t nr = p->cu[n + 1] - c0 < BT ? p->cu[n + 1] - c0 : BT;
                const size_t tl = ((size_t)(c0 + nr - 1) * HV + hv) * K;
                for (int d = 0; d < K; d++)
                    for (int v = 0; v < V; v++)
                        Sn[d * V + v] = exp2(p->g[tl + d]) * S[d * V + v];
                for (int i = 0; i < nr; i++) {
                    size_t tk = ((size_t)(c0 + i) * HV + hv) * K;
                    size_t tv = ((size_t)(c0 + i) * HV + hv) * V;
                    for (int v = 0; v < V; v++) {
                        double o = 0.0, ws = 0.0;
                        for (int d = 0; d < K; d++) {
                            o += p->qg[tk + d] * S[d * V + v];
                            ws += p->w[tk + d] * S[d * V + v];
                        }
                        vn[v] = p->u[tv + v] - ws;
                        loss += p->scale * p->dout[tv + v] * o + p->dv[tv + v] * vn[v];
                    }
                    for (int d = 0; d < K; d++)
                        for (int v = 0; v < V; v++) Sn[d * V + v] += p->kg[tk + d] * vn[v];
                }
                if (row == p->inj_row && hv == p->inj_hv) Sn[p->inj_i] += p->inj;
                memcpy(S, Sn, sizeof(double) * KV);
            }
            if (p->dht)
                for (size_t i = 0; i < KV; i++) loss += p->dht[so + i] * S[i];
        }
    free(S); free(Sn); free(vn);
    return loss;
}

static double dhu_fd_x(dhu_prob *p, double *x, double h)
{
    double x0 = *x;
    *x = x0 + h;
    double lp = dhu_loss(p);
    *x = x0 - h;
    double lm = dhu_loss(p);
    *x = x0;
    return (lp - lm) / (2 * h);
}

/* dL/dS_{c+1}[d,v] of global chunk row `row` at value head hv, by injection. */
static double dhu_fd_state(dhu_prob *p, int64_t row, int hv, size_t i, double h)
{
    p->inj_row = row;
    p->inj_hv = hv;
    p->inj_i = i;
    p->inj = h;
    double lp = dhu_loss(p);
    p->inj = -h;
    double lm = dhu_loss(p);
    p->inj_row = -1;
    p->inj = 0.0;
    return (lp - lm) / (2 * h);
}

/* One bwd_dhu FD case.  cu == NULL: the fixed-length API on B rows of T
 * tokens; else the varlen API on T storage tokens, sequences per cu [N+1]
 * (inputs beyond cu[N] NaN, outputs there and dh rows beyond the chunk
 * count must stay POISON).  Every dh entry of every chunk row and head is
 * checked, dv2 at 16 random tokens and the last token of each sequence, dh0
 * at 16 random entries and one entry of each sequence. */
static void dhu_fd_run(int with_dht, uint64_t salt, int B, int T, int N, const int64_t *cu_in,
                       int HV, int K, int V, double mask_frac, double mask)
{
    kref_rng rng;
    kref_rng_seed(&rng, g_seed ^ salt);
    int64_t *cu_fix = cu_in ? NULL : fixed_cu(B, T);
    const int NN = cu_in ? N : B, TT = cu_in ? T : B * T;
    const int64_t *cu = cu_in ? cu_in : cu_fix;
    int64_t *off = calloc((size_t)NN + 1, sizeof(int64_t));
    const int64_t NT = kref_chunk_offsets(NN, cu, off), nt = cu[NN];
    dhu_prob p = {.T = TT, .HV = HV, .K = K, .V = V, .N = NN, .cu = cu, .off = off,
                  .inj_row = -1};
    const size_t KV = (size_t)K * V;
    size_t nk = (size_t)TT * HV * K, nvv = (size_t)TT * HV * V, ns = (size_t)NN * HV * KV,
           nh = (size_t)(NT + 2) * HV * KV; /* two spare rows, never written */
    p.qg = dalloc(nk); p.kg = dalloc(nk); p.w = dalloc(nk); p.g = dalloc(nk);
    p.u = dalloc(nvv); p.dout = dalloc(nvv); p.dv = dalloc(nvv); p.h0 = dalloc(ns);
    p.dht = with_dht ? dalloc(ns) : NULL;
    p.scale = 1.0 / sqrt((double)K);
    double *a = dalloc(nk);
    kref_gen_gate(&rng, KREF_GATE_LOGSIG, 1, TT, HV, K, a);
    mask_gates(&rng, a, nk, mask_frac, mask);
    fill(p.g, nk, NAN);
    kref_gate_cumsum_varlen(TT, HV, K, NN, cu, a, p.g);
    /* Short sequences: fla's plain-randn recipe, scaled down so the toy scan
     * stays well conditioned. */
    kref_gen_normal(&rng, nk, 0.3, p.qg);
    kref_gen_normal(&rng, nk, 0.1, p.kg);
    kref_gen_normal(&rng, nk, 0.1, p.w);
    kref_gen_normal(&rng, nvv, 1.0, p.u);
    kref_gen_normal(&rng, nvv, 1.0, p.dout);
    kref_gen_normal(&rng, nvv, 1.0, p.dv);
    kref_gen_normal(&rng, ns, 1.0, p.h0);
    if (p.dht) kref_gen_normal(&rng, ns, 1.0, p.dht);
    double *in_k[3] = {p.qg, p.kg, p.w}, *in_v[3] = {p.u, p.dout, p.dv};
    for (int i = 0; i < 3; i++) {
        fill(in_k[i] + (size_t)nt * HV * K, nk - (size_t)nt * HV * K, NAN);
        fill(in_v[i] + (size_t)nt * HV * V, nvv - (size_t)nt * HV * V, NAN);
    }
    double *dh = dalloc(nh), *dv2 = dalloc(nvv), *dh0 = dalloc(ns);
    fill(dh, nh, POISON); fill(dv2, nvv, POISON); fill(dh0, ns, POISON);
    if (cu_in)
        kref_bwd_dhu_varlen(TT, HV, K, V, NN, cu, p.qg, p.kg, p.w, p.g, p.dout, p.dv, p.dht,
                            p.scale, -1, dh, dv2, dh0);
    else
        kref_bwd_dhu(B, T, HV, K, V, p.qg, p.kg, p.w, p.g, p.dout, p.dv, p.dht, p.scale, -1,
                     dh, dv2, dh0);
    CHK(all_finite(dh, (size_t)NT * HV * KV) && all_finite(dv2, (size_t)nt * HV * V) &&
        all_finite(dh0, ns));
    CHK(untouched(dh, (size_t)NT, (size_t)NT + 2, (size_t)HV * KV));
    CHK(untouched(dv2, (size_t)nt, (size_t)TT, (size_t)HV * V));
    const double h = 1e-5;
    double rh = rms_of(dh, (size_t)NT * HV * KV), rv = rms_of(dv2, (size_t)nt * HV * V),
           r0 = rms_of(dh0, ns);
    double eh = 0, ev = 0, e0 = 0;
    for (int64_t row = 0; row < NT; row++)
        for (int hv = 0; hv < HV; hv++)
            for (size_t i = 0; i < KV; i++) {
                double an = dh[((size_t)row * HV + hv) * KV + i];
                eh = fmax(eh, fd_rel(dhu_fd_state(&p, row, hv, i, h), an, rh));
            }
    for (int it = 0; it < 16 + NN; it++) {
        int64_t t = it < 16 ? (int64_t)(kref_rng_u64(&rng) % (uint64_t)nt) : cu[it - 16 + 1] - 1;
        if (it >= 16 && cu[it - 16 + 1] == cu[it - 16]) continue;
        size_t i = ((size_t)t * HV + kref_rng_u64(&rng) % (uint64_t)HV) * V +
                   kref_rng_u64(&rng) % (uint64_t)V;
        ev = fmax(ev, fd_rel(dhu_fd_x(&p, &p.u[i], h), dv2[i], rv));
    }
    for (int it = 0; it < 16 + NN; it++) {
        size_t i = it < 16 ? kref_rng_u64(&rng) % ns
                           : (size_t)(it - 16) * HV * KV + kref_rng_u64(&rng) % ((size_t)HV * KV);
        e0 = fmax(e0, fd_rel(dhu_fd_x(&p, &p.h0[i], h), dh0[i], r0));
    }
    char shape[160];
    shape_label(shape, sizeof shape, B, T, N, cu_in);
    printf("  bwd_dhu FD%s (%s K%d V%d HV%d, dht %s): max rel err dh %.2e (all %lld x %d x %d x %d)"
           " dv2 %.2e dh0 %.2e\n",
           mask_frac > 0 ? " +mask" : "", shape, K, V, HV, with_dht ? "given" : "NULL", eh,
           (long long)NT, HV, K, V, ev, e0);
    ck_assert_msg(eh <= 1e-6 && ev <= 1e-6 && e0 <= 1e-6, "bwd_dhu FD mismatch (%s, seed %llu)",
                  shape, (unsigned long long)g_seed);
    /* The last chunk row of each sequence holds dht (or zero); a zero-length
     * sequence runs no chunk, so its dh0 is its dht (or zero), bitwise. */
    for (int n = 0; n < NN; n++) {
        const double *want = p.dht ? p.dht + (size_t)n * HV * KV : NULL;
        for (size_t i = 0; i < (size_t)HV * KV; i++) {
            double wv = want ? want[i] : 0.0;
            if (off[n + 1] > off[n]) CHK(dh[(size_t)(off[n + 1] - 1) * HV * KV + i] == wv);
            else CHK(dh0[(size_t)n * HV * KV + i] == wv);
        }
    }
    free(p.qg); free(p.kg); free(p.w); free(p.g); free(p.u); free(p.dout); free(p.dv);
    free(p.h0); free(p.dht); free(a); free(dh); free(dv2); free(dh0); free(off); free(cu_fix);
}

static void dhu_fd_case(int with_dht)
{
    dhu_fd_run(with_dht, 0x3000u + (unsigned)with_dht, 1, 192, 0, NULL, 2, 4, 3, 0.0, 0.0);
}

START_TEST(test_dhu_fd)
{
    dhu_fd_case(_i);
}
END_TEST

/* Realistic inputs (spec 6.3) rounded to the io dtype; returns them in the
 * caller's arrays.  q, k here are at value heads. */
static void make_realistic(kref_rng *rng, kref_gate_family fam, int io, int B, int T,
                           int HV, int K, int V, double *qg, double *kg, double *w,
                           double *g, double *dout, double *dv, double *dht)
{
    size_t nk = (size_t)B * T * HV * K, nvv = (size_t)B * T * HV * V;
    double *q = dalloc(nk), *k = dalloc(nk), *a = dalloc(nk), *beta = dalloc((size_t)B * T * HV);
    kref_gen_unit_rows(rng, (size_t)B * T * HV, K, q);
    kref_gen_unit_rows(rng, (size_t)B * T * HV, K, k);
    kref_gen_beta(rng, (size_t)B * T * HV, beta);
    kref_gen_gate(rng, fam, B, T, HV, K, a);
    kref_gate_cumsum(B, T, HV, K, a, g);
    kref_gen_dhu_inputs(B, T, HV, K, q, k, beta, g, w, kg, qg);
    kref_gen_normal(rng, nvv, 1.0, dout);
    kref_gen_normal(rng, nvv, 1.0, dv);
    if (dht) kref_gen_normal(rng, (size_t)B * HV * K * V, 1.0, dht);
    for (size_t i = 0; i < nk; i++) {
        qg[i] = kref_round_io(qg[i], io);
        kg[i] = kref_round_io(kg[i], io);
        w[i] = kref_round_io(w[i], io);
    }
    for (size_t i = 0; i < nvv; i++) {
        dout[i] = kref_round_io(dout[i], io);
        dv[i] = kref_round_io(dv[i], io);
    }
    free(q); free(k); free(a); free(beta);
}

/* fla-faithful rounding must move the results by a bf16/fp16-sized amount:
 * not zero, not more than the spec's expected rel-RMS (~6e-3 for bf16). */
START_TEST(test_dhu_faithful)
{
    kref_rng rng;
    kref_rng_seed(&rng, g_seed ^ 0x4000u);
    const int B = 1, T = 512, HV = 2, K = 64, V = 64, NT = T / BT, io = _i;
    size_t nk = (size_t)B * T * HV * K, nvv = (size_t)B * T * HV * V,
           ns = (size_t)B * HV * K * V, nh = (size_t)B * NT * HV * K * V;
    double *qg = dalloc(nk), *kg = dalloc(nk), *w = dalloc(nk), *g = dalloc(nk),
           *dout = dalloc(nvv), *dv = dalloc(nvv), *dht = dalloc(ns);
    make_realistic(&rng, KREF_GATE_MILD, io, B, T, HV, K, V, qg, kg, w, g, dout, dv, dht);
    double *dh = dalloc(nh), *dv2 = dalloc(nvv), *dh0 = dalloc(ns);
    double *fh = dalloc(nh), *fv2 = dalloc(nvv), *fh0 = dalloc(ns);
    double sc = 1.0 / sqrt((double)K);
    kref_bwd_dhu(B, T, HV, K, V, qg, kg, w, g, dout, dv, dht, sc, -1, dh, dv2, dh0);
    kref_bwd_dhu(B, T, HV, K, V, qg, kg, w, g, dout, dv, dht, sc, io, fh, fv2, fh0);
    double eh = kref_rel_rms(dh, fh, nh), ev = kref_rel_rms(dv2, fv2, nvv),
           e0 = kref_rel_rms(dh0, fh0, ns);
    printf("  bwd_dhu faithful(%s) vs exact, T512 K64 V64: rel-RMS dh %.2e dv2 %.2e dh0 %.2e\n",
           io ? "fp16" : "bf16", eh, ev, e0);
    fflush(stdout);
    double lo = io ? 1e-5 : 1e-4, hi = io ? 2e-3 : 1e-2;
    /* dh0 may legitimately move far less: with realistic gates a chunk's
     * total decay is tiny, so dh0 sees only chunk 0's rounding, where kg and
     * w have disjoint support (late rows vs early rows). */
    CHK(eh > lo && eh < hi && ev > lo && ev < hi && e0 < hi);
    /* Faithful checkpoints and dv2 are exactly representable in io. */
    for (size_t i = 0; i < nh; i++) CHK(kref_round_io(fh[i], io) == fh[i]);
    for (size_t i = 0; i < nvv; i++) CHK(kref_round_io(fv2[i], io) == fv2[i]);
    free(qg); free(kg); free(w); free(g); free(dout); free(dv); free(dht);
    free(dh); free(dv2); free(dh0); free(fh); free(fv2); free(fh0);
}
END_TEST

/* -------------------------------------------------------- generators --- */

START_TEST(test_gen_gates)
{
    kref_rng rng;
    kref_rng_seed(&rng, g_seed ^ 0x5000u);
    const int B = 2, T = 256, HV = 3, K = 8;
    size_t n = (size_t)B * T * HV * K;
    double *a = dalloc(n), *g = dalloc(n);
    for (int f = 0; f < KREF_GATE_NFAMILIES; f++) {
        kref_gen_gate(&rng, (kref_gate_family)f, B, T, HV, K, a);
        kref_gate_cumsum(B, T, HV, K, a, g);
        double amin = 0, amean = 0;
        for (size_t i = 0; i < n; i++) {
            CHK(isfinite(a[i]) && a[i] <= 0.0);
            CHK(kref_round_f32(g[i]) == g[i]);
            amin = fmin(amin, a[i]);
            amean += a[i] / (double)n;
        }
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int hv = 0; hv < HV; hv++)
                    for (int d = 0; d < K; d++) {
                        size_t o = (((size_t)b * T + t) * HV + hv) * K + d;
                        if (t % BT == 0) /* reset: row 0 holds its own gate only */
                            CHK(fabs(g[o] - KREF_RCP_LN2 * a[o]) <=
                                      1e-6 * fabs(g[o]) + 1e-30);
                        else
                            CHK(g[o] <= g[o - (size_t)HV * K]);
                    }
        printf("  gate %-6s: mean a %.3f nats, min a %.2f\n",
               kref_gate_name((kref_gate_family)f), amean, amin);
    }
    free(a); free(g);
}
END_TEST

START_TEST(test_gen_dA)
{
    kref_rng rng;
    kref_rng_seed(&rng, g_seed ^ 0x6000u);
    const int B = 1, T = 128, HV = 2;
    size_t n = (size_t)B * T * HV * BT;
    double *qk = dalloc(n), *kk = dalloc(n);
    kref_gen_dA(&rng, B, T, HV, 0, NAN, qk);
    kref_gen_dA(&rng, B, T, HV, 1, 1e30, kk);
    for (int t = 0; t < T; t++)
        for (int hv = 0; hv < HV; hv++)
            for (int s = 0; s < BT; s++) {
                size_t o = ((size_t)t * HV + hv) * BT + s;
                int r = t % BT;
                if (s <= r) CHK(isfinite(qk[o]) && qk[o] != 0.0);
                else CHK(isnan(qk[o]));
                if (s < r) CHK(isfinite(kk[o]) && kk[o] != 0.0);
                else if (s == r) CHK(kk[o] == 0.0);
                else CHK(kk[o] == 1e30);
            }
    double *x = dalloc(1000), *b = dalloc(1000);
    kref_gen_unit_rows(&rng, 10, 100, x);
    for (int i = 0; i < 10; i++) {
        double s = 0;
        for (int d = 0; d < 100; d++) s += x[i * 100 + d] * x[i * 100 + d];
        CHK(fabs(s - 1.0) < 1e-12);
    }
    kref_gen_beta(&rng, 1000, b);
    for (int i = 0; i < 1000; i++) CHK(b[i] > 0.0 && b[i] < 2.0);
    free(qk); free(kk); free(x); free(b);
}
END_TEST

/* Realistic dhu inputs over T = 1024 stay finite and the reverse scan stays
 * bounded for every gate family. */
START_TEST(test_gen_dhu_bounded)
{
    kref_rng rng;
    kref_rng_seed(&rng, g_seed ^ (0x7000u + (unsigned)_i));
    const int B = 1, T = 1024, HV = 2, K = 128, V = 32, NT = T / BT;
    kref_gate_family fam = (kref_gate_family)_i;
    size_t nk = (size_t)B * T * HV * K, nvv = (size_t)B * T * HV * V,
           ns = (size_t)B * HV * K * V, nh = (size_t)B * NT * HV * K * V;
    double *qg = dalloc(nk), *kg = dalloc(nk), *w = dalloc(nk), *g = dalloc(nk),
           *dout = dalloc(nvv), *dv = dalloc(nvv), *dht = dalloc(ns);
    make_realistic(&rng, fam, -1, B, T, HV, K, V, qg, kg, w, g, dout, dv, dht);
    double mw = 0;
    for (size_t i = 0; i < nk; i++) {
        CHK(isfinite(qg[i]) && isfinite(kg[i]) && isfinite(w[i]));
        mw = fmax(mw, fabs(w[i]));
    }
    double *dh = dalloc(nh), *dv2 = dalloc(nvv), *dh0 = dalloc(ns);
    kref_bwd_dhu(B, T, HV, K, V, qg, kg, w, g, dout, dv, dht, 1.0 / sqrt((double)K), -1,
                 dh, dv2, dh0);
    double mh = 0, mv = 0;
    for (size_t i = 0; i < nh; i++) { CHK(isfinite(dh[i])); mh = fmax(mh, fabs(dh[i])); }
    for (size_t i = 0; i < ns; i++) { CHK(isfinite(dh0[i])); mh = fmax(mh, fabs(dh0[i])); }
    for (size_t i = 0; i < nvv; i++) { CHK(isfinite(dv2[i])); mv = fmax(mv, fabs(dv2[i])); }
    printf("  realistic dhu %-6s T1024 K128: max|w| %.2f max|dH| %.2f max|dv2| %.2f\n",
           kref_gate_name(fam), mw, mh, mv);
    CHK(mh < 1e4 && mv < 1e4);
    free(qg); free(kg); free(w); free(g); free(dout); free(dv); free(dht);
    free(dh); free(dv2); free(dh0);
}
END_TEST

/* ------------------------------------------------ variable length --- */

/* Lengths 1, 15, 63, 64, 65, 100, 0: single rows, partial chunks, exactly one
 * chunk, one row past it, a zero-length sequence last; 12 slack tokens. */
static const int64_t k_cu7[8] = {0, 1, 16, 79, 143, 208, 308, 308};
#define K_CU7_T 320

/* FD of the varlen references (and of the fixed-length ones at T % 64 != 0):
 * 0 LOGSIG K8; 1 STRONG with GVA (H2 HV4) K16; 2 LOGSIG with 10% of the gates
 * at -10 (a milder stand-in for fla's -1000 mask, which test_varlen_masked
 * covers); 3 the fixed-length API at B2 T100. */
START_TEST(test_intra_fd_varlen)
{
    switch (_i) {
    case 0: intra_fd_run(KREF_GATE_LOGSIG, 0x9000u, 1, K_CU7_T, 7, k_cu7, 1, 2, 8, 0, 0); break;
    case 1: intra_fd_run(KREF_GATE_STRONG, 0x9001u, 1, K_CU7_T, 7, k_cu7, 2, 4, 16, 0, 0); break;
    case 2: intra_fd_run(KREF_GATE_LOGSIG, 0x9002u, 1, K_CU7_T, 7, k_cu7, 1, 2, 8, 0.1, -10); break;
    default: intra_fd_run(KREF_GATE_LOGSIG, 0x9003u, 2, 100, 0, NULL, 1, 2, 8, 0, 0); break;
    }
}
END_TEST

/* 0/1 varlen without/with dht; 2 with dht and 10% of the gates at -10; 3 the
 * fixed-length API at B2 T100. */
START_TEST(test_dhu_fd_varlen)
{
    switch (_i) {
    case 0: dhu_fd_run(0, 0xA000u, 1, K_CU7_T, 7, k_cu7, 2, 8, 8, 0, 0); break;
    case 1: dhu_fd_run(1, 0xA001u, 1, K_CU7_T, 7, k_cu7, 2, 8, 8, 0, 0); break;
    case 2: dhu_fd_run(1, 0xA002u, 1, K_CU7_T, 7, k_cu7, 2, 8, 8, 0.1, -10); break;
    default: dhu_fd_run(1, 0xA003u, 2, 100, 0, NULL, 2, 8, 8, 0, 0); break;
    }
}
END_TEST

/* All inputs of both stages for a packed batch of T storage tokens, from the
 * varlen generators (realistic dhu inputs, spec 6.3); q/k at H heads for
 * bwd_intra, at HV heads (qv, kv) for the dhu inputs.  Gates: LOGSIG with a
 * fraction mask_frac at `mask`. */
typedef struct vl_inputs {
    int T, H, HV, K, V, N;
    const int64_t *cu;
    double *q, *k, *a, *g, *beta, *dAqk, *dAkk, *dq_in, *dk_in, *dg_in, *db_in;
    double *qg, *kg, *w, *dout, *dv, *dht;
} vl_inputs;

static void vl_make(vl_inputs *x, kref_rng *rng, double mask_frac, double mask)
{
    const int T = x->T, H = x->H, HV = x->HV, K = x->K, V = x->V;
    size_t nqk = (size_t)T * H * K, nv = (size_t)T * HV * K, nb = (size_t)T * HV,
           nA = nb * BT, nvv = (size_t)T * HV * V;
    x->q = dalloc(nqk); x->k = dalloc(nqk); x->a = dalloc(nv); x->g = dalloc(nv);
    x->beta = dalloc(nb); x->dAqk = dalloc(nA); x->dAkk = dalloc(nA);
    x->dq_in = dalloc(nv); x->dk_in = dalloc(nv); x->dg_in = dalloc(nv); x->db_in = dalloc(nb);
    x->qg = dalloc(nv); x->kg = dalloc(nv); x->w = dalloc(nv);
    x->dout = dalloc(nvv); x->dv = dalloc(nvv); x->dht = dalloc((size_t)x->N * HV * K * V);
    kref_gen_unit_rows(rng, (size_t)T * H, K, x->q);
    kref_gen_unit_rows(rng, (size_t)T * H, K, x->k);
    kref_gen_gate(rng, KREF_GATE_LOGSIG, 1, T, HV, K, x->a);
    mask_gates(rng, x->a, nv, mask_frac, mask);
    kref_gate_cumsum_varlen(T, HV, K, x->N, x->cu, x->a, x->g);
    kref_gen_beta(rng, nb, x->beta);
    kref_gen_dA_varlen(rng, T, HV, x->N, x->cu, 0, NAN, x->dAqk);
    kref_gen_dA_varlen(rng, T, HV, x->N, x->cu, 1, NAN, x->dAkk);
    kref_gen_normal(rng, nv, 1.0, x->dq_in);
    kref_gen_normal(rng, nv, 1.0, x->dk_in);
    kref_gen_normal(rng, nv, 1.0, x->dg_in);
    kref_gen_normal(rng, nb, 1.0, x->db_in);
    /* The dhu inputs from q/k at the value heads (rows unit-norm). */
    double *qv = dalloc(nv), *kv = dalloc(nv);
    kref_gen_unit_rows(rng, (size_t)T * HV, K, qv);
    kref_gen_unit_rows(rng, (size_t)T * HV, K, kv);
    kref_gen_dhu_inputs_varlen(T, HV, K, x->N, x->cu, qv, kv, x->beta, x->g, x->w, x->kg, x->qg);
    kref_gen_normal(rng, nvv, 1.0, x->dout);
    kref_gen_normal(rng, nvv, 1.0, x->dv);
    kref_gen_normal(rng, (size_t)x->N * HV * K * V, 1.0, x->dht);
    free(qv); free(kv);
}

static void vl_free(vl_inputs *x)
{
    double *p[] = {x->q, x->k, x->a, x->g, x->beta, x->dAqk, x->dAkk, x->dq_in, x->dk_in,
                   x->dg_in, x->db_in, x->qg, x->kg, x->w, x->dout, x->dv, x->dht};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
}

/* Both stages' outputs. */
typedef struct vl_out {
    double *dq, *dk, *dg, *db, *dh, *dv2, *dh0;
} vl_out;

static void vl_out_alloc(vl_out *o, const vl_inputs *x, int64_t nrows)
{
    size_t nv = (size_t)x->T * x->HV * x->K, KV = (size_t)x->K * x->V;
    o->dq = dalloc(nv); o->dk = dalloc(nv); o->dg = dalloc(nv);
    o->db = dalloc((size_t)x->T * x->HV);
    o->dh = dalloc((size_t)nrows * x->HV * KV);
    o->dv2 = dalloc((size_t)x->T * x->HV * x->V);
    o->dh0 = dalloc((size_t)x->N * x->HV * KV);
}

static void vl_out_free(vl_out *o)
{
    free(o->dq); free(o->dk); free(o->dg); free(o->db); free(o->dh); free(o->dv2); free(o->dh0);
}

/* Both varlen references on x; token pointers offset by t0 tokens, states by
 * n0 sequences and dh by row0 rows (to run one sequence of x alone). */
static void vl_run(const vl_inputs *x, int T, int N, const int64_t *cu, int64_t t0, int n0,
                   int64_t row0, int fold, int io, const vl_out *o)
{
    const int H = x->H, HV = x->HV, K = x->K, V = x->V;
    size_t qo = (size_t)t0 * H * K, ko = (size_t)t0 * HV * K, bo = (size_t)t0 * HV,
           vo = (size_t)t0 * HV * V, so = (size_t)n0 * HV * K * V,
           ho = (size_t)row0 * HV * K * V;
    kref_bwd_intra_varlen(T, H, HV, K, N, cu, x->q + qo, x->k + qo, x->g + ko, x->beta + bo,
                          x->dAqk + bo * BT, x->dAkk + bo * BT, x->dq_in + ko, x->dk_in + ko,
                          x->dg_in + ko, x->db_in + bo, fold, o->dq + ko, o->dk + ko,
                          o->dg + ko, o->db + bo);
    kref_bwd_dhu_varlen(T, HV, K, V, N, cu, x->qg + ko, x->kg + ko, x->w + ko, x->g + ko,
                        x->dout + vo, x->dv + vo, x->dht + so, 1.0 / sqrt((double)K), io,
                        o->dh + ho, o->dv2 + vo, o->dh0 + so);
}

/* The varlen references on cu = [0, T, 2T] equal the fixed-length ones at
 * B = 2 bitwise, and so do the generators (same seed): T = 100 (partial
 * last chunk), 128 and 1. */
START_TEST(test_varlen_fixed_equiv)
{
    static const int Ts[3] = {100, 128, 1};
    const int B = 2, T = Ts[_i], H = 1, HV = 2, K = 16, V = 8;
    int64_t *cu = fixed_cu(B, T);
    kref_rng rng;
    kref_rng_seed(&rng, g_seed ^ (0xB000u + (unsigned)_i));
    vl_inputs x = {.T = B * T, .H = H, .HV = HV, .K = K, .V = V, .N = B, .cu = cu};
    vl_make(&x, &rng, 0.0, 0.0);
    const int64_t NT = kref_chunk_offsets(B, cu, NULL);
    CHK(NT == (int64_t)B * ((T + BT - 1) / BT));
    vl_out v, f;
    vl_out_alloc(&v, &x, NT);
    vl_out_alloc(&f, &x, NT);
    size_t nv = (size_t)B * T * HV * K, nb = (size_t)B * T * HV, nvv = (size_t)B * T * HV * V,
           nh = (size_t)NT * HV * K * V, ns = (size_t)B * HV * K * V;
    /* Generators: fixed-length against the varlen outputs in x. */
    double *g = dalloc(nv), *w = dalloc(nv), *kg = dalloc(nv), *qg = dalloc(nv),
           *A1 = dalloc(nb * BT), *A2 = dalloc(nb * BT);
    kref_gate_cumsum(B, T, HV, K, x.a, g);
    CHK(memcmp(g, x.g, nv * sizeof(double)) == 0);
    kref_rng r1, r2;
    kref_rng_seed(&r1, g_seed ^ 0xB100u);
    kref_rng_seed(&r2, g_seed ^ 0xB100u);
    kref_gen_dA(&r1, B, T, HV, 1, NAN, A1);
    kref_gen_dA_varlen(&r2, B * T, HV, B, cu, 1, NAN, A2);
    CHK(memcmp(A1, A2, nb * BT * sizeof(double)) == 0);
    double *qv = dalloc(nv), *kv = dalloc(nv), *w2 = dalloc(nv), *kg2 = dalloc(nv),
           *qg2 = dalloc(nv);
    kref_gen_unit_rows(&rng, nb, K, qv);
    kref_gen_unit_rows(&rng, nb, K, kv);
    kref_gen_dhu_inputs(B, T, HV, K, qv, kv, x.beta, x.g, w, kg, qg);
    kref_gen_dhu_inputs_varlen(B * T, HV, K, B, cu, qv, kv, x.beta, x.g, w2, kg2, qg2);
    CHK(memcmp(w, w2, nv * sizeof(double)) == 0 && memcmp(kg, kg2, nv * sizeof(double)) == 0 &&
        memcmp(qg, qg2, nv * sizeof(double)) == 0);
    for (int fold = 0; fold < 2; fold++)
        for (int io = -1; io < 2; io++) {
            vl_run(&x, B * T, B, cu, 0, 0, 0, fold, io, &v);
            kref_bwd_intra(B, T, H, HV, K, x.q, x.k, x.g, x.beta, x.dAqk, x.dAkk, x.dq_in,
                           x.dk_in, x.dg_in, x.db_in, fold, f.dq, f.dk, f.dg, f.db);
            kref_bwd_dhu(B, T, HV, K, V, x.qg, x.kg, x.w, x.g, x.dout, x.dv, x.dht,
                         1.0 / sqrt((double)K), io, f.dh, f.dv2, f.dh0);
            CHK(memcmp(v.dq, f.dq, nv * 8) == 0 && memcmp(v.dk, f.dk, nv * 8) == 0 &&
                memcmp(v.dg, f.dg, nv * 8) == 0 && memcmp(v.db, f.db, nb * 8) == 0);
            CHK(memcmp(v.dh, f.dh, nh * 8) == 0 && memcmp(v.dv2, f.dv2, nvv * 8) == 0 &&
                memcmp(v.dh0, f.dh0, ns * 8) == 0);
            CHK(all_finite(v.dq, nv) && all_finite(v.dg, nv) && all_finite(v.dh, nh) &&
                all_finite(v.dv2, nvv) && all_finite(v.dh0, ns));
        }
    printf("  varlen cu [0,%d,%d] == fixed B2 T%d: bitwise (both stages, fold_dg 0/1, "
           "io exact/bf16/fp16, generators)\n", T, 2 * T, T);
    free(g); free(w); free(kg); free(qg); free(A1); free(A2); free(qv); free(kv); free(w2);
    free(kg2); free(qg2); free(cu);
    vl_out_free(&v); vl_out_free(&f); vl_free(&x);
}
END_TEST

/* Sequences are independent: packed [77, 0, 130] plus 9 slack tokens equals
 * each sequence run alone, bitwise, for both stages (dh rows, dv2, dh0 with
 * h0/dht per sequence); the zero-length sequence gets dh0 = dht, alone too,
 * and zero without dht. */
START_TEST(test_varlen_split)
{
    static const int64_t cu[4] = {0, 77, 77, 207};
    const int T = 216, N = 3, H = 1, HV = 2, K = 16, V = 8;
    const size_t KV = (size_t)K * V;
    kref_rng rng;
    kref_rng_seed(&rng, g_seed ^ 0xC000u);
    vl_inputs x = {.T = T, .H = H, .HV = HV, .K = K, .V = V, .N = N, .cu = cu};
    vl_make(&x, &rng, 0.0, 0.0);
    int64_t off[4];
    const int64_t NT = kref_chunk_offsets(N, cu, off);
    CHK(NT == 5 && off[0] == 0 && off[1] == 2 && off[2] == 2 && off[3] == 5);
    vl_out pk, al;
    vl_out_alloc(&pk, &x, NT);
    vl_out_alloc(&al, &x, NT);
    size_t nv = (size_t)T * HV * K, nb = (size_t)T * HV, nvv = (size_t)T * HV * V,
           nh = (size_t)NT * HV * KV, ns = (size_t)N * HV * KV;
    double *outs[2][7] = {{pk.dq, pk.dk, pk.dg, pk.db, pk.dh, pk.dv2, pk.dh0},
                          {al.dq, al.dk, al.dg, al.db, al.dh, al.dv2, al.dh0}};
    const size_t sz[7] = {nv, nv, nv, nb, nh, nvv, ns};
    for (int fold = 0; fold < 2; fold++) {
        for (int j = 0; j < 2; j++)
            for (int i = 0; i < 7; i++) fill(outs[j][i], sz[i], POISON);
        vl_run(&x, T, N, cu, 0, 0, 0, fold, -1, &pk);
        for (int n = 0; n < N; n++) {
            const int64_t one[2] = {0, cu[n + 1] - cu[n]};
            vl_run(&x, (int)one[1], 1, one, cu[n], n, off[n], fold, -1, &al);
        }
        for (int i = 0; i < 7; i++) CHK(memcmp(outs[0][i], outs[1][i], sz[i] * 8) == 0);
        CHK(memcmp(pk.dh0 + KV * HV, x.dht + KV * HV, KV * HV * 8) == 0);
        CHK(all_finite(pk.dq, (size_t)cu[N] * HV * K) && all_finite(pk.dh, nh) &&
            all_finite(pk.dh0, ns) && untouched(pk.dq, (size_t)cu[N], T, (size_t)HV * K) &&
            untouched(pk.db, (size_t)cu[N], T, HV) &&
            untouched(pk.dv2, (size_t)cu[N], T, (size_t)HV * V));
    }
    /* Without dht the zero-length sequence's dh0 is zero. */
    kref_bwd_dhu_varlen(T, HV, K, V, N, cu, x.qg, x.kg, x.w, x.g, x.dout, x.dv, NULL, 0.25, -1,
                        pk.dh, pk.dv2, pk.dh0);
    for (size_t i = 0; i < KV * HV; i++) CHK(pk.dh0[KV * HV + i] == 0.0);
    printf("  varlen split: packed [77,0,130]+9 slack == each sequence alone, bitwise; "
           "zero-length dh0 == dht\n");
    vl_out_free(&pk); vl_out_free(&al); vl_free(&x);
}
END_TEST

/* fla's masked gates (-1000 nats on 10% of the entries, and on every entry
 * of one sequence) over 24 random sequences of 1..200 tokens with a
 * zero-length one and 50 slack tokens of NaN: both stages' outputs are
 * finite in every io mode, slack outputs untouched. */
START_TEST(test_varlen_masked)
{
    kref_rng rng;
    kref_rng_seed(&rng, g_seed ^ 0xD000u);
    const int N = 24, H = 1, HV = 2, K = 32, V = 16;
    int64_t cu[25];
    const int64_t nt = kref_gen_cu_seqlens(&rng, N, 1, 200, 1, cu);
    const int T = (int)nt + 50;
    const int64_t NT = kref_chunk_offsets(N, cu, NULL);
    vl_inputs x = {.T = T, .H = H, .HV = HV, .K = K, .V = V, .N = N, .cu = cu};
    vl_make(&x, &rng, 0.1, -1000.0);
    /* Every gate of the first non-empty sequence masked. */
    int n1 = cu[1] > 0 ? 0 : 1;
    for (int64_t t = cu[n1]; t < cu[n1 + 1]; t++)
        for (int i = 0; i < HV * K; i++) x.a[(size_t)t * HV * K + i] = -1000.0;
    kref_gate_cumsum_varlen(T, HV, K, N, cu, x.a, x.g);
    /* NaN in every input token beyond cu[N]. */
    size_t v0 = (size_t)nt;
    double *perk[] = {x.q, x.k}, *perv[] = {x.g, x.dq_in, x.dk_in, x.dg_in, x.qg, x.kg, x.w};
    for (int i = 0; i < 2; i++) fill(perk[i] + v0 * H * K, (size_t)(T - nt) * H * K, NAN);
    for (int i = 0; i < 7; i++) fill(perv[i] + v0 * HV * K, (size_t)(T - nt) * HV * K, NAN);
    fill(x.beta + v0 * HV, (size_t)(T - nt) * HV, NAN);
    fill(x.db_in + v0 * HV, (size_t)(T - nt) * HV, NAN);
    fill(x.dout + v0 * HV * V, (size_t)(T - nt) * HV * V, NAN);
    fill(x.dv + v0 * HV * V, (size_t)(T - nt) * HV * V, NAN);
    vl_out o;
    vl_out_alloc(&o, &x, NT);
    size_t nvk = v0 * HV * K, nh = (size_t)NT * HV * K * V, ns = (size_t)N * HV * K * V;
    for (int io = -1; io < 2; io++) {
        fill(o.dq, (size_t)T * HV * K, POISON); fill(o.dk, (size_t)T * HV * K, POISON);
        fill(o.dg, (size_t)T * HV * K, POISON); fill(o.db, (size_t)T * HV, POISON);
        fill(o.dv2, (size_t)T * HV * V, POISON);
        vl_run(&x, T, N, cu, 0, 0, 0, io == 0, io, &o);
        CHK(all_finite(o.dq, nvk) && all_finite(o.dk, nvk) && all_finite(o.dg, nvk) &&
            all_finite(o.db, v0 * HV) && all_finite(o.dh, nh) &&
            all_finite(o.dv2, v0 * HV * V) && all_finite(o.dh0, ns));
        CHK(untouched(o.dq, v0, T, (size_t)HV * K) && untouched(o.dk, v0, T, (size_t)HV * K) &&
            untouched(o.dg, v0, T, (size_t)HV * K) && untouched(o.db, v0, T, HV) &&
            untouched(o.dv2, v0, T, (size_t)HV * V));
    }
    CHK(all_finite(x.g, nvk) && all_finite(x.qg, nvk) && all_finite(x.kg, nvk) &&
        all_finite(x.w, nvk));
    printf("  varlen masked gates (-1000): %d sequences, %lld tokens, %lld chunks: all finite\n",
           N, (long long)nt, (long long)NT);
    vl_out_free(&o); vl_free(&x);
}
END_TEST

/* The varlen generators: cu_seqlens lengths in range with one zero, chunk
 * offsets, the gate cumsum restarting at every sequence's chunk boundaries,
 * dA's valid/garbage pattern per sequence-local row, nothing beyond cu[N]
 * written by the cumsum and the dhu inputs. */
START_TEST(test_gen_varlen)
{
    kref_rng rng;
    kref_rng_seed(&rng, g_seed ^ 0xE000u);
    const int N = 9, HV = 2, K = 4;
    int64_t cu[10], off[10];
    const int64_t nt = kref_gen_cu_seqlens(&rng, N, 1, 150, 1, cu);
    int zeros = 0;
    for (int n = 0; n < N; n++) {
        int64_t len = cu[n + 1] - cu[n];
        CHK(len == 0 || (len >= 1 && len <= 150));
        zeros += len == 0;
    }
    CHK(zeros == 1 && cu[0] == 0 && cu[N] == nt);
    const int64_t NT = kref_chunk_offsets(N, cu, off);
    for (int n = 0; n < N; n++) CHK(off[n + 1] - off[n] == (cu[n + 1] - cu[n] + 63) / 64);
    CHK(off[0] == 0 && off[N] == NT);
    int64_t cu2[4];
    CHK(kref_gen_cu_seqlens(&rng, 3, 64, 64, 0, cu2) == 192 && cu2[1] == 64 && cu2[2] == 128);
    const int T = (int)nt + 7;
    size_t n4 = (size_t)T * HV * K;
    double *a = dalloc(n4), *g = dalloc(n4), *dA = dalloc((size_t)T * HV * BT);
    kref_gen_gate(&rng, KREF_GATE_LOGSIG, 1, T, HV, K, a);
    fill(g, n4, POISON);
    kref_gate_cumsum_varlen(T, HV, K, N, cu, a, g);
    kref_gen_dA_varlen(&rng, T, HV, N, cu, 0, NAN, dA);
    for (int n = 0; n < N; n++)
        for (int64_t t = cu[n]; t < cu[n + 1]; t++) {
            int r = (int)((t - cu[n]) % BT);
            for (int i = 0; i < HV * K; i++) {
                size_t o = (size_t)t * HV * K + i;
                if (r == 0)
                    CHK(fabs(g[o] - KREF_RCP_LN2 * a[o]) <= 1e-6 * fabs(g[o]) + 1e-30);
                else
                    CHK(g[o] <= g[o - (size_t)HV * K]);
            }
            for (int s = 0; s < BT * HV; s++) {
                double e = dA[(size_t)t * HV * BT + s];
                CHK(s % BT <= r ? isfinite(e) : isnan(e));
            }
        }
    CHK(untouched(g, (size_t)nt, T, (size_t)HV * K));
    for (size_t i = (size_t)nt * HV * BT; i < (size_t)T * HV * BT; i++) CHK(isnan(dA[i]));
    double *q = dalloc(n4), *k = dalloc(n4), *beta = dalloc((size_t)T * HV), *w = dalloc(n4),
           *kg = dalloc(n4), *qg = dalloc(n4);
    kref_gen_unit_rows(&rng, (size_t)T * HV, K, q);
    kref_gen_unit_rows(&rng, (size_t)T * HV, K, k);
    kref_gen_beta(&rng, (size_t)T * HV, beta);
    fill(w, n4, POISON); fill(kg, n4, POISON); fill(qg, n4, POISON);
    kref_gen_dhu_inputs_varlen(T, HV, K, N, cu, q, k, beta, g, w, kg, qg);
    CHK(all_finite(w, (size_t)nt * HV * K) && all_finite(kg, (size_t)nt * HV * K));
    CHK(untouched(w, (size_t)nt, T, (size_t)HV * K) && untouched(kg, (size_t)nt, T, (size_t)HV * K) &&
        untouched(qg, (size_t)nt, T, (size_t)HV * K));
    /* kg at a chunk's last valid row is k itself (exp2(0)). */
    for (int n = 0; n < N; n++)
        if (cu[n + 1] > cu[n])
            for (int i = 0; i < HV * K; i++) {
                size_t o = (size_t)(cu[n + 1] - 1) * HV * K + i;
                CHK(kg[o] == k[o]);
            }
    free(a); free(g); free(dA); free(q); free(k); free(beta); free(w); free(kg); free(qg);
}
END_TEST

/* GPU-test-sized varlen calls stay practical: N sequences of 1..200 tokens
 * (N = 250 here to keep the suite short; KREF_VARLEN_SPEED_N=1000 measures
 * the GPU tests' 1000-sequence shape), HV2 K = V = 128,
 * both stages, finite. */
START_TEST(test_varlen_speed)
{
    kref_rng rng;
    kref_rng_seed(&rng, g_seed ^ 0xF000u);
    const char *e = getenv("KREF_VARLEN_SPEED_N");
    const int N = e && *e ? atoi(e) : 250, H = 1, HV = 2, K = 128, V = 128;
    int64_t *cu = calloc((size_t)N + 1, sizeof(int64_t));
    ck_assert_ptr_nonnull(cu);
    const int64_t nt = kref_gen_cu_seqlens(&rng, N, 1, 200, 1, cu), NT = kref_chunk_offsets(N, cu, NULL);
    const int T = (int)nt;
    size_t nqk = (size_t)T * H * K, nv = (size_t)T * HV * K, nb = (size_t)T * HV,
           nvv = (size_t)T * HV * V, KV = (size_t)K * V;
    double *q = dalloc(nqk), *k = dalloc(nqk), *g = dalloc(nv), *beta = dalloc(nb),
           *dAqk = dalloc(nb * BT), *dAkk = dalloc(nb * BT), *z = dalloc(nv), *zb = dalloc(nb),
           *dq = dalloc(nv), *dk = dalloc(nv), *dg = dalloc(nv), *db = dalloc(nb);
    kref_gen_unit_rows(&rng, (size_t)T * H, K, q);
    kref_gen_unit_rows(&rng, (size_t)T * H, K, k);
    kref_gen_gate(&rng, KREF_GATE_LOGSIG, 1, T, HV, K, dq);
    kref_gate_cumsum_varlen(T, HV, K, N, cu, dq, g);
    kref_gen_beta(&rng, nb, beta);
    kref_gen_dA_varlen(&rng, T, HV, N, cu, 0, NAN, dAqk);
    kref_gen_dA_varlen(&rng, T, HV, N, cu, 1, NAN, dAkk);
    double t0 = now_s();
    kref_bwd_intra_varlen(T, H, HV, K, N, cu, q, k, g, beta, dAqk, dAkk, z, z, z, zb, 1, dq, dk,
                          dg, db);
    double ti = now_s() - t0;
    CHK(all_finite(dq, nv) && all_finite(dk, nv) && all_finite(dg, nv) && all_finite(db, nb));
    free(dAqk); free(dAkk);
    /* dhu inputs: plain small normals (the timing does not depend on them). */
    double *dout = dalloc(nvv), *dv = dalloc(nvv), *dh = dalloc((size_t)NT * HV * KV),
           *dv2 = dalloc(nvv), *dht = dalloc((size_t)N * HV * KV), *dh0 = dalloc((size_t)N * HV * KV);
    kref_gen_normal(&rng, nv, 0.05, dq);
    kref_gen_normal(&rng, nv, 0.05, dk);
    kref_gen_normal(&rng, nvv, 1.0, dout);
    kref_gen_normal(&rng, nvv, 1.0, dv);
    kref_gen_normal(&rng, (size_t)N * HV * KV, 1.0, dht);
    t0 = now_s();
    kref_bwd_dhu_varlen(T, HV, K, V, N, cu, dq, dk, dk, g, dout, dv, dht, 1.0 / sqrt((double)K), 0,
                        dh, dv2, dh0);
    double td = now_s() - t0;
    CHK(all_finite(dh, (size_t)NT * HV * KV) && all_finite(dv2, nvv) &&
        all_finite(dh0, (size_t)N * HV * KV));
    printf("  varlen speed: %d sequences of 1..200 (%d tokens, %lld chunks) HV2 K128 V128: "
           "bwd_intra %.2f s, bwd_dhu %.2f s (this build)\n",
           N, T, (long long)NT, ti, td);
    free(cu); free(q); free(k); free(g); free(beta); free(z); free(zb); free(dq); free(dk);
    free(dg); free(db); free(dout); free(dv); free(dh); free(dv2); free(dht); free(dh0);
}
END_TEST

/* ------------------------------------------------------- conversions --- */

START_TEST(test_conversions)
{
    /* Known values. */
    ck_assert_uint_eq(kref_to_bf16(1.0), 0x3F80);
    ck_assert_uint_eq(kref_to_fp16(1.0), 0x3C00);
    ck_assert_uint_eq(kref_to_bf16(-2.0), 0xC000);
    ck_assert_uint_eq(kref_to_fp16(65504.0), 0x7BFF);
    ck_assert_uint_eq(kref_to_fp16(65519.99), 0x7BFF);
    ck_assert_uint_eq(kref_to_fp16(65520.0), 0x7C00); /* tie to even -> inf */
    ck_assert_uint_eq(kref_to_fp16(1e6), 0x7C00);
    ck_assert_uint_eq(kref_to_fp16(-INFINITY), 0xFC00);
    ck_assert_uint_eq(kref_to_bf16(INFINITY), 0x7F80);
    ck_assert_uint_eq(kref_to_bf16(3.3895313892515355e38), 0x7F7F);
    ck_assert_uint_eq(kref_to_bf16(3.4e38), 0x7F80);
    ck_assert_uint_eq(kref_to_bf16(-0.0), 0x8000);
    /* Ties to even. */
    ck_assert_uint_eq(kref_to_bf16(1.0 + 0x1p-8), 0x3F80);
    ck_assert_uint_eq(kref_to_bf16(1.0 + 3 * 0x1p-8), 0x3F82);
    ck_assert_uint_eq(kref_to_bf16(1.0 + 0x1p-8 + 0x1p-40), 0x3F81); /* no double rounding */
    ck_assert_uint_eq(kref_to_fp16(1.0 + 0x1p-11), 0x3C00);
    ck_assert_uint_eq(kref_to_fp16(1.0 + 3 * 0x1p-11), 0x3C02);
    /* fp16 subnormals. */
    ck_assert_uint_eq(kref_to_fp16(0x1p-24), 0x0001);
    ck_assert_uint_eq(kref_to_fp16(0x1p-25), 0x0000);
    ck_assert_uint_eq(kref_to_fp16(1.5 * 0x1p-24), 0x0002);
    ck_assert_uint_eq(kref_to_fp16(0x1p-14), 0x0400);
    ck_assert_uint_eq(kref_to_fp16(0x1p-14 - 0x1p-24), 0x03FF);
    CHK(kref_from_fp16(0x0001) == 0x1p-24);
    CHK(kref_from_bf16(0x0001) == 0x1p-133);
    /* NaN stays NaN. */
    CHK(isnan(kref_from_bf16(kref_to_bf16(NAN))));
    CHK(isnan(kref_from_fp16(kref_to_fp16(NAN))));
    CHK(isnan(kref_round_io(NAN, 0)) && isnan(kref_round_io(NAN, 1)));
    CHK(kref_round_io(0.1, -1) == 0.1);
    CHK(kref_round_io(65504.0, 1) == 65504.0);
    /* Every non-NaN bit pattern decodes and re-encodes to itself. */
    for (unsigned b = 0; b < 65536; b++) {
        double x = kref_from_fp16((uint16_t)b);
        if (!isnan(x)) CHK_U(kref_to_fp16(x), b);
        double y = kref_from_bf16((uint16_t)b);
        if (!isnan(y)) CHK_U(kref_to_bf16(y), b);
        else CHK(isnan(kref_from_bf16(kref_to_bf16(y))));
    }
    /* float -> bf16 agrees with the usual bit trick on random floats. */
    kref_rng rng;
    kref_rng_seed(&rng, g_seed ^ 0x8000u);
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)kref_rng_u64(&rng);
        float f;
        memcpy(&f, &u, 4);
        if (isnan(f)) continue;
        uint32_t want = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
        CHK_U(kref_to_bf16((double)f), want);
        /* fp16 round trip is the nearest value: no fp16 is strictly closer. */
        double x = (double)f;
        uint16_t hb = kref_to_fp16(x);
        double hx = kref_from_fp16(hb);
        if (isfinite(hx) && (hb & 0x7FFF) != 0x7BFF && (hb & 0x7FFF) != 0) {
            double up = kref_from_fp16((uint16_t)(hb + 1)), dn = kref_from_fp16((uint16_t)(hb - 1));
            CHK(fabs(hx - x) <= fabs(up - x) && fabs(hx - x) <= fabs(dn - x));
        }
    }
}
END_TEST

START_TEST(test_metrics_rng)
{
    double r[3] = {1, 2, 2}, g[3] = {1, 2, 2};
    CHK(kref_rel_rms(r, g, 3) == 0.0);
    g[1] = 2.3;
    CHK(fabs(kref_rel_rms(r, g, 3) - 0.1) < 1e-12);
    CHK(fabs(kref_max_abs(r, g, 3) - 0.3) < 1e-12);
    g[2] = NAN;
    CHK(kref_rel_rms(r, g, 3) == INFINITY);
    CHK(!(kref_rel_rms(r, g, 3) <= 1.0));
    CHK(kref_max_abs(r, g, 3) == INFINITY);
    g[2] = INFINITY;
    CHK(kref_rel_rms(r, g, 3) == INFINITY);
    /* The RNG replays, and its normals look normal. */
    kref_rng a, b;
    kref_rng_seed(&a, 42);
    kref_rng_seed(&b, 42);
    for (int i = 0; i < 100; i++) CHK(kref_rng_u64(&a) == kref_rng_u64(&b));
    double m = 0, v = 0;
    const int N = 200000;
    for (int i = 0; i < N; i++) {
        double x = kref_rng_normal(&a);
        m += x;
        v += x * x;
    }
    m /= N;
    v = v / N - m * m;
    CHK(fabs(m) < 0.02 && fabs(v - 1.0) < 0.02);
}
END_TEST

/* ------------------------------------------------------------ wy_dqkg --- */

/* A wy_dqkg problem on a packed batch (B = 1): the inputs of
 * kref_wy_dqkg_varlen, with the WY matrix of each chunk parametrized as
 * A = (I + L)^-1, L strictly lower (the forward's), so that the reference's
 * dA (the gradient with respect to L) has a finite difference to meet. */
typedef struct wy_prob {
    int T, H, HV, K, V, N;
    const int64_t *cu;
    double *q, *k, *v, *vn, *g, *beta, *L, *h, *dh, *dout, *dv, *A;
    double scale;
} wy_prob;

/* A of every chunk from L (forward substitution of the unit lower triangular
 * I + L), in the [T, HV, 64] token-row layout; columns past the chunk's
 * valid rows are zero. */
static void wy_make_A(wy_prob *p)
{
    for (int n = 0; n < p->N; n++)
        for (int64_t c0 = p->cu[n]; c0 < p->cu[n + 1]; c0 += BT) {
            const int nr = (int)(p->cu[n + 1] - c0 < BT ? p->cu[n + 1] - c0 : BT);
            for (int hv = 0; hv < p->HV; hv++)
                for (int i = 0; i < nr; i++) {
                    double *Ai = &p->A[(((size_t)c0 + i) * p->HV + hv) * BT];
                    const double *Li = &p->L[(((size_t)c0 + i) * p->HV + hv) * BT];
                    for (int j = 0; j < BT; j++) Ai[j] = 0.0;
                    /* row i of (I + L)^-1: A[i] = e_i - sum_{m<i} L[i][m] A[m] */
                    Ai[i] = 1.0;
                    for (int m = 0; m < i; m++) {
                        const double *Am = &p->A[(((size_t)c0 + m) * p->HV + hv) * BT];
                        for (int j = 0; j <= m; j++) Ai[j] -= Li[m] * Am[j];
                    }
                }
        }
}

/* The scalar wy_dqkg differentiates, per chunk (valid rows, gn = g of the
 * last valid row, h and dh the chunk's rows):
 *   sum do * scale (q ge) h + sum dh * (h exp2(gn) + (k exp2(gn - g))^T v_new)
 *   + sum dv * (A (v beta) - A (k ge beta) h) */
static double wy_loss(wy_prob *p)
{
    wy_make_A(p);
    const int G = p->HV / p->H, K = p->K, V = p->V, HV = p->HV, H = p->H;
    double loss = 0.0;
    int64_t row = 0;
    double *u = dalloc((size_t)BT * V), *w = dalloc((size_t)BT * K);
    for (int n = 0; n < p->N; n++)
        for (int64_t c0 = p->cu[n]; c0 < p->cu[n + 1]; c0 += BT, row++) {
            const int nr = (int)(p->cu[n + 1] - c0 < BT ? p->cu[n + 1] - c0 : BT);
            for (int hv = 0; hv < HV; hv++) {
                const int hq = hv / G;
                const double *hh = &p->h[((size_t)row * HV + hv) * K * V], *dhh = &p->dh[((size_t)row * HV + hv) * K * V];
#define WQ(t, d) (((size_t)(c0 + (t)) * H + hq) * K + (d))
#define WG(t, d) (((size_t)(c0 + (t)) * HV + hv) * K + (d))
#define WV(t, x) (((size_t)(c0 + (t)) * HV + hv) * V + (x))
#define WB(t) ((size_t)(c0 + (t)) * HV + hv)
                for (int t = 0; t < nr; t++)
                    for (int x = 0; x < V; x++) {
                        double o = 0.0;
                        for (int d = 0; d < K; d++) o += p->q[WQ(t, d)] * exp2(p->g[WG(t, d)]) * hh[d * V + x];
                        loss += p->dout[WV(t, x)] * p->scale * o;
                    }
                for (int d = 0; d < K; d++) {
                    const double gn = p->g[WG(nr - 1, d)];
                    for (int x = 0; x < V; x++) {
                        double hn = hh[d * V + x] * exp2(gn);
                        for (int t = 0; t < nr; t++) hn += p->k[WQ(t, d)] * exp2(gn - p->g[WG(t, d)]) * p->vn[WV(t, x)];
                        loss += dhh[d * V + x] * hn;
                    }
                }
                for (int t = 0; t < nr; t++) {
                    const double *At = &p->A[WB(t) * BT];
                    for (int x = 0; x < V; x++) {
                        double a = 0.0;
                        for (int s = 0; s < nr; s++) a += At[s] * p->v[WV(s, x)] * p->beta[WB(s)];
                        u[t * V + x] = a;
                    }
                    for (int d = 0; d < K; d++) {
                        double a = 0.0;
                        for (int s = 0; s < nr; s++) a += At[s] * p->k[WQ(s, d)] * exp2(p->g[WG(s, d)]) * p->beta[WB(s)];
                        w[t * K + d] = a;
                    }
                    for (int x = 0; x < V; x++) {
                        double vn2 = u[t * V + x];
                        for (int d = 0; d < K; d++) vn2 -= w[t * K + d] * hh[d * V + x];
                        loss += p->dv[WV(t, x)] * vn2;
                    }
                }
#undef WQ
#undef WG
#undef WV
#undef WB
            }
        }
    free(u), free(w);
    return loss;
}

static double wy_fd(wy_prob *p, double *x, double h)
{
    const double x0 = *x;
    *x = x0 + h;
    const double lp = wy_loss(p);
    *x = x0 - h;
    const double lm = wy_loss(p);
    *x = x0;
    return (lp - lm) / (2 * h);
}

/* kref_wy_dqkg_varlen (exact) against central differences of wy_loss in every
 * input it differentiates: q, k, v (dv2), the cumulative gate (dg, per
 * natural-log unit), beta and L (dA), on packed sequences with a one-token
 * and a partial chunk, grouped value heads (HV = 2H). */
START_TEST(test_wy_fd)
{
    static const int64_t cu[] = {0, 1, 70, 134};
    wy_prob p = {.T = 140, .H = 1, .HV = 2, .K = 5, .V = 3, .N = 3, .cu = cu, .scale = 0.37};
    kref_rng rng;
    kref_rng_seed(&rng, g_seed ^ 0x77ull);
    const int T = p.T, H = p.H, HV = p.HV, K = p.K, V = p.V;
    const int64_t NT = kref_chunk_offsets(p.N, cu, NULL);
    const size_t nqk = (size_t)T * H * K, nk = (size_t)T * HV * K, nv = (size_t)T * HV * V, nb = (size_t)T * HV,
                 nA = (size_t)T * HV * BT, nh = (size_t)NT * HV * K * V;
    p.q = dalloc(nqk), p.k = dalloc(nqk), p.v = dalloc(nv), p.vn = dalloc(nv), p.g = dalloc(nk);
    p.beta = dalloc(nb), p.L = dalloc(nA), p.A = dalloc(nA), p.h = dalloc(nh), p.dh = dalloc(nh);
    p.dout = dalloc(nv), p.dv = dalloc(nv);
    double *a = dalloc(nk);
    kref_gen_unit_rows(&rng, (size_t)T * H, K, p.q);
    kref_gen_unit_rows(&rng, (size_t)T * H, K, p.k);
    kref_gen_normal(&rng, nv, 1.0, p.v);
    kref_gen_normal(&rng, nv, 1.0, p.vn);
    kref_gen_normal(&rng, nv, 1.0, p.dout);
    kref_gen_normal(&rng, nv, 1.0, p.dv);
    kref_gen_normal(&rng, nh, 0.5, p.h);
    kref_gen_normal(&rng, nh, 0.5, p.dh);
    kref_gen_beta(&rng, nb, p.beta);
    kref_gen_gate(&rng, KREF_GATE_LOGSIG, 1, T, HV, K, a);
    fill(p.g, nk, 0.0);
    kref_gate_cumsum_varlen(T, HV, K, p.N, cu, a, p.g);
    fill(p.L, nA, 0.0);
    for (int n = 0; n < p.N; n++)
        for (int64_t t = cu[n]; t < cu[n + 1]; t++)
            for (int hv = 0; hv < HV; hv++)
                for (int j = 0; j < (int)((t - cu[n]) % BT); j++) p.L[((size_t)t * HV + hv) * BT + j] = 0.2 * kref_rng_normal(&rng);
    wy_make_A(&p);
    double *dq = dalloc(nk), *dk = dalloc(nk), *dv2 = dalloc(nv), *dg = dalloc(nk), *db = dalloc(nb), *dA = dalloc(nA);
    kref_wy_dqkg_varlen(T, H, HV, K, V, p.N, cu, p.q, p.k, p.v, p.vn, p.g, p.beta, p.A, p.h, p.dh, p.dout, p.dv,
                        p.scale, -1, dq, dk, dv2, dg, db, dA);
    const int64_t nt = cu[p.N];
    const double hstep = 1e-5;
    double worst = 0.0;
    /* q and k: HV = 2H, so the gradient of q[t,h] sums the reference's dq over the group */
    for (int64_t t = 0; t < nt; t++)
        for (int d = 0; d < K; d++) {
            const double aq = dq[((size_t)t * HV + 0) * K + d] + dq[((size_t)t * HV + 1) * K + d];
            const double ak = dk[((size_t)t * HV + 0) * K + d] + dk[((size_t)t * HV + 1) * K + d];
            worst = fmax(worst, fd_rel(wy_fd(&p, &p.q[(size_t)t * K + d], hstep), aq, rms_of(dq, (size_t)nt * HV * K)));
            worst = fmax(worst, fd_rel(wy_fd(&p, &p.k[(size_t)t * K + d], hstep), ak, rms_of(dk, (size_t)nt * HV * K)));
        }
    for (int64_t t = 0; t < nt; t++)
        for (int hv = 0; hv < HV; hv++) {
            const size_t b = (size_t)t * HV + hv;
            worst = fmax(worst, fd_rel(wy_fd(&p, &p.beta[b], hstep), db[b], rms_of(db, (size_t)nt * HV)));
            for (int x = 0; x < V; x++)
                worst = fmax(worst, fd_rel(wy_fd(&p, &p.v[b * V + x], hstep), dv2[b * V + x], rms_of(dv2, (size_t)nt * HV * V)));
            for (int d = 0; d < K; d++) /* g in log2 units: d/dg2 = ln 2 * d/dg_nat */
                worst = fmax(worst, fd_rel(wy_fd(&p, &p.g[b * K + d], hstep) / M_LN2,
                                           dg[b * K + d], rms_of(dg, (size_t)nt * HV * K)));
            int64_t cs, ce;
            chunk_of(p.N, cu, t, &cs, &ce);
            for (int j = 0; j < (int)(t - cs); j++)
                worst = fmax(worst, fd_rel(wy_fd(&p, &p.L[b * BT + j], hstep), dA[b * BT + j], rms_of(dA, nA)));
        }
    printf("wy_dqkg reference vs finite differences: worst relative error %.2e\n", worst);
    CHK(worst < 1e-6);
    double *all[] = {p.q, p.k, p.v, p.vn, p.g, p.beta, p.L, p.A, p.h, p.dh, p.dout, p.dv, a, dq, dk, dv2, dg, db, dA};
    for (size_t x = 0; x < sizeof all / sizeof all[0]; x++) free(all[x]);
}
END_TEST

/* ------------------------------- the forward recompute (w, u, h) --- */

/* The central difference of loss(ctx) in *x (step 1e-5 relative), *x restored. */
static double central(double (*loss)(void *), void *ctx, double *x)
{
    const double x0 = *x, h = 1e-5 * fmax(1.0, fabs(x0));
    *x = x0 + h;
    const double lp = loss(ctx);
    *x = x0 - h;
    const double lm = loss(ctx);
    *x = x0;
    return (lp - lm) / (2 * h);
}

/* One input of a finite-difference check: its values and its analytic gradient. */
typedef struct {
    const char *name;
    double *x, *g;
    size_t n;
} fd_input;

/* The worst fd_rel over every element of every input (each printed after what), failing when a gradient is all
 * zero. */
static double fd_inputs(const char *what, const fd_input *in, size_t nin, double (*loss)(void *), void *ctx)
{
    double worst = 0.0;
    for (size_t j = 0; j < nin; j++) {
        const double rg = rms_of(in[j].g, in[j].n);
        double e = 0.0;
        CHK(rg > 0);
        for (size_t i = 0; i < in[j].n; i++) e = fmax(e, fd_rel(central(loss, ctx, &in[j].x[i]), in[j].g[i], rg));
        printf("%s vs finite differences: d%s %.2e\n", what, in[j].name, e);
        worst = fmax(worst, e);
    }
    return worst;
}

/* A KDA problem for the token recurrence: q, k [T,H,K] (value head hv reads
 * head hv / (HV / H)), v [T,HV,V], a [T,HV,K] natural-log decays, beta
 * [T,HV], h0 [N,HV,K,V]; do [T,HV,V] and dht [N,HV,K,V] weigh the loss (q,
 * do and dht may be NULL when only the states are wanted). */
typedef struct {
    int T, H, HV, K, V, N;
    const int64_t *cu;
    double scale, *q, *k, *v, *a, *beta, *h0, *dout, *dht;
} kda_prob;

/* The KDA recurrence token by token, independent of the chunked form: per
 * sequence S = h0[n]; for each token S = diag(exp(a_t)) S, then the delta
 * rule S += beta_t k_t (v_t - S^T k_t)^T, o_t = scale S^T q_t.  Returns the
 * loss sum(do o) + sum(dht S_final) (0 without do); hb [NT,HV,K,V] (unless
 * NULL): S entering each 64-token chunk (row chunk_offsets[n] + c); ht
 * [N,HV,K,V] (unless NULL): S at the end. */
static double kda_run(const kda_prob *p, double *hb, double *ht)
{
    const int G = p->HV / p->H, K = p->K, V = p->V, HV = p->HV;
    const size_t KV = (size_t)K * V;
    int64_t *off = calloc((size_t)p->N + 1, sizeof(int64_t));
    ck_assert_ptr_nonnull(off);
    kref_chunk_offsets(p->N, p->cu, off);
    double *S = dalloc(KV), *pred = dalloc((size_t)V), L = 0.0;
    for (int n = 0; n < p->N; n++)
        for (int hv = 0; hv < HV; hv++) {
            memcpy(S, p->h0 + ((size_t)n * HV + hv) * KV, sizeof(double) * KV);
            for (int64_t t = p->cu[n]; t < p->cu[n + 1]; t++) {
                if (hb && (t - p->cu[n]) % BT == 0)
                    memcpy(hb + ((size_t)(off[n] + (t - p->cu[n]) / BT) * HV + hv) * KV, S, sizeof(double) * KV);
                const double *kt = p->k + ((size_t)t * p->H + hv / G) * K;
                const double *vt = p->v + ((size_t)t * HV + hv) * V, b = p->beta[(size_t)t * HV + hv];
                for (int d = 0; d < K; d++)
                    for (int e = 0; e < V; e++) S[(size_t)d * V + e] *= exp(p->a[((size_t)t * HV + hv) * K + d]);
                for (int e = 0; e < V; e++) {
                    pred[e] = 0.0;
                    for (int d = 0; d < K; d++) pred[e] += S[(size_t)d * V + e] * kt[d];
                }
                for (int d = 0; d < K; d++)
                    for (int e = 0; e < V; e++) S[(size_t)d * V + e] += b * kt[d] * (vt[e] - pred[e]);
                if (!p->dout) continue;
                const double *qt = p->q + ((size_t)t * p->H + hv / G) * K;
                for (int e = 0; e < V; e++) {
                    double o = 0.0;
                    for (int d = 0; d < K; d++) o += S[(size_t)d * V + e] * qt[d];
                    L += p->dout[((size_t)t * HV + hv) * V + e] * p->scale * o;
                }
            }
            if (ht) memcpy(ht + ((size_t)n * HV + hv) * KV, S, sizeof(double) * KV);
            if (p->dht)
                for (size_t i = 0; i < KV; i++) L += p->dht[((size_t)n * HV + hv) * KV + i] * S[i];
        }
    free(S);
    free(pred);
    free(off);
    return L;
}

/* kref_wy_akk + kref_recompute_w_u + kref_fwd_h (the chunked form fla's
 * backward recomputes) against the token recurrence: the state entering
 * every chunk and the final state.  _i = 0: B = 2 sequences of 150 tokens
 * (a partial last chunk); 1: 5 packed documents with a one-token one and an
 * empty one. */
START_TEST(test_fwd_recompute)
{
    static const int64_t cu_fixed[] = {0, 150, 300}, cu_packed[] = {0, 1, 65, 165, 165, 202};
    const int N = _i ? 5 : 2, T = _i ? 202 : 300, HV = 2, K = 8, V = 5;
    const int64_t *cu = _i ? cu_packed : cu_fixed;
    kref_rng r;
    kref_rng_seed(&r, g_seed ^ (0xC000u + (unsigned)_i));
    const size_t nk = (size_t)T * HV * K, nv = (size_t)T * HV * V, KV = (size_t)K * V;
    const int64_t NT = kref_chunk_offsets(N, cu, NULL);
    double *k = dalloc(nk), *v = dalloc(nv), *beta = dalloc((size_t)T * HV), *a = dalloc(nk), *g2 = dalloc(nk);
    double *Akk = dalloc((size_t)T * HV * BT), *w = dalloc(nk), *u = dalloc(nv), *kg = dalloc(nk);
    double *h0 = dalloc((size_t)N * HV * KV), *h = dalloc((size_t)NT * HV * KV), *vn = dalloc(nv);
    double *ht = dalloc((size_t)N * HV * KV), *hb = dalloc((size_t)NT * HV * KV), *ht2 = dalloc((size_t)N * HV * KV);
    kref_gen_unit_rows(&r, (size_t)T * HV, K, k);
    kref_gen_normal(&r, nv, 1.0, v);
    kref_gen_beta(&r, (size_t)T * HV, beta);
    kref_gen_gate(&r, KREF_GATE_LOGSIG, 1, T, HV, K, a);
    kref_gen_normal(&r, (size_t)N * HV * KV, 1.0, h0);
    kref_gate_cumsum_varlen(T, HV, K, N, cu, a, g2);
    for (size_t i = 0; i < (size_t)NT * HV * KV; i++) h[i] = NAN;
    for (size_t i = 0; i < nv; i++) vn[i] = NAN;
    kref_wy_akk_varlen(T, HV, K, N, cu, k, beta, g2, Akk);
    kref_recompute_w_u_varlen(T, HV, K, V, N, cu, k, v, beta, g2, Akk, w, u, kg);
    kref_fwd_h_varlen(T, HV, K, V, N, cu, kg, w, u, g2, h0, h, vn, ht);
    /* the token recurrence takes the decays that g2 holds (kref_gate_cumsum rounds g2 to fp32):
     * a_t = ln 2 (g2_t - g2_{t-1}) within a chunk, ln 2 g2_t on its first row */
    for (int n = 0; n < N; n++)
        for (int64_t t = cu[n]; t < cu[n + 1]; t++)
            for (size_t j = 0; j < (size_t)HV * K; j++) {
                const size_t i = (size_t)t * HV * K + j;
                a[i] = KREF_LN2 * (g2[i] - ((t - cu[n]) % BT ? g2[i - (size_t)HV * K] : 0.0));
            }
    const kda_prob p = {.T = T, .H = HV, .HV = HV, .K = K, .V = V, .N = N, .cu = cu, .k = k, .v = v, .a = a,
                        .beta = beta, .h0 = h0};
    kda_run(&p, hb, ht2);
    const double eh = kref_rel_rms(hb, h, (size_t)NT * HV * KV), et = kref_rel_rms(ht2, ht, (size_t)N * HV * KV);
    printf("chunked recompute vs the token recurrence (%s): states entering chunks %.2e, final %.2e\n",
           _i ? "packed" : "fixed", eh, et);
    CHK(eh < 1e-12 && et < 1e-12);
    for (size_t i = 0; i < nv; i++) CHK(isfinite(vn[i]));
    double *all[] = {k, v, beta, a, g2, Akk, w, u, kg, h0, h, vn, ht, hb, ht2};
    for (size_t x = 0; x < sizeof all / sizeof all[0]; x++) free(all[x]);
}
END_TEST

/* The whole function kref_kda_bwd_varlen differentiates: kda_run's loss. */
static double kda_loss(void *ctx)
{
    return kda_run(ctx, NULL, NULL);
}

/* the whole backward composed of the stage references against the finite
 * differences of the token recurrence's loss, for every input: _i = 0: two
 * sequences of 100 tokens, H = HV = 2; 1: packed documents of 1, 70, 0 and 30
 * tokens with grouped value heads (H = 1, HV = 2) */
START_TEST(test_kda_bwd_fd)
{
    static const int64_t cu_fixed[] = {0, 100, 200}, cu_packed[] = {0, 1, 71, 71, 101};
    kda_prob p = {.T = _i ? 101 : 200, .H = _i ? 1 : 2, .HV = 2, .K = 4, .V = 3, .N = _i ? 4 : 2,
                  .cu = _i ? cu_packed : cu_fixed, .scale = 0.5};
    kref_rng r;
    kref_rng_seed(&r, g_seed ^ (0xD000u + (unsigned)_i));
    const size_t nq = (size_t)p.T * p.H * p.K, nk = (size_t)p.T * p.HV * p.K, nv = (size_t)p.T * p.HV * p.V;
    const size_t ns = (size_t)p.N * p.HV * p.K * p.V, nb = (size_t)p.T * p.HV;
    p.q = dalloc(nq), p.k = dalloc(nq), p.v = dalloc(nv), p.a = dalloc(nk), p.beta = dalloc(nb);
    p.h0 = dalloc(ns), p.dout = dalloc(nv), p.dht = dalloc(ns);
    kref_gen_unit_rows(&r, (size_t)p.T * p.H, p.K, p.q);
    kref_gen_unit_rows(&r, (size_t)p.T * p.H, p.K, p.k);
    kref_gen_normal(&r, nv, 1.0, p.v);
    kref_gen_gate(&r, KREF_GATE_LOGSIG, 1, p.T, p.HV, p.K, p.a);
    kref_gen_beta(&r, nb, p.beta);
    kref_gen_normal(&r, ns, 1.0, p.h0);
    kref_gen_normal(&r, nv, 1.0, p.dout);
    kref_gen_normal(&r, ns, 1.0, p.dht);
    double *dq = dalloc(nq), *dk = dalloc(nq), *dv = dalloc(nv), *da = dalloc(nk), *db = dalloc(nb), *dh0 = dalloc(ns);
    for (size_t i = 0; i < nk; i++) da[i] = NAN;
    kref_kda_bwd_varlen(p.T, p.H, p.HV, p.K, p.V, p.N, p.cu, p.q, p.k, p.v, p.a, p.beta, p.h0, p.scale, p.dout,
                        p.dht, dq, dk, dv, da, db, dh0);
    const fd_input in[] = {{"q", p.q, dq, nq}, {"k", p.k, dk, nq}, {"v", p.v, dv, nv}, {"a", p.a, da, nk},
                           {"beta", p.beta, db, nb}, {"h0", p.h0, dh0, ns}};
    CHK(fd_inputs(_i ? "whole backward (packed, GVA)" : "whole backward (fixed)", in, sizeof in / sizeof in[0],
                  kda_loss, &p) < 1e-6);
    double *all[] = {p.q, p.k, p.v, p.a, p.beta, p.h0, p.dout, p.dht, dq, dk, dv, da, db, dh0};
    for (size_t x = 0; x < sizeof all / sizeof all[0]; x++) free(all[x]);
}
END_TEST

/* The production configuration's function: kda_prob's recurrence on
 * l2norm(q_raw), l2norm(k_raw), the gate of g_raw and beta_scale
 * sigmoid(beta_logit). */
typedef struct {
    kda_prob p;
    int safe;
    double lb, beta_scale, *q_raw, *k_raw, *g_raw, *A_log, *dtb, *logit, *rs;
} prod_prob;

static double prod_loss(void *ctx)
{
    prod_prob *x = ctx;
    kda_prob *p = &x->p;
    const size_t rq = (size_t)p->T * p->H, rv = (size_t)p->T * p->HV;
    kref_l2norm(rq, p->K, 1e-6, x->q_raw, p->q, x->rs);
    kref_l2norm(rq, p->K, 1e-6, x->k_raw, p->k, x->rs);
    kref_gate_act(rv, p->HV, p->K, x->g_raw, x->A_log, x->dtb, x->safe, x->lb, p->a);
    kref_beta_sigmoid(rv, x->beta_scale, x->logit, p->beta);
    return kda_loss(p);
}

/* kref_kda_bwd_prod_varlen against the finite differences of the whole
 * production function, for every input: _i = 0: the plain gate, packed
 * documents with grouped value heads, beta_scale 2; 1: the safe gate (lower
 * bound -5), two sequences; raw gates of +-20 among the draws */
START_TEST(test_kda_bwd_prod_fd)
{
    static const int64_t cu_fixed[] = {0, 90, 180}, cu_packed[] = {0, 1, 71, 71, 101};
    prod_prob x = {.p = {.T = _i ? 180 : 101, .H = _i ? 2 : 1, .HV = 2, .K = 4, .V = 3, .N = _i ? 2 : 4,
                         .cu = _i ? cu_fixed : cu_packed, .scale = 0.5},
                   .safe = _i, .lb = -5.0, .beta_scale = _i ? 1.0 : 2.0};
    kda_prob *p = &x.p;
    kref_rng r;
    kref_rng_seed(&r, g_seed ^ (0xE000u + (unsigned)_i));
    const size_t nq = (size_t)p->T * p->H * p->K, nk = (size_t)p->T * p->HV * p->K;
    const size_t nv = (size_t)p->T * p->HV * p->V, ns = (size_t)p->N * p->HV * p->K * p->V, nb = (size_t)p->T * p->HV;
    p->q = dalloc(nq), p->k = dalloc(nq), p->v = dalloc(nv), p->a = dalloc(nk), p->beta = dalloc(nb);
    p->h0 = dalloc(ns), p->dout = dalloc(nv), p->dht = dalloc(ns);
    x.q_raw = dalloc(nq), x.k_raw = dalloc(nq), x.g_raw = dalloc(nk), x.A_log = dalloc((size_t)p->HV);
    x.dtb = dalloc((size_t)p->HV * p->K), x.logit = dalloc(nb), x.rs = dalloc((size_t)p->T * p->H);
    kref_gen_normal(&r, nq, 2.0, x.q_raw);
    kref_gen_normal(&r, nq, 1.0, x.k_raw);
    kref_gen_normal(&r, nv, 1.0, p->v);
    kref_gen_normal(&r, nk, 1.5, x.g_raw);
    x.g_raw[5] = 20.0, x.g_raw[17] = -20.0;
    for (int hv = 0; hv < p->HV; hv++) x.A_log[hv] = log(1.0 + 15.0 * kref_rng_uniform(&r));
    kref_gen_normal(&r, (size_t)p->HV * p->K, 0.5, x.dtb);
    kref_gen_normal(&r, nb, 1.0, x.logit);
    kref_gen_normal(&r, ns, 1.0, p->h0);
    kref_gen_normal(&r, nv, 1.0, p->dout);
    kref_gen_normal(&r, ns, 1.0, p->dht);
    double *dq = dalloc(nq), *dk = dalloc(nq), *dv = dalloc(nv), *dg = dalloc(nk), *dAl = dalloc((size_t)p->HV);
    double *ddt = dalloc((size_t)p->HV * p->K), *db = dalloc(nb), *dh0 = dalloc(ns);
    kref_kda_bwd_prod_varlen(p->T, p->H, p->HV, p->K, p->V, p->N, p->cu, x.q_raw, x.k_raw, p->v, x.g_raw, x.A_log,
                             x.dtb, x.safe, x.lb, x.logit, x.beta_scale, p->h0, p->scale, p->dout, p->dht, dq, dk, dv,
                             dg, dAl, ddt, db, dh0);
    const fd_input in[] = {{"q", x.q_raw, dq, nq}, {"k", x.k_raw, dk, nq}, {"v", p->v, dv, nv},
                           {"g", x.g_raw, dg, nk}, {"A_log", x.A_log, dAl, (size_t)p->HV},
                           {"dt_bias", x.dtb, ddt, (size_t)p->HV * p->K}, {"beta", x.logit, db, nb},
                           {"h0", p->h0, dh0, ns}};
    CHK(fd_inputs(_i ? "production backward (safe gate)" : "production backward (plain gate)", in,
                  sizeof in / sizeof in[0], prod_loss, &x) < 1e-6);
    double *all[] = {p->q, p->k, p->v, p->a, p->beta, p->h0, p->dout, p->dht, x.q_raw, x.k_raw, x.g_raw, x.A_log,
                     x.dtb, x.logit, x.rs, dq, dk, dv, dg, dAl, ddt, db, dh0};
    for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) free(all[j]);
}
END_TEST

/* --------------------------- gate, l2norm, beta sigmoid (the flags) --- */

typedef struct {
    int HV, K, safe;
    size_t rows;
    double lb, *g, *A_log, *dtb, *da, *a;
} gate_prob;

static double gate_loss(void *ctx)
{
    gate_prob *p = ctx;
    kref_gate_act(p->rows, p->HV, p->K, p->g, p->A_log, p->dtb, p->safe, p->lb, p->a);
    double L = 0.0;
    for (size_t i = 0; i < p->rows * (size_t)p->K; i++) L += p->da[i] * p->a[i];
    return L;
}

/* _i = 0: the plain gate, 1: the safe gate (lower bound -5); raw gates of
 * +-20 among the draws */
START_TEST(test_gate_fd)
{
    kref_rng r;
    kref_rng_seed(&r, g_seed ^ (0xB000u + (unsigned)_i));
    gate_prob p = {.HV = 3, .K = 5, .safe = _i, .rows = 37 * 3, .lb = -5.0};
    const size_t n = p.rows * (size_t)p.K;
    p.g = dalloc(n), p.da = dalloc(n), p.a = dalloc(n);
    p.A_log = dalloc((size_t)p.HV), p.dtb = dalloc((size_t)p.HV * p.K);
    kref_gen_normal(&r, n, 2.0, p.g);
    p.g[3] = 20.0, p.g[11] = -20.0;
    kref_gen_normal(&r, n, 1.0, p.da);
    for (int hv = 0; hv < p.HV; hv++) p.A_log[hv] = log(1.0 + 15.0 * kref_rng_uniform(&r));
    kref_gen_normal(&r, (size_t)p.HV * p.K, 0.5, p.dtb);
    double *dg = dalloc(n), *dA = dalloc((size_t)p.HV), *db = dalloc((size_t)p.HV * p.K);
    for (size_t i = 0; i < n; i++) dg[i] = NAN;
    kref_gate_act_bwd(p.rows, p.HV, p.K, p.g, p.A_log, p.dtb, p.safe, p.lb, p.da, dg, dA, db);
    const fd_input in[] = {{"g_raw", p.g, dg, n}, {"A_log", p.A_log, dA, (size_t)p.HV},
                           {"dt_bias", p.dtb, db, (size_t)p.HV * p.K}};
    CHK(fd_inputs(_i ? "gate (safe)" : "gate (plain)", in, sizeof in / sizeof in[0], gate_loss, &p) < 1e-6);
    double *all[] = {p.g, p.da, p.a, p.A_log, p.dtb, dg, dA, db};
    for (size_t x = 0; x < sizeof all / sizeof all[0]; x++) free(all[x]);
}
END_TEST

/* the l2norm of rows of K and beta's sigmoid (scale 1 and 2), each against
 * the finite differences of sum(dy * f(x)) */
START_TEST(test_l2norm_sigmoid_fd)
{
    kref_rng r;
    kref_rng_seed(&r, g_seed ^ 0xB100u);
    const int K = 7;
    const size_t rows = 23, n = rows * K;
    double *x = dalloc(n), *y = dalloc(n), *rs = dalloc(rows), *dy = dalloc(n), *dx = dalloc(n);
    double *y2 = dalloc(n), *rs2 = dalloc(rows);
    kref_gen_normal(&r, n, 3.0, x);
    kref_gen_normal(&r, n, 1.0, dy);
    kref_l2norm(rows, K, 1e-6, x, y, rs);
    for (size_t i = 0; i < n; i++) dx[i] = NAN;
    kref_l2norm_bwd(rows, K, y, rs, dy, dx);
    const double rx = rms_of(dx, n);
    CHK(rx > 0);
    double el = 0;
    for (size_t i = 0; i < n; i++) {
        const double x0 = x[i], h = 1e-5 * fmax(1.0, fabs(x0));
        double l[2];
        for (int sgn = 0; sgn < 2; sgn++) {
            x[i] = x0 + (sgn ? -h : h);
            kref_l2norm(rows, K, 1e-6, x, y2, rs2);
            l[sgn] = 0.0;
            for (size_t j = 0; j < n; j++) l[sgn] += dy[j] * y2[j];
        }
        x[i] = x0;
        el = fmax(el, fd_rel((l[0] - l[1]) / (2 * h), dx[i], rx));
    }
    double es = 0;
    for (int sc = 1; sc <= 2; sc++) {
        kref_beta_sigmoid_bwd(n, sc, x, dy, dx);
        const double rb = rms_of(dx, n);
        CHK(rb > 0);
        for (size_t i = 0; i < n; i++) {
            const double x0 = x[i], h = 1e-5 * fmax(1.0, fabs(x0));
            double bp, bm;
            x[i] = x0 + h;
            kref_beta_sigmoid(1, sc, &x[i], &bp);
            x[i] = x0 - h;
            kref_beta_sigmoid(1, sc, &x[i], &bm);
            x[i] = x0;
            es = fmax(es, fd_rel(dy[i] * (bp - bm) / (2 * h), dx[i], rb));
        }
    }
    printf("l2norm vs finite differences %.2e, beta sigmoid %.2e\n", el, es);
    CHK(el < 1e-6 && es < 1e-6);
    double *all[] = {x, y, rs, dy, dx, y2, rs2};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) free(all[k]);
}
END_TEST

static Suite *ref_suite(void)
{
    Suite *s = suite_create("reference");
    TCase *tc = tcase_create("conversions");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_conversions);
    tcase_add_test(tc, test_metrics_rng);
    suite_add_tcase(s, tc);
    tc = tcase_create("generators");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_gen_gates);
    tcase_add_test(tc, test_gen_dA);
    tcase_add_loop_test(tc, test_gen_dhu_bounded, 0, KREF_GATE_NFAMILIES);
    tcase_add_test(tc, test_gen_varlen);
    suite_add_tcase(s, tc);
    tc = tcase_create("bwd_intra");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_intra_fd, 0, KREF_GATE_NFAMILIES);
    tcase_add_test(tc, test_intra_speed);
    suite_add_tcase(s, tc);
    tc = tcase_create("bwd_dhu");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_dhu_fd, 0, 2);
    tcase_add_loop_test(tc, test_dhu_faithful, 0, 2);
    suite_add_tcase(s, tc);
    tc = tcase_create("wy_dqkg");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_wy_fd);
    suite_add_tcase(s, tc);
    tc = tcase_create("forward recompute");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_fwd_recompute, 0, 2);
    suite_add_tcase(s, tc);
    tc = tcase_create("whole backward");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_kda_bwd_fd, 0, 2);
    tcase_add_loop_test(tc, test_kda_bwd_prod_fd, 0, 2);
    suite_add_tcase(s, tc);
    tc = tcase_create("flags");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_gate_fd, 0, 2);
    tcase_add_test(tc, test_l2norm_sigmoid_fd);
    suite_add_tcase(s, tc);
    tc = tcase_create("varlen");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_intra_fd_varlen, 0, 4);
    tcase_add_loop_test(tc, test_dhu_fd_varlen, 0, 4);
    tcase_add_loop_test(tc, test_varlen_fixed_equiv, 0, 3);
    tcase_add_test(tc, test_varlen_split);
    tcase_add_test(tc, test_varlen_masked);
    tcase_add_test(tc, test_varlen_speed);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    g_seed = kref_pick_seed();
    printf("test_reference: seed %llu (replay with KREF_SEED=%llu)\n",
           (unsigned long long)g_seed, (unsigned long long)g_seed);
    fflush(stdout);
    SRunner *sr = srunner_create(ref_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    printf("test_reference: seed %llu, %d failed\n", (unsigned long long)g_seed, failed);
    return failed == 0 ? 0 : 1;
}
