/*
 * kda_ref.h: the float64 host reference for the KDA backward stages
 * (bwd_intra, bwd_dhu and wy_dqkg; docs/kernels.md has their math), plus the
 * seeded random number generator, the bf16/fp16 host conversions, the
 * test-input generators and the error metrics that the kernel tests use.
 *
 * Guarantees: plain C11 with only libc and libm; no global state (the RNG is
 * a caller-owned struct); every array is caller-allocated and uses the
 * contiguous fla layouts of kernel_src/kda_params.h with BT = 64; all
 * arithmetic is in double.  The references are verified against finite
 * differences of the forward definitions by tests/test_reference.c.
 * Any T >= 0 (the last chunk of a row may be partial) and HV % H == 0; K and
 * V are free (no K in {64,128} restriction here).
 *
 * Variable length (fla 0.6.0's cu_seqlens contract): the _varlen functions take B = 1 packed arrays of T
 * storage tokens and cu_seqlens [N+1] (int64, cu[0] = 0, non-decreasing,
 * cu[N] <= T).  Sequence n is tokens [cu[n], cu[n+1]); its chunks are
 * ceil(T_n / 64), chunk c covering tokens cu[n] + 64c ..
 * min(cu[n] + 64(c+1), cu[n+1]) - 1, so no chunk spans two sequences and the
 * last one may be partial (only its valid rows exist).  Per-chunk state rows
 * (dh) are indexed chunk_offsets[n] + c (kref_chunk_offsets); per-sequence
 * states (h0, dht, dh0) are [N,HV,K,V].  Tokens >= cu[N] are neither read nor
 * written.  The fixed-length functions are the special case
 * cu = [0, T, 2T, .., BT] of one implementation: a contiguous [B,T,...] array
 * is that packed layout, and dh's [B, ceil(T/64)] rows are its chunk rows.
 */
#ifndef KDART_KDA_REF_H
#define KDART_KDA_REF_H

#include <stddef.h>
#include <stdint.h>

#define KREF_BT 64                    /* chunk length, fixed by the algorithm */
#define KREF_RCP_LN2 1.4426950216     /* fla's fp32 RCP_LN2 constant */
#define KREF_LN2 0.69314718055994530942 /* ln 2 in double */

/* ---- Seeded RNG: xoshiro256** seeded through splitmix64. ---- */
typedef struct kref_rng {
    uint64_t s[4];
    int has_spare;  /* Box-Muller produces pairs; the second one is cached. */
    double spare;
} kref_rng;

/* Seeds the generator; equal seeds give equal streams on every platform. */
void kref_rng_seed(kref_rng *r, uint64_t seed);
uint64_t kref_rng_u64(kref_rng *r);
/* Uniform double in [0,1) with 53 random bits. */
double kref_rng_uniform(kref_rng *r);
/* Standard normal double (Box-Muller). */
double kref_rng_normal(kref_rng *r);
/* Returns the seed to use for a test run: the value of the environment
 * variable KREF_SEED when set (to replay a failure), else a mix of the time
 * and the pid.  Callers print it. */
uint64_t kref_pick_seed(void);

/* ---- Host conversions (round to nearest, ties to even). ---- */
/* Overflow goes to inf, NaN stays NaN (quiet, sign kept), subnormals are
 * rounded correctly (fp16 and bf16 both have them).  The double inputs are
 * rounded once, directly (no double rounding through float). */
uint16_t kref_to_bf16(double x);
uint16_t kref_to_fp16(double x);
double kref_from_bf16(uint16_t bits);
double kref_from_fp16(uint16_t bits);
/* Rounds x to the io dtype and back: io = 0 bf16, io = 1 fp16.  Any other io
 * value returns x unchanged. */
double kref_round_io(double x, int io);
/* Rounds x to fp32 and back. */
double kref_round_f32(double x);

/* ---- Variable-length layout. ---- */
/* Fills chunk_offsets [N+1] (unless NULL) with the exclusive prefix sum of
 * ceil(T_n / 64) over cu_seqlens [N+1] and returns the total chunk count. */
int64_t kref_chunk_offsets(int N, const int64_t *cu_seqlens,
                           int64_t *chunk_offsets);
/* Draws cu_seqlens [N+1] for N sequences with lengths uniform in [lo, hi]
 * (0 <= lo <= hi); with_empty > 0 makes one random sequence zero-length (for
 * N >= 1).  Returns cu[N], the token count. */
