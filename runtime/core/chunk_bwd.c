/*
 * chunk_bwd.c: kdart_kda_chunk_bwd, the whole KDA backward of fla's chunk_kda
 * in one C call, and kdart_chunk_bwd_workspace, the scratch it needs.  It
 * runs the stages kdart.torch's stage calls run, in the same order and with
 * the same choices: the recompute (the gate's cumsum with w, u, qg, kg),
 * fwd_h (h and v_new), bwd_dhu with fla's dAv fused (or bwd_dav first where
 * the grid says so), wy_dqkg with bwd_intra's terms in its launch, bwd_post.
 * Packed sequences on a grid of a few waves go through bwd_dhu's V split
 * (one long sequence would set the time): its 64-column scans still take the
 * dAv fused, and bwd_dav first writes dv only for the long sequences whose
 * scans run 32 columns at a time (the kernels decide which, on the device,
 * from cu_seqlens: the host never reads it).
 * Where wy_dqkg's kernel can (a native K tile, dg in the io dtype), the last
 * step's gate and beta part runs at the end of wy_dqkg's launch, where dg and
 * db are final in registers, and bwd_post does the rest (dq, dk, and the
 * A_log / dt_bias sums from a partial row per chunk): the same bits as the
 * stage calls but for dA_log and ddt_bias, summed in another fixed order
 * (KDART_FUSE_POST=0 keeps it all in bwd_post).  Every intermediate lives in the
 * caller's workspace, carved here in a fixed layout.  Every stage's arguments
 * are checked (kdart_spec_for) before the first launch, so a bad call
 * launches nothing and writes nothing.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "stage.h"
#include "kda_params.h"

/* One workspace view: a contiguous DLTensor at a byte offset of the workspace. */
typedef struct view {
    DLTensor t;
    int64_t shape[5];
} view;

typedef struct carver {
    const DLTensor *ws; /* NULL: only count the bytes */
    uint64_t off;       /* bytes used so far */
} carver;

#define ALIGN 256

/* The next view of ndim dims of dtype dt (bits: 16 or 32; code: a DLPack type code). */
static const DLTensor *carve(carver *cv, view *v, uint8_t code, uint8_t bits, int ndim, int64_t d0, int64_t d1,
                             int64_t d2, int64_t d3, int64_t d4) {
    const int64_t d[5] = {d0, d1, d2, d3, d4};
    uint64_t n = 1;
    memset(v, 0, sizeof *v);
    for (int i = 0; i < ndim; i++) v->shape[i] = d[i], n *= (uint64_t)d[i];
    cv->off = (cv->off + ALIGN - 1) / ALIGN * ALIGN;
    if (cv->ws) {
        v->t.data = cv->ws->data;
        v->t.device = cv->ws->device;
        v->t.byte_offset = cv->ws->byte_offset + cv->off;
    }
    v->t.ndim = ndim;
    v->t.dtype.code = code, v->t.dtype.bits = bits, v->t.dtype.lanes = 1;
    v->t.shape = v->shape;
    cv->off += n * (bits / 8);
    return &v->t;
}

/* Everything one call needs, read from its args. */
typedef struct plan {
    int64_t B, T, H, HV, K, V, N, NT, HB;
    int gate, fused, svf, packed, recompute;
    int fuse_u; /* the recompute without u: fwd_h makes it from v, Akk and beta */
    int split; /* fused, packed, and bwd_dhu's V split: bwd_dav for its long sequences first */
    uint8_t io_code; /* kDLBfloat or kDLFloat (fp16) */
} plan;

