/*
 * fwd_h: the forward state scan that chunk_kda_bwd recomputes (kernel_src/fwd_h.cuh;
 * fla's chunk_gated_delta_rule_fwd_h with the per-channel gate gk), kdart_kda_fwd_h:
 * h (the state entering each chunk), v_new and, when asked, the final state.  One CTA
 * per (sequence, value head, V tile) scans the chunks in order; the K
 * tile (64, 128, 256) and the V tile BV (32, 64) are template parameters.  Everything
 * kdart knows about the stage is here: its registry row, launch shape, default prewarm
 * rule, the V tile choice, and its operation's arguments, checks, specialization
 * choice and launch.
 */
#include "../stage.h"
#include "kda_params.h"

/* FwdHTraits<K, BV> in kernel_src/fwd_h.cuh: 128 threads, 256 (two warpgroups of 32
 * columns each) at <256, 64>; cp.async stages (three at the K tile 64, else two: two CTAs
 * an SM at 64 and 128) of kg and w (K/64 tiles of 64 x 64 io each), u (one tile) and
 * g_last (K floats), the IO(S) tiles and seq_of's scratch */
#define FWDH_THREADS(K, BV) (128 * ((K) == 256 && (BV) == 64 ? 2 : 1))
#define FWDH_STAGES(K, BV) ((K) == 64 ? 3 : 2)
#define FWDH_SMEM(K, BV) \
    (FWDH_STAGES(K, BV) * ((2 * (K) / 64 + 1) * 8192 + (K) * 4) + (K) / 64 * 8192 + 128)
/* uv: a stage holds A's tile too, and seq_of's scratch lies in the last stage's A tile */
#define FWDH_SMEM_UV(K, BV) (FWDH_SMEM(K, BV) + FWDH_STAGES(K, BV) * 8192 - 128)
_Static_assert(FWDH_SMEM_UV(64, 32) == 107264 && FWDH_SMEM_UV(128, 64) == 115712 && FWDH_SMEM_UV(256, 64) == 198656,
               "fwd_h's uv launch contract (kernel_src/fwd_h.cuh asserts the same)");
_Static_assert(FWDH_SMEM(64, 32) == 82816 && FWDH_SMEM(128, 32) == 99456 && FWDH_SMEM(128, 64) == 99456 &&
                   FWDH_SMEM(256, 64) == 182400,
               "fwd_h's launch contract (kernel_src/fwd_h.cuh asserts the same)");

#define FWDH_BVS(X) X(32) X(64)
#define INT_(v) v,
#define STR_(v) #v,
static const int fwdh_bvs[] = {FWDH_BVS(INT_)};
#define NBV ((int)(sizeof fwdh_bvs / sizeof fwdh_bvs[0]))

/* vals: io, K, BV, varlen, tail, uv */
static void shape(const int *vals, int *threads, int *smem) {
    const int K = kdart__k_tile_at(vals[1]), bv = fwdh_bvs[vals[2]];
    *threads = FWDH_THREADS(K, bv);
    *smem = vals[5] ? FWDH_SMEM_UV(K, bv) : FWDH_SMEM(K, bv);
}

/* The default prewarm set: bf16 (what the backward runs in), every native
 * specialization, and the masked ones at the K tile 128 (head dims below 128,
 * V not a multiple of the tile), each with u given (the stage call) and made
 * in the scan (the whole backward); the rest compile on first use. */
static int prewarmed(const int *vals) { return vals[0] == 0 && (vals[4] == 0 || kdart__k_tile_at(vals[1]) == 128); }

/* The scan is serial over chunks, so only the grid runs in parallel: 64
 * columns a scan (each scan copies the K-side tiles, kg and w, once for its
 * columns), unless that grid leaves SMs without a scan, where scans of 32
 * columns double the CTAs (two an SM) for the price of copying the K side
 * twice (mostly from L2).  (Both tiles run two CTAs an SM at the K tiles 64
 * and 128: from one 64-column scan an SM up, the wider tile does the columns
 * in fewer chunk steps.) */
static int pick_bv(long long N, long long HV, long long V, int sms) {
    const long long scans64 = N * HV * ((V + 63) / 64);
    return scans64 < (long long)(sms > 0 ? sms : 1) ? 32 : 64;
}

