/*
 * recompute_wu: the backward's forward recompute of w, u, qg, kg from Akk
 * (kernel_src/recompute_wu.cuh; fla's recompute_w_u_fwd), with the gate's
 * chunk cumsum in front when the raw gate is given (fla's
 * kda_gate_chunk_cumsum, both gate forms), kdart_kda_recompute_wu.  One CTA
 * of 128 threads per (chunk, value head), the K and V blocks of 64 columns
 * walked in turn, at every head dim.  Everything kdart knows about the stage
 * is here: its registry row, launch shape, default prewarm rule, and its
 * operation's arguments, checks, specialization choice and launch.
 */
#include "../stage.h"
#include "kda_params.h"

/* RecomputeWuTraits in kernel_src/recompute_wu.cuh: 128 threads; two stages
 * of the gate (fp32), k or v, and q tiles, A and beta. */
#define RWU_THREADS 128
#define RWU_SMEM 74304
static void shape(const int *vals, int *threads, int *smem) {
    (void)vals;
    *threads = RWU_THREADS;
    *smem = RWU_SMEM;
}

/* The default prewarm set: bf16 with fp32 beta (the beta sigmoid inside
 * chunk_kda), with and without the gate, native and tail; fp16 and beta in
 * the io dtype compile on first use.  vals: io, varlen, tail, beta, gate. */
static int prewarmed(const int *vals) { return vals[0] == 0 && vals[3] == 1; }

#define ARGS kdart_recompute_wu_args
#define IN 0
#define OUT KDART__A_OUT
#define OPT KDART__A_OPTIONAL

static int dims(kdart_rt *rt, kdart__call *c) {
    const ARGS *a = c->args;
    int rc;
    if (!a->k || !a->k->shape || a->k->ndim != 4 || !a->v || !a->v->shape || a->v->ndim != 4)
        return kdart__err(rt, !a->k || !a->v ? KDART_ENULL : KDART_ESHAPE, "k must be [B,T,H,K] and v [B,T,HV,V]");
    if ((rc = kdart__call_io(rt, c, a->k, "k", 4)) != KDART_OK) return rc;
    const int64_t B = a->k->shape[0], T = a->k->shape[1], H = a->k->shape[2], K = a->k->shape[3];
    const int64_t HV = a->v->shape[2], V = a->v->shape[3];
    if ((rc = kdart__check_head_dim(rt, K)) != KDART_OK) return rc;
    if ((rc = kdart__check_value_dim(rt, V)) != KDART_OK) return rc;
    if ((rc = kdart__check_heads(rt, B, T, H, HV, "v")) != KDART_OK) return rc;
    /* the gate: either the cumsummed one in, or the raw one with A_log in and the cumsum out */
    if (!a->g == !a->g_raw)
        return kdart__err(rt, a->g ? KDART_EINVAL : KDART_ENULL,
                          "give either g (the cumsummed gate) or g_raw (the raw gate, with A_log and g_out)");
    if (a->g_raw && (!a->A_log || !a->g_out))
        return kdart__err(rt, KDART_ENULL, "g_raw needs A_log and g_out (dt_bias is optional)");
    if (a->g && (a->A_log || a->dt_bias || a->g_out))
        return kdart__err(rt, KDART_EINVAL, "A_log, dt_bias and g_out go with g_raw, not with g");
    if (a->q == NULL && a->qg != NULL) return kdart__err(rt, KDART_ENULL, "qg needs q");
    if (a->q != NULL && a->qg == NULL) return kdart__err(rt, KDART_ENULL, "q needs qg (the output it is read for)");
    if ((rc = kdart__call_seqs(rt, c, B, T)) != KDART_OK) return rc;
    if ((rc = kdart__chunk_grid(rt, c, B, T, HV, 0)) != KDART_OK) return rc;
    int64_t *d = c->d;
    d[KDART__D_B] = B, d[KDART__D_T] = T, d[KDART__D_H] = H, d[KDART__D_HV] = HV, d[KDART__D_K] = K;
    d[KDART__D_V] = V;
    return KDART_OK;
}

static int choose(kdart_rt *rt, kdart__call *c) {
    (void)rt;
    const ARGS *a = c->args;
    const int64_t K = c->d[KDART__D_K], V = c->d[KDART__D_V];
    const int v[5] = {c->io, c->sq.varlen, K % 64 != 0 || V % 64 != 0, kdart__dtype_of(a->beta) == 32,
                      a->g_raw != NULL};
    memcpy(c->vals, v, sizeof v);
    return KDART_OK;
}