static int sizes(kdart_rt *rt, const kdart_chunk_bwd_args *a, plan *p) {
    if (!a->q || !a->q->shape || a->q->ndim != 4 || !a->v || !a->v->shape || a->v->ndim != 4)
        return kdart__err(rt, !a->q || !a->v ? KDART_ENULL : KDART_ESHAPE, "q must be [B,T,H,K] and v [B,T,HV,V]");
    p->B = a->q->shape[0], p->T = a->q->shape[1], p->H = a->q->shape[2], p->K = a->q->shape[3];
    p->HV = a->v->shape[2], p->V = a->v->shape[3];
    if (a->q->dtype.bits != 16 || a->q->dtype.lanes != 1 ||
        (a->q->dtype.code != kDLBfloat && a->q->dtype.code != kDLFloat))
        return kdart__err(rt, KDART_EDTYPE, "q must be bfloat16 or float16 (the io dtype)");
    p->io_code = a->q->dtype.code;
    p->gate = a->A_log != NULL;
    if (p->gate && !a->g) return kdart__err(rt, KDART_ENULL, "the gate in the kernel (A_log given) needs the raw gate g");
    if (!p->gate && !a->g_cumsum)
        return kdart__err(rt, KDART_ENULL, "without the gate in the kernel (A_log NULL), g_cumsum is needed");
    p->recompute = a->w == NULL;
    if (!p->recompute && (!a->u || !a->qg || !a->kg || !a->v_new || !a->h || !a->g_cumsum))
        return kdart__err(rt, KDART_ENULL, "without the recompute (w given), u, qg, kg, v_new, h and g_cumsum are needed");
    p->packed = a->cu_seqlens != NULL;
    if (p->packed && !a->chunk_indices)
        return kdart__err(rt, KDART_ENULL, "packed sequences need chunk_indices (chunk_kda's forward makes them)");
    if (p->packed && (!a->cu_seqlens->shape || a->cu_seqlens->ndim != 1 || a->cu_seqlens->shape[0] < 2 ||
                      !a->chunk_indices->shape || a->chunk_indices->ndim != 2 || a->chunk_indices->shape[0] < 1))
        return kdart__err(rt, KDART_ESHAPE, "cu_seqlens must be [N+1] (N >= 1) and chunk_indices [NT,2]");
    p->N = p->packed ? a->cu_seqlens->shape[0] - 1 : p->B;
    p->NT = p->packed ? a->chunk_indices->shape[0] : (p->T + KDART_CHUNK - 1) / KDART_CHUNK;
    p->HB = p->packed ? 1 : p->B;
    p->svf = a->state_v_first != 0;
    if (p->B < 1 || p->T < 1 || p->H < 1 || p->HV < 1 || p->K < 1 || p->V < 1)
        return kdart__err(rt, KDART_ESHAPE, "every size must be >= 1");
    /* fla's dAv inside bwd_dhu and wy_dqkg: K 64 or 128, V a multiple of 64 up to 512, on grids where
     * bwd_dhu runs the V tile 64 (packed ones of at most 4 waves through its V split, where bwd_dav serves
     * the long sequences first: split); the SM count unknown (no CUDA): fused */
    p->fuse_u = rt->fuse_u && p->recompute;
    p->fused = rt->fuse_dav && (p->K == 64 || p->K == 128) && p->V % 64 == 0 && p->V <= 512;
    int sms = 0;
    p->split = 0;
    if (p->fused && kdart__cuda_sm_count(rt, &sms) == KDART_OK && sms > 0) {
        const int bv = kdart__dhu_pick_bv(p->N, p->HV, p->V, (int)p->K, sms);
        if (bv != 64) p->fused = 0;
        else p->split = kdart__dhu_v_split(p->packed, p->N, p->HV, p->V, p->K, sms);
    }
    return KDART_OK;
}

/* The stages' args of one call, over the workspace views. */
typedef struct stages {
    view gk, w, u, qg, kg, h, vn, dh, dv2, dq1, dk1, dg1, db1, dvi, pws, part;
    kdart_recompute_wu_args rwu;
    kdart_fwd_h_args fwdh;
    kdart_bwd_dav_args dav;
    kdart_bwd_dhu_args dhu;
    kdart_wy_dqkg_args wy;
    kdart_bwd_post_args post;
    kdart__post_split split; /* the last step's gate part in wy_dqkg's launch where it can */
    uint64_t bytes;
} stages;

