/*
 * wy_dqkg: the WY backward fused with the state-gradient products
 * (kernel_src/wy_dqkg.cuh; fla's chunk_kda_bwd_wy_dqkg_fused),
 * kdart_kda_wy_dqkg.  One CTA of 256 threads per (chunk, value head), the
 * K blocks of 64 columns walked in turn; with intra, the same CTA then adds
 * bwd_intra's terms (fold_dg) to its dq, dk, dg, db in place.  Everything kdart knows about the
 * stage is here: its registry row, launch shape, default prewarm rule, and
 * its operation's arguments, checks, specialization choice and launch.
 */
#include "../stage.h"
#include "kda_params.h"

/* WyDqkgTraits<K> in kernel_src/wy_dqkg.cuh: 256 threads; two stages of six
 * 64 x 64 io tiles, A, and the small per-row and per-column slots, the same at
 * every K tile. */
#define WY_THREADS 256
#define WY_SMEM 108864

/* vals: io, K, varlen, tail, beta, svf, dAqk, intra, post; intra's kernels run
 * bwd_intra's body after their own, in bwd_intra's shared memory where it is
 * the larger (same threads, same two CTAs per SM). */
static void shape(const int *vals, int *threads, int *smem) {
    const int intra = KDART__INTRA_SMEM(kdart__k_tile_at(vals[1]));
    *threads = WY_THREADS;
    *smem = vals[7] && intra > WY_SMEM ? intra : WY_SMEM;
}

/* intra without dAqk compiles to a trap: the intra part needs the dAqk product (the runtime picks dAqk = 1
 * with intra, whether or not the caller wants the dAqk output); so does post without intra or with the
 * tail (the gate part sits in the intra part's native body). */
static int stub(const int *vals) {
    return (vals[7] == 1 && vals[6] == 0) || (vals[8] == 1 && (vals[7] == 0 || vals[3] == 1));
}

/* The default prewarm set: every native one with the K-first state; the
 * V-first state and the tail (head dims 60, 100, 192) in bf16 with fp32
 * beta, as the configuration most models train with hands them over; with
 * dAqk (fla's dAv fused, which kdart.fla asks for at K = 64 and 128 with V
 * a multiple of 64) the native K tiles 64 and 128 with fp32 beta and the
 * K-first state, alone and with intra (what kdart.torch.chunk_kda_bwd runs
 * there); post (kdart_kda_chunk_bwd's last step's gate part) on those in bf16.
 * vals: io, K, varlen, tail, beta, svf, dAqk, intra, post. */
static int prewarmed(const int *vals) {
    if (vals[8] == 1)
        return vals[0] == 0 && vals[7] == 1 && vals[3] == 0 && vals[1] <= 1 && vals[4] == 1 && vals[5] == 0;
    if (vals[6] == 1) return vals[3] == 0 && vals[1] <= 1 && vals[4] == 1 && vals[5] == 0;
    if (vals[3] == 1 || vals[5] == 1) return vals[0] == 0 && vals[4] == 1;
    return 1;
}

#define ARGS kdart_wy_dqkg_args
#define IN 0
#define OUT KDART__A_OUT

