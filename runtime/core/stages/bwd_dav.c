/*
 * bwd_dav: fla's chunk_kda_bwd_dAv as a kernel of its own
 * (kernel_src/bwd_dav.cuh), kdart_kda_bwd_dav: dA = scale tril0(do v^T) and
 * dv = Aqk^T do per chunk, for the calls kdart.fla cannot fuse into bwd_dhu and
 * wy_dqkg.  One CTA of 128 threads per (chunk, value head), the V blocks of 64
 * columns walked in turn, any V up to 512.  Everything kdart knows about the
 * stage is here: its registry row, launch shape, default prewarm rule, and its
 * operation's arguments, checks, specialization choice and launch.
 */
#include "../stage.h"
#include "kda_params.h"

/* BwdDavTraits in kernel_src/bwd_dav.cuh: 128 threads; two stages of the do
 * and v tiles, Aqk's tile and chunk_of's scratch. */
#define DAV_THREADS 128
#define DAV_SMEM 41024
static void shape(const int *vals, int *threads, int *smem) {
    (void)vals;
    *threads = DAV_THREADS;
    *smem = DAV_SMEM;
}

/* The default prewarm set: bf16 (what the backward runs in), native and tail,
 * fixed length and packed; fp16 compiles on first use.  vals: io, varlen, tail. */
static int prewarmed(const int *vals) { return vals[0] == 0; }

#define ARGS kdart_bwd_dav_args
#define IN 0
#define OUT KDART__A_OUT

static int dims(kdart_rt *rt, kdart__call *c) {
    const ARGS *a = c->args;
    int rc;
    if ((rc = kdart__call_io(rt, c, a->d_o, "do", 4)) != KDART_OK) return rc;
    const int64_t B = a->d_o->shape[0], T = a->d_o->shape[1], HV = a->d_o->shape[2], V = a->d_o->shape[3];
    if (B < 1 || T < 1 || HV < 1)
        return kdart__err(rt, KDART_ESHAPE, "empty tensor: do is [%lld,%lld,%lld,%lld]", (long long)B, (long long)T,
                          (long long)HV, (long long)V);
    if ((rc = kdart__check_value_dim(rt, V)) != KDART_OK) return rc;
    if ((rc = kdart__call_seqs(rt, c, B, T)) != KDART_OK) return rc;
    if ((rc = kdart__chunk_grid(rt, c, B, T, HV, 0)) != KDART_OK) return rc;
    int64_t *d = c->d;
    d[KDART__D_B] = B, d[KDART__D_T] = T, d[KDART__D_HV] = HV, d[KDART__D_V] = V;
    return KDART_OK;
}

static int choose(kdart_rt *rt, kdart__call *c) {
    (void)rt;
    const int v[3] = {c->io, c->sq.varlen, c->d[KDART__D_V] % 64 != 0};
    memcpy(c->vals, v, sizeof v);
    return KDART_OK;
}

static int launch(kdart_rt *rt, const kdart__call *c, const kdart__unit *u, void *fn, int *status, void *stream) {
    const ARGS *a = c->args;
    const int64_t *d = c->d;
    /* extra (kdart_kda_chunk_bwd's packed calls on bwd_dhu's V split, stage.h): dv for the split's long
     * sequences alone, which the kernel tells from cu_seqlens by the SM count, as bwd_dhu's does */
    int sms = 0, rc;
    if (c->extra && c->sq.cu && (rc = kdart__cuda_sm_count(rt, &sms)) != KDART_OK) return rc;
    kdart_bwd_dav_params p = {
        kdart__ptr(a->v), kdart__ptr(a->d_o), kdart__ptr(a->A), (float *)kdart__ptr(a->dA), (void *)kdart__ptr(a->dv),
        a->scale, (int)d[KDART__D_B], (int)d[KDART__D_T], (int)d[KDART__D_HV], (int)d[KDART__D_V],
        kdart__ptr(c->sq.cu), status, (int)c->sq.N, (int)c->grid[0], c->sq.is64, sms,
    };
    return kdart__launch(rt, fn, c->grid[0], c->grid[1], 1, u->threads, u->smem, stream, &p);
}

static const kdart__op op = {
    sizeof(ARGS), sizeof(ARGS), "kdart_bwd_dav_args", 5, 1,
    {
        KDART__TARG("v", ARGS, v, KDART__DT_IO, IN, B, T, HV, V),
        KDART__TARG("do", ARGS, d_o, KDART__DT_IO, IN, B, T, HV, V),
        KDART__TARG("A", ARGS, A, KDART__DT_IO, IN, B, T, HV, 64),
        KDART__TARG("dA", ARGS, dA, KDART__DT_F32, OUT | KDART__A_OPTIONAL, B, T, HV, 64),
        KDART__TARG("dv", ARGS, dv, KDART__DT_IO, OUT, B, T, HV, V),
    },
    {KDART__SARG("scale", ARGS, scale, 'f')},
    offsetof(ARGS, cu_seqlens), offsetof(ARGS, chunk_indices), 0,
    dims, choose, launch,
};

_Static_assert(2 * 2 * 2 <= KDART__MAX_SPECS, "bwd_dav's specs exceed KDART__MAX_SPECS");

const kdart__kernel kdart__stage_bwd_dav = {
    "bwd_dav", "bwd_dav.cuh", "kdart_bwd_dav", 3,
    /* tail: V not a multiple of 64 (masked copies and stores) */
    {KDART__IO_PARAM, KDART__FLAG_PARAM("varlen"), KDART__FLAG_PARAM("tail")},
    shape, prewarmed, NULL, &op,
};

int kdart_kda_bwd_dav(kdart_rt *rt, const kdart_bwd_dav_args *a, void *stream) {
    return kdart__op_call(rt, &kdart__stage_bwd_dav, a, stream, NULL, 0);
}