static void build(const kdart_chunk_bwd_args *a, const plan *p, const DLTensor *ws, stages *s) {
    carver cv = {ws, 0};
    const uint8_t io = p->io_code, F = kDLFloat;
    const int64_t B = p->B, T = p->T, H = p->H, HV = p->HV, K = p->K, V = p->V;
    const int64_t S1 = p->svf ? V : K, S2 = p->svf ? K : V;
    memset(s, 0, sizeof *s);
    /* bwd_post's partial sums first (its per-head counters, cleared by each call, at their end) */
    const DLTensor *pws = p->gate ? carve(&cv, &s->pws, F, 32, 1, kdart_bwd_post_workspace(H, HV, K), 0, 0, 0, 0)
                                  : NULL;
    /* and the partial rows of the same sums, a row per CTA of wy_dqkg's grid (a chunk row and value head;
     * packed, the grid's T / 64 + N chunk rows bound the chunks, and the call clears the rows first: a CTA
     * past the last chunk writes none), where wy_dqkg's launch takes the gate's part of the last step */
    const int64_t rows = p->packed ? p->T / KDART_CHUNK + p->N : p->B * p->NT;
    s->split.rows = rows;
    if (p->gate) s->split.part = carve(&cv, &s->part, F, 32, 1, kdart__post_part_floats(rows, HV, K), 0, 0, 0, 0);
    /* what lives from the recompute to bwd_post: the gate's cumsum, h, v_new, dh, dv2 (and bwd_dav's dv;
     * wy_dqkg hands dA and dAqk to bwd_intra's terms in shared memory, so they take no room here) */
    const DLTensor *gk = a->g_cumsum, *w = a->w, *u = a->u, *qg = a->qg, *kg = a->kg, *h = a->h, *vn = a->v_new;
    if (p->recompute) {
        if (p->gate) gk = carve(&cv, &s->gk, F, 32, 4, B, T, HV, K, 0);
        h = carve(&cv, &s->h, io, 16, 5, p->HB, p->NT, HV, S1, S2);
        vn = carve(&cv, &s->vn, io, 16, 4, B, T, HV, V, 0);
    }
    const DLTensor *dh = carve(&cv, &s->dh, io, 16, 5, p->HB, p->NT, HV, S1, S2);
    const DLTensor *dv2 = carve(&cv, &s->dv2, io, 16, 4, B, T, HV, V, 0); /* bwd_dhu's, wy_dqkg's dv */
    const DLTensor *dvi = NULL;
    if (!p->fused || p->split) { /* bwd_dav's dv alone, bwd_dhu's input (wy_dqkg computes dAqk itself and takes
                                  * bwd_intra's terms on every grid); split: the long sequences' rows alone */
        dvi = carve(&cv, &s->dvi, io, 16, 4, B, T, HV, V, 0);
        s->dav = (kdart_bwd_dav_args){sizeof s->dav, vn, a->d_o, a->Aqk, NULL, dvi, a->scale, a->cu_seqlens,
                                      a->chunk_indices};
    }
    /* then one region for two sets that are never live together: w, (u,) qg, kg (read last by bwd_dhu) and
     * wy_dqkg's fp32 dq, dk, dg, db (written after bwd_dhu, read by bwd_post) */
    carver early = cv, late = cv;
    if (p->recompute) {
        w = carve(&early, &s->w, io, 16, 4, B, T, HV, K, 0);
        u = p->fuse_u ? NULL : carve(&early, &s->u, io, 16, 4, B, T, HV, V, 0); /* NULL: fwd_h makes it */
        qg = carve(&early, &s->qg, io, 16, 4, B, T, HV, K, 0);
        kg = carve(&early, &s->kg, io, 16, 4, B, T, HV, K, 0);
    }
    const DLTensor *dq1 = carve(&late, &s->dq1, F, 32, 4, B, T, HV, K, 0);
    const DLTensor *dk1 = carve(&late, &s->dk1, F, 32, 4, B, T, HV, K, 0);
    const DLTensor *dg1 = carve(&late, &s->dg1, F, 32, 4, B, T, HV, K, 0);
    const DLTensor *db1 = carve(&late, &s->db1, F, 32, 3, B, T, HV, 0, 0);
    cv.off = early.off > late.off ? early.off : late.off;
    s->bytes = cv.off;

    s->rwu.struct_size = sizeof s->rwu; /* (s was zeroed: the fields not set are NULL) */
    s->rwu.q = a->q, s->rwu.k = a->k, s->rwu.v = a->v, s->rwu.beta = a->beta, s->rwu.A = a->Akk;
    if (p->gate) {
        s->rwu.g_raw = a->g, s->rwu.A_log = a->A_log, s->rwu.dt_bias = a->dt_bias, s->rwu.g_out = gk;
        s->rwu.lower_bound = a->lower_bound, s->rwu.safe_gate = a->safe_gate;
    } else {
        s->rwu.g = gk;
    }
    s->rwu.w = w, s->rwu.u = u, s->rwu.qg = qg, s->rwu.kg = kg; /* (u NULL: the recompute skips its V steps) */
    s->rwu.cu_seqlens = a->cu_seqlens, s->rwu.chunk_indices = a->chunk_indices;

    /* fuse_u: u made in fwd_h's scan from v, Akk and beta */
    const int fu = p->fuse_u;
    s->fwdh = (kdart_fwd_h_args){sizeof s->fwdh, kg, w, fu ? a->v : u, gk, a->h0, h, vn, NULL, 0, p->svf,
                                 a->cu_seqlens, a->chunk_indices, a->chunk_offsets,
                                 fu ? a->Akk : NULL, fu ? a->beta : NULL};

    s->dhu.struct_size = sizeof s->dhu;
    s->dhu.qg = qg, s->dhu.kg = kg, s->dhu.w = w, s->dhu.d_o = a->d_o, s->dhu.g = gk, s->dhu.dht = a->dht;
    s->dhu.dh = dh, s->dhu.dv2 = dv2, s->dhu.dh0 = a->dh0;
    s->dhu.scale = a->scale, s->dhu.cu_seqlens = a->cu_seqlens, s->dhu.chunk_indices = a->chunk_indices;
    s->dhu.chunk_offsets = a->chunk_offsets, s->dhu.state_v_first = p->svf;
    if (p->fused) s->dhu.Aqk = a->Aqk; /* (dv = Aqk^T do inside the scan) */
    else s->dhu.dv = dvi;

    s->wy = (kdart_wy_dqkg_args){sizeof s->wy, a->q, a->k, a->v, vn, gk, a->beta, a->Akk, h, dh, a->d_o,
                                 dv2, dq1, dk1, a->dv, dg1, db1, NULL, a->scale, p->svf,
                                 a->cu_seqlens, a->chunk_indices, NULL, 1};

    s->post.struct_size = sizeof s->post;
    s->post.dq_in = dq1, s->post.dk_in = dk1, s->post.dg_in = dg1, s->post.db_in = db1;
    if (a->q_rstd) s->post.q = a->q, s->post.q_rstd = a->q_rstd;
    if (a->k_rstd) s->post.k = a->k, s->post.k_rstd = a->k_rstd;
    if (p->gate) {
        s->post.g_raw = a->g, s->post.A_log = a->A_log, s->post.dt_bias = a->dt_bias, s->post.workspace = pws;
        s->post.dA_log = a->dA_log, s->post.ddt_bias = a->dt_bias ? a->ddt_bias : NULL;
        s->post.lower_bound = a->lower_bound, s->post.safe_gate = a->safe_gate;
    }
    s->post.g_io = a->dg && a->dg->dtype.bits == 16; /* (with the gate, g_raw's dtype is checked against it) */
    s->post.beta_raw = a->beta_raw;
    s->post.beta_io = a->dbeta && a->dbeta->dtype.bits == 16;
    s->post.beta_scale = a->allow_neg_eigval ? 2.f : 1.f;
    s->post.dq = a->dq, s->post.dk = a->dk, s->post.dg = a->dg, s->post.db = a->dbeta;
    s->split.post = &s->post;
}

