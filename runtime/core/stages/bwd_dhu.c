/*
 * bwd_dhu: the reverse scan of the state gradient (kernel_src/bwd_dhu.cuh;
 * fla's chunk_gated_delta_rule_bwd_dhu), kdart_kda_bwd_dhu.  One CTA per
 * (sequence, value head, V tile) scans the chunks in reverse; the K tile
 * (64, 128, 192, 256) and the V tile BV (16, 32, 64) are template
 * parameters.  Everything kdart knows about the stage is here: its registry
 * row, launch shape, default prewarm rule, the V tile choice, and its
 * operation's arguments, checks, specialization choice and launch.
 */
#include "../stage.h"
#include "kda_params.h"

/* BwdDhuTraits<K, BV>::kWGs: warpgroups of 128 threads (kCtaThreads), two at
 * the K tiles 192 and 256 with BV 64, each scanning 32 of the columns */
#define DHU_WGS(K, BV) ((K) >= 192 && (BV) == 64 ? 2 : 1)
#define DHU_THREADS(K, BV) (128 * DHU_WGS(K, BV))
/* BwdDhuTraits<K, BV>::kSmemBytes: cp.async stages (three; two at K = 192, 256)
 * of kg, qg, w ([64][K] io), do, dv ([64][BV] io) and one fp32 g row, each
 * stage rounded up to 1 KB (where wgmma's swizzle patterns repeat), plus
 * IO(dH) [K][BV]; with two warpgroups qg has one buffer outside the stages */
#define DHU_STAGES(K) ((K) >= 192 ? 2 : 3)
#define DHU_QONE(K, BV) ((K) == 256 && DHU_WGS(K, BV) > 1)
#define DHU_STAGE(K, BV) (((3 - DHU_QONE(K, BV)) * 64 * (K) * 2 + 2 * 64 * (BV) * 2 + (K) * 4 + 1023) / 1024 * 1024)
#define DHU_SMEM(K, BV) (DHU_STAGES(K) * DHU_STAGE(K, BV) + DHU_QONE(K, BV) * 64 * (K) * 2 + (K) * (BV) * 2)
_Static_assert(DHU_SMEM(256, 64) == 231424 && DHU_SMEM(256, 32) == 231424 && DHU_SMEM(128, 64) == 216064 &&
                   DHU_SMEM(192, 32) == 178176 && DHU_SMEM(192, 64) == 206848,
               "bwd_dhu's launch contract (kernel_src/bwd_dhu.cuh asserts the same)");

/* The V tiles and the K tiles (one more than the other stages': 192, where a
 * head dim in 129..192 scans a quarter fewer K-side bytes than in the 256
 * tile), each written once: the parameters' strings and the integers the
 * rules work with both expand these lists. */
#define DHU_BVS(X) X(16) X(32) X(64)
#define DHU_KS(X) X(64) X(128) X(192) X(256)
#define INT_(v) v,
#define STR_(v) #v,
static const int dhu_bvs[] = {DHU_BVS(INT_)};
static const int dhu_k_tiles[] = {DHU_KS(INT_)};
#define NBV ((int)(sizeof dhu_bvs / sizeof dhu_bvs[0]))
#define NDK ((int)(sizeof dhu_k_tiles / sizeof dhu_k_tiles[0]))

int kdart__dhu_k_tile(int64_t K) { return K > 128 && K <= 192 ? 192 : kdart__k_tile(K); }
int kdart__dhu_k_index(int k_tile) {
    for (int i = 0; i < NDK; i++)
        if (dhu_k_tiles[i] == k_tile) return i;
    return -1;
}
int kdart__dhu_bv_index(int bv) {
    for (int i = 0; i < NBV; i++)
        if (dhu_bvs[i] == bv) return i;
    return -1;
}

/* Every (K, BV) is a kernel (the K tiles 192 and 256 run BV 64 as two
 * warpgroups of 32 columns).  vals: io, K, BV, varlen, tail. */
static void shape(const int *vals, int *threads, int *smem) {
    int K = dhu_k_tiles[vals[1]], bv = dhu_bvs[vals[2]];
    *threads = DHU_THREADS(K, bv);
    *smem = DHU_SMEM(K, bv);
}

/* The default prewarm set: every native specialization; the K tile 192
 * native and bf16 only; the masked and V-first ones (tail 1: head dim 100,
 * partial V tiles; tail 2: the V-first state of K = 128 models) in bf16 at
 * the K tile 128.  The others compile on first use (about 0.5 s each). */