int kdart_fwd_h_v_tile(kdart_rt *rt, int64_t N, int64_t HV, int64_t K, int64_t V, int *v_tile) {
    KDART__CHECK_RT(rt);
    int sms = 0, rc = v_tile ? kdart__check_head_dim(rt, K) : kdart__err(rt, KDART_ENULL, "v_tile must not be NULL");
    if (rc == KDART_OK) rc = kdart__check_value_dim(rt, V);
    if (rc == KDART_OK && (N < 1 || HV < 1))
        rc = kdart__err(rt, KDART_ESHAPE, "N=%lld HV=%lld: need N, HV >= 1", (long long)N, (long long)HV);
    if (rc == KDART_OK) rc = kdart__cuda_sm_count(rt, &sms);
    if (rc == KDART_OK) *v_tile = pick_bv(N, HV, V, sms);
    return rc;
}

#define ARGS kdart_fwd_h_args
#define IN 0
#define OUT KDART__A_OUT
#define OPT KDART__A_OPTIONAL
/* aux slots from dims and choose to launch */
enum { AUX_SVF, AUX_BV };

static int dims(kdart_rt *rt, kdart__call *c) {
    const ARGS *a = c->args;
    int rc;
    if (!a->k || !a->k->shape || a->k->ndim != 4 || !a->u || !a->u->shape || a->u->ndim != 4)
        return kdart__err(rt, !a->k || !a->u ? KDART_ENULL : KDART_ESHAPE, "k must be [B,T,H,K] and u [B,T,HV,V]");
    if ((rc = kdart__call_io(rt, c, a->k, "k", 4)) != KDART_OK) return rc;
    const int64_t B = a->k->shape[0], T = a->k->shape[1], H = a->k->shape[2], K = a->k->shape[3];
    const int64_t HV = a->u->shape[2], V = a->u->shape[3];
    if ((rc = kdart__check_head_dim(rt, K)) != KDART_OK) return rc;
    if ((rc = kdart__check_value_dim(rt, V)) != KDART_OK) return rc;
    if ((rc = kdart__check_heads(rt, B, T, H, HV, "u")) != KDART_OK) return rc;
    if (a->v_tile != 0 && a->v_tile != 32 && a->v_tile != 64)
        return kdart__err(rt, KDART_EUNSUPPORTED, "v_tile=%d is not supported (0 = chosen by kdart, or 32, 64)",
                          a->v_tile);
    if ((rc = kdart__call_seqs(rt, c, B, T)) != KDART_OK) return rc;
    if (!a->A != !a->beta) return kdart__err(rt, KDART_ENULL, "A and beta go together (u made from v), or neither");
    const int svf = a->state_v_first != 0;
    const int64_t N = c->sq.N;
    /* the grid is (V/BV, N*HV): one serial scan per sequence, value head and V tile */
    if (N * HV > 65535 || T > INT32_MAX)
        return kdart__err(rt, KDART_EUNSUPPORTED, "problem too large: N*HV=%lld scans (at most 65535), T=%lld",
                          (long long)(N * HV), (long long)T);
    /* h's chunk rows: exactly ceil(T/64) per row at fixed length; packed: any NT >= 1 (>= the
     * rows of chunk_indices, when given: fla sizes h by it), the kernel checks the rest */
    int64_t NT = (T + KDART_CHUNK - 1) / KDART_CHUNK;
    if (c->sq.cu && (rc = kdart__packed_chunk_rows(rt, c, a->h, "h", svf, &NT)) != KDART_OK) return rc;
    if (NT > INT32_MAX)
        return kdart__err(rt, KDART_EUNSUPPORTED, "h has %lld chunk rows (at most 2^31 - 1)", (long long)NT);
    const int64_t sizes[][2] = {{KDART__D_B, B},   {KDART__D_T, T},   {KDART__D_H, H},   {KDART__D_HV, HV},
                                {KDART__D_K, K},   {KDART__D_V, V},   {KDART__D_N, N},   {KDART__D_NT, NT},
                                {KDART__D_S1, svf ? V : K}, {KDART__D_S2, svf ? K : V}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) c->d[sizes[i][0]] = sizes[i][1];
    c->max_chunks = NT;
    c->aux[AUX_SVF] = svf;
    return KDART_OK;
}

static int choose(kdart_rt *rt, kdart__call *c) {
    const ARGS *a = c->args;
    const int64_t K = c->d[KDART__D_K], V = c->d[KDART__D_V];
    int bv = a->v_tile, rc;
    if (bv == 0) {
        int sms = 1;
        if ((rc = kdart__cuda_sm_count(rt, &sms)) != KDART_OK) return rc;
        bv = pick_bv(c->d[KDART__D_N], c->d[KDART__D_HV], V, sms);
    }
    const int kt = kdart__k_tile(K);
    /* the masked specialization for a head dim below its K tile or a partial last V tile */
    const int v[6] = {c->io, kdart__k_index(kt), bv == 32 ? 0 : 1, c->sq.varlen, K != kt || V % bv != 0, a->A != NULL};
    memcpy(c->vals, v, sizeof v);
    c->aux[AUX_BV] = bv;
    return KDART_OK;
}

