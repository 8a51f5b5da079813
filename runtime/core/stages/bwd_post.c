/*
 * bwd_post: the backward's last step (kernel_src/bwd_post.cuh),
 * kdart_kda_bwd_post: from the chunk stages' fp32 dq, dk, dg, db to the
 * gradients of chunk_kda's inputs: the value heads' sum, the l2norm backward
 * of q and k, the gate backward with its A_log and dt_bias reductions (both
 * gate forms), the beta-sigmoid backward and the casts, in one launch.  The
 * tokens are independent here: sequences, chunks and cu_seqlens do not
 * matter.  Everything kdart knows about the stage is here: its registry row,
 * launch shape, default prewarm rule, and its operation's arguments, checks,
 * specialization choice and launch.
 */
#include "../stage.h"
#include "kda_params.h"

/* BwdPostTraits in kernel_src/bwd_post.cuh: 256 threads, static shared memory
 * only, at most 256 CTAs of tokens per head (the workspace's partial rows). */
#define POST_THREADS 256
#define POST_MAX_BLOCKS 256
#define POST_TOKENS 512  /* tokens per CTA at most, unless the workspace's rows need more */
#define POST_PAIRS 1024  /* (head, block) pairs the grid keeps before CTAs take more tokens */
static void shape(const int *vals, int *threads, int *smem) {
    (void)vals;
    *threads = POST_THREADS;
    *smem = 0;
}

/* The default prewarm set: bf16 with every dtype of g and beta; fp16 compiles
 * on first use.  vals: io, g_io, beta_io, tail. */
static int prewarmed(const int *vals) { return vals[0] == 0; }

int64_t kdart_bwd_post_workspace(int64_t H, int64_t HV, int64_t K) {
    if (H < 1 || HV < 1 || K < 1) return 0;
    return POST_MAX_BLOCKS * HV * (K + 1) + H;
}

#define ARGS kdart_bwd_post_args
#define IN 0
#define OUT KDART__A_OUT
#define OPT KDART__A_OPTIONAL

/* A pair that goes together: both given or neither. */
static int paired(kdart_rt *rt, const void *x, const char *xn, const void *y, const char *yn) {
    if (!x == !y) return KDART_OK;
    return kdart__err(rt, KDART_ENULL, "%s and %s go together: %s is given, %s is NULL", xn, yn, x ? xn : yn,
                      x ? yn : xn);
}

static int dims(kdart_rt *rt, kdart__call *c) {
    const ARGS *a = c->args;
    int rc;
    if (!a->dq_in || !a->dq_in->shape || a->dq_in->ndim != 4)
        return kdart__err(rt, !a->dq_in ? KDART_ENULL : KDART_ESHAPE, "dq_in must be [B,T,HV,K]");
    if ((rc = kdart__call_io(rt, c, a->dq, "dq", 4)) != KDART_OK) return rc;
    const int64_t B = a->dq->shape[0], T = a->dq->shape[1], H = a->dq->shape[2], K = a->dq->shape[3];
    const int64_t HV = a->dq_in->shape[2];
    if ((rc = kdart__check_head_dim(rt, K)) != KDART_OK) return rc;
    if ((rc = kdart__check_heads(rt, B, T, H, HV, "dq_in")) != KDART_OK) return rc;
    if ((rc = paired(rt, a->q, "q", a->q_rstd, "q_rstd")) != KDART_OK) return rc;
    if ((rc = paired(rt, a->k, "k", a->k_rstd, "k_rstd")) != KDART_OK) return rc;
    if (a->g_raw && (!a->A_log || !a->dA_log || !a->workspace))
        return kdart__err(rt, KDART_ENULL, "g_raw needs A_log, dA_log and workspace");
    if (!a->g_raw && (a->A_log || a->dt_bias || a->dA_log || a->ddt_bias))
        return kdart__err(rt, KDART_EINVAL, "A_log, dt_bias, dA_log and ddt_bias go with g_raw (the gate in the kernel)");
    if ((rc = paired(rt, a->dt_bias, "dt_bias", a->ddt_bias, "ddt_bias")) != KDART_OK) return rc;
    if (!(a->beta_scale == 1.0f || a->beta_scale == 2.0f))
        return kdart__err(rt, KDART_EINVAL, "beta_scale is %g (1, or 2 with allow_neg_eigval)", (double)a->beta_scale);
    if (B * T > INT32_MAX || H > 65535)
        return kdart__err(rt, KDART_EUNSUPPORTED, "problem too large: B*T=%lld tokens (at most 2^31 - 1), H=%lld",
                          (long long)(B * T), (long long)H);
    const int64_t sizes[][2] = {{KDART__D_B, B}, {KDART__D_T, T}, {KDART__D_H, H}, {KDART__D_HV, HV},
                                {KDART__D_K, K}, {KDART__D_W, kdart_bwd_post_workspace(H, HV, K)}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) c->d[sizes[i][0]] = sizes[i][1];
    return KDART_OK;
}