static int prewarmed(const int *vals) {
    if (dhu_k_tiles[vals[1]] == 192) return vals[0] == 0 && vals[4] == 0;
    if (vals[4] != 0) return vals[0] == 0 && dhu_k_tiles[vals[1]] == 128;
    return 1;
}

/* The scan is serial over chunks, so only the grid runs in parallel: a CTA
 * (one scan of BV columns) takes about the same time per chunk wherever it
 * runs, and the launch takes ceil(CTAs / SMs) of those times (every tile
 * width runs one CTA per SM at K = 128; at K = 64 two fit, but the pair
 * shares the SM, so it is not counted as free).  The relative per-chunk
 * times below were measured on the H200 with an earlier, mma.sync-only form of
 * the kernel (at K = 128 a 64-column scan took 2.15 us per chunk, 32 columns
 * 1.35 us, 16 columns 1.01 us); with the wgmma kernel of today they still pick
 * the measured-best tile on every row of the standard table (measured on the
 * H200 at every tile width).  The narrower tile wins only when its extra
 * waves are paid for; ties go to the wider tile, which moves fewer K-side
 * bytes. */
int kdart__dhu_pick_bv(long long B, long long HV, long long V, int K, int sms) {
    /* per-chunk time, per mille of the widest tile; one entry per dhu_bvs value */
    static const int rel128[NBV] = {470, 630, 1000};
    static const int rel64[NBV] = {550, 745, 1000};
    /* K = 192 and 256: BV 64 is two warpgroups over one copy of the K-side tiles
     * (K = 256 on one wave, B1 T8192 H4, on the H200: 0.244, 0.283, 0.463 ms; 192 taken as 256's) */
    static const int rel256[NBV] = {530, 610, 1000};
    const int kt0 = kdart__dhu_k_tile(K), kt = kt0 > 0 ? kt0 : 128;
    const int *rel = kt == 64 ? rel64 : kt >= 192 ? rel256 : rel128;
    if (sms < 1) sms = 1;
    int best = -1;
    long long best_cost = -1;
    for (int i = NBV - 1; i >= 0; i--) {
        long long ctas = B * HV * ((V + dhu_bvs[i] - 1) / dhu_bvs[i]);
        long long cost = (ctas + sms - 1) / sms * rel[i];
        if (best_cost < 0 || cost < best_cost) best = i, best_cost = cost;
    }
    return dhu_bvs[best];
}

/* The V split (bwd_dhu.cuh, kdart::dhu::varlen64): packed sequences at BV
 * 64 in a grid of at most 4 waves, where one long sequence can outlast
 * all the others; each CTA then picks 32 or 64 columns from its own
 * sequence's length.  Larger grids keep their balance by themselves. */
int kdart__dhu_v_split(int packed, long long N, long long HV, long long V, int64_t K, int sms) {
    return packed && kdart__dhu_k_tile(K) <= 128 && N * HV * ((V + 63) / 64) <= 4LL * sms;
}

int kdart_dhu_v_tile(kdart_rt *rt, int64_t B, int64_t HV, int64_t K, int64_t V, int *v_tile) {
    KDART__CHECK_RT(rt);
    if (!v_tile) return kdart__err(rt, KDART_ENULL, "v_tile must not be NULL");
    int sms, rc;
    if ((rc = kdart__check_head_dim(rt, K)) != KDART_OK) return rc;
    if ((rc = kdart__check_value_dim(rt, V)) != KDART_OK) return rc;
    if (B < 1 || HV < 1)
        return kdart__err(rt, KDART_ESHAPE, "B=%lld HV=%lld: need B, HV >= 1", (long long)B, (long long)HV);
    if ((rc = kdart__cuda_sm_count(rt, &sms)) != KDART_OK) return rc;
    *v_tile = kdart__dhu_pick_bv(B, HV, V, (int)K, sms);
    return KDART_OK;
}

#define ARGS kdart_bwd_dhu_args
#define IN 0
#define OUT KDART__A_OUT
#define OPT KDART__A_OPTIONAL
/* aux slots from choose to launch */
enum { AUX_SVF, AUX_V_SPLIT, AUX_BV, AUX_SMS, AUX_AQK };

