/*
 * ops.c: the KDA backward operations, kdart_kda_bwd_intra, kdart_kda_bwd_dhu
 * and kdart_kda_wy_dqkg: argument validation, specialization choice, launch.
 *
 * Validation happens in full before anything is launched, and a failure
 * names the argument and returns its own status (ENULL, EDTYPE, ESHAPE,
 * ESTRIDE, EALIGN, EDEVICE, EUNSUPPORTED, EINVAL), so nothing is written
 * when anything is wrong.  The checks are plain integer compares over at
 * most 14 descriptors: well under a microsecond.
 *
 * Variable-length batches (cu_seqlens) and fixed-length ones with T % 64 != 0
 * go to the varlen=1 specializations; only shapes and dtypes are checked on
 * the host (cu_seqlens is never read here unless KDART_CHECK asks for it):
 * the kernels validate cu_seqlens themselves and report through the
 * context's device status word (cuda.c, kdart_device_status).
 *
 * The launch path allocates nothing and synchronizes nothing: it reads the
 * prepared unit of the specialization through an atomic slot (preparing
 * it on first use), finds the function of the current context, fills the
 * params struct on the stack and calls cuLaunchKernel.  It can therefore
 * be captured in a CUDA graph once the specialization is prepared.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_api.h"
#include "kda_params.h"
#include "rt.h"

enum { IO_BF16 = 0, IO_FP16 = 1 };

/* What a tensor argument must be.  A negative dim in want[] means "any". */
typedef struct tcheck {
    const char *name;
    const DLTensor *t;
    int dtype;       /* -1 io dtype, 32 fp32, -2 either (its own specialization each) */
    int ndim;
    int64_t want[5];
} tcheck;

static int dtype_of(const DLTensor *t) {
    if (t->dtype.lanes != 1) return -100;
    if (t->dtype.code == kDLBfloat && t->dtype.bits == 16) return IO_BF16;
    if (t->dtype.code == kDLFloat && t->dtype.bits == 16) return IO_FP16;
    if (t->dtype.code == kDLFloat && t->dtype.bits == 32) return 32;
    return -100;
}

static const char *dtype_name(int d) {
    return d == IO_BF16 ? "bfloat16" : d == IO_FP16 ? "float16" : d == 32 ? "float32" : "unsupported";
}

static uintptr_t addr(const DLTensor *t) { return (uintptr_t)t->data + (uintptr_t)t->byte_offset; }

static size_t nbytes(const DLTensor *t) {
    size_t n = (size_t)t->dtype.bits / 8;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    return n;
}

static void shape_str(const DLTensor *t, char *buf, size_t n) {
    size_t u = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->ndim && u < n; i++) u += (size_t)snprintf(buf + u, n - u, "%s%lld", i ? "," : "", (long long)t->shape[i]);
    if (u < n) snprintf(buf + u, n - u, "]");
}

/* A tensor's dtype, shape and strides (what kdart_spec_for checks: nothing
 * that depends on where its memory is). */
static int check_layout(kdart_rt *rt, const tcheck *c, int io) {
    const DLTensor *t = c->t;
    const int have = dtype_of(t), want = c->dtype < 0 ? io : c->dtype;
    if (c->dtype == -2 ? have != io && have != 32 : have != want)
        return kdart__err(rt, KDART_EDTYPE, "tensor %s is %s, expected %s%s", c->name, dtype_name(have),
                          dtype_name(want), c->dtype == -2 ? " (the io dtype) or float32" : "");
    char sb[96];
    if (t->ndim != c->ndim) {
        shape_str(t, sb, sizeof sb);
        return kdart__err(rt, KDART_ESHAPE, "tensor %s has %d dims %s, expected %d", c->name, t->ndim, sb, c->ndim);
    }
    if (!t->shape) return kdart__err(rt, KDART_ENULL, "tensor %s has NULL shape", c->name);
    for (int i = 0; i < c->ndim; i++) {
        if (c->want[i] >= 0 && t->shape[i] != c->want[i]) {
            shape_str(t, sb, sizeof sb);
            return kdart__err(rt, KDART_ESHAPE, "tensor %s has shape %s; dim %d should be %lld", c->name, sb, i,
                              (long long)c->want[i]);
        }
    }
    if (t->strides) {
        int64_t expect = 1;
        for (int i = c->ndim - 1; i >= 0; i--) {
            /* A dim of size 1 may carry any stride (DLPack convention). */
            if (t->shape[i] != 1 && t->strides[i] != expect)
                return kdart__err(rt, KDART_ESTRIDE,
                                  "tensor %s is not contiguous (stride %lld of dim %d, expected %lld)", c->name,
                                  (long long)t->strides[i], i, (long long)expect);
            expect *= t->shape[i];
        }
    }
    return KDART_OK;
}

/* Checks one tensor; device_id is taken from the first tensor checked.
 * plan: only its layout (kdart_spec_for). */
static int check_tensor(kdart_rt *rt, const tcheck *c, int io, int *device_id, int plan) {
    const DLTensor *t = c->t;
    if (!t) return kdart__err(rt, KDART_ENULL, "tensor %s is NULL", c->name);
    if (plan) return check_layout(rt, c, io); /* kdart_spec_for: no memory is looked at */
    if (!t->data) return kdart__err(rt, KDART_ENULL, "tensor %s has NULL data", c->name);
    if (t->device.device_type != kDLCUDA)
        return kdart__err(rt, KDART_EDEVICE, "tensor %s is not in CUDA device memory (device_type %d)", c->name,
                          (int)t->device.device_type);
    if (*device_id < 0) *device_id = t->device.device_id;
    if (t->device.device_id != *device_id)
        return kdart__err(rt, KDART_EDEVICE, "tensor %s is on cuda:%d, the others on cuda:%d", c->name,
                          t->device.device_id, *device_id);
    int rc = check_layout(rt, c, io);
    if (rc) return rc;
    if (addr(t) % 16 != 0)
        return kdart__err(rt, KDART_EALIGN, "tensor %s data is not 16-byte aligned (address %#llx)", c->name,
                          (unsigned long long)addr(t));
    return KDART_OK;
}