static int launch(kdart_rt *rt, const kdart__call *c, const kdart__unit *u, void *fn, int *status, void *stream) {
    const ARGS *a = c->args;
    const int64_t *d = c->d;
    const int64_t V = d[KDART__D_V], bv = c->aux[AUX_BV];
    /* the uv specializations take the common fields followed by A and beta */
    kdart_fwd_h_uv_params p = {
        {
            kdart__ptr(a->k), kdart__ptr(a->w), kdart__ptr(a->u), kdart__ptr(a->gk), kdart__ptr(a->h0),
            (void *)kdart__ptr(a->h), (void *)kdart__ptr(a->v_new), (float *)kdart__ptr(a->ht),
            (int)d[KDART__D_B], (int)d[KDART__D_T], (int)d[KDART__D_H], (int)d[KDART__D_HV], (int)V,
            kdart__ptr(c->sq.cu), status, (int)d[KDART__D_N], (int)d[KDART__D_NT], c->sq.is64, (int)d[KDART__D_K],
            c->aux[AUX_SVF],
        },
        kdart__ptr(a->A), kdart__ptr(a->beta), a->beta && a->beta->dtype.bits == 32,
    };
    return kdart__launch(rt, fn, (unsigned)((V + bv - 1) / bv), (unsigned)(d[KDART__D_N] * d[KDART__D_HV]), 1,
                         u->threads, u->smem, stream, &p);
}

static const kdart__op op = {
    sizeof(ARGS), sizeof(ARGS), "kdart_fwd_h_args", 10, 2,
    {
        KDART__TARG("k", ARGS, k, KDART__DT_IO, IN, B, T, H, K),
        KDART__TARG("w", ARGS, w, KDART__DT_IO, IN, B, T, HV, K),
        KDART__TARG("u", ARGS, u, KDART__DT_IO, IN, B, T, HV, V),
        KDART__TARG("gk", ARGS, gk, KDART__DT_F32, IN, B, T, HV, K),
        KDART__TARG("h0", ARGS, h0, KDART__DT_F32, IN | OPT, N, HV, S1, S2),
        KDART__TARG("h", ARGS, h, KDART__DT_IO, OUT, B, NT, HV, S1, S2),
        KDART__TARG("v_new", ARGS, v_new, KDART__DT_IO, OUT | OPT, B, T, HV, V),
        KDART__TARG("ht", ARGS, ht, KDART__DT_F32, OUT | OPT, N, HV, S1, S2),
        KDART__TARG("A", ARGS, A, KDART__DT_IO, IN | OPT, B, T, HV, 64),
        KDART__TARG("beta", ARGS, beta, KDART__DT_IO_F32, IN | OPT, B, T, HV),
    },
    {KDART__SARG("v_tile", ARGS, v_tile, 'i'), KDART__SARG("state_v_first", ARGS, state_v_first, 'i')},
    offsetof(ARGS, cu_seqlens), offsetof(ARGS, chunk_indices), offsetof(ARGS, chunk_offsets),
    dims, choose, launch,
};

_Static_assert(2 * 3 * NBV * 2 * 2 * 2 <= KDART__MAX_SPECS, "fwd_h's specs exceed KDART__MAX_SPECS");

const kdart__kernel kdart__stage_fwd_h = {
    "fwd_h", "fwd_h.cuh", "kdart_fwd_h", 6,
    {KDART__IO_PARAM, KDART__K_PARAM, {"BV", NBV, {FWDH_BVS(STR_)}, {FWDH_BVS(STR_)}, NBV - 1},
     KDART__FLAG_PARAM("varlen"),
     /* tail: a head dim below the K tile or V not a multiple of BV (masked copies and stores) */
     KDART__FLAG_PARAM("tail"),
     /* uv: u made from v, A and beta in the scan (kdart_kda_chunk_bwd's; A and beta given) */
     KDART__FLAG_PARAM("uv")},
    shape, prewarmed, NULL, &op,
};

int kdart_kda_fwd_h(kdart_rt *rt, const kdart_fwd_h_args *a, void *stream) {
    return kdart__op_call(rt, &kdart__stage_fwd_h, a, stream, NULL, 0);
}