static int dims(kdart_rt *rt, kdart__call *c) {
    const ARGS *a = c->args;
    int rc;
    if (!a->qg || !a->qg->shape || a->qg->ndim != 4 || !a->d_o || !a->d_o->shape || a->d_o->ndim != 4)
        return kdart__err(rt, !a->qg || !a->d_o ? KDART_ENULL : KDART_ESHAPE,
                          "qg must be [B,T,HV,K] and do [B,T,HV,V]");
    if ((rc = kdart__call_io(rt, c, a->qg, "qg", 4)) != KDART_OK) return rc;
    const int64_t B = a->qg->shape[0], T = a->qg->shape[1], HV = a->qg->shape[2], K = a->qg->shape[3];
    const int64_t V = a->d_o->shape[3];
    if ((rc = kdart__check_head_dim(rt, K)) != KDART_OK) return rc;
    if ((rc = kdart__check_value_dim(rt, V)) != KDART_OK) return rc;
    if (B < 1 || T < 1 || HV < 1)
        return kdart__err(rt, KDART_ESHAPE, "empty tensor: B=%lld T=%lld HV=%lld V=%lld", (long long)B,
                          (long long)T, (long long)HV, (long long)V);
    if ((rc = kdart__call_seqs(rt, c, B, T)) != KDART_OK) return rc;
    const int svf = kdart__arg_int(c, offsetof(ARGS, state_v_first)) != 0; /* (a 0.2 field) */
    if (a->v_tile != 0 && kdart__dhu_bv_index(a->v_tile) < 0)
        return kdart__err(rt, KDART_EUNSUPPORTED, "v_tile=%d is not supported (0 = chosen by kdart, or 16, 32, 64)",
                          a->v_tile);
    /* dv, or Aqk (the dAv stage fused: DV starts from Aqk^T do), exactly one */
    const DLTensor *aqk = kdart__arg(c, offsetof(ARGS, Aqk));
    if (!a->dv == !aqk)
        return kdart__err(rt, a->dv ? KDART_EINVAL : KDART_ENULL, "give dv or Aqk (%s)",
                          a->dv ? "not both" : "both are NULL");
    if (aqk && (K != 64 && K != 128))
        return kdart__err(rt, KDART_EUNSUPPORTED, "Aqk (the fused dv) needs K = 64 or 128, not %lld", (long long)K);
    if (aqk && V % 64 != 0)
        return kdart__err(rt, KDART_EUNSUPPORTED, "Aqk (the fused dv) needs V a multiple of 64, not %lld",
                          (long long)V);
    if (aqk && a->v_tile != 0 && a->v_tile != 64)
        return kdart__err(rt, KDART_EUNSUPPORTED, "Aqk (the fused dv) runs the V tile 64, not v_tile=%d", a->v_tile);
    c->aux[AUX_AQK] = aqk != NULL;
    const int64_t N = c->sq.N;
    /* dh's chunk rows: exactly ceil(T/64) per row at fixed length; packed:
     * the total is known only on the device, so any NT >= 1 (>= the rows of
     * chunk_indices, when given: fla sizes dh by it) and the kernel checks */
    int64_t NT = (T + KDART_CHUNK - 1) / KDART_CHUNK;
    if (c->sq.cu && (rc = kdart__packed_chunk_rows(rt, c, a->dh, "dh", svf, &NT)) != KDART_OK) return rc;
    /* Both bodies index with 64-bit offsets; the grid is (V/BV, N*HV), one
     * serial scan per sequence, value head and V tile */
    if (T > INT32_MAX || NT > INT32_MAX || N * HV > 65535)
        return kdart__err(rt, KDART_EUNSUPPORTED, "problem too large: N*HV=%lld scans (at most 65535)",
                          (long long)(N * HV));
    int64_t *d = c->d;
    d[KDART__D_B] = B, d[KDART__D_T] = T, d[KDART__D_HV] = HV, d[KDART__D_K] = K, d[KDART__D_V] = V;
    d[KDART__D_N] = N, d[KDART__D_NT] = NT;
    /* the state's two trailing dims: [K, V], or [V, K] with state_v_first */
    d[KDART__D_S1] = svf ? V : K, d[KDART__D_S2] = svf ? K : V;
    c->max_chunks = NT;
    c->aux[AUX_SVF] = svf;
    return KDART_OK;
}