/* Outputs must not overlap each other or any input: the kernels read the
 * inputs of a chunk while other CTAs write their outputs. */
static int check_overlap(kdart_rt *rt, const tcheck *c, int n, int first_out) {
    for (int i = first_out; i < n; i++) {
        if (!c[i].t) continue;
        uintptr_t a0 = addr(c[i].t), a1 = a0 + nbytes(c[i].t);
        for (int j = 0; j < n; j++) {
            if (j == i || !c[j].t || (j > i && j >= first_out)) continue;
            uintptr_t b0 = addr(c[j].t), b1 = b0 + nbytes(c[j].t);
            if (a0 < b1 && b0 < a1)
                return kdart__err(rt, KDART_EINVAL, "output %s overlaps %s %s (in-place is not supported)",
                                  c[i].name, j < first_out ? "input" : "output", c[j].name);
        }
    }
    return KDART_OK;
}

/* No output may overlap cu_seqlens either: CTAs read it while others write. */
static int check_cu_overlap(kdart_rt *rt, const tcheck *c, int n, int first_out, const DLTensor *cu) {
    if (!cu) return KDART_OK;
    uintptr_t b0 = addr(cu), b1 = b0 + nbytes(cu);
    for (int i = first_out; i < n; i++) {
        if (!c[i].t) continue;
        uintptr_t a0 = addr(c[i].t), a1 = a0 + nbytes(c[i].t);
        if (a0 < b1 && b0 < a1) return kdart__err(rt, KDART_EINVAL, "output %s overlaps cu_seqlens", c[i].name);
    }
    if (cu->device.device_id != c[0].t->device.device_id)
        return kdart__err(rt, KDART_EDEVICE, "cu_seqlens is on cuda:%d, the tensors on cuda:%d", cu->device.device_id,
                          c[0].t->device.device_id);
    return KDART_OK;
}

/* Head dims: any K in 1..256, served by the K tile above it (64, 128, 256;
 * bwd_dhu also 192) with masked loads and stores (the tail specializations)
 * where K is below its tile. */
static int check_head_dim(kdart_rt *rt, int64_t K) {
    if (K < 1 || K > 256)
        return kdart__err(rt, KDART_EUNSUPPORTED, "head dim K=%lld is not supported (K must be 1..256)", (long long)K);
    return KDART_OK;
}

/* bwd_dhu's value dim: any V in 1..512 (the last V tile masked where the
 * tile does not divide V). */
static int check_value_dim(kdart_rt *rt, int64_t V) {
    if (V < 1 || V > 512)
        return kdart__err(rt, KDART_EUNSUPPORTED, "value dim V=%lld is not supported (V must be 1..512)", (long long)V);
    return KDART_OK;
}

/* Checks that the current context is on the tensors' device (device_id
 * < 0: any), and returns the launchable function of the specialization. */
static int resolve(kdart_rt *rt, int kernel, const int *vals, int device_id, kdart__unit **unit, void **fn,
                   int **status) {
    void *ctx;
    char arch[16];
    int dev;
    int rc = kdart__cuda_context_dev(rt, &ctx, arch, &dev);
    if (rc) return rc;
    if (device_id >= 0 && dev != device_id)
        return kdart__err(rt, KDART_EDEVICE, "tensors are on cuda:%d but the current context is on cuda:%d",
                          device_id, dev);
    const kdart__kernel *k = &kdart__kernels[kernel];
    kdart__unit *u = atomic_load_explicit(&rt->slots[kernel][kdart__spec_index(k, vals)], memory_order_acquire);
    if (!u || strcmp(u->arch, arch) != 0) {
        rc = kdart__prepare(rt, kernel, vals, arch, 0, NULL, &u);
        if (rc) return rc;
    }
    rc = kdart__unit_function(rt, u, ctx, fn);
    if (rc) return rc;
    *unit = u;
    /* varlen launches only (the fixed-length kernels never read it); allocated when the varlen unit was bound */
    if (status) *status = kdart__status_word(rt, ctx);
    return KDART_OK;
}

/* ------------------------------------------------------------ sequences */

/* Does the caller's struct_size cover `field` of args struct type TYPE? */
#define COVERS(a, TYPE, field) ((a)->struct_size >= offsetof(TYPE, field) + sizeof((a)->field))

/* struct_size: the current struct, or a 0.1 caller's, which ends where the
 * first field added since (first_new) begins. */
static int check_struct_size(kdart_rt *rt, uint32_t have, size_t first_new, size_t full, const char *type) {
    if (have >= first_new && have <= full) return KDART_OK;
    if (first_new == full) /* a struct with no older form */
        return kdart__err(rt, KDART_EINVAL, "args.struct_size is %u, expected %zu (sizeof(%s))", have, full, type);
    return kdart__err(rt, KDART_EINVAL, "args.struct_size is %u, expected %zu (%s; %zu without the varlen fields)",
                      have, full, type, first_new);
}

/* How a call's tokens split into sequences. */
typedef struct seqs {
    const DLTensor *cu; /* cu_seqlens, or NULL: B rows of T tokens */
    int64_t N;          /* sequences */
    int is64;           /* cu_seqlens is int64 */
    int64_t ci_rows;    /* rows of chunk_indices, -1 when not given */
    int varlen;         /* the varlen=1 specialization (cu_seqlens, or T % 64 != 0) */
} seqs;

