/*
 * kda_ref.c: implementation of the float64 KDA backward references, the
 * RNG, the bf16/fp16 conversions, the input generators and the error metrics
 * declared in kda_ref.h.
 *
 * Guarantees: C11 with libc and libm only, no global mutable state, no
 * allocation except per-call scratch (freed before returning; an allocation
 * failure aborts, since this is test code).  The references follow spec
 * sections 5.1 and 5.2 term for term; only the loop order differs (each
 * exp2(g_r - g_s) with s <= r is evaluated once and used by both the row and
 * the column sums), which changes nothing but double rounding.  Every
 * function has one packed-layout (cu_seqlens) implementation; the
 * fixed-length entry points call it with cu = [0, T, .., BT].
 */
#include "kda_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BT KREF_BT

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "kda_ref: out of memory (%zu bytes)\n", n);
        abort();
    }
    return p;
}

/* ---------------------------------------------------------------- RNG --- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void kref_rng_seed(kref_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
    r->has_spare = 0;
    r->spare = 0.0;
}

uint64_t kref_rng_u64(kref_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double kref_rng_uniform(kref_rng *r)
{
    return (double)(kref_rng_u64(r) >> 11) * 0x1.0p-53;
}

double kref_rng_normal(kref_rng *r)
{
    if (r->has_spare) {
        r->has_spare = 0;
        return r->spare;
    }
    /* u1 in (0,1] so that log(u1) is finite. */
    double u1 = 1.0 - kref_rng_uniform(r);
    double u2 = kref_rng_uniform(r);
    double rad = sqrt(-2.0 * log(u1));
    double th = 6.283185307179586476925 * u2;
    r->spare = rad * sin(th);
    r->has_spare = 1;
    return rad * cos(th);
}

uint64_t kref_pick_seed(void)
{
    const char *e = getenv("KREF_SEED");
    if (e && *e) return strtoull(e, NULL, 0);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000007ULL ^ (uint64_t)ts.tv_nsec ^
                 ((uint64_t)getpid() << 32);
    return splitmix64(&x);
}

/* -------------------------------------------------------- conversions --- */

/* Rounds x to a binary format with mbits stored mantissa bits, minimum
 * normal exponent emin and largest finite value maxf, ties to even.  The
 * scaling by a power of two is exact, and nearbyint rounds ties to even in
 * the default rounding mode. */
static double round_fmt(double x, int mbits, int emin, double maxf)
{
    if (!isfinite(x) || x == 0.0) return x;
    int ex;
    frexp(x, &ex); /* |x| = m 2^ex, m in [0.5,1): unbiased exponent ex-1 */
    int e = ex - 1;
    if (e < emin) e = emin;
    double q = ldexp(nearbyint(ldexp(x, mbits - e)), e - mbits);
    if (fabs(q) > maxf) return copysign(INFINITY, x);
    return q;
}

/* Encodes an already representable value. */
static uint16_t encode_fmt(double x, int mbits, int ebits, int emin)
{
    int bias = (1 << (ebits - 1)) - 1;
    uint16_t sign = signbit(x) ? (uint16_t)(1u << 15) : 0;
    uint16_t expall = (uint16_t)(((1u << ebits) - 1) << mbits);
    if (isnan(x)) return (uint16_t)(sign | expall | (1u << (mbits - 1)));
    if (isinf(x)) return (uint16_t)(sign | expall);
    double a = fabs(x);
    if (a == 0.0) return sign;
    if (a < ldexp(1.0, emin)) /* subnormal */
        return (uint16_t)(sign | (uint16_t)ldexp(a, mbits - emin));
    int ex;
    frexp(a, &ex);
    int e = ex - 1;
    uint16_t mant = (uint16_t)(ldexp(a, mbits - e) - ldexp(1.0, mbits));
    return (uint16_t)(sign | ((uint16_t)(e + bias) << mbits) | mant);
}

static double decode_fmt(uint16_t b, int mbits, int ebits, int emin)
{
    int bias = (1 << (ebits - 1)) - 1;
    int sign = (b >> 15) & 1;
    int E = (b >> mbits) & ((1 << ebits) - 1);
    int m = b & ((1 << mbits) - 1);
    double v;
    if (E == (1 << ebits) - 1)
        v = m ? NAN : INFINITY;
    else if (E == 0)
        v = ldexp((double)m, emin - mbits);
    else
        v = ldexp((double)(m + (1 << mbits)), E - bias - mbits);
    return sign ? -v : v;
}

#define BF16_MAX 3.38953138925153547590470800371487866880e38 /* (2-2^-7) 2^127 */

uint16_t kref_to_bf16(double x)
{
    return encode_fmt(round_fmt(x, 7, -126, BF16_MAX), 7, 8, -126);
}
uint16_t kref_to_fp16(double x)
{
    return encode_fmt(round_fmt(x, 10, -14, 65504.0), 10, 5, -14);
}
double kref_from_bf16(uint16_t b) { return decode_fmt(b, 7, 8, -126); }
double kref_from_fp16(uint16_t b) { return decode_fmt(b, 10, 5, -14); }

double kref_round_io(double x, int io)
{
    if (io == 0) return round_fmt(x, 7, -126, BF16_MAX);
    if (io == 1) return round_fmt(x, 10, -14, 65504.0);
    return x;
}

double kref_round_f32(double x) { return (double)(float)x; }

/* ----------------------------------------------------- packed layout --- */

/* Aborts unless cu_seqlens [N+1] is a packed layout within T tokens. */
static void check_cu(const char *who, int T, int N, const int64_t *cu)
{
    int ok = N >= 0 && T >= 0 && cu && cu[0] == 0;
    for (int n = 0; ok && n < N; n++) ok = cu[n + 1] >= cu[n];
    if (!ok || cu[N] > T) {
        fprintf(stderr, "kda_ref: %s: invalid cu_seqlens (N %d, T %d)\n", who, N, T);
        abort();
    }
}

/* cu = [0, T, 2T, .., BT]: a fixed-length [B,T,...] batch as a packed one
 * (the caller frees it). */
static int64_t *fixed_cu(int B, int T)
{
    int64_t *cu = xmalloc(sizeof(int64_t) * ((size_t)B + 1));
    for (int b = 0; b <= B; b++) cu[b] = (int64_t)b * T;
    return cu;
}

static int nchunks(const int64_t *cu, int n)
{
    return (int)((cu[n + 1] - cu[n] + BT - 1) / BT);
}