static int choose(kdart_rt *rt, kdart__call *c) {
    const ARGS *a = c->args;
    const int64_t K = c->d[KDART__D_K], V = c->d[KDART__D_V], HV = c->d[KDART__D_HV], N = c->d[KDART__D_N];
    const int kt = kdart__dhu_k_tile(K), svf = c->aux[AUX_SVF];
    /* with Aqk (the fused dv) the V tile is 64 whatever the grid; fused_auto: kdart was left the choice */
    const int fused_auto = c->aux[AUX_AQK] && a->v_tile == 0 && !c->plan;
    int bv = c->aux[AUX_AQK] ? 64 : a->v_tile, v_split = 0, sms = 1, rc;
    /* the SM count, for the tile choice, the grid shapes (pairs: the K tile 256 on packed sequences with
     * HV even, see "Head pairs" in launch) and the fused dv's refusal below (kdart_spec_for: neither the
     * pairs nor that refusal are part of the spec) */
    const int pairable = c->sq.varlen && kt == 256 && HV % 2 == 0;
    if (bv == 0 || (fused_auto && c->sq.cu) || (pairable && !c->plan)) {
        if ((rc = kdart__cuda_sm_count(rt, &sms)) != KDART_OK) return rc;
        if (sms < 1) sms = 1; /* 0 when the query failed, as kdart__dhu_pick_bv reads it */
    }
    /* the V split (kdart__dhu_v_split) */
    const int split_grid = kdart__dhu_v_split(c->sq.cu != NULL, N, HV, V, K, sms);
    if (bv == 0) {
        bv = kdart__dhu_pick_bv(N, HV, V, (int)K, sms);
        if (bv == 64 && split_grid) v_split = sms;
    } else if (fused_auto && split_grid && c->extra) {
        /* kdart_kda_chunk_bwd's packed calls: the split, its 64-column scans with the dv fused, its 32-column
         * ones (the long sequences') reading the dv that bwd_dav wrote for them alone (extra) */
        v_split = sms;
    } else if (fused_auto && split_grid) {
        /* the fused dv scans the tile 64 whole, where one long sequence would set the time: such calls are
         * left to the unfused form (a caller's explicit v_tile = 64 has no split either way) */
        return kdart__err(rt, KDART_EUNSUPPORTED,
                          "Aqk (the fused dv): packed sequences on %lld scans of 64 columns (at most 4 waves) "
                          "take the V split, which the fused form does not have; pass dv",
                          (long long)(N * HV * ((V + 63) / 64)));
    }
    /* the masked specialization (tail 1) for what the native tiles cannot
     * take: a head dim below its K tile, a partial last V tile; the V-first
     * state at native dims has its own (tail 2: the native copies) */
    const int full = K == kt && V % bv == 0;
    const int v[5] = {c->io, kdart__dhu_k_index(kt), kdart__dhu_bv_index(bv), c->sq.varlen, !full ? 1 : svf ? 2 : 0};
    memcpy(c->vals, v, sizeof v);
    c->aux[AUX_V_SPLIT] = v_split, c->aux[AUX_BV] = bv, c->aux[AUX_SMS] = sms;
    return KDART_OK;
}

static int launch(kdart_rt *rt, const kdart__call *c, const kdart__unit *u, void *fn, int *status, void *stream) {
    const ARGS *a = c->args;
    const int64_t *d = c->d;
    const int64_t N = d[KDART__D_N], HV = d[KDART__D_HV], V = d[KDART__D_V];
    const int bv = c->aux[AUX_BV], v_split = c->aux[AUX_V_SPLIT], sms = c->aux[AUX_SMS];
    /* Head pairs (bwd_dhu.cuh, kdart::dhu::pair_heads): packed sequences at the
     * native K tile 256, where one CTA fills an SM and each waits for its first
     * chunk alone; a CTA scans two heads of one sequence, the second's first
     * chunk copied during the first's last.  Only on grids of at least 8
     * waves, which halving keeps at 4 or more (fewer CTAs than that would
     * leave SMs idle at the end instead); the sm_90a build alone has them
     * (measured there only).  Not at BV 64, two warpgroups per CTA: there they
     * measured slower on the H200 (45 packed documents at K = V = 256: 1.298
     * against 1.254 ms without pairs). */
    const int pair = c->sq.varlen && kdart__dhu_k_tile(d[KDART__D_K]) == 256 && HV % 2 == 0 && c->vals[4] == 0 &&
                     bv != 64 && strcmp(u->arch, "sm_90a") == 0 && N * HV * ((V + bv - 1) / bv) >= 8LL * sms;
    /* extra (kdart_kda_chunk_bwd's packed calls on the split): bwd_dav's dv of the long sequences, beside Aqk */
    const void *dv = c->extra ? kdart__ptr((const DLTensor *)c->extra) : kdart__ptr(a->dv);
    kdart_bwd_dhu_params p = {
        kdart__ptr(a->qg), kdart__ptr(a->kg), kdart__ptr(a->w), kdart__ptr(a->g), kdart__ptr(a->d_o),
        dv, kdart__ptr(a->dht), (void *)kdart__ptr(a->dh), (void *)kdart__ptr(a->dv2),
        (float *)kdart__ptr(a->dh0), a->scale, (int)d[KDART__D_B], (int)d[KDART__D_T], (int)HV, (int)V,
        kdart__ptr(c->sq.cu), status, (int)N, (int)d[KDART__D_NT], c->sq.is64, (int)d[KDART__D_K],
        c->aux[AUX_SVF], v_split, pair, kdart__ptr(kdart__arg(c, offsetof(ARGS, Aqk))),
    };
    const int64_t tile = v_split ? 32 : bv; /* the split grid has a CTA per 32 columns */
    return kdart__launch(rt, fn, (unsigned)((V + tile - 1) / tile), (unsigned)(pair ? N * HV / 2 : N * HV), 1,
                         u->threads, u->smem, stream, &p);
}