int64_t kref_gen_cu_seqlens(kref_rng *r, int N, int lo, int hi, int with_empty,
                            int64_t *cu_seqlens);

/* ---- References. ---- */
/*
 * bwd_intra, spec 5.1, in double.  Inputs: q,k [B,T,H,K]; g (g2, log2
 * units) [B,T,HV,K]; beta [B,T,HV]; dAqk, dAkk [B,T,HV,64] (only s <= r of
 * each chunk row is read, and in a partial chunk only s < its valid row
 * count; other entries may hold anything, NaN included); dq_in, dk_in, dg_in
 * [B,T,HV,K]; db_in [B,T,HV].  Outputs per value head: dq, dk, dg [B,T,HV,K]
 * and db [B,T,HV] (db_in included).  With fold_dg the dg output is the
 * chunk-local inclusive suffix sum (over the chunk's valid rows).  dAkk's
 * diagonal is read (fla writes it as zero).
 */
void kref_bwd_intra(int B, int T, int H, int HV, int K,
                    const double *q, const double *k, const double *g,
                    const double *beta, const double *dAqk, const double *dAkk,
                    const double *dq_in, const double *dk_in,
                    const double *dg_in, const double *db_in, int fold_dg,
                    double *dq, double *dk, double *dg, double *db);
/* The same on a packed batch: every array is [1,T,...] as above, sequences
 * per cu_seqlens [N+1]; tokens >= cu[N] are not read and not written. */
void kref_bwd_intra_varlen(int T, int H, int HV, int K, int N,
                           const int64_t *cu_seqlens,
                           const double *q, const double *k, const double *g,
                           const double *beta, const double *dAqk,
                           const double *dAkk, const double *dq_in,
                           const double *dk_in, const double *dg_in,
                           const double *db_in, int fold_dg,
                           double *dq, double *dk, double *dg, double *db);

/*
 * bwd_dhu, spec 5.2, in double.  Inputs: qg, kg, w, g [B,T,HV,K] (only the
 * last valid row of each chunk, min(64c+63, T-1), of g is read); dout
 * ("do"), dv [B,T,HV,V]; dht [B,HV,K,V] or NULL (start from zero).  Outputs:
 * dh [B,NT,HV,K,V] with NT = ceil(T/64), dv2 [B,T,HV,V], and dh0 [B,HV,K,V]
 * unless dh0 is NULL.  faithful_io = -1 is the exact float64
 * recurrence; 0 (bf16) or 1 (fp16) rounds dH to the io dtype before the kg.dH
 * product and the checkpoint store, and rounds dv2 to the io dtype before
 * the w.dv2 product and the dv2 store, as fla does.  dH itself and dh0 stay
 * double.
 */
void kref_bwd_dhu(int B, int T, int HV, int K, int V,
                  const double *qg, const double *kg, const double *w,
                  const double *g, const double *dout, const double *dv,
                  const double *dht, double scale, int faithful_io,
                  double *dh, double *dv2, double *dh0);
/* The same on a packed batch (B = 1, cu_seqlens [N+1]): the scan restarts
 * per sequence from dht[n] (or zero), a partial chunk decays by the gate of
 * its last valid row, dh is [NT,HV,K,V] with chunk (n, c) at row
 * chunk_offsets[n] + c (rows >= kref_chunk_offsets' total are not written),
 * dht and dh0 are [N,HV,K,V]; a zero-length sequence runs no chunk and gets
 * dh0[n] = dht[n].  Tokens >= cu[N] are not read and not written. */
void kref_bwd_dhu_varlen(int T, int HV, int K, int V, int N,
                         const int64_t *cu_seqlens,
                         const double *qg, const double *kg, const double *w,
                         const double *g, const double *dout, const double *dv,
                         const double *dht, double scale, int faithful_io,
                         double *dh, double *dv2, double *dh0);

/*
 * wy_dqkg (fla chunk_kda_bwd_wy_dqkg_fused), in double, on a packed batch
 * (B = 1, cu_seqlens [N+1]; fixed length is cu = [0, T, .., BT]): q, k
 * [T,H,K]; v, v_new, dout, dv [T,HV,V]; g (g2) [T,HV,K]; beta [T,HV]; A
 * [T,HV,64] (row = token; columns below the chunk's valid rows are read);
 * h, dh [NT,HV,K,V] with chunk (n, c) at row chunk_offsets[n] + c.  Outputs
 * for the valid tokens: dq, dk, dg [T,HV,K]; dv2 [T,HV,V]; db [T,HV]; dA
 * [T,HV,64] (all 64 columns, zero outside the strictly lower part).
 * faithful_io = -1 is exact; 0 (bf16) or 1 (fp16) rounds dv2 as stored, dw and kg before
 * the dA and dkgb products, and dA's factors between its two products, to
 * the io dtype, as fla does (the kernel's rounding points).  Math:
 * docs/kernels.md.  Tokens >= cu[N] are not read and not written.
 */