static int int_bits(const DLTensor *t) {
    return t->dtype.code == kDLInt && t->dtype.lanes == 1 && (t->dtype.bits == 32 || t->dtype.bits == 64)
               ? t->dtype.bits : 0;
}

/* cu_seqlens and fla's optional index tensors (chunk_offsets: NULL for
 * bwd_intra, which fla does not pass it): shapes and dtypes only, on the
 * host; nothing here reads device memory. */
static int check_seqs(kdart_rt *rt, const DLTensor *cu, const DLTensor *ci, const DLTensor *co, int64_t B, int64_t T,
                      int plan, seqs *s) {
    memset(s, 0, sizeof *s);
    s->N = B;
    s->ci_rows = -1;
    s->varlen = T % KDART_CHUNK != 0;
    if (!cu) {
        if (ci || co)
            return kdart__err(rt, KDART_EINVAL, "%s given without cu_seqlens", ci ? "chunk_indices" : "chunk_offsets");
        return KDART_OK;
    }
    s->cu = cu;
    s->varlen = 1;
    if (!plan && !cu->data) return kdart__err(rt, KDART_ENULL, "cu_seqlens has NULL data");
    if (!plan && cu->device.device_type != kDLCUDA)
        return kdart__err(rt, KDART_EDEVICE,
                          "cu_seqlens is not in CUDA device memory (device_type %d): the kernels read it on the device",
                          (int)cu->device.device_type);
    int bits = int_bits(cu);
    if (!bits)
        return kdart__err(rt, KDART_EDTYPE, "cu_seqlens has dtype code %d bits %d; expected int32 or int64",
                          (int)cu->dtype.code, (int)cu->dtype.bits);
    if (cu->ndim != 1 || !cu->shape)
        return kdart__err(rt, KDART_ESHAPE, "cu_seqlens has %d dims; expected 1 ([N+1])", cu->ndim);
    if (cu->shape[0] < 2 || cu->shape[0] - 1 > INT32_MAX)
        return kdart__err(rt, KDART_ESHAPE, "cu_seqlens has %lld entries; expected N+1 with 1 <= N <= 2^31-1",
                          (long long)cu->shape[0]);
    if (cu->strides && cu->shape[0] != 1 && cu->strides[0] != 1)
        return kdart__err(rt, KDART_ESTRIDE, "cu_seqlens is not contiguous (stride %lld)", (long long)cu->strides[0]);
    if (!plan && addr(cu) % (uintptr_t)(bits / 8) != 0)
        return kdart__err(rt, KDART_EALIGN, "cu_seqlens data is not %d-byte aligned (address %#llx)", bits / 8,
                          (unsigned long long)addr(cu));
    if (B != 1)
        return kdart__err(rt, KDART_ESHAPE, "cu_seqlens needs B == 1 (sequences packed along T), got B=%lld",
                          (long long)B);
    s->N = cu->shape[0] - 1;
    s->is64 = bits == 64;
    const DLTensor *idx[2] = {ci, co};
    const char *names[2] = {"chunk_indices", "chunk_offsets"};
    for (int i = 0; i < 2; i++) {
        const DLTensor *t = idx[i];
        if (!t) continue;
        if (int_bits(t) != bits)
            return kdart__err(rt, KDART_EDTYPE, "%s has dtype code %d bits %d; expected int%d (as cu_seqlens)", names[i],
                              (int)t->dtype.code, (int)t->dtype.bits, bits);
        int ok = i == 0 ? t->ndim == 2 && t->shape && t->shape[1] == 2 : t->ndim == 1 && t->shape && t->shape[0] == s->N + 1;
        if (!ok) {
            char sb[96] = "[]";
            if (t->shape) shape_str(t, sb, sizeof sb);
            return kdart__err(rt, KDART_ESHAPE, "%s has shape %s; expected %s", names[i], sb,
                              i == 0 ? "[NT,2]" : "[N+1] (as cu_seqlens)");
        }
    }
    if (ci) s->ci_rows = ci->shape[0];
    return KDART_OK;
}

/* Packed sequences: the chunk rows of a per-chunk state tensor t ([1,NT,HV,..]),
 * which only the device can count exactly, so any NT >= 1 (>= the rows of
 * chunk_indices when given: fla sizes its states by it) and the kernel checks. */
static int packed_chunk_rows(kdart_rt *rt, const DLTensor *t, const char *name, int svf, const seqs *s,
                             int64_t *NT) {
    if (!t || !t->shape || t->ndim != 5)
        return kdart__err(rt, !t ? KDART_ENULL : KDART_ESHAPE, "%s must be [1,NT,HV,%s]", name, svf ? "V,K" : "K,V");
    *NT = t->shape[1];
    if (*NT < 1 || *NT < s->ci_rows)
        return kdart__err(rt, KDART_ESHAPE, "%s has %lld chunk rows; needs at least %lld (%s)", name, (long long)*NT,
                          (long long)(s->ci_rows > 1 ? s->ci_rows : 1),
                          s->ci_rows > 1 ? "the rows of chunk_indices" : "one");
    return KDART_OK;
}

/* KDART_CHECK (debugging only, never capturable): cu_seqlens copied to the
 * host synchronously and checked as the kernels would, before anything is
 * launched.  max_chunks: the most chunks the call has room for. */