static const kdart__op op = {
    sizeof(ARGS), offsetof(ARGS, cu_seqlens), "kdart_bwd_dhu_args", 11, 3,
    {
        KDART__TARG("qg", ARGS, qg, KDART__DT_IO, IN, B, T, HV, K),
        KDART__TARG("kg", ARGS, kg, KDART__DT_IO, IN, B, T, HV, K),
        KDART__TARG("w", ARGS, w, KDART__DT_IO, IN, B, T, HV, K),
        KDART__TARG("g", ARGS, g, KDART__DT_F32, IN, B, T, HV, K),
        KDART__TARG("do", ARGS, d_o, KDART__DT_IO, IN, B, T, HV, V),
        KDART__TARG("dv", ARGS, dv, KDART__DT_IO, IN | OPT, B, T, HV, V),
        KDART__TARG("dht", ARGS, dht, KDART__DT_F32, IN | OPT, N, HV, S1, S2),
        KDART__TARG("Aqk", ARGS, Aqk, KDART__DT_IO, IN | OPT, B, T, HV, 64),
        KDART__TARG("dh", ARGS, dh, KDART__DT_IO, OUT, B, NT, HV, S1, S2),
        KDART__TARG("dv2", ARGS, dv2, KDART__DT_IO, OUT, B, T, HV, V),
        KDART__TARG("dh0", ARGS, dh0, KDART__DT_F32, OUT | OPT, N, HV, S1, S2),
    },
    {KDART__SARG("scale", ARGS, scale, 'f'), KDART__SARG("v_tile", ARGS, v_tile, 'i'),
     KDART__SARG("state_v_first", ARGS, state_v_first, 'i')},
    offsetof(ARGS, cu_seqlens), offsetof(ARGS, chunk_indices), offsetof(ARGS, chunk_offsets),
    dims, choose, launch,
};

_Static_assert(2 * NDK * NBV * 2 * 3 <= KDART__MAX_SPECS, "bwd_dhu's specs exceed KDART__MAX_SPECS");

const kdart__kernel kdart__stage_bwd_dhu = {
    "bwd_dhu", "bwd_dhu.cuh", "kdart_bwd_dhu", 5,
    {KDART__IO_PARAM, {"K", NDK, {DHU_KS(STR_)}, {DHU_KS(STR_)}, 1}, {"BV", NBV, {DHU_BVS(STR_)}, {DHU_BVS(STR_)}, NBV - 1},
     KDART__FLAG_PARAM("varlen"),
     /* tail: 0 native, 1 masked (head dims below the K tile, partial V tiles,
      * the V-first state at those), 2 the V-first state at native dims */
     {"tail", 3, {"0", "1", "2"}, {"0", "1", "2"}, 0}},
    shape, prewarmed, NULL, &op,
};

int kdart_kda_bwd_dhu(kdart_rt *rt, const kdart_bwd_dhu_args *a, void *stream) {
    return kdart__op_call(rt, &kdart__stage_bwd_dhu, a, stream, NULL, 0);
}