void kref_wy_dqkg_varlen(int T, int H, int HV, int K, int V, int N,
                         const int64_t *cu_seqlens, const double *q,
                         const double *k, const double *v, const double *v_new,
                         const double *g, const double *beta, const double *A,
                         const double *h, const double *dh, const double *dout,
                         const double *dv, double scale, int faithful_io,
                         double *dq, double *dk, double *dv2, double *dg,
                         double *db, double *dA);

/* ---- Input generators (caller allocates, functions fill). ---- */
typedef enum kref_gate_family {
    KREF_GATE_MILD = 0,   /* a = logsigmoid(1.5*randn + 2) */
    KREF_GATE_LOGSIG,     /* a = logsigmoid(randn) */
    KREF_GATE_STRONG,     /* a = logsigmoid(randn) / 0.1 */
    KREF_GATE_CONST5,     /* a = -5 */
    KREF_GATE_FUSED,      /* a = -exp(A_log[hv]) softplus(g_raw + dt_bias[hv,d]) */
    KREF_GATE_NFAMILIES
} kref_gate_family;

/* Name of a family, for messages. */
const char *kref_gate_name(kref_gate_family f);
/* Per-token natural-log decay a [B,T,HV,K], every entry <= 0.  FUSED draws
 * exp(A_log[hv]) ~ U[1,16], dt_bias[hv,d] = 0.5 randn, g_raw = randn. */
void kref_gen_gate(kref_rng *r, kref_gate_family f, int B, int T, int HV,
                   int K, double *a);
/* g2 = fp32(RCP_LN2 * chunk-local inclusive cumsum of a), [B,T,HV,K]; the
 * cumsum restarts every 64 rows and is accumulated in double.  g2 is
 * non-increasing within each chunk for a <= 0. */
void kref_gate_cumsum(int B, int T, int HV, int K, const double *a,
                      double *g2);
/* The same on a packed batch: the cumsum restarts at each chunk boundary of
 * each sequence (cu[n] + 64c); tokens >= cu[N] of g2 are not written. */
void kref_gate_cumsum_varlen(int T, int HV, int K, int N,
                             const int64_t *cu_seqlens, const double *a,
                             double *g2);
/* n independent standard normals times scale. */
void kref_gen_normal(kref_rng *r, size_t n, double scale, double *x);
/* nrows rows of length K, randn then L2-normalized (used for q and k). */
void kref_gen_unit_rows(kref_rng *r, size_t nrows, int K, double *x);
/* n values 2*sigmoid(randn), in (0,2). */
void kref_gen_beta(kref_rng *r, size_t n, double *beta);
/* dA [B,T,HV,64]: randn on s <= r of each chunk row r (strict = 0, dAqk) or
 * on s < r (strict = 1, dAkk, whose diagonal is then exactly 0); the
 * strictly-upper entries get `garbage` (e.g. NAN) to prove they are unread.
 * (In a partial chunk the columns at or beyond its valid row count are all
 * strictly upper, since r < that count.) */
void kref_gen_dA(kref_rng *r, int B, int T, int HV, int strict,
                 double garbage, double *dA);
/* The same on a packed batch; every entry of tokens >= cu[N] is garbage. */
void kref_gen_dA_varlen(kref_rng *r, int T, int HV, int N,
                        const int64_t *cu_seqlens, int strict, double garbage,
                        double *dA);
/*
 * Realistic bwd_dhu inputs from q, k [B,T,HV,K] (at value heads,
 * rows unit-norm), beta [B,T,HV] and g2 [B,T,HV,K]: per chunk
 * L[r,s] = beta[r] sum_d k[r,d]k[s,d]exp2(g2[r,d]-g2[s,d]) (s<r),
 * Akk = (I+L)^-1 (forward substitution), w = Akk (beta k exp2(g2)),
 * kg = k exp2(g2_last - g2), qg = q exp2(g2); all [B,T,HV,K], in double
 * (the caller rounds them to the io dtype).  g2_last is the chunk's last
 * valid row; a partial chunk is its valid rows only.
 */