static int host_check(kdart_rt *rt, const seqs *s, int64_t T, int64_t max_chunks) {
    if (!(rt->flags & KDART_OPEN_CHECK) || !s->cu) return KDART_OK;
    size_t n = (size_t)s->N + 1, w = s->is64 ? 8 : 4;
    void *h = malloc(n * w);
    if (!h) return kdart__err(rt, KDART_ENOMEM, "KDART_CHECK: no memory for cu_seqlens (%zu entries)", n);
    int rc = kdart__copy_to_host(rt, h, (const void *)addr(s->cu), n * w);
    int64_t prev = 0, chunks = 0;
    for (size_t i = 0; rc == KDART_OK && i < n; i++) {
        int64_t v = s->is64 ? ((const int64_t *)h)[i] : ((const int32_t *)h)[i];
        if (i == 0 && v != 0)
            rc = kdart__err(rt, KDART_EINVAL, "KDART_CHECK: cu_seqlens[0] is %lld, expected 0", (long long)v);
        else if (v < prev)
            rc = kdart__err(rt, KDART_EINVAL, "KDART_CHECK: cu_seqlens decreases: cu[%zu] = %lld < cu[%zu] = %lld", i,
                            (long long)v, i - 1, (long long)prev);
        else if (i == n - 1 && v > T)
            rc = kdart__err(rt, KDART_EINVAL, "KDART_CHECK: cu_seqlens[N] = %lld exceeds the tensors' T = %lld",
                            (long long)v, (long long)T);
        if (i) chunks += (v - prev + KDART_CHUNK - 1) / KDART_CHUNK;
        prev = v;
    }
    if (rc == KDART_OK && chunks > max_chunks)
        rc = kdart__err(rt, KDART_EINVAL, "KDART_CHECK: cu_seqlens makes %lld chunks; dh has %lld rows",
                        (long long)chunks, (long long)max_chunks);
    if (rc == KDART_OK && s->ci_rows >= 0 && s->ci_rows != chunks)
        rc = kdart__err(rt, KDART_EINVAL, "KDART_CHECK: chunk_indices has %lld rows; cu_seqlens makes %lld chunks",
                        (long long)s->ci_rows, (long long)chunks);
    free(h);
    return rc;
}

/* kdart_spec_for's answer: the canonical spec written into buf (n bytes). */
typedef struct spec_out {
    char *buf;
    size_t n;
} spec_out;

/* The end of an op's checks in kdart_spec_for: the spec it would launch. */
static int plan_answer(kdart_rt *rt, int kernel, const int *vals, const spec_out *so) {
    int len = kdart__spec_format(&kdart__kernels[kernel], vals, so->buf, so->n);
    if (len < 0) return kdart__err(rt, KDART_EINVAL, "the spec does not fit in %zu bytes", so->n);
    return len;
}

/* bwd_intra: launched (so NULL), or only checked and its spec written (so:
 * kdart_spec_for; the checks of its arguments' memory are then skipped). */