/* Chunk c of sequence n: sets its first token and returns its valid row
 * count, 1..64. */
static int chunk_span(const int64_t *cu, int n, int c, size_t *t0)
{
    const int64_t start = cu[n] + (int64_t)c * BT, left = cu[n + 1] - start;
    *t0 = (size_t)start;
    return left < BT ? (int)left : BT;
}

int64_t kref_chunk_offsets(int N, const int64_t *cu, int64_t *off)
{
    int64_t acc = 0;
    for (int n = 0; n < N; n++) {
        if (off) off[n] = acc;
        acc += nchunks(cu, n);
    }
    if (off) off[N] = acc;
    return acc;
}

int64_t kref_gen_cu_seqlens(kref_rng *r, int N, int lo, int hi, int with_empty,
                            int64_t *cu)
{
    const int empty = (with_empty > 0 && N > 0) ? (int)(kref_rng_u64(r) % (uint64_t)N) : -1;
    cu[0] = 0;
    for (int n = 0; n < N; n++) {
        int64_t len = lo + (int64_t)(kref_rng_u64(r) % (uint64_t)(hi - lo + 1));
        cu[n + 1] = cu[n] + (n == empty ? 0 : len);
    }
    return cu[N];
}

/* --------------------------------------------------------- bwd_intra --- */

void kref_bwd_intra(int B, int T, int H, int HV, int K,
                    const double *q, const double *k, const double *g,
                    const double *beta, const double *dAqk, const double *dAkk,
                    const double *dq_in, const double *dk_in,
                    const double *dg_in, const double *db_in, int fold_dg,
                    double *dq, double *dk, double *dg, double *db)
{
    int64_t *cu = fixed_cu(B, T);
    kref_bwd_intra_varlen(B * T, H, HV, K, B, cu, q, k, g, beta, dAqk, dAkk, dq_in,
                          dk_in, dg_in, db_in, fold_dg, dq, dk, dg, db);
    free(cu);
}

void kref_bwd_intra_varlen(int T, int H, int HV, int K, int N,
                           const int64_t *cu,
                           const double *q, const double *k, const double *g,
                           const double *beta, const double *dAqk,
                           const double *dAkk, const double *dq_in,
                           const double *dk_in, const double *dg_in,
                           const double *db_in, int fold_dg,
                           double *dq, double *dk, double *dg, double *db)
{
    check_cu("kref_bwd_intra_varlen", T, N, cu);
    const int G = HV / H;
    /* Per-chunk slices, transposed to [d][r] so the inner loops are
     * contiguous. */
    double *qs = xmalloc(sizeof(double) * (size_t)K * BT);
    double *ks = xmalloc(sizeof(double) * (size_t)K * BT);
    double *gs = xmalloc(sizeof(double) * (size_t)K * BT);
    double *Aq = xmalloc(sizeof(double) * (size_t)K * BT);
    double *Ak = xmalloc(sizeof(double) * (size_t)K * BT);
    double *Ct = xmalloc(sizeof(double) * (size_t)K * BT);
    double *aq = xmalloc(sizeof(double) * BT * BT); /* [r][s], s <= r valid */
    double *ak = xmalloc(sizeof(double) * BT * BT);
    double bs[BT];

    for (int n = 0; n < N; n++)
        for (int hv = 0; hv < HV; hv++) {
            const int h = hv / G;
            for (int c = 0; c < nchunks(cu, n); c++) {
                size_t t0;
                /* Only the chunk's nr valid rows exist: every loop below
                 * stops there, so no row or column >= nr is read. */
                const int nr = chunk_span(cu, n, c, &t0);
                for (int r = 0; r < nr; r++) {
                    size_t tr = t0 + r;
                    for (int d = 0; d < K; d++) {
                        qs[(size_t)d * BT + r] = q[(tr * H + h) * K + d];
                        ks[(size_t)d * BT + r] = k[(tr * H + h) * K + d];
                        gs[(size_t)d * BT + r] = g[(tr * HV + hv) * K + d];
                    }
                    bs[r] = beta[tr * HV + hv];
                    /* Only s <= r is copied: strictly-upper entries are never
                     * read. */
                    for (int s = 0; s <= r; s++) {
                        aq[r * BT + s] = dAqk[(tr * HV + hv) * BT + s];
                        ak[r * BT + s] = dAkk[(tr * HV + hv) * BT + s];
                    }
                }
                for (int d = 0; d < K; d++) {
                    const double *qd = qs + (size_t)d * BT;
                    const double *kd = ks + (size_t)d * BT;
                    const double *gd = gs + (size_t)d * BT;
                    double *Ctd = Ct + (size_t)d * BT;
                    for (int s = 0; s < nr; s++) Ctd[s] = 0.0;
                    for (int r = 0; r < nr; r++) {
                        double sq = 0.0, sk = 0.0;
                        const double gr = gd[r];
                        const double colq = qd[r], colk = bs[r] * kd[r];
                        const double *aqr = aq + r * BT, *akr = ak + r * BT;
                        for (int s = 0; s <= r; s++) {
                            const double e = exp2(gr - gd[s]); /* arg <= 0 */
                            sq += aqr[s] * kd[s] * e;
                            sk += akr[s] * kd[s] * e;
                            Ctd[s] += (aqr[s] * colq + akr[s] * colk) * e;
                        }
                        Aq[(size_t)d * BT + r] = sq;
                        Ak[(size_t)d * BT + r] = sk;
                    }
                }
                for (int r = 0; r < nr; r++) {
                    size_t tr = t0 + r;
                    double dbacc = 0.0;
                    const double br = bs[r];
                    for (int d = 0; d < K; d++) {
                        size_t o = (tr * HV + hv) * K + d, i = (size_t)d * BT + r;
                        const double qr = qs[i], kr = ks[i];
                        dq[o] = dq_in[o] + Aq[i];
                        dk[o] = dk_in[o] + br * Ak[i] + Ct[i];
                        dg[o] = dg_in[o] + qr * Aq[i] + (br * Ak[i] - Ct[i]) * kr;
                        dbacc += kr * Ak[i];
                    }
                    db[tr * HV + hv] = db_in[tr * HV + hv] + dbacc;
                }
                if (fold_dg)
                    for (int d = 0; d < K; d++) {
                        double acc = 0.0;
                        for (int r = nr - 1; r >= 0; r--) {
                            size_t o = ((t0 + r) * HV + hv) * K + d;
                            acc += dg[o];
                            dg[o] = acc;
                        }
                    }
            }
        }
    free(qs); free(ks); free(gs); free(Aq); free(Ak); free(Ct);
    free(aq); free(ak);
}