void kref_gen_dhu_inputs(int B, int T, int HV, int K, const double *q,
                         const double *k, const double *beta,
                         const double *g2, double *w, double *kg, double *qg);
/* The same per sequence of a packed batch; tokens >= cu[N] are not read and
 * not written. */
void kref_gen_dhu_inputs_varlen(int T, int HV, int K, int N,
                                const int64_t *cu_seqlens, const double *q,
                                const double *k, const double *beta,
                                const double *g2, double *w, double *kg,
                                double *qg);

/* ---- The forward recompute of the backward (packed layout as above). ----
 * Akk [T,HV,64]: per chunk (I + L)^-1 with L[r,s] = beta[r] sum_d k[r,d]
 * k[s,d] exp2(g2[r,d] - g2[s,d]) for s < r, unit lower triangular, zeros
 * above the diagonal and past the chunk's valid rows (what chunk_kda's
 * forward saves).  k [T,HV,K] at the value heads, beta [T,HV]. */
void kref_wy_akk_varlen(int T, int HV, int K, int N, const int64_t *cu_seqlens,
                        const double *k, const double *beta, const double *g2,
                        double *Akk);
/* fla's recompute_w_u from Akk: w = Akk (beta k exp2(g2)), u = Akk (beta v),
 * kg = k exp2(g2_last - g2); v, u [T,HV,V].  w NULL: u alone (kg is then not written
 * either). */
void kref_recompute_w_u_varlen(int T, int HV, int K, int V, int N,
                               const int64_t *cu_seqlens, const double *k,
                               const double *v, const double *beta,
                               const double *g2, const double *Akk, double *w,
                               double *u, double *kg);
/* fla's chunk_gated_delta_rule_fwd_h: per sequence S = h0[n] (or 0); for each
 * chunk c, h[row] = S (the state entering it, row = chunk_offsets[n] + c),
 * v_new = u - w S, S = diag(exp2(g2_last)) S + kg^T v_new; ht[n] = S.  h
 * [NT,HV,K,V], v_new [T,HV,V], ht [N,HV,K,V] (ht may be NULL). */
void kref_fwd_h_varlen(int T, int HV, int K, int V, int N,
                       const int64_t *cu_seqlens, const double *kg,
                       const double *w, const double *u, const double *g2,
                       const double *h0, double *h, double *v_new, double *ht);
/* The same with fla's roundings when faithful_io is 0 (bf16) or 1 (fp16): h
 * holds R(S), which is also what w multiplies, and v_new is rounded to the
 * io dtype before it is stored and before kg^T v_new; S and ht stay double.
 * faithful_io = -1 is kref_fwd_h_varlen, exact. */
void kref_fwd_h_varlen_io(int T, int HV, int K, int V, int N,
                          const int64_t *cu_seqlens, const double *kg,
                          const double *w, const double *u, const double *g2,
                          const double *h0, int faithful_io, double *h,
                          double *v_new, double *ht);

/* fla's chunk_kda_bwd_dAv per chunk of each sequence: dA [T,HV,64] = scale
 * do v^T on and below the diagonal (t >= s), zero above; dv [T,HV,V] =
 * Aqk^T do over t >= s (Aqk [T,HV,64]: only its lower triangle, diagonal
 * included, is read).  do, v [T,HV,V] (v: chunk_kda_bwd's v_new).  Either
 * output may be NULL (not computed); tokens >= cu[N] are not written. */
void kref_bwd_dav_varlen(int T, int HV, int V, int N, const int64_t *cu_seqlens,
                         const double *Aqk, const double *dout,
                         const double *v, double scale, double *dA, double *dv);

/* The whole chunk_kda backward from the forward's inputs, composed of the
 * stage references above as fla's chunk_kda_bwd runs them (recompute, dAv,
 * bwd_dhu, wy_dqkg, bwd_intra with the dg fold), exact (faithful_io = -1):
 * q, k [T,H,K] as the recurrence takes them (after any l2norm), v [T,HV,V],
 * a [T,HV,K] the per-token natural-log decay (after any gate activation),
 * beta [T,HV] (after any sigmoid), h0 [N,HV,K,V] or NULL, do [T,HV,V], dht
 * [N,HV,K,V] or NULL.  Outputs: dq, dk [T,H,K] (summed over each head's value
 * heads), dv [T,HV,V], da [T,HV,K], dbeta [T,HV], dh0 [N,HV,K,V] (when h0).
 * The function it differentiates: per sequence S = h0[n] (or 0), per token
 * S = diag(exp(a_t)) S, S += beta_t k_t (v_t - S^T k_t)^T, o_t = scale S^T
 * q_t; the loss sum(do o) + sum(dht S_final). */