static int choose(kdart_rt *rt, kdart__call *c) {
    (void)rt;
    const ARGS *a = c->args;
    const int64_t N = c->d[KDART__D_B] * c->d[KDART__D_T];
    const int v[4] = {c->io, a->g_io != 0, a->beta_io != 0, c->d[KDART__D_K] % 4 != 0};
    memcpy(c->vals, v, sizeof v);
    /* tokens per CTA: a multiple of the eight warps, few enough CTAs for the workspace; and up to
     * POST_TOKENS where the grid keeps at least POST_PAIRS (head, block) pairs: long-lived CTAs stream
     * better than many short ones (on the H200, 512 against 64 tokens a CTA: 2-8% faster on 32768 and
     * 131072 tokens; with the heads as the grid's fastest index, 10-18% in all), while small problems
     * keep their CTAs */
    int64_t tb = N * c->d[KDART__D_H] / POST_PAIRS;
    tb = tb > POST_TOKENS ? POST_TOKENS : tb;
    const int64_t least = (N + POST_MAX_BLOCKS - 1) / POST_MAX_BLOCKS;
    tb = tb < least ? least : tb;
    tb = tb < 8 ? 8 : (tb + 7) / 8 * 8;
    c->aux[0] = (int)tb;
    c->grid[0] = (unsigned)c->d[KDART__D_H];
    c->grid[1] = (unsigned)((N + tb - 1) / tb);
    return KDART_OK;
}

static int launch(kdart_rt *rt, const kdart__call *c, const kdart__unit *u, void *fn, int *status, void *stream) {
    (void)status;
    const ARGS *a = c->args;
    const int64_t *d = c->d;
    kdart_bwd_post_params p = {
        (const float *)kdart__ptr(a->dq_in), (const float *)kdart__ptr(a->dk_in), kdart__ptr(a->q), kdart__ptr(a->k),
        (const float *)kdart__ptr(a->q_rstd), (const float *)kdart__ptr(a->k_rstd),
        (const float *)kdart__ptr(a->dg_in), kdart__ptr(a->g_raw), (const float *)kdart__ptr(a->A_log),
        (const float *)kdart__ptr(a->dt_bias), (const float *)kdart__ptr(a->db_in), kdart__ptr(a->beta_raw),
        (float *)kdart__ptr(a->workspace), (void *)kdart__ptr(a->dq), (void *)kdart__ptr(a->dk),
        (void *)kdart__ptr(a->dg), (void *)kdart__ptr(a->db), (float *)kdart__ptr(a->dA_log),
        (float *)kdart__ptr(a->ddt_bias), a->lower_bound, a->safe_gate != 0, a->beta_scale,
        (int)(d[KDART__D_B] * d[KDART__D_T]), (int)d[KDART__D_H], (int)d[KDART__D_HV], (int)d[KDART__D_K], c->aux[0],
        0, 0,
    };
    /* kdart_kda_chunk_bwd's split last step: wy_dqkg's launch wrote dg and db and, with the gate, the
     * partial rows this launch sums (z = 0) instead of its own */
    const kdart__post_split *x = c->extra;
    if (x && x->fused) {
        p.fused = x->fused;
        if (a->g_raw) p.workspace = (float *)kdart__ptr(x->part), p.rows = (int)x->rows;
    }
    /* (heads, token blocks, z): dq, dk, then dg and db; split: the partial rows' sums, then dq and dk unless
     * wy_dqkg's launch wrote them (the launch contract in kernel_src/bwd_post.cuh) */
    const unsigned nz = x && x->fused == 2 ? 1 : 3;
    return kdart__launch(rt, fn, c->grid[0], c->grid[1], nz, u->threads, u->smem, stream, &p);
}