static int bwd_intra_call(kdart_rt *rt, const kdart_bwd_intra_args *a, void *stream, const spec_out *so) {
    KDART__CHECK_RT(rt);
    if (!a) return kdart__err(rt, KDART_ENULL, "args is NULL");
    int rc;
    if ((rc = check_struct_size(rt, a->struct_size, offsetof(kdart_bwd_intra_args, cu_seqlens), sizeof *a,
                                "kdart_bwd_intra_args")) != KDART_OK)
        return rc;
    if (!a->q || !a->q->shape || a->q->ndim != 4 || !a->g || !a->g->shape || a->g->ndim != 4)
        return kdart__err(rt, !a->q ? KDART_ENULL : !a->g ? KDART_ENULL : KDART_ESHAPE,
                          "q must be [B,T,H,K] and g [B,T,HV,K]");
    const int64_t B = a->q->shape[0], T = a->q->shape[1], H = a->q->shape[2], K = a->q->shape[3];
    const int64_t HV = a->g->shape[2];
    int io = dtype_of(a->q);
    if (io != IO_BF16 && io != IO_FP16)
        return kdart__err(rt, KDART_EDTYPE, "q is %s; the io dtype must be bfloat16 or float16", dtype_name(io));
    if ((rc = check_head_dim(rt, K)) != KDART_OK) return rc;
    if (B < 1 || T < 1 || H < 1 || HV < 1)
        return kdart__err(rt, KDART_ESHAPE, "empty tensor: B=%lld T=%lld H=%lld HV=%lld", (long long)B,
                          (long long)T, (long long)H, (long long)HV);
    seqs sq;
    if ((rc = check_seqs(rt, COVERS(a, kdart_bwd_intra_args, cu_seqlens) ? a->cu_seqlens : NULL,
                         COVERS(a, kdart_bwd_intra_args, chunk_indices) ? a->chunk_indices : NULL, NULL, B, T,
                         so != NULL, &sq)) != KDART_OK)
        return rc;
    if (HV % H != 0)
        return kdart__err(rt, KDART_ESHAPE, "HV=%lld (value heads, from g) is not a multiple of H=%lld (from q)",
                          (long long)HV, (long long)H);
    if (a->emit_bf16 && HV != H)
        return kdart__err(rt, KDART_EUNSUPPORTED,
                          "emit_bf16 needs HV == H (grouped value heads are summed in fp32 by the caller)");
    /* Both bodies index with 64-bit offsets (problems past 2^32 elements need
     * nothing else).  The fixed-length grid is (T/64, B*HV); past the grid's
     * 65535 in y the varlen body takes the batch, with its grid (B*chunks, HV):
     * the same results, and the common case keeps its kernel. */
    if (!sq.varlen && B * HV > 65535) sq.varlen = 1;
    /* A head dim below its K tile runs the tail specialization, which exists
     * for the varlen body only (its params carry Kr); cu_seqlens stays NULL, so
     * it takes the batch as B rows of T tokens.  Native K keeps its kernel. */
    const int tail = K != kdart__k_tile(K);
    if (tail) sq.varlen = 1;
    const int64_t NTC = (T + KDART_CHUNK - 1) / KDART_CHUNK;
    const int64_t grid_x = !sq.varlen ? T / KDART_CHUNK : sq.cu ? T / KDART_CHUNK + sq.N : B * NTC;
    if (T > INT32_MAX || HV > 65535 || grid_x > INT32_MAX)
        return kdart__err(rt, KDART_EUNSUPPORTED, "problem too large (T=%lld, HV=%lld, %lld chunks)", (long long)T,
                          (long long)HV, (long long)grid_x);
    int odt = a->emit_bf16 ? -1 : 32;
    tcheck c[] = {
        {"q", a->q, -1, 4, {B, T, H, K}},           {"k", a->k, -1, 4, {B, T, H, K}},
        {"g", a->g, 32, 4, {B, T, HV, K}},          {"beta", a->beta, -2, 3, {B, T, HV}},
        {"dAqk", a->dAqk, 32, 4, {B, T, HV, 64}},   {"dAkk", a->dAkk, 32, 4, {B, T, HV, 64}},
        {"dq_in", a->dq_in, 32, 4, {B, T, HV, K}},  {"dk_in", a->dk_in, 32, 4, {B, T, HV, K}},
        {"dg_in", a->dg_in, 32, 4, {B, T, HV, K}},  {"db_in", a->db_in, 32, 3, {B, T, HV}},
        {"dq", a->dq, odt, 4, {B, T, HV, K}},       {"dk", a->dk, odt, 4, {B, T, HV, K}},
        {"dg", a->dg, 32, 4, {B, T, HV, K}},        {"db", a->db, 32, 3, {B, T, HV}},
    };
    const int n = (int)(sizeof c / sizeof c[0]);
    int device_id = -1;
    for (int i = 0; i < n; i++)
        if ((rc = check_tensor(rt, &c[i], io, &device_id, so != NULL)) != KDART_OK) return rc;
    int vals[7] = {io, a->fold_dg ? 1 : 0, a->emit_bf16 ? 1 : 0, kdart__k_index(kdart__k_tile(K)), sq.varlen, tail,
                   /* beta in fp32 (what fla hands the stage when chunk_kda applies the beta sigmoid) */
                   dtype_of(a->beta) == 32};
    if (so) return plan_answer(rt, KDART__K_BWD_INTRA, vals, so);
    if ((rc = check_overlap(rt, c, n, 10)) != KDART_OK) return rc;
    if ((rc = check_cu_overlap(rt, c, n, 10, sq.cu)) != KDART_OK) return rc;
    if ((rc = host_check(rt, &sq, T, grid_x)) != KDART_OK) return rc;

    kdart__unit *u;
    void *fn;
    int *status = NULL;
    if ((rc = resolve(rt, KDART__K_BWD_INTRA, vals, device_id, &u, &fn, sq.varlen ? &status : NULL)) != KDART_OK)
        return rc;
    kdart_bwd_intra_params p = {
        (const void *)addr(a->q),      (const void *)addr(a->k),      (const float *)addr(a->g),
        (const void *)addr(a->beta),   (const float *)addr(a->dAqk),  (const float *)addr(a->dAkk),
        (const float *)addr(a->dq_in), (const float *)addr(a->dk_in), (const float *)addr(a->dg_in),
        (const float *)addr(a->db_in), (void *)addr(a->dq),           (void *)addr(a->dk),
        (float *)addr(a->dg),          (float *)addr(a->db),          (int)B, (int)T, (int)H, (int)HV,
        sq.cu ? (const void *)addr(sq.cu) : NULL, status, (int)sq.N, (int)grid_x, sq.is64, (int)K,
    };
    return kdart__launch(rt, fn, (unsigned)grid_x, (unsigned)(sq.varlen ? HV : B * HV), 1, u->threads, u->smem,
                         stream, &p);
}

int kdart_kda_bwd_intra(kdart_rt *rt, const kdart_bwd_intra_args *a, void *stream) {
    return bwd_intra_call(rt, a, stream, NULL);
}