static int dims(kdart_rt *rt, kdart__call *c) {
    const ARGS *a = c->args;
    int rc;
    if (!a->q || !a->q->shape || a->q->ndim != 4 || !a->v || !a->v->shape || a->v->ndim != 4)
        return kdart__err(rt, !a->q || !a->v ? KDART_ENULL : KDART_ESHAPE, "q must be [B,T,H,K] and v [B,T,HV,V]");
    if ((rc = kdart__call_io(rt, c, a->q, "q", 4)) != KDART_OK) return rc;
    const int64_t B = a->q->shape[0], T = a->q->shape[1], H = a->q->shape[2], K = a->q->shape[3];
    const int64_t HV = a->v->shape[2], V = a->v->shape[3];
    if ((rc = kdart__check_head_dim(rt, K)) != KDART_OK) return rc;
    if ((rc = kdart__check_value_dim(rt, V)) != KDART_OK) return rc;
    if ((rc = kdart__check_heads(rt, B, T, H, HV, "v")) != KDART_OK) return rc;
    if ((rc = kdart__call_seqs(rt, c, B, T)) != KDART_OK) return rc;
    /* intra: the kernel hands dA and dAqk to bwd_intra's terms through shared
     * memory, so both are optional outputs then (without intra, dA is the
     * output the caller's bwd_intra reads); its tail body (a head dim below the
     * K tile) is the varlen one, which takes the batch as B rows */
    const int intra = kdart__arg_int(c, offsetof(ARGS, intra)) != 0;
    if (!intra && !a->dA) return kdart__err(rt, KDART_ENULL, "tensor dA is NULL (it may be left out only with intra)");
    if ((rc = kdart__chunk_grid(rt, c, B, T, HV, intra && K != kdart__k_tile(K))) != KDART_OK) return rc;
    /* h's chunk rows: B * ceil(T/64) at fixed length (B rows of them), or,
     * packed, any NT >= 1 (>= chunk_indices's rows when given; the kernel
     * checks the total on the device) */
    const int svf = a->state_v_first != 0;
    int64_t NT = (T + KDART_CHUNK - 1) / KDART_CHUNK, HB = B;
    if (c->sq.cu) {
        if ((rc = kdart__packed_chunk_rows(rt, c, a->h, "h", svf, &NT)) != KDART_OK) return rc;
        if (NT > INT32_MAX) return kdart__err(rt, KDART_EUNSUPPORTED, "problem too large (h has %lld chunk rows)",
                                              (long long)NT);
        HB = 1;
        c->max_chunks = NT;
    }
    /* sm_90a reads the step's tiles by TMA, whose coordinates are 32-bit: token rows and state rows
     * stay below 2^31 (a bound no device memory reaches: h alone would hold 256 GiB) */
    if (B * T > INT32_MAX || HB * NT * HV * K > INT32_MAX)
        return kdart__err(rt, KDART_EUNSUPPORTED, "problem too large (%lld token rows, %lld state rows)",
                          (long long)(B * T), (long long)(HB * NT * HV * K));
    int64_t *d = c->d;
    d[KDART__D_B] = B, d[KDART__D_T] = T, d[KDART__D_H] = H, d[KDART__D_HV] = HV, d[KDART__D_K] = K;
    d[KDART__D_V] = V, d[KDART__D_NT] = NT, d[KDART__D_HB] = HB;
    d[KDART__D_S1] = svf ? V : K, d[KDART__D_S2] = svf ? K : V;
    return KDART_OK;
}

static int choose(kdart_rt *rt, kdart__call *c) {
    (void)rt;
    const ARGS *a = c->args;
    const int64_t K = c->d[KDART__D_K], V = c->d[KDART__D_V];
    /* (the native bodies' TMA boxes are 64 token rows: fewer rows in all take the tail body) */
    const int intra = kdart__arg_int(c, offsetof(ARGS, intra)) != 0,
              tail = K != kdart__k_tile(K) || V % 64 != 0 || c->d[KDART__D_B] * c->d[KDART__D_T] < KDART_CHUNK;
    /* kdart_kda_chunk_bwd's last step: its gate and beta part in this launch where the intra part's native
     * body writes dg (dg in the io dtype, as the raw gate, or without the gate in the kernel in fp32, the
     * log-space gate's dtype; part holding a row per CTA) */
    kdart__post_split *x = c->extra;
    const kdart_bwd_post_args *pa = x ? x->post : NULL;
    int post = 0;
    if (pa && intra && !tail && pa->dg &&
        (kdart__dtype_of(pa->dg) == c->io || (!pa->g_raw && kdart__dtype_of(pa->dg) == 32))) {
        const int64_t rows = (int64_t)c->grid[0] * c->grid[1] / c->d[KDART__D_HV];
        post = !pa->g_raw || (x->part && x->part->shape[0] >= kdart__post_part_floats(rows, c->d[KDART__D_HV], K));
    }
    /* and dq, dk: at level 2, where the value rows are q's and k's (HV == H) and the l2norm's q and k this
     * call's (fixed length and packed alike) */
    const int qk = post && x->level >= 2 && c->d[KDART__D_HV] == c->d[KDART__D_H] &&
                   (!pa->q || kdart__ptr(pa->q) == kdart__ptr(a->q)) && (!pa->k || kdart__ptr(pa->k) == kdart__ptr(a->k));
    if (x) x->fused = post + qk;
    const int v[9] = {c->io, kdart__k_index(kdart__k_tile(K)), c->sq.varlen, tail,
                      kdart__dtype_of(a->beta) == 32, a->state_v_first != 0,
                      kdart__arg(c, offsetof(ARGS, dAqk)) != NULL || intra, intra, post};
    memcpy(c->vals, v, sizeof v);
    return KDART_OK;
}

int64_t kdart__post_part_floats(int64_t rows, int64_t HV, int64_t K) { return rows * HV * (K + 4); }