void kref_kda_bwd_varlen(int T, int H, int HV, int K, int V, int N,
                         const int64_t *cu_seqlens, const double *q,
                         const double *k, const double *v, const double *a,
                         const double *beta, const double *h0, double scale,
                         const double *dout, const double *dht, double *dq,
                         double *dk, double *dv, double *da, double *dbeta,
                         double *dh0);

/* The same in the production configuration (use_qk_l2norm_in_kernel,
 * use_gate_in_kernel with A_log and dt_bias, plain or safe with lower_bound,
 * use_beta_sigmoid_in_kernel with beta_scale 1, or 2 for allow_neg_eigval):
 * from the raw q, k [T,H,K], g_raw [T,HV,K], beta_logit [T,HV] through the
 * functions below, to dq, dk (raw), dv, dg_raw, dA_log [HV], ddt_bias [HV,K],
 * dbeta_logit and dh0.  l2norm's eps is fla's 1e-6.  Tokens >= cu[N] of
 * every input must be finite (the elementwise stages read them): their
 * gradients are zero there, and dv is not written there. */
void kref_kda_bwd_prod_varlen(int T, int H, int HV, int K, int V, int N,
                              const int64_t *cu_seqlens, const double *q_raw,
                              const double *k_raw, const double *v,
                              const double *g_raw, const double *A_log,
                              const double *dt_bias, int safe,
                              double lower_bound, const double *beta_logit,
                              double beta_scale, const double *h0, double scale,
                              const double *dout, const double *dht, double *dq,
                              double *dk, double *dv, double *dg_raw,
                              double *dA_log, double *ddt_bias,
                              double *dbeta_logit, double *dh0);

/* ---- The elementwise stages of chunk_kda's production flags. ----
 * Rows are tokens times heads, in any order; every function is exact in
 * double and loops in a fixed order. */
/* The gate inside chunk_kda (use_gate_in_kernel), per row and channel, x =
 * g_raw + dt_bias[hv, d] with hv = row % HV:
 *   plain (safe = 0): a = -exp(A_log[hv]) softplus(x)
 *   safe  (safe = 1): a = lower_bound sigmoid(exp(A_log[hv]) x)
 * a, g_raw [rows, K] with rows = tokens * HV; A_log [HV]; dt_bias [HV, K]. */
void kref_gate_act(size_t rows, int HV, int K, const double *g_raw,
                   const double *A_log, const double *dt_bias, int safe,
                   double lower_bound, double *a);
/* Its backward from da: dg_raw [rows, K], and the sums over the rows of
 * dA_log [HV] and ddt_bias [HV, K] (overwritten, not accumulated). */
void kref_gate_act_bwd(size_t rows, int HV, int K, const double *g_raw,
                       const double *A_log, const double *dt_bias, int safe,
                       double lower_bound, const double *da, double *dg_raw,
                       double *dA_log, double *ddt_bias);
/* y = x rstd with rstd = 1 / sqrt(sum_d x^2 + eps) per row of K (fla's
 * l2norm); rstd [rows]. */
void kref_l2norm(size_t rows, int K, double eps, const double *x, double *y,
                 double *rstd);
/* dx = rstd (dy - y sum_d(dy y)) per row: the backward through kref_l2norm
 * from y and rstd, as fla's l2norm_bwd takes them. */
void kref_l2norm_bwd(size_t rows, int K, const double *y, const double *rstd,
                     const double *dy, double *dx);
/* beta = scale sigmoid(x) (scale 2 with allow_neg_eigval, else 1), and its
 * backward dx = db scale s (1 - s), s = sigmoid(x); n values. */
void kref_beta_sigmoid(size_t n, double scale, const double *x, double *beta);
void kref_beta_sigmoid_bwd(size_t n, double scale, const double *x,
                           const double *db, double *dx);

/* ---- Error metrics. ---- */
/* ||got - ref||_2 / ||ref||_2; INFINITY when any got (or ref) entry is not
 * finite; when ||ref|| = 0 it is 0 if got is all zero, else INFINITY. */
double kref_rel_rms(const double *ref, const double *got, size_t n);
/* max |got - ref|; INFINITY when any entry is not finite. */
double kref_max_abs(const double *ref, const double *got, size_t n);

#endif /* KDART_KDA_REF_H */