/* bwd_dhu, launched or (so) only checked, as bwd_intra_call. */
static int bwd_dhu_call(kdart_rt *rt, const kdart_bwd_dhu_args *a, void *stream, const spec_out *so) {
    KDART__CHECK_RT(rt);
    if (!a) return kdart__err(rt, KDART_ENULL, "args is NULL");
    int rc;
    if ((rc = check_struct_size(rt, a->struct_size, offsetof(kdart_bwd_dhu_args, cu_seqlens), sizeof *a,
                                "kdart_bwd_dhu_args")) != KDART_OK)
        return rc;
    if (!a->qg || !a->qg->shape || a->qg->ndim != 4 || !a->d_o || !a->d_o->shape || a->d_o->ndim != 4)
        return kdart__err(rt, !a->qg || !a->d_o ? KDART_ENULL : KDART_ESHAPE,
                          "qg must be [B,T,HV,K] and do [B,T,HV,V]");
    const int64_t B = a->qg->shape[0], T = a->qg->shape[1], HV = a->qg->shape[2], K = a->qg->shape[3];
    const int64_t V = a->d_o->shape[3];
    int io = dtype_of(a->qg);
    if (io != IO_BF16 && io != IO_FP16)
        return kdart__err(rt, KDART_EDTYPE, "qg is %s; the io dtype must be bfloat16 or float16", dtype_name(io));
    if ((rc = check_head_dim(rt, K)) != KDART_OK) return rc;
    if (V < 1 || V > 512) return check_value_dim(rt, V);
    if (B < 1 || T < 1 || HV < 1 || V < 1)
        return kdart__err(rt, KDART_ESHAPE, "empty tensor: B=%lld T=%lld HV=%lld V=%lld", (long long)B,
                          (long long)T, (long long)HV, (long long)V);
    seqs sq;
    if ((rc = check_seqs(rt, COVERS(a, kdart_bwd_dhu_args, cu_seqlens) ? a->cu_seqlens : NULL,
                         COVERS(a, kdart_bwd_dhu_args, chunk_indices) ? a->chunk_indices : NULL,
                         COVERS(a, kdart_bwd_dhu_args, chunk_offsets) ? a->chunk_offsets : NULL, B, T,
                         so != NULL, &sq)) !=
        KDART_OK)
        return rc;
    if ((rc = check_value_dim(rt, V)) != KDART_OK) return rc;
    const int svf = COVERS(a, kdart_bwd_dhu_args, state_v_first) && a->state_v_first;
    const int kt = kdart__dhu_k_tile(K);
    if (a->v_tile != 0 && kdart__dhu_bv_index(a->v_tile) < 0)
        return kdart__err(rt, KDART_EUNSUPPORTED, "v_tile=%d is not supported (0 = chosen by kdart, or 16, 32, 64)",
                          a->v_tile);
    const int64_t N = sq.N;
    /* dh's chunk rows: exactly ceil(T/64) per row at fixed length; varlen:
     * the total is known only on the device, so any NT >= 1 (>= the rows of
     * chunk_indices, when given: fla sizes dh by it) and the kernel checks */
    int64_t NT = (T + KDART_CHUNK - 1) / KDART_CHUNK;
    if (sq.cu && (rc = packed_chunk_rows(rt, a->dh, "dh", svf, &sq, &NT)) != KDART_OK) return rc;
    /* Both bodies index with 64-bit offsets; the grid is (V/BV, N*HV), one
     * serial scan per sequence, value head and V tile */
    if (T > INT32_MAX || NT > INT32_MAX || N * HV > 65535)
        return kdart__err(rt, KDART_EUNSUPPORTED, "problem too large: N*HV=%lld scans (at most 65535)",
                          (long long)(N * HV));
    /* the state's two trailing dims: [K, V], or [V, K] with state_v_first */
    const int64_t S1 = svf ? V : K, S2 = svf ? K : V;
    tcheck c[] = {
        {"qg", a->qg, -1, 4, {B, T, HV, K}},     {"kg", a->kg, -1, 4, {B, T, HV, K}},
        {"w", a->w, -1, 4, {B, T, HV, K}},       {"g", a->g, 32, 4, {B, T, HV, K}},
        {"do", a->d_o, -1, 4, {B, T, HV, V}},    {"dv", a->dv, -1, 4, {B, T, HV, V}},
        {"dht", a->dht, 32, 4, {N, HV, S1, S2}}, {"dh", a->dh, -1, 5, {B, NT, HV, S1, S2}},
        {"dv2", a->dv2, -1, 4, {B, T, HV, V}},   {"dh0", a->dh0, 32, 4, {N, HV, S1, S2}},
    };
    const int n = (int)(sizeof c / sizeof c[0]);
    int device_id = -1;
    for (int i = 0; i < n; i++) {
        if ((i == 6 || i == 9) && !c[i].t) continue; /* dht and dh0 are optional */
        if ((rc = check_tensor(rt, &c[i], io, &device_id, so != NULL)) != KDART_OK) return rc;
    }
    if (!so) {
        if ((rc = check_overlap(rt, c, n, 7)) != KDART_OK) return rc;
        if ((rc = check_cu_overlap(rt, c, n, 7, sq.cu)) != KDART_OK) return rc;
        if ((rc = host_check(rt, &sq, T, NT)) != KDART_OK) return rc;
    }

    /* the SM count, for the tile choice and the grid shapes below (pairs: the
     * K tile 256 on packed sequences with HV even, see "Head pairs") */
    int bv = a->v_tile, v_split = 0, sms = 1;
    const int pairable = sq.varlen && kt == 256 && HV % 2 == 0;
    if (bv == 0 || (pairable && !so)) { /* (kdart_spec_for: the pairs are no part of the spec) */
        if ((rc = kdart__cuda_sm_count(rt, &sms)) != KDART_OK) return rc;
        if (sms < 1) sms = 1; /* 0 when the query failed, as kdart__dhu_pick_bv reads it */
    }
    if (bv == 0) {
        bv = kdart__dhu_pick_bv(N, HV, V, (int)K, sms);
        /* The V split (bwd_dhu.cuh, kdart::dhu::varlen64): packed sequences at BV
         * 64 in a grid of at most 4 waves, where one long sequence can outlast
         * all the others; each CTA then picks 32 or 64 columns from its own
         * sequence's length.  Larger grids keep their balance by themselves. */
        if (sq.cu && bv == 64 && kt <= 128 && N * HV * ((V + 63) / 64) <= 4LL * sms) v_split = sms;
    }
    /* the masked specialization (tail 1) for what the native tiles cannot
     * take: a head dim below its K tile, a partial last V tile; the V-first
     * state at native dims has its own (tail 2: the native copies) */
    const int full = K == kt && V % bv == 0;
    const int tail = !full ? 1 : svf ? 2 : 0;
    int vals[5] = {io, kdart__dhu_k_index(kt), kdart__dhu_bv_index(bv), sq.varlen, tail};
    if (so) return plan_answer(rt, KDART__K_BWD_DHU, vals, so);
    kdart__unit *u;
    void *fn;
    int *status = NULL;
    if ((rc = resolve(rt, KDART__K_BWD_DHU, vals, device_id, &u, &fn, sq.varlen ? &status : NULL)) != KDART_OK)
        return rc;
    /* Head pairs (bwd_dhu.cuh, kdart::dhu::pair_heads): packed sequences at the
     * native K tile 256, where one CTA fills an SM and each waits for its first
     * chunk alone; a CTA scans two heads of one sequence, the second's first
     * chunk copied during the first's last.  Only on grids of at least 8
     * waves, which halving keeps at 4 or more (fewer CTAs than that would
     * leave SMs idle at the end instead); the sm_90a build alone has them
     * (measured there only).  Not at BV 64, two warpgroups per CTA: there they
     * measured slower on the H200 (45 packed documents at K = V = 256: 1.298
     * against 1.254 ms without pairs). */
    const int pair = pairable && !tail && bv != 64 && strcmp(u->arch, "sm_90a") == 0 &&
                     N * HV * ((V + bv - 1) / bv) >= 8LL * sms;
    kdart_bwd_dhu_params p = {
        (const void *)addr(a->qg), (const void *)addr(a->kg),  (const void *)addr(a->w),
        (const float *)addr(a->g), (const void *)addr(a->d_o), (const void *)addr(a->dv),
        a->dht ? (const float *)addr(a->dht) : NULL,
        (void *)addr(a->dh),       (void *)addr(a->dv2),       a->dh0 ? (float *)addr(a->dh0) : NULL,
        a->scale,                  (int)B, (int)T, (int)HV, (int)V,
        sq.cu ? (const void *)addr(sq.cu) : NULL, status, (int)N, (int)NT, sq.is64, (int)K, svf, v_split, pair,
    };
    const int64_t tile = v_split ? 32 : bv; /* the split grid has a CTA per 32 columns */
    return kdart__launch(rt, fn, (unsigned)((V + tile - 1) / tile), (unsigned)(pair ? N * HV / 2 : N * HV), 1,
                         u->threads, u->smem, stream, &p);
}