static int launch(kdart_rt *rt, const kdart__call *c, const kdart__unit *u, void *fn, int *status, void *stream) {
    const ARGS *a = c->args;
    const int64_t *d = c->d;
    kdart_wy_dqkg_params p = {
        kdart__ptr(a->q),  kdart__ptr(a->k),  kdart__ptr(a->v),   kdart__ptr(a->v_new), kdart__ptr(a->g),
        kdart__ptr(a->beta), kdart__ptr(a->A), kdart__ptr(a->h),  kdart__ptr(a->dh),    kdart__ptr(a->d_o),
        kdart__ptr(a->dv), (float *)kdart__ptr(a->dq), (float *)kdart__ptr(a->dk), (void *)kdart__ptr(a->dv2),
        (float *)kdart__ptr(a->dg), (float *)kdart__ptr(a->db), (float *)kdart__ptr(a->dA), a->scale,
        (int)d[KDART__D_B], (int)d[KDART__D_T], (int)d[KDART__D_H], (int)d[KDART__D_HV], (int)d[KDART__D_V],
        kdart__ptr(c->sq.cu), status, (int)c->sq.N, (int)(c->sq.cu ? d[KDART__D_NT] : c->grid[0]), c->sq.is64,
        (int)d[KDART__D_K], (float *)kdart__ptr(kdart__arg(c, offsetof(ARGS, dAqk))), {{{0}}},
    };
    /* the native specializations of the sm_90a build read the step's tiles by TMA (the kernel's kTma:
     * tail and svf 0; the maps are encoded for those alone, every launch): do, dv, v_new, v as
     * (V, HV, B*T), h and dh as (V, HB*NT*HV*K) (HB: B, or 1 packed), 64 x 64 boxes (choose gives
     * calls of fewer than 64 token rows the tail body: a box may not exceed its tensor) */
    if (!c->vals[3] && !c->vals[5] && strcmp(u->arch, "sm_90a") == 0) {
        const uint64_t V = (uint64_t)d[KDART__D_V], HV = (uint64_t)d[KDART__D_HV], K = (uint64_t)d[KDART__D_K];
        const uint64_t BT = (uint64_t)d[KDART__D_B] * (uint64_t)d[KDART__D_T];
        const uint64_t HR = (uint64_t)d[KDART__D_HB] * (uint64_t)d[KDART__D_NT] * HV * K;
        const uint64_t dv3[3] = {V, HV, BT}, sv3[2] = {2 * V, 2 * V * HV};
        const uint64_t dh2[2] = {V, HR}, sh2[1] = {2 * V};
        const uint32_t bv3[3] = {64, 1, 64}, bh2[2] = {64, 64};
        const void *vt[4] = {p.dout, p.dv, p.v_new, p.v};
        int rc = KDART_OK;
        for (int i = 0; i < 4 && rc == KDART_OK; i++) rc = kdart__tmap(rt, &p.tm[i], c->io, vt[i], 3, dv3, sv3, bv3);
        if (rc == KDART_OK) rc = kdart__tmap(rt, &p.tm[4], c->io, p.h, 2, dh2, sh2, bh2);
        if (rc == KDART_OK) rc = kdart__tmap(rt, &p.tm[5], c->io, p.dh, 2, dh2, sh2, bh2);
        if (rc != KDART_OK) return rc;
    }
    if (!c->vals[7]) return kdart__launch(rt, fn, c->grid[0], c->grid[1], 1, u->threads, u->smem, stream, &p);
    /* intra: bwd_intra's parameter over wy_dqkg's outputs (read back and
     * updated in place), on the same grid */
    kdart_wy_intra_params pi = {
        p,
        {p.q, p.k, p.g, p.beta, p.dAqk, p.dA, p.dq, p.dk, p.dg, p.db, p.dq, p.dk, p.dg, p.db, p.B, p.T, p.H, p.HV,
         p.cu_seqlens, status, p.N, (int)c->grid[0], p.cu_is64, p.Kr},
        {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0.f, 1.f, 0, 0, 0, 0},
    };
    if (c->vals[8]) { /* the last step's gate and beta part (choose checked its conditions) */
        const kdart__post_split *x = c->extra;
        const kdart_bwd_post_args *pa = x->post;
        kdart_intra_post_params *q = &pi.post;
        q->g_raw = kdart__ptr(pa->g_raw), q->A_log = (const float *)kdart__ptr(pa->A_log);
        q->dt_bias = (const float *)kdart__ptr(pa->dt_bias), q->beta_raw = kdart__ptr(pa->beta_raw);
        q->dg = (void *)kdart__ptr(pa->dg), q->db = (void *)kdart__ptr(pa->db);
        q->part = pa->g_raw ? (float *)kdart__ptr(x->part) : NULL;
        q->lower_bound = pa->lower_bound, q->beta_scale = pa->beta_scale;
        q->safe_gate = pa->safe_gate != 0, q->db_io = pa->beta_io != 0, q->dg_f32 = kdart__dtype_of(pa->dg) == 32;
        if (((const kdart__post_split *)c->extra)->fused == 2) {
            q->dq = (void *)kdart__ptr(pa->dq), q->dk = (void *)kdart__ptr(pa->dk);
            q->q_rstd = (const float *)kdart__ptr(pa->q_rstd), q->k_rstd = (const float *)kdart__ptr(pa->k_rstd);
            q->qk = 1;
        }
    }
    return kdart__launch(rt, fn, c->grid[0], c->grid[1], 1, u->threads, u->smem, stream, &pi);
}

