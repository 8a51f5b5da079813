/*
 * bwd_intra: the intra-chunk backward (kernel_src/bwd_intra.cuh; fla's
 * chunk_kda_bwd_intra), kdart_kda_bwd_intra.  One CTA of 256 threads per
 * (chunk, value head); the K tile (64, 128, 256) is a template parameter.
 * Everything kdart knows about the stage is here: its registry row, launch
 * shape, default prewarm rule, and its operation's arguments, checks,
 * specialization choice and launch.
 */
#include "../stage.h"
#include "kda_params.h"

/* BwdIntraTraits<K> in kernel_src/bwd_intra.cuh (its static_asserts pin the
 * same numbers): 256 threads; the shared memory is KDART__INTRA_SMEM. */
#define INTRA_THREADS 256

/* vals: io, fold, emit, K, varlen, tail, beta (every specialization of one K
 * tile launches with the same shape). */
static void shape(const int *vals, int *threads, int *smem) {
    *threads = INTRA_THREADS;
    *smem = KDART__INTRA_SMEM(kdart__k_tile_at(vals[3]));
}

/* The tail without varlen compiles to a trap: FixedParams has no Kr. */
static int stub(const int *vals) { return vals[5] == 1 && vals[4] == 0; }

/* The default prewarm set: every native specialization with beta in the io
 * dtype; fp32 beta as kdart.fla calls it (fold_dg=1, emit_bf16=0: the beta
 * sigmoid inside chunk_kda), both io dtypes; the tail (head dims 60, 100,
 * 192) in bf16 as kdart.fla calls it, either beta.  The others compile on
 * first use (about 1.5 s each). */
static int prewarmed(const int *vals) {
    if (vals[6] == 1 && (vals[1] != 1 || vals[2] != 0)) return 0;
    if (vals[5] == 1) return vals[0] == 0 && vals[1] == 1 && vals[2] == 0;
    return 1;
}

#define ARGS kdart_bwd_intra_args
#define IN 0
#define OUT KDART__A_OUT

static int dims(kdart_rt *rt, kdart__call *c) {
    const ARGS *a = c->args;
    int rc;
    if (!a->q || !a->q->shape || a->q->ndim != 4 || !a->g || !a->g->shape || a->g->ndim != 4)
        return kdart__err(rt, !a->q ? KDART_ENULL : !a->g ? KDART_ENULL : KDART_ESHAPE,
                          "q must be [B,T,H,K] and g [B,T,HV,K]");
    if ((rc = kdart__call_io(rt, c, a->q, "q", 4)) != KDART_OK) return rc;
    const int64_t B = a->q->shape[0], T = a->q->shape[1], H = a->q->shape[2], K = a->q->shape[3];
    const int64_t HV = a->g->shape[2];
    if ((rc = kdart__check_head_dim(rt, K)) != KDART_OK) return rc;
    if ((rc = kdart__check_heads(rt, B, T, H, HV, "g")) != KDART_OK) return rc;
    if ((rc = kdart__call_seqs(rt, c, B, T)) != KDART_OK) return rc;
    if (a->emit_bf16 && HV != H)
        return kdart__err(rt, KDART_EUNSUPPORTED,
                          "emit_bf16 needs HV == H (grouped value heads are summed in fp32 by the caller)");
    /* A head dim below its K tile runs the tail specialization, which exists
     * for the varlen body only (its params carry Kr); cu_seqlens stays NULL, so
     * it takes the batch as B rows of T tokens.  Native K keeps its kernel. */
    if ((rc = kdart__chunk_grid(rt, c, B, T, HV, K != kdart__k_tile(K))) != KDART_OK) return rc;
    int64_t *d = c->d;
    d[KDART__D_B] = B, d[KDART__D_T] = T, d[KDART__D_H] = H, d[KDART__D_HV] = HV, d[KDART__D_K] = K;
    return KDART_OK;
}

static int choose(kdart_rt *rt, kdart__call *c) {
    (void)rt;
    const ARGS *a = c->args;
    const int64_t K = c->d[KDART__D_K];
    const int v[7] = {c->io, a->fold_dg ? 1 : 0, a->emit_bf16 ? 1 : 0, kdart__k_index(kdart__k_tile(K)), c->sq.varlen,
                      K != kdart__k_tile(K), kdart__dtype_of(a->beta) == 32};
    memcpy(c->vals, v, sizeof v);
    return KDART_OK;
}