/* ----------------------------------------------------------- bwd_dhu --- */

void kref_bwd_dhu(int B, int T, int HV, int K, int V,
                  const double *qg, const double *kg, const double *w,
                  const double *g, const double *dout, const double *dv,
                  const double *dht, double scale, int faithful_io,
                  double *dh, double *dv2, double *dh0)
{
    int64_t *cu = fixed_cu(B, T);
    kref_bwd_dhu_varlen(B * T, HV, K, V, B, cu, qg, kg, w, g, dout, dv, dht, scale,
                        faithful_io, dh, dv2, dh0);
    free(cu);
}

void kref_bwd_dhu_varlen(int T, int HV, int K, int V, int N,
                         const int64_t *cu,
                         const double *qg, const double *kg, const double *w,
                         const double *g, const double *dout, const double *dv,
                         const double *dht, double scale, int faithful_io,
                         double *dh, double *dv2, double *dh0)
{
    check_cu("kref_bwd_dhu_varlen", T, N, cu);
    const int io = (faithful_io == 0 || faithful_io == 1) ? faithful_io : -1;
    const size_t KV = (size_t)K * V;
    double *dH = xmalloc(sizeof(double) * KV);
    double *dHr = xmalloc(sizeof(double) * KV); /* operand copy of dH */
    double *qd = xmalloc(sizeof(double) * KV);
    double *wd = xmalloc(sizeof(double) * KV);
    double *dv2c = xmalloc(sizeof(double) * (size_t)BT * V); /* operand dv2 */

    int64_t row0 = 0; /* chunk_offsets[n] */
    for (int n = 0; n < N; row0 += nchunks(cu, n), n++)
        for (int hv = 0; hv < HV; hv++) {
            const size_t so = ((size_t)n * HV + hv) * KV;
            for (size_t i = 0; i < KV; i++) dH[i] = dht ? dht[so + i] : 0.0;
            for (int c = nchunks(cu, n) - 1; c >= 0; c--) {
                size_t t0;
                const int nr = chunk_span(cu, n, c, &t0);
                for (size_t i = 0; i < KV; i++) dHr[i] = kref_round_io(dH[i], io);
                memcpy(dh + (((size_t)row0 + c) * HV + hv) * KV, dHr, sizeof(double) * KV);
                /* dv2 uses the pre-update dH. */
                for (int i = 0; i < nr; i++) {
                    size_t tv = ((t0 + i) * HV + hv) * V, tk = ((t0 + i) * HV + hv) * K;
                    double *row = dv2c + (size_t)i * V;
                    for (int v = 0; v < V; v++) row[v] = dv[tv + v];
                    for (int d = 0; d < K; d++) {
                        const double kv = kg[tk + d];
                        const double *hr = dHr + (size_t)d * V;
                        for (int v = 0; v < V; v++) row[v] += kv * hr[v];
                    }
                    for (int v = 0; v < V; v++) {
                        row[v] = kref_round_io(row[v], io);
                        dv2[tv + v] = row[v];
                    }
                }
                /* One row d of qg^T do and w^T dv2 at a time (it stays in L1);
                 * each entry still sums over i in order. */
                for (int d = 0; d < K; d++) {
                    double *qdr = qd + (size_t)d * V, *wdr = wd + (size_t)d * V;
                    for (int v = 0; v < V; v++) qdr[v] = wdr[v] = 0.0;
                    for (int i = 0; i < nr; i++) {
                        const size_t tv = ((t0 + i) * HV + hv) * V;
                        const size_t tk = ((t0 + i) * HV + hv) * K + d;
                        const double qv = qg[tk], wv = w[tk];
                        const double *dor = dout + tv, *row = dv2c + (size_t)i * V;
                        for (int v = 0; v < V; v++) {
                            qdr[v] += qv * dor[v];
                            wdr[v] += wv * row[v];
                        }
                    }
                }
                /* A partial chunk decays by its last valid row. */
                const size_t tl = ((t0 + nr - 1) * HV + hv) * K;
                for (int d = 0; d < K; d++) {
                    const double a = exp2(g[tl + d]);
                    for (int v = 0; v < V; v++) {
                        size_t i = (size_t)d * V + v;
                        dH[i] = a * dH[i] + scale * qd[i] - wd[i];
                    }
                }
            }
            if (dh0) memcpy(dh0 + so, dH, sizeof(double) * KV);
        }
    free(dH); free(dHr); free(qd); free(wd); free(dv2c);
}

/* -------------------------------------------------------- generators --- */

const char *kref_gate_name(kref_gate_family f)
{
    switch (f) {
    case KREF_GATE_MILD: return "MILD";
    case KREF_GATE_LOGSIG: return "LOGSIG";
    case KREF_GATE_STRONG: return "STRONG";
    case KREF_GATE_CONST5: return "CONST5";
    case KREF_GATE_FUSED: return "FUSED";
    default: return "?";
    }
}

/* log(sigmoid(x)) = -softplus(-x), computed without overflow. */
static double logsigmoid(double x)
{
    return x >= 0 ? -log1p(exp(-x)) : x - log1p(exp(x));
}

static double softplus(double x)
{
    return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
}

void kref_gen_gate(kref_rng *r, kref_gate_family f, int B, int T, int HV,
                   int K, double *a)
{
    double *Aexp = NULL, *dtb = NULL;
    if (f == KREF_GATE_FUSED) {
        Aexp = xmalloc(sizeof(double) * (size_t)HV);
        dtb = xmalloc(sizeof(double) * (size_t)HV * K);
        for (int hv = 0; hv < HV; hv++) Aexp[hv] = 1.0 + 15.0 * kref_rng_uniform(r);
        for (int i = 0; i < HV * K; i++) dtb[i] = 0.5 * kref_rng_normal(r);
    }
    size_t n = (size_t)B * T * HV * K;
    for (size_t i = 0; i < n; i++) {
        double v;
        switch (f) {
        case KREF_GATE_MILD: v = logsigmoid(1.5 * kref_rng_normal(r) + 2.0); break;
        case KREF_GATE_LOGSIG: v = logsigmoid(kref_rng_normal(r)); break;
        case KREF_GATE_STRONG: v = logsigmoid(kref_rng_normal(r)) / 0.1; break;
        case KREF_GATE_CONST5: v = -5.0; break;
        case KREF_GATE_FUSED: {
            int hv = (int)((i / (size_t)K) % (size_t)HV), d = (int)(i % (size_t)K);
            v = -Aexp[hv] * softplus(kref_rng_normal(r) + dtb[hv * K + d]);
            break;
        }
        default: v = 0.0;
        }
        a[i] = v;
    }
    free(Aexp);
    free(dtb);
}