static const kdart__op op = {
    sizeof(ARGS), offsetof(ARGS, dAqk), "kdart_wy_dqkg_args", 18, 3,
    {
        KDART__TARG("q", ARGS, q, KDART__DT_IO, IN, B, T, H, K),
        KDART__TARG("k", ARGS, k, KDART__DT_IO, IN, B, T, H, K),
        KDART__TARG("v", ARGS, v, KDART__DT_IO, IN, B, T, HV, V),
        KDART__TARG("v_new", ARGS, v_new, KDART__DT_IO, IN, B, T, HV, V),
        KDART__TARG("g", ARGS, g, KDART__DT_F32, IN, B, T, HV, K),
        KDART__TARG("beta", ARGS, beta, KDART__DT_IO_F32, IN, B, T, HV),
        KDART__TARG("A", ARGS, A, KDART__DT_IO, IN, B, T, HV, 64),
        KDART__TARG("h", ARGS, h, KDART__DT_IO, IN, HB, NT, HV, S1, S2),
        KDART__TARG("dh", ARGS, dh, KDART__DT_IO, IN, HB, NT, HV, S1, S2),
        KDART__TARG("do", ARGS, d_o, KDART__DT_IO, IN, B, T, HV, V),
        KDART__TARG("dv", ARGS, dv, KDART__DT_IO, IN, B, T, HV, V),
        KDART__TARG("dq", ARGS, dq, KDART__DT_F32, OUT, B, T, HV, K),
        KDART__TARG("dk", ARGS, dk, KDART__DT_F32, OUT, B, T, HV, K),
        KDART__TARG("dv2", ARGS, dv2, KDART__DT_IO, OUT, B, T, HV, V),
        KDART__TARG("dg", ARGS, dg, KDART__DT_F32, OUT, B, T, HV, K),
        KDART__TARG("db", ARGS, db, KDART__DT_F32, OUT, B, T, HV),
        KDART__TARG("dA", ARGS, dA, KDART__DT_F32, OUT | KDART__A_OPTIONAL, B, T, HV, 64),
        KDART__TARG("dAqk", ARGS, dAqk, KDART__DT_F32, OUT | KDART__A_OPTIONAL, B, T, HV, 64),
    },
    {KDART__SARG("scale", ARGS, scale, 'f'), KDART__SARG("state_v_first", ARGS, state_v_first, 'i'),
     KDART__SARG("intra", ARGS, intra, 'i')},
    offsetof(ARGS, cu_seqlens), offsetof(ARGS, chunk_indices), 0,
    dims, choose, launch,
};

_Static_assert(2 * 3 * 2 * 2 * 2 * 2 * 2 * 2 * 2 <= KDART__MAX_SPECS, "wy_dqkg's specs exceed KDART__MAX_SPECS");

const kdart__kernel kdart__stage_wy_dqkg = {
    "wy_dqkg", "wy_dqkg.cuh", "kdart_wy_dqkg", 9,
    {KDART__IO_PARAM, KDART__K_PARAM, KDART__FLAG_PARAM("varlen"),
     /* tail: a head dim below the K tile or V not a multiple of 64 (element
      * loads and stores); svf: the V-first state layout of h and dh; dAqk:
      * the dAqk output (its accumulator's registers, in its own kernels) */
     KDART__FLAG_PARAM("tail"), KDART__BETA_PARAM, KDART__FLAG_PARAM("svf"), KDART__FLAG_PARAM("dAqk"),
     /* intra: bwd_intra's terms (fold_dg) added in the same launch; post: then the backward's last
      * step's gate and beta part (kdart_kda_chunk_bwd's) */
     KDART__FLAG_PARAM("intra"), KDART__FLAG_PARAM("post")},
    shape, prewarmed, stub, &op,
};

int kdart_kda_wy_dqkg(kdart_rt *rt, const kdart_wy_dqkg_args *a, void *stream) {
    return kdart__op_call(rt, &kdart__stage_wy_dqkg, a, stream, NULL, 0);
}