static int launch(kdart_rt *rt, const kdart__call *c, const kdart__unit *u, void *fn, int *status, void *stream) {
    const ARGS *a = c->args;
    const int64_t *d = c->d;
    kdart_bwd_intra_params p = {
        kdart__ptr(a->q),      kdart__ptr(a->k),      kdart__ptr(a->g),
        kdart__ptr(a->beta),   kdart__ptr(a->dAqk),   kdart__ptr(a->dAkk),
        kdart__ptr(a->dq_in),  kdart__ptr(a->dk_in),  kdart__ptr(a->dg_in),
        kdart__ptr(a->db_in),  (void *)kdart__ptr(a->dq), (void *)kdart__ptr(a->dk),
        (float *)kdart__ptr(a->dg), (float *)kdart__ptr(a->db),
        (int)d[KDART__D_B], (int)d[KDART__D_T], (int)d[KDART__D_H], (int)d[KDART__D_HV],
        kdart__ptr(c->sq.cu), status, (int)c->sq.N, (int)c->grid[0], c->sq.is64, (int)d[KDART__D_K],
    };
    return kdart__launch(rt, fn, c->grid[0], c->grid[1], 1, u->threads, u->smem, stream, &p);
}

static const kdart__op op = {
    sizeof(ARGS), offsetof(ARGS, cu_seqlens), "kdart_bwd_intra_args", 14, 2,
    {
        KDART__TARG("q", ARGS, q, KDART__DT_IO, IN, B, T, H, K),
        KDART__TARG("k", ARGS, k, KDART__DT_IO, IN, B, T, H, K),
        KDART__TARG("g", ARGS, g, KDART__DT_F32, IN, B, T, HV, K),
        KDART__TARG("beta", ARGS, beta, KDART__DT_IO_F32, IN, B, T, HV),
        KDART__TARG("dAqk", ARGS, dAqk, KDART__DT_F32, IN, B, T, HV, 64),
        KDART__TARG("dAkk", ARGS, dAkk, KDART__DT_F32, IN, B, T, HV, 64),
        KDART__TARG("dq_in", ARGS, dq_in, KDART__DT_F32, IN, B, T, HV, K),
        KDART__TARG("dk_in", ARGS, dk_in, KDART__DT_F32, IN, B, T, HV, K),
        KDART__TARG("dg_in", ARGS, dg_in, KDART__DT_F32, IN, B, T, HV, K),
        KDART__TARG("db_in", ARGS, db_in, KDART__DT_F32, IN, B, T, HV),
        KDART__TARG_FLAG("dq", ARGS, dq, emit_bf16, OUT, B, T, HV, K),
        KDART__TARG_FLAG("dk", ARGS, dk, emit_bf16, OUT, B, T, HV, K),
        KDART__TARG("dg", ARGS, dg, KDART__DT_F32, OUT, B, T, HV, K),
        KDART__TARG("db", ARGS, db, KDART__DT_F32, OUT, B, T, HV),
    },
    {KDART__SARG("fold_dg", ARGS, fold_dg, 'i'), KDART__SARG("emit_bf16", ARGS, emit_bf16, 'i')},
    offsetof(ARGS, cu_seqlens), offsetof(ARGS, chunk_indices), 0,
    dims, choose, launch,
};

_Static_assert(2 * 2 * 2 * 3 * 2 * 2 * 2 <= KDART__MAX_SPECS, "bwd_intra's specs exceed KDART__MAX_SPECS");

const kdart__kernel kdart__stage_bwd_intra = {
    "bwd_intra", "bwd_intra.cuh", "kdart_bwd_intra", 7,
    {KDART__IO_PARAM, KDART__FLAG_PARAM("fold_dg"), KDART__FLAG_PARAM("emit_bf16"), KDART__K_PARAM,
     KDART__FLAG_PARAM("varlen"), KDART__FLAG_PARAM("tail"), KDART__BETA_PARAM},
    shape, prewarmed, stub, &op,
};

int kdart_kda_bwd_intra(kdart_rt *rt, const kdart_bwd_intra_args *a, void *stream) {
    return kdart__op_call(rt, &kdart__stage_bwd_intra, a, stream, NULL, 0);
}