static int launch(kdart_rt *rt, const kdart__call *c, const kdart__unit *u, void *fn, int *status, void *stream) {
    const ARGS *a = c->args;
    const int64_t *d = c->d;
    kdart_recompute_wu_params p = {
        kdart__ptr(a->q), kdart__ptr(a->k), kdart__ptr(a->v), kdart__ptr(a->beta), kdart__ptr(a->A),
        (const float *)kdart__ptr(a->g), kdart__ptr(a->g_raw), (const float *)kdart__ptr(a->A_log),
        (const float *)kdart__ptr(a->dt_bias), (float *)kdart__ptr(a->g_out), (void *)kdart__ptr(a->w),
        (void *)kdart__ptr(a->u), (void *)kdart__ptr(a->qg), (void *)kdart__ptr(a->kg), a->lower_bound,
        a->safe_gate != 0, a->g_raw != NULL && kdart__dtype_of(a->g_raw) == 32, (int)d[KDART__D_B], (int)d[KDART__D_T],
        (int)d[KDART__D_H], (int)d[KDART__D_HV], (int)d[KDART__D_V], kdart__ptr(c->sq.cu), status, (int)c->sq.N,
        (int)c->grid[0], c->sq.is64, (int)d[KDART__D_K],
    };
    return kdart__launch(rt, fn, c->grid[0], c->grid[1], 1, u->threads, u->smem, stream, &p);
}

static const kdart__op op = {
    sizeof(ARGS), sizeof(ARGS), "kdart_recompute_wu_args", 14, 2,
    {
        KDART__TARG("q", ARGS, q, KDART__DT_IO, IN | OPT, B, T, H, K),
        KDART__TARG("k", ARGS, k, KDART__DT_IO, IN, B, T, H, K),
        KDART__TARG("v", ARGS, v, KDART__DT_IO, IN, B, T, HV, V),
        KDART__TARG("beta", ARGS, beta, KDART__DT_IO_F32, IN, B, T, HV),
        KDART__TARG("A", ARGS, A, KDART__DT_IO, IN, B, T, HV, 64),
        KDART__TARG("g", ARGS, g, KDART__DT_F32, IN | OPT, B, T, HV, K),
        KDART__TARG("g_raw", ARGS, g_raw, KDART__DT_IO_F32, IN | OPT, B, T, HV, K),
        KDART__TARG("A_log", ARGS, A_log, KDART__DT_F32, IN | OPT, HV),
        KDART__TARG("dt_bias", ARGS, dt_bias, KDART__DT_F32, IN | OPT, HV, K),
        KDART__TARG("g_out", ARGS, g_out, KDART__DT_F32, OUT | OPT, B, T, HV, K),
        KDART__TARG("w", ARGS, w, KDART__DT_IO, OUT, B, T, HV, K),
        KDART__TARG("u", ARGS, u, KDART__DT_IO, OUT | OPT, B, T, HV, V),
        KDART__TARG("qg", ARGS, qg, KDART__DT_IO, OUT | OPT, B, T, HV, K),
        KDART__TARG("kg", ARGS, kg, KDART__DT_IO, OUT, B, T, HV, K),
    },
    {KDART__SARG("lower_bound", ARGS, lower_bound, 'f'), KDART__SARG("safe_gate", ARGS, safe_gate, 'i')},
    offsetof(ARGS, cu_seqlens), offsetof(ARGS, chunk_indices), 0,
    dims, choose, launch,
};

_Static_assert(2 * 2 * 2 * 2 * 2 <= KDART__MAX_SPECS, "recompute_wu's specs exceed KDART__MAX_SPECS");

const kdart__kernel kdart__stage_recompute_wu = {
    "recompute_wu", "recompute_wu.cuh", "kdart_recompute_wu", 5,
    {KDART__IO_PARAM, KDART__FLAG_PARAM("varlen"),
     /* tail: a head dim or V not a multiple of 64 (masked copies and stores);
      * gate: the raw gate in, its chunk cumsum out (fla's kda_gate_chunk_cumsum in front) */
     KDART__FLAG_PARAM("tail"), KDART__BETA_PARAM, KDART__FLAG_PARAM("gate")},
    shape, prewarmed, NULL, &op,
};

int kdart_kda_recompute_wu(kdart_rt *rt, const kdart_recompute_wu_args *a, void *stream) {
    return kdart__op_call(rt, &kdart__stage_recompute_wu, a, stream, NULL, 0);
}