static const kdart__op op = {
    sizeof(ARGS), sizeof(ARGS), "kdart_bwd_post_args", 19, 5,
    {
        KDART__TARG("dq_in", ARGS, dq_in, KDART__DT_F32, IN, B, T, HV, K),
        KDART__TARG("dk_in", ARGS, dk_in, KDART__DT_F32, IN, B, T, HV, K),
        KDART__TARG("q", ARGS, q, KDART__DT_IO, IN | OPT, B, T, H, K),
        KDART__TARG("k", ARGS, k, KDART__DT_IO, IN | OPT, B, T, H, K),
        KDART__TARG("q_rstd", ARGS, q_rstd, KDART__DT_F32, IN | OPT, B, T, H),
        KDART__TARG("k_rstd", ARGS, k_rstd, KDART__DT_F32, IN | OPT, B, T, H),
        KDART__TARG("dg_in", ARGS, dg_in, KDART__DT_F32, IN, B, T, HV, K),
        KDART__TARG_FLAG("g_raw", ARGS, g_raw, g_io, IN | OPT, B, T, HV, K),
        KDART__TARG("A_log", ARGS, A_log, KDART__DT_F32, IN | OPT, HV),
        KDART__TARG("dt_bias", ARGS, dt_bias, KDART__DT_F32, IN | OPT, HV, K),
        KDART__TARG("db_in", ARGS, db_in, KDART__DT_F32, IN, B, T, HV),
        KDART__TARG_FLAG("beta_raw", ARGS, beta_raw, beta_io, IN | OPT, B, T, HV),
        /* read and written: the caller's zeroed scratch, left zeroed */
        KDART__TARG("workspace", ARGS, workspace, KDART__DT_F32, IN | OPT, W),
        KDART__TARG("dq", ARGS, dq, KDART__DT_IO, OUT, B, T, H, K),
        KDART__TARG("dk", ARGS, dk, KDART__DT_IO, OUT, B, T, H, K),
        KDART__TARG_FLAG("dg", ARGS, dg, g_io, OUT, B, T, HV, K),
        KDART__TARG_FLAG("db", ARGS, db, beta_io, OUT, B, T, HV),
        KDART__TARG("dA_log", ARGS, dA_log, KDART__DT_F32, OUT | OPT, HV),
        KDART__TARG("ddt_bias", ARGS, ddt_bias, KDART__DT_F32, OUT | OPT, HV, K),
    },
    {KDART__SARG("lower_bound", ARGS, lower_bound, 'f'), KDART__SARG("safe_gate", ARGS, safe_gate, 'i'),
     KDART__SARG("beta_scale", ARGS, beta_scale, 'f'), KDART__SARG("g_io", ARGS, g_io, 'i'),
     KDART__SARG("beta_io", ARGS, beta_io, 'i')},
    0, 0, 0,
    dims, choose, launch,
};

_Static_assert(2 * 2 * 2 * 2 <= KDART__MAX_SPECS, "bwd_post's specs exceed KDART__MAX_SPECS");

const kdart__kernel kdart__stage_bwd_post = {
    "bwd_post", "bwd_post.cuh", "kdart_bwd_post", 4,
    /* g_io / beta_io: g_raw and dg, beta_raw and db in the io dtype (else fp32);
     * tail: a head dim not a multiple of 4 (scalar accesses) */
    {KDART__IO_PARAM, KDART__FLAG_PARAM("g_io"), KDART__FLAG_PARAM("beta_io"), KDART__FLAG_PARAM("tail")},
    shape, prewarmed, NULL, &op,
};

int kdart_kda_bwd_post(kdart_rt *rt, const kdart_bwd_post_args *a, void *stream) {
    return kdart__op_call(rt, &kdart__stage_bwd_post, a, stream, NULL, 0);
}