int kdart_kda_bwd_dhu(kdart_rt *rt, const kdart_bwd_dhu_args *a, void *stream) {
    return bwd_dhu_call(rt, a, stream, NULL);
}

/* wy_dqkg, launched or (so) only checked, as bwd_intra_call. */
static int wy_dqkg_call(kdart_rt *rt, const kdart_wy_dqkg_args *a, void *stream, const spec_out *so) {
    KDART__CHECK_RT(rt);
    if (!a) return kdart__err(rt, KDART_ENULL, "args is NULL");
    int rc;
    if ((rc = check_struct_size(rt, a->struct_size, sizeof *a, sizeof *a, "kdart_wy_dqkg_args")) != KDART_OK)
        return rc;
    if (!a->q || !a->q->shape || a->q->ndim != 4 || !a->v || !a->v->shape || a->v->ndim != 4)
        return kdart__err(rt, !a->q || !a->v ? KDART_ENULL : KDART_ESHAPE, "q must be [B,T,H,K] and v [B,T,HV,V]");
    const int64_t B = a->q->shape[0], T = a->q->shape[1], H = a->q->shape[2], K = a->q->shape[3];
    const int64_t HV = a->v->shape[2], V = a->v->shape[3];
    int io = dtype_of(a->q);
    if (io != IO_BF16 && io != IO_FP16)
        return kdart__err(rt, KDART_EDTYPE, "q is %s; the io dtype must be bfloat16 or float16", dtype_name(io));
    if ((rc = check_head_dim(rt, K)) != KDART_OK) return rc;
    if ((rc = check_value_dim(rt, V)) != KDART_OK) return rc;
    if (B < 1 || T < 1 || H < 1 || HV < 1)
        return kdart__err(rt, KDART_ESHAPE, "empty tensor: B=%lld T=%lld H=%lld HV=%lld", (long long)B,
                          (long long)T, (long long)H, (long long)HV);
    if (HV % H != 0)
        return kdart__err(rt, KDART_ESHAPE, "HV=%lld (value heads, from v) is not a multiple of H=%lld (from q)",
                          (long long)HV, (long long)H);
    seqs sq;
    if ((rc = check_seqs(rt, a->cu_seqlens, a->chunk_indices, NULL, B, T, so != NULL, &sq)) != KDART_OK) return rc;
    if (!sq.varlen && B * HV > 65535) sq.varlen = 1;
    const int tail = K != kdart__k_tile(K) || V % 64 != 0;
    const int64_t NTC = (T + KDART_CHUNK - 1) / KDART_CHUNK;
    const int64_t grid_x = !sq.varlen ? T / KDART_CHUNK : sq.cu ? T / KDART_CHUNK + sq.N : B * NTC;
    /* h's chunk rows: B * ceil(T/64) at fixed length (B rows of them), or,
     * packed, any NT >= 1 (>= chunk_indices's rows when given; the kernel
     * checks the total on the device) */
    int64_t NT = NTC, HB = B;
    if (sq.cu) {
        if ((rc = packed_chunk_rows(rt, a->h, "h", a->state_v_first, &sq, &NT)) != KDART_OK) return rc;
        HB = 1;
    }
    if (T > INT32_MAX || HV > 65535 || grid_x > INT32_MAX || NT > INT32_MAX)
        return kdart__err(rt, KDART_EUNSUPPORTED, "problem too large (T=%lld, HV=%lld, %lld chunks)", (long long)T,
                          (long long)HV, (long long)grid_x);
    const int svf = a->state_v_first != 0;
    const int64_t S1 = svf ? V : K, S2 = svf ? K : V;
    tcheck c[] = {
        {"q", a->q, -1, 4, {B, T, H, K}},          {"k", a->k, -1, 4, {B, T, H, K}},
        {"v", a->v, -1, 4, {B, T, HV, V}},         {"v_new", a->v_new, -1, 4, {B, T, HV, V}},
        {"g", a->g, 32, 4, {B, T, HV, K}},         {"beta", a->beta, -2, 3, {B, T, HV}},
        {"A", a->A, -1, 4, {B, T, HV, 64}},        {"h", a->h, -1, 5, {HB, NT, HV, S1, S2}},
        {"dh", a->dh, -1, 5, {HB, NT, HV, S1, S2}}, {"do", a->d_o, -1, 4, {B, T, HV, V}},
        {"dv", a->dv, -1, 4, {B, T, HV, V}},
        {"dq", a->dq, 32, 4, {B, T, HV, K}},       {"dk", a->dk, 32, 4, {B, T, HV, K}},
        {"dv2", a->dv2, -1, 4, {B, T, HV, V}},     {"dg", a->dg, 32, 4, {B, T, HV, K}},
        {"db", a->db, 32, 3, {B, T, HV}},          {"dA", a->dA, 32, 4, {B, T, HV, 64}},
    };
    const int n = (int)(sizeof c / sizeof c[0]), first_out = 11;
    int device_id = -1;
    for (int i = 0; i < n; i++)
        if ((rc = check_tensor(rt, &c[i], io, &device_id, so != NULL)) != KDART_OK) return rc;
    int vals[6] = {io, kdart__k_index(kdart__k_tile(K)), sq.varlen, tail, dtype_of(a->beta) == 32, svf};
    if (so) return plan_answer(rt, KDART__K_WY_DQKG, vals, so);
    if ((rc = check_overlap(rt, c, n, first_out)) != KDART_OK) return rc;
    if ((rc = check_cu_overlap(rt, c, n, first_out, sq.cu)) != KDART_OK) return rc;
    if ((rc = host_check(rt, &sq, T, sq.cu ? NT : grid_x)) != KDART_OK) return rc;

    kdart__unit *u;
    void *fn;
    int *status = NULL;
    if ((rc = resolve(rt, KDART__K_WY_DQKG, vals, device_id, &u, &fn, sq.varlen ? &status : NULL)) != KDART_OK)
        return rc;
    kdart_wy_dqkg_params p = {
        (const void *)addr(a->q),    (const void *)addr(a->k),     (const void *)addr(a->v),
        (const void *)addr(a->v_new), (const float *)addr(a->g),   (const void *)addr(a->beta),
        (const void *)addr(a->A),    (const void *)addr(a->h),     (const void *)addr(a->dh),
        (const void *)addr(a->d_o),  (const void *)addr(a->dv),    (float *)addr(a->dq),
        (float *)addr(a->dk),        (void *)addr(a->dv2),         (float *)addr(a->dg),
        (float *)addr(a->db),        (float *)addr(a->dA),         a->scale,
        (int)B, (int)T, (int)H, (int)HV, (int)V,
        sq.cu ? (const void *)addr(sq.cu) : NULL, status, (int)sq.N, (int)(sq.cu ? NT : grid_x), sq.is64, (int)K,
    };
    return kdart__launch(rt, fn, (unsigned)grid_x, (unsigned)(sq.varlen ? HV : B * HV), 1, u->threads, u->smem,
                         stream, &p);
}