void kref_gate_cumsum(int B, int T, int HV, int K, const double *a, double *g2)
{
    int64_t *cu = fixed_cu(B, T);
    kref_gate_cumsum_varlen(B * T, HV, K, B, cu, a, g2);
    free(cu);
}

void kref_gate_cumsum_varlen(int T, int HV, int K, int N, const int64_t *cu,
                             const double *a, double *g2)
{
    check_cu("kref_gate_cumsum_varlen", T, N, cu);
    for (int n = 0; n < N; n++)
        for (int hv = 0; hv < HV; hv++)
            for (int d = 0; d < K; d++) {
                double acc = 0.0;
                for (int64_t t = cu[n]; t < cu[n + 1]; t++) {
                    if ((t - cu[n]) % BT == 0) acc = 0.0;
                    size_t o = ((size_t)t * HV + hv) * K + d;
                    acc += a[o];
                    g2[o] = kref_round_f32(KREF_RCP_LN2 * acc);
                }
            }
}

void kref_gen_normal(kref_rng *r, size_t n, double scale, double *x)
{
    for (size_t i = 0; i < n; i++) x[i] = scale * kref_rng_normal(r);
}

void kref_gen_unit_rows(kref_rng *r, size_t nrows, int K, double *x)
{
    for (size_t i = 0; i < nrows; i++) {
        double *row = x + i * (size_t)K, ss = 0.0;
        for (int d = 0; d < K; d++) {
            row[d] = kref_rng_normal(r);
            ss += row[d] * row[d];
        }
        double inv = ss > 0 ? 1.0 / sqrt(ss) : 0.0;
        for (int d = 0; d < K; d++) row[d] *= inv;
    }
}

void kref_gen_beta(kref_rng *r, size_t n, double *beta)
{
    for (size_t i = 0; i < n; i++) beta[i] = 2.0 / (1.0 + exp(-kref_rng_normal(r)));
}

void kref_gen_dA(kref_rng *r, int B, int T, int HV, int strict,
                 double garbage, double *dA)
{
    int64_t *cu = fixed_cu(B, T);
    kref_gen_dA_varlen(r, B * T, HV, B, cu, strict, garbage, dA);
    free(cu);
}

void kref_gen_dA_varlen(kref_rng *r, int T, int HV, int N, const int64_t *cu,
                        int strict, double garbage, double *dA)
{
    check_cu("kref_gen_dA_varlen", T, N, cu);
    int n = 0;
    for (int64_t t = 0; t < T; t++) {
        while (n < N && t >= cu[n + 1]) n++;
        /* Chunk-local row; tokens beyond cu[N] have none (all garbage). */
        const int row = n < N ? (int)((t - cu[n]) % BT) : -1;
        for (int hv = 0; hv < HV; hv++) {
            double *p = dA + ((size_t)t * HV + hv) * BT;
            for (int s = 0; s < BT; s++) {
                if (s < row || (s == row && !strict))
                    p[s] = kref_rng_normal(r);
                else if (s == row)
                    p[s] = 0.0;
                else
                    p[s] = garbage;
            }
        }
    }
}

void kref_gen_dhu_inputs(int B, int T, int HV, int K, const double *q,
                         const double *k, const double *beta,
                         const double *g2, double *w, double *kg, double *qg)
{
    int64_t *cu = fixed_cu(B, T);
    kref_gen_dhu_inputs_varlen(B * T, HV, K, B, cu, q, k, beta, g2, w, kg, qg);
    free(cu);
}

/* One chunk's WY inverse A = (I + L)^-1 (BT x BT, unit lower, zeros above the
 * diagonal and past nr), L[r,s] = beta[r] sum_d k[r,d] k[s,d] exp2(g2[r,d] -
 * g2[s,d]) for s < r, over rows t0.. (nr valid) of value head hv; L is
 * scratch. */
static void chunk_akk(const double *k, const double *beta, const double *g2, size_t t0, int nr, int hv, int HV,
                      int K, double *L, double *A)
{
#define IX(r, d) (((t0 + (r)) * HV + hv) * K + (d))
    for (int r = 0; r < nr; r++)
        for (int s = 0; s < r; s++) {
            double acc = 0.0;
            for (int d = 0; d < K; d++) acc += k[IX(r, d)] * k[IX(s, d)] * exp2(g2[IX(r, d)] - g2[IX(s, d)]);
            L[r * BT + s] = beta[(t0 + r) * HV + hv] * acc;
        }
#undef IX
    /* (I + L) A = I by forward substitution, row by row */
    for (int r = 0; r < BT; r++)
        for (int j = 0; j < BT; j++) {
            double x = 0.0;
            if (r < nr && j == r) x = 1.0;
            else if (r < nr && j < r)
                for (int s = j; s < r; s++) x -= L[r * BT + s] * A[s * BT + j];
            A[r * BT + j] = x;
        }
}

/* One chunk's w = A (beta k exp2 g2) and kg = k exp2(g2_last - g2) from its WY
 * inverse A (row r at A + r astride), rows t0.. (nr valid) of value head hv;
 * kb [BT, K] is scratch. */
static void chunk_w_kg(const double *A, size_t astride, const double *k, const double *beta, const double *g2,
                       size_t t0, int nr, int hv, int HV, int K, double *kb, double *w, double *kg)
{
#define IX(r, d) (((t0 + (r)) * HV + hv) * K + (d))
    for (int r = 0; r < nr; r++)
        for (int d = 0; d < K; d++)
            kb[(size_t)r * K + d] = beta[(t0 + r) * HV + hv] * k[IX(r, d)] * exp2(g2[IX(r, d)]);
    for (int r = 0; r < nr; r++)
        for (int d = 0; d < K; d++) {
            double acc = 0.0;
            for (int s = 0; s <= r; s++) acc += A[r * astride + s] * kb[(size_t)s * K + d];
            w[IX(r, d)] = acc;
            kg[IX(r, d)] = k[IX(r, d)] * exp2(g2[IX(nr - 1, d)] - g2[IX(r, d)]);
        }
#undef IX
}