/* The checks both entry points start with: the args struct, then the sizes of the call. */
static int begin(kdart_rt *rt, const kdart_chunk_bwd_args *args, plan *p) {
    if (!args) return kdart__err(rt, KDART_ENULL, "args must not be NULL");
    if (args->struct_size != sizeof *args)
        return kdart__err(rt, KDART_EINVAL, "args.struct_size is %u, expected %zu (sizeof(kdart_chunk_bwd_args))",
                          args->struct_size, sizeof *args);
    return sizes(rt, args, p);
}

int64_t kdart_chunk_bwd_workspace(kdart_rt *rt, const kdart_chunk_bwd_args *args) {
    KDART__CHECK_RT(rt);
    plan p;
    stages s;
    int rc = begin(rt, args, &p);
    if (rc) return rc;
    build(args, &p, NULL, &s);
    return (int64_t)s.bytes;
}

int kdart_kda_chunk_bwd(kdart_rt *rt, const kdart_chunk_bwd_args *args, void *stream) {
    KDART__CHECK_RT(rt);
    plan p;
    stages s;
    int rc = begin(rt, args, &p);
    if (rc) return rc;
    const DLTensor *ws = args->workspace;
    if (!ws || !ws->shape) return kdart__err(rt, KDART_ENULL, "workspace must be given (kdart_chunk_bwd_workspace)");
    build(args, &p, ws, &s);
    if (ws->ndim != 1 || ws->dtype.code != kDLUInt || ws->dtype.bits != 8 || ws->dtype.lanes != 1 ||
        (ws->strides && ws->strides[0] != 1))
        return kdart__err(rt, KDART_EDTYPE, "workspace must be a contiguous 1-D uint8 tensor");
    if ((uint64_t)ws->shape[0] < s.bytes)
        return kdart__err(rt, KDART_ESHAPE, "workspace has %lld bytes, the call needs %llu",
                          (long long)ws->shape[0], (unsigned long long)s.bytes);
    if ((((uintptr_t)ws->data + ws->byte_offset) % ALIGN) != 0)
        return kdart__err(rt, KDART_EALIGN, "workspace must be %d-byte aligned", ALIGN);
    /* every stage's checks before the first launch (the intermediates' shapes are the stages' own rules) */
    char spec[128];
    static const char *const names[] = {"recompute_wu", "fwd_h", "bwd_dav", "bwd_dhu", "wy_dqkg", "bwd_post"};
    const void *all[] = {&s.rwu, &s.fwdh, &s.dav, &s.dhu, &s.wy, &s.post};
    const int run[] = {p.recompute, p.recompute, !p.fused || p.split, 1, 1, 1};
    /* (a stage that needs the device to choose its specialization says ENOCUDA / ENODEVICE after its
     * argument checks: the later stages are still checked, and that status returned at the end) */
    int nodev = KDART_OK;
    for (int i = 0; i < 6; i++) {
        if (!run[i] || (rc = kdart_spec_for(rt, names[i], all[i], spec, sizeof spec)) >= 0) continue;
        if (rc != KDART_ENOCUDA && rc != KDART_ENODEVICE) return rc;
        if (nodev == KDART_OK) nodev = rc;
    }
    if (nodev != KDART_OK) return kdart__err(rt, nodev, "no CUDA device to choose the stages' specializations");
    if (p.recompute && ((rc = kdart_kda_recompute_wu(rt, &s.rwu, stream)) || (rc = kdart_kda_fwd_h(rt, &s.fwdh, stream))))
        return rc;
    /* split: bwd_dav writes the long sequences' dv alone, and bwd_dhu's 32-column scans read it (extra) */
    if (p.split) {
        if ((rc = kdart__op_call_ex(rt, &kdart__stage_bwd_dav, &s.dav, stream, (void *)s.dav.dv)) ||
            (rc = kdart__op_call_ex(rt, &kdart__stage_bwd_dhu, &s.dhu, stream, (void *)s.dav.dv)))
            return rc;
    } else {
        if (!p.fused && (rc = kdart_kda_bwd_dav(rt, &s.dav, stream))) return rc;
        if ((rc = kdart_kda_bwd_dhu(rt, &s.dhu, stream))) return rc;
    }
    /* wy_dqkg, with the last step's gate and beta part in its launch where it can (it says so in split) */
    kdart__post_split *x = rt->fuse_post ? &s.split : NULL;
    if (x) x->level = rt->fuse_post;
    /* packed: the partial rows of the grid's CTAs past the last chunk stay zero (bwd_post sums every row) */
    if (x && p.gate && p.packed &&
        (rc = kdart__memset32_async(rt, (float *)kdart__ptr(s.split.part), 0u, (size_t)s.split.part->shape[0], stream)))
        return rc;
    if ((rc = kdart__op_call_ex(rt, &kdart__stage_wy_dqkg, &s.wy, stream, x))) return rc;
    if (x && x->fused == 2 && !p.gate) return KDART_OK; /* (nothing left for bwd_post) */
    /* bwd_post's per-head counters (the last H words of its partials) start at zero where it sums its own
     * partials: the workspace's contents are never relied on */
    if (p.gate && !(x && x->fused)) {
        float *pw = (float *)kdart__ptr(s.post.workspace);
        const int64_t nw = s.post.workspace->shape[0];
        if ((rc = kdart__memset32_async(rt, pw + (nw - p.H), 0u, (size_t)p.H, stream))) return rc;
    }
    return kdart__op_call_ex(rt, &kdart__stage_bwd_post, &s.post, stream, x);
}