int kdart_kda_wy_dqkg(kdart_rt *rt, const kdart_wy_dqkg_args *a, void *stream) {
    return wy_dqkg_call(rt, a, stream, NULL);
}

int kdart_spec_for(kdart_rt *rt, const char *kernel, const void *args, char *buf, size_t n) {
    KDART__CHECK_RT(rt);
    if (!kernel || !args || !buf) return kdart__err(rt, KDART_ENULL, "kernel, args and buf must not be NULL");
    const spec_out so = {buf, n};
    if (strcmp(kernel, "bwd_intra") == 0) return bwd_intra_call(rt, args, NULL, &so);
    if (strcmp(kernel, "bwd_dhu") == 0) return bwd_dhu_call(rt, args, NULL, &so);
    if (strcmp(kernel, "wy_dqkg") == 0) return wy_dqkg_call(rt, args, NULL, &so);
    if (kdart__kernel_find(kernel))
        return kdart__err(rt, KDART_EINVAL, "%s has no operation of its own (kdart_spec_for takes bwd_intra, bwd_dhu, wy_dqkg)",
                          kernel);
    return kdart__err(rt, KDART_EKERNEL, "no kernel named '%s'", kernel);
}

int kdart_dhu_v_tile(kdart_rt *rt, int64_t B, int64_t HV, int64_t K, int64_t V, int *v_tile) {
    KDART__CHECK_RT(rt);
    if (!v_tile) return kdart__err(rt, KDART_ENULL, "v_tile must not be NULL");
    int sms, rc;
    if ((rc = check_head_dim(rt, K)) != KDART_OK) return rc;
    if ((rc = check_value_dim(rt, V)) != KDART_OK) return rc;
    if (B < 1 || HV < 1)
        return kdart__err(rt, KDART_ESHAPE, "B=%lld HV=%lld: need B, HV >= 1", (long long)B, (long long)HV);
    if ((rc = kdart__cuda_sm_count(rt, &sms)) != KDART_OK) return rc;
    *v_tile = kdart__dhu_pick_bv(B, HV, V, (int)K, sms);
    return KDART_OK;
}

int kdart_get_function(kdart_rt *rt, const char *kernel, const char *spec, kdart_launch_info *out) {
    KDART__CHECK_RT(rt);
    if (!out) return kdart__err(rt, KDART_ENULL, "out must not be NULL");
    const kdart__kernel *k;
    int vals[KDART__MAX_PARAMS];
    int rc = kdart__kernel_spec(rt, kernel, spec, &k, vals);
    if (rc) return rc;
    kdart__unit *u;
    void *fn;
    if ((rc = resolve(rt, (int)(k - kdart__kernels), vals, -1, &u, &fn, NULL)) != KDART_OK) return rc;
    out->function = fn;
    out->threads = u->threads;
    out->smem_bytes = u->smem;
    return KDART_OK;
}