void kref_gen_dhu_inputs_varlen(int T, int HV, int K, int N, const int64_t *cu,
                                const double *q, const double *k,
                                const double *beta, const double *g2, double *w,
                                double *kg, double *qg)
{
    check_cu("kref_gen_dhu_inputs_varlen", T, N, cu);
    double *L = xmalloc(sizeof(double) * BT * BT);
    double *A = xmalloc(sizeof(double) * BT * BT);
    double *kb = xmalloc(sizeof(double) * (size_t)BT * K); /* beta k exp2 g2 */
    for (int n = 0; n < N; n++)
        for (int hv = 0; hv < HV; hv++)
            for (int c = 0; c < nchunks(cu, n); c++) {
                size_t t0;
                const int nr = chunk_span(cu, n, c, &t0);
#define IX(r, d) (((t0 + (r)) * HV + hv) * K + (d))
                chunk_akk(k, beta, g2, t0, nr, hv, HV, K, L, A);
                chunk_w_kg(A, BT, k, beta, g2, t0, nr, hv, HV, K, kb, w, kg);
                for (int r = 0; r < nr; r++)
                    for (int d = 0; d < K; d++) qg[IX(r, d)] = q[IX(r, d)] * exp2(g2[IX(r, d)]);
#undef IX
            }
    free(L); free(A); free(kb);
}

/* ----------------------------------------------------------- metrics --- */

double kref_rel_rms(const double *ref, const double *got, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]) || !isfinite(ref[i])) return INFINITY;
        double e = got[i] - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
    }
    if (den == 0.0) return num == 0.0 ? 0.0 : INFINITY;
    return sqrt(num / den);
}

double kref_max_abs(const double *ref, const double *got, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]) || !isfinite(ref[i])) return INFINITY;
        double e = fabs(got[i] - ref[i]);
        if (e > m) m = e;
    }
    return m;
}

/* ------------------------------------------------------------- wy_dqkg */

void kref_wy_dqkg_varlen(int T, int H, int HV, int K, int V, int N,
                         const int64_t *cu, const double *q,
                         const double *k, const double *v, const double *vn,
                         const double *g, const double *beta, const double *A,
                         const double *h, const double *dh, const double *dout,
                         const double *dv, double scale, int io,
                         double *dq, double *dk, double *dv2, double *dg,
                         double *db, double *dA) {
    (void)T;
    const int G = HV / H;
    double *Sq = malloc(sizeof(double) * BT * K), *Sk = malloc(sizeof(double) * BT * K),
           *dw = malloc(sizeof(double) * BT * K), *kgr = malloc(sizeof(double) * BT * K),
           *dk0 = malloc(sizeof(double) * BT * K), *dkgb = malloc(sizeof(double) * BT * K),
           *dgk = malloc(sizeof(double) * K), *dAp = malloc(sizeof(double) * BT * BT),
           *X = malloc(sizeof(double) * BT * BT), *Y = malloc(sizeof(double) * BT * BT);
    int64_t row = 0; /* chunk row of h, dh */
    for (int n = 0; n < N; n++) {
        const int64_t len = cu[n + 1] - cu[n], nc = (len + BT - 1) / BT;
        for (int64_t c = 0; c < nc; c++, row++) {
            const int nv = (int)(len - BT * c < BT ? len - BT * c : BT), last = nv - 1;
            const int64_t t0 = cu[n] + BT * c;
            for (int hv = 0; hv < HV; hv++) {
                const int hq = hv / G;
#define QK(t, d) (((size_t)(t0 + (t)) * H + hq) * K + (d))
#define GK(t, d) (((size_t)(t0 + (t)) * HV + hv) * K + (d))
#define VV(t, x) (((size_t)(t0 + (t)) * HV + hv) * V + (x))
#define AA(t, j) (((size_t)(t0 + (t)) * HV + hv) * BT + (j))
#define HH(d, x) (((size_t)row * HV + hv) * K * V + (size_t)(d) * V + (x))
                for (int i = 0; i < nv; i++)
                    for (int d = 0; d < K; d++) {
                        double a = 0, b = 0, w = 0;
                        for (int x = 0; x < V; x++) {
                            a += dout[VV(i, x)] * h[HH(d, x)];
                            b += vn[VV(i, x)] * dh[HH(d, x)];
                            w += dv[VV(i, x)] * h[HH(d, x)];
                        }
                        Sq[i * K + d] = a, Sk[i * K + d] = b, dw[i * K + d] = kref_round_io(-w, io);
                    }
                for (int i = 0; i < nv; i++) {
                    double dbi = 0;
                    for (int x = 0; x < V; x++) { /* dvb = A^T dv */
                        double s = 0;
                        for (int r = 0; r < nv; r++) s += A[AA(r, i)] * dv[VV(r, x)];
                        dv2[VV(i, x)] = kref_round_io(s * beta[(size_t)(t0 + i) * HV + hv], io);
                        dbi += s * v[VV(i, x)];
                    }
                    db[(size_t)(t0 + i) * HV + hv] = dbi;
                }
                for (int d = 0; d < K; d++) {
                    const double gn = g[GK(last, d)];
                    double hd = 0;
                    for (int x = 0; x < V; x++) hd += h[HH(d, x)] * dh[HH(d, x)];
                    dgk[d] = exp2(gn) * hd;
                    for (int i = 0; i < nv; i++) {
                        const double ge = exp2(g[GK(i, d)]);
                        dk0[i * K + d] = Sk[i * K + d] * exp2(gn - g[GK(i, d)]);
                        dgk[d] += k[QK(i, d)] * dk0[i * K + d];
                        kgr[i * K + d] = k[QK(i, d)] * ge;
                        dq[GK(i, d)] = Sq[i * K + d] * ge * scale;
                    }
                }
                for (int i = 0; i < nv; i++)
                    for (int d = 0; d < K; d++) { /* dkgb = A^T dw */
                        double s = 0;
                        for (int r = 0; r < nv; r++) s += A[AA(r, i)] * dw[r * K + d];
                        dkgb[i * K + d] = s;
                    }
                for (int i = 0; i < nv; i++) {
                    const double be = beta[(size_t)(t0 + i) * HV + hv];
                    double dbi = 0;
                    for (int d = 0; d < K; d++) {
                        const double ge = exp2(g[GK(i, d)]), kg = kgr[i * K + d], x = dkgb[i * K + d];
                        dbi += x * kg;
                        dk[GK(i, d)] = dk0[i * K + d] + x * ge * be;
                        dg[GK(i, d)] = q[QK(i, d)] * dq[GK(i, d)] - k[QK(i, d)] * dk0[i * K + d] + kg * x * be +
                                       (i == last ? dgk[d] : 0.0);
                    }
                    db[(size_t)(t0 + i) * HV + hv] += dbi;
                }
                /* dA' = dv v^T + dw R(kg)^T, then dA = -tril1(A^T R(tril1(dA') beta_j) A^T) */
                for (int j = 0; j < nv; j++) /* R(kg) once per element, not once per product */
                    for (int d = 0; d < K; d++) kgr[j * K + d] = kref_round_io(kgr[j * K + d], io);
                for (int i = 0; i < nv; i++)
                    for (int j = 0; j < nv; j++) {
                        double s = 0;
                        for (int x = 0; x < V; x++) s += dv[VV(i, x)] * v[VV(j, x)];
                        for (int d = 0; d < K; d++) s += dw[i * K + d] * kgr[j * K + d];
                        dAp[i * BT + j] = s;
                        X[i * BT + j] = i > j ? kref_round_io(s * beta[(size_t)(t0 + j) * HV + hv], io) : 0.0;
                    }
                for (int i = 0; i < nv; i++)
                    for (int u = 0; u < nv; u++) {
                        double s = 0;
                        for (int j = 0; j < nv; j++) s += X[i * BT + j] * A[AA(u, j)];
                        Y[i * BT + u] = kref_round_io(s, io);
                    }
                for (int t = 0; t < nv; t++)
                    for (int u = 0; u < BT; u++) {
                        double s = 0;
                        if (u < nv && t > u)
                            for (int r = 0; r < nv; r++) s += A[AA(r, t)] * Y[r * BT + u];
                        dA[AA(t, u)] = u < nv && t > u ? -s : 0.0;
                    }
#undef QK
#undef GK
#undef VV
#undef AA
#undef HH
            }
        }
    }
    free(Sq), free(Sk), free(dw), free(kgr), free(dk0), free(dkgb), free(dgk), free(dAp), free(X), free(Y);
}

/* ---- The forward recompute of the backward. ---- */

/* n zeroed doubles (tokens past cu[N] are never written, nor read) */
static double *dnew(size_t n)
{
    double *p = xmalloc(sizeof(double) * n);
    memset(p, 0, sizeof(double) * n);
    return p;
}

void kref_wy_akk_varlen(int T, int HV, int K, int N, const int64_t *cu,
                        const double *k, const double *beta, const double *g2,
                        double *Akk)
{
    check_cu("kref_wy_akk_varlen", T, N, cu);
    double *L = xmalloc(sizeof(double) * BT * BT), *A = xmalloc(sizeof(double) * BT * BT);
    for (int n = 0; n < N; n++)
        for (int hv = 0; hv < HV; hv++)
            for (int c = 0; c < nchunks(cu, n); c++) {
                size_t t0;
                const int nr = chunk_span(cu, n, c, &t0);
                chunk_akk(k, beta, g2, t0, nr, hv, HV, K, L, A);
                for (int r = 0; r < nr; r++)
                    memcpy(Akk + ((t0 + r) * HV + hv) * BT, A + (size_t)r * BT, sizeof(double) * BT);
            }
    free(L);
    free(A);
}

void kref_recompute_w_u_varlen(int T, int HV, int K, int V, int N,
                               const int64_t *cu, const double *k,
                               const double *v, const double *beta,
                               const double *g2, const double *Akk, double *w,
                               double *u, double *kg)
{
    check_cu("kref_recompute_w_u_varlen", T, N, cu);
    double *kb = xmalloc(sizeof(double) * (size_t)BT * K);
    for (int n = 0; n < N; n++)
        for (int hv = 0; hv < HV; hv++)
            for (int c = 0; c < nchunks(cu, n); c++) {
                size_t t0;
                const int nr = chunk_span(cu, n, c, &t0);
                if (w != NULL)
                    chunk_w_kg(Akk + (t0 * HV + hv) * BT, (size_t)HV * BT, k, beta, g2, t0, nr, hv, HV, K, kb, w, kg);
#define IV(r, e) (((t0 + (r)) * HV + hv) * V + (e))
                for (int r = 0; r < nr; r++) {
                    const double *a = Akk + ((t0 + r) * HV + hv) * BT;
                    for (int e = 0; e < V; e++) {
                        double acc = 0.0;
                        for (int s = 0; s <= r; s++) acc += a[s] * beta[(t0 + s) * HV + hv] * v[IV(s, e)];
                        u[IV(r, e)] = acc;
                    }
                }
#undef IV
            }
    free(kb);
}

void kref_fwd_h_varlen(int T, int HV, int K, int V, int N, const int64_t *cu,
                       const double *kg, const double *w, const double *u,
                       const double *g2, const double *h0, double *h,
                       double *v_new, double *ht)
{
    kref_fwd_h_varlen_io(T, HV, K, V, N, cu, kg, w, u, g2, h0, -1, h, v_new, ht);
}

void kref_fwd_h_varlen_io(int T, int HV, int K, int V, int N, const int64_t *cu,
                          const double *kg, const double *w, const double *u,
                          const double *g2, const double *h0, int faithful_io,
                          double *h, double *v_new, double *ht)
{
    check_cu("kref_fwd_h_varlen", T, N, cu);
    int64_t *off = xmalloc(sizeof(int64_t) * ((size_t)N + 1));
    kref_chunk_offsets(N, cu, off);
    const size_t KV = (size_t)K * V;
    /* S the state; SI what h holds and w multiplies: R(S) with faithful_io, else S */
    double *S = xmalloc(sizeof(double) * KV), *SI = xmalloc(sizeof(double) * KV);
    for (int n = 0; n < N; n++)
        for (int hv = 0; hv < HV; hv++) {
            for (size_t i = 0; i < KV; i++) S[i] = h0 ? h0[((size_t)n * HV + hv) * KV + i] : 0.0;
            for (int c = 0; c < nchunks(cu, n); c++) {
                size_t t0;
                const int nr = chunk_span(cu, n, c, &t0);
                for (size_t i = 0; i < KV; i++) SI[i] = kref_round_io(S[i], faithful_io);
                memcpy(h + ((size_t)(off[n] + c) * HV + hv) * KV, SI, sizeof(double) * KV);
                for (int r = 0; r < nr; r++)
                    for (int e = 0; e < V; e++) {
                        double acc = u[((t0 + r) * HV + hv) * V + e];
                        for (int d = 0; d < K; d++) acc -= w[((t0 + r) * HV + hv) * K + d] * SI[(size_t)d * V + e];
                        v_new[((t0 + r) * HV + hv) * V + e] = kref_round_io(acc, faithful_io);
                    }
                for (int d = 0; d < K; d++) {
                    const double decay = exp2(g2[((t0 + nr - 1) * HV + hv) * K + d]);
                    for (int e = 0; e < V; e++) {
                        double acc = decay * S[(size_t)d * V + e];
                        for (int r = 0; r < nr; r++)
                            acc += kg[((t0 + r) * HV + hv) * K + d] * v_new[((t0 + r) * HV + hv) * V + e];
                        S[(size_t)d * V + e] = acc;
                    }
                }
            }
            if (ht) memcpy(ht + ((size_t)n * HV + hv) * KV, S, sizeof(double) * KV);
        }
    free(S);
    free(SI);
    free(off);
}

void kref_bwd_dav_varlen(int T, int HV, int V, int N, const int64_t *cu,
                         const double *Aqk, const double *dout,
                         const double *v, double scale, double *dA, double *dv)
{
    check_cu("kref_bwd_dav_varlen", T, N, cu);
#define VV(t, e) (((t0 + (t)) * HV + hv) * V + (e))
#define AA(t, s) (((t0 + (t)) * HV + hv) * BT + (s))
    for (int n = 0; n < N; n++)
        for (int hv = 0; hv < HV; hv++)
            for (int c = 0; c < nchunks(cu, n); c++) {
                size_t t0;
                const int nr = chunk_span(cu, n, c, &t0);
                for (int t = 0; dA && t < nr; t++)
                    for (int s = 0; s < BT; s++) {
                        double x = 0.0;
                        for (int e = 0; s <= t && e < V; e++) x += dout[VV(t, e)] * v[VV(s, e)];
                        dA[AA(t, s)] = scale * x;
                    }
                for (int s = 0; dv && s < nr; s++)
                    for (int e = 0; e < V; e++) {
                        double x = 0.0;
                        for (int t = s; t < nr; t++) x += Aqk[AA(t, s)] * dout[VV(t, e)];
                        dv[VV(s, e)] = x;
                    }
            }
#undef VV
#undef AA
}

void kref_kda_bwd_varlen(int T, int H, int HV, int K, int V, int N,
                         const int64_t *cu, const double *q, const double *k,
                         const double *v, const double *a, const double *beta,
                         const double *h0, double scale, const double *dout,
                         const double *dht, double *dq, double *dk, double *dv,
                         double *da, double *dbeta, double *dh0)
{
    check_cu("kref_kda_bwd_varlen", T, N, cu);
    const int G = HV / H;
    const int64_t NT = kref_chunk_offsets(N, cu, NULL);
    const size_t nk = (size_t)T * HV * K, nv = (size_t)T * HV * V, nA = (size_t)T * HV * BT;
    const size_t nh = (size_t)NT * HV * K * V;
    double *g2 = dnew(nk), *kv = dnew(nk), *qg = dnew(nk), *w = dnew(nk), *kg = dnew(nk), *u = dnew(nv);
    double *Akk = dnew(nA), *Aqk = dnew(nA), *dAqk = dnew(nA), *dAkk = dnew(nA), *h = dnew(nh), *dh = dnew(nh);
    double *vn = dnew(nv), *dvi = dnew(nv), *dv2 = dnew(nv), *dq1 = dnew(nk), *dk1 = dnew(nk), *dg1 = dnew(nk);
    double *db1 = dnew((size_t)T * HV), *dq2 = dnew(nk), *dk2 = dnew(nk);
    /* g2: the chunk-local cumsum of a in log2 units (in double); k, q at the value heads */
    for (int n = 0; n < N; n++)
        for (int64_t t = cu[n]; t < cu[n + 1]; t++)
            for (int hv = 0; hv < HV; hv++)
                for (int d = 0; d < K; d++) {
                    const size_t i = ((size_t)t * HV + hv) * K + d, hq = ((size_t)t * H + hv / G) * K + d;
                    g2[i] = a[i] / KREF_LN2 + ((t - cu[n]) % BT ? g2[i - (size_t)HV * K] : 0.0);
                    kv[i] = k[hq];
                    qg[i] = q[hq];
                }
    for (size_t i = 0; i < nk; i++) qg[i] *= exp2(g2[i]);
    kref_wy_akk_varlen(T, HV, K, N, cu, kv, beta, g2, Akk);
    kref_recompute_w_u_varlen(T, HV, K, V, N, cu, kv, v, beta, g2, Akk, w, u, kg);
    kref_fwd_h_varlen(T, HV, K, V, N, cu, kg, w, u, g2, h0, h, vn, NULL);
    /* Aqk = scale q k^T with the gate, on and below the diagonal (the forward's); then fla's dAv */
    for (int n = 0; n < N; n++)
        for (int hv = 0; hv < HV; hv++)
            for (int c = 0; c < nchunks(cu, n); c++) {
                size_t t0;
                const int nr = chunk_span(cu, n, c, &t0);
                for (int r = 0; r < nr; r++)
                    for (int s = 0; s < BT; s++) {
                        double x = 0.0;
                        for (int d = 0; s <= r && d < K; d++) {
                            const size_t ir = ((t0 + r) * HV + hv) * K + d, is = ((t0 + s) * HV + hv) * K + d;
                            x += q[((t0 + r) * H + hv / G) * K + d] * kv[is] * exp2(g2[ir] - g2[is]);
                        }
                        Aqk[((t0 + r) * HV + hv) * BT + s] = scale * x;
                    }
            }
    kref_bwd_dav_varlen(T, HV, V, N, cu, Aqk, dout, vn, scale, dAqk, dvi);
    kref_bwd_dhu_varlen(T, HV, K, V, N, cu, qg, kg, w, g2, dout, dvi, dht, scale, -1, dh, dv2, h0 ? dh0 : NULL);
    kref_wy_dqkg_varlen(T, H, HV, K, V, N, cu, q, k, v, vn, g2, beta, Akk, h, dh, dout, dv2, scale, -1, dq1, dk1,
                        dv, dg1, db1, dAkk);
    kref_bwd_intra_varlen(T, H, HV, K, N, cu, q, k, g2, beta, dAqk, dAkk, dq1, dk1, dg1, db1, 1, dq2, dk2, da,
                          dbeta);
    /* dq, dk at the query heads: the sums over each group's value heads */
    memset(dq, 0, sizeof(double) * (size_t)T * H * K);
    memset(dk, 0, sizeof(double) * (size_t)T * H * K);
    for (int n = 0; n < N; n++)
        for (int64_t t = cu[n]; t < cu[n + 1]; t++)
            for (int hv = 0; hv < HV; hv++)
                for (int d = 0; d < K; d++) {
                    dq[((size_t)t * H + hv / G) * K + d] += dq2[((size_t)t * HV + hv) * K + d];
                    dk[((size_t)t * H + hv / G) * K + d] += dk2[((size_t)t * HV + hv) * K + d];
                }
    double *all[] = {g2, kv, qg, w, kg, u, Akk, Aqk, dAqk, dAkk, h, dh, vn, dvi, dv2, dq1, dk1, dg1, db1, dq2, dk2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* ---- The elementwise stages of chunk_kda's production flags. ---- */

static double sigmoid(double x)
{
    return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
}

void kref_gate_act(size_t rows, int HV, int K, const double *g_raw,
                   const double *A_log, const double *dt_bias, int safe,
                   double lower_bound, double *a)
{
    for (size_t r = 0; r < rows; r++) {
        const int hv = (int)(r % (size_t)HV);
        const double e = exp(A_log[hv]);
        for (int d = 0; d < K; d++) {
            const size_t i = r * (size_t)K + d;
            const double x = g_raw[i] + dt_bias[(size_t)hv * K + d];
            a[i] = safe ? lower_bound * sigmoid(e * x) : -e * softplus(x);
        }
    }
}

void kref_gate_act_bwd(size_t rows, int HV, int K, const double *g_raw,
                       const double *A_log, const double *dt_bias, int safe,
                       double lower_bound, const double *da, double *dg_raw,
                       double *dA_log, double *ddt_bias)
{
    memset(dA_log, 0, sizeof(double) * (size_t)HV);
    memset(ddt_bias, 0, sizeof(double) * (size_t)HV * K);
    for (size_t r = 0; r < rows; r++) {
        const int hv = (int)(r % (size_t)HV);
        const double e = exp(A_log[hv]);
        for (int d = 0; d < K; d++) {
            const size_t i = r * (size_t)K + d;
            const double x = g_raw[i] + dt_bias[(size_t)hv * K + d];
            double dx, dlog;
            if (safe) { /* a = lb s(e x): da/dx = lb s (1 - s) e, da/dA_log = lb s (1 - s) e x */
                const double s = sigmoid(e * x), inner = da[i] * lower_bound * s * (1.0 - s);
                dx = inner * e;
                dlog = inner * e * x;
            } else {   /* a = -e softplus(x): da/dx = -e sigmoid(x), da/dA_log = a */
                dx = -da[i] * e * sigmoid(x);
                dlog = -da[i] * e * softplus(x);
            }
            dg_raw[i] = dx;
            dA_log[hv] += dlog;
            ddt_bias[(size_t)hv * K + d] += dx;
        }
    }
}

void kref_l2norm(size_t rows, int K, double eps, const double *x, double *y,
                 double *rstd)
{
    for (size_t r = 0; r < rows; r++) {
        const double *xr = x + r * (size_t)K;
        double ss = 0.0;
        for (int d = 0; d < K; d++) ss += xr[d] * xr[d];
        rstd[r] = 1.0 / sqrt(ss + eps);
        for (int d = 0; d < K; d++) y[r * (size_t)K + d] = xr[d] * rstd[r];
    }
}

void kref_l2norm_bwd(size_t rows, int K, const double *y, const double *rstd,
                     const double *dy, double *dx)
{
    for (size_t r = 0; r < rows; r++) {
        const double *yr = y + r * (size_t)K, *dyr = dy + r * (size_t)K;
        double dot = 0.0;
        for (int d = 0; d < K; d++) dot += dyr[d] * yr[d];
        for (int d = 0; d < K; d++) dx[r * (size_t)K + d] = rstd[r] * (dyr[d] - yr[d] * dot);
    }
}

void kref_beta_sigmoid(size_t n, double scale, const double *x, double *beta)
{
    for (size_t i = 0; i < n; i++) beta[i] = scale * sigmoid(x[i]);
}

void kref_beta_sigmoid_bwd(size_t n, double scale, const double *x,
                           const double *db, double *dx)
{
    for (size_t i = 0; i < n; i++) {
        const double s = sigmoid(x[i]);
        dx[i] = db[i] * scale * s * (1.0 - s);
    }
}

void kref_kda_bwd_prod_varlen(int T, int H, int HV, int K, int V, int N,
                              const int64_t *cu, const double *q_raw,
                              const double *k_raw, const double *v,
                              const double *g_raw, const double *A_log,
                              const double *dt_bias, int safe,
                              double lower_bound, const double *beta_logit,
                              double beta_scale, const double *h0, double scale,
                              const double *dout, const double *dht, double *dq,
                              double *dk, double *dv, double *dg_raw,
                              double *dA_log, double *ddt_bias,
                              double *dbeta_logit, double *dh0)
{
    const size_t nq = (size_t)T * H * K, nk = (size_t)T * HV * K, nb = (size_t)T * HV;
    double *q = dnew(nq), *k = dnew(nq), *rq = dnew((size_t)T * H), *rk = dnew((size_t)T * H), *a = dnew(nk);
    double *beta = dnew(nb), *dqn = dnew(nq), *dkn = dnew(nq), *da = dnew(nk), *db = dnew(nb);
    kref_l2norm((size_t)T * H, K, 1e-6, q_raw, q, rq);
    kref_l2norm((size_t)T * H, K, 1e-6, k_raw, k, rk);
    kref_gate_act((size_t)T * HV, HV, K, g_raw, A_log, dt_bias, safe, lower_bound, a);
    kref_beta_sigmoid(nb, beta_scale, beta_logit, beta);
    kref_kda_bwd_varlen(T, H, HV, K, V, N, cu, q, k, v, a, beta, h0, scale, dout, dht, dqn, dkn, dv, da, db, dh0);
    kref_l2norm_bwd((size_t)T * H, K, q, rq, dqn, dq);
    kref_l2norm_bwd((size_t)T * H, K, k, rk, dkn, dk);
    kref_gate_act_bwd((size_t)T * HV, HV, K, g_raw, A_log, dt_bias, safe, lower_bound, da, dg_raw, dA_log, ddt_bias);
    kref_beta_sigmoid_bwd(nb, beta_scale, beta_logit, db, dbeta_logit);
    double *all[] = {q, k, rq, rk, a, beta, dqn, dkn, da, db};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

