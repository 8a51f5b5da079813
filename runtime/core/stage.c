/*
 * stage.c: the engine of every stage's operation (stage.h): argument
 * validation from the stage's table, specialization choice through its
 * hooks, launch; and the calls that take any stage by name (kdart_op_run,
 * kdart_spec_for, kdart_op_arg, kdart_get_function).
 *
 * Validation happens in full before anything is launched, and a failure
 * names the argument and returns its own status (ENULL, EDTYPE, ESHAPE,
 * ESTRIDE, EALIGN, EDEVICE, EUNSUPPORTED, EINVAL), so nothing is written
 * when anything is wrong.  The checks are plain integer compares over at
 * most KDART__MAX_TARGS descriptors: well under a microsecond.
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
#include "stage.h"

int kdart__dtype_of(const DLTensor *t) {
    if (t->dtype.lanes != 1) return -100;
    if (t->dtype.code == kDLBfloat && t->dtype.bits == 16) return 0;
    if (t->dtype.code == kDLFloat && t->dtype.bits == 16) return 1;
    if (t->dtype.code == kDLFloat && t->dtype.bits == 32) return 32;
    return -100;
}

const char *kdart__dtype_name(int d) {
    return d == 0 ? "bfloat16" : d == 1 ? "float16" : d == 32 ? "float32" : "unsupported";
}

static uintptr_t addr(const DLTensor *t) { return (uintptr_t)kdart__ptr(t); }

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

/* ------------------------------------------------------ the call's args */

/* Does the caller's struct_size cover the field at off (of size sz)? */
static int covers(const kdart__call *c, size_t off, size_t sz) { return c->size >= off + sz; }

const DLTensor *kdart__arg(const kdart__call *c, size_t off) {
    if (!off || !covers(c, off, sizeof(const DLTensor *))) return NULL;
    const DLTensor *t;
    memcpy(&t, (const char *)c->args + off, sizeof t);
    return t;
}

int kdart__arg_int(const kdart__call *c, size_t off) {
    int v = 0;
    if (covers(c, off, sizeof v)) memcpy(&v, (const char *)c->args + off, sizeof v);
    return v;
}

/* --------------------------------------------------------- tensor checks */

/* The dtype a tensor row wants in this call (0/1 io, 32 fp32; 0x100 | io: either). */
static int want_dtype(const kdart__call *c, const kdart__targ *a) {
    switch (a->dtype) {
    case KDART__DT_F32: return 32;
    case KDART__DT_IO_F32: return 0x100 | c->io;
    case KDART__DT_FLAG: return kdart__arg_int(c, a->flag_offset) ? c->io : 32;
    default: return c->io;
    }
}

/* A tensor's dtype, shape and strides (what kdart_spec_for checks: nothing
 * that depends on where its memory is). */
static int check_layout(kdart_rt *rt, const char *name, const DLTensor *t, int want, int ndim, const int64_t *dims) {
    /* want: 0/1 the io dtype, 32 fp32, or 0x100 | io: the io dtype or fp32 */
    const int have = kdart__dtype_of(t), either = want >= 0x100, w = want & 0xff;
    if (either ? have != w && have != 32 : have != w)
        return kdart__err(rt, KDART_EDTYPE, "tensor %s is %s, expected %s%s", name, kdart__dtype_name(have),
                          kdart__dtype_name(w), either ? " (the io dtype) or float32" : "");
    char sb[96];
    if (t->ndim != ndim) {
        if (t->shape) shape_str(t, sb, sizeof sb);
        else snprintf(sb, sizeof sb, "[]");
        return kdart__err(rt, KDART_ESHAPE, "tensor %s has %d dims %s, expected %d", name, t->ndim, sb, ndim);
    }
    if (!t->shape) return kdart__err(rt, KDART_ENULL, "tensor %s has NULL shape", name);
    for (int i = 0; i < ndim; i++) {
        if (t->shape[i] != dims[i]) {
            shape_str(t, sb, sizeof sb);
            return kdart__err(rt, KDART_ESHAPE, "tensor %s has shape %s; dim %d should be %lld", name, sb, i,
                              (long long)dims[i]);
        }
    }
    if (t->strides) {
        int64_t expect = 1;
        for (int i = ndim - 1; i >= 0; i--) {
            /* A dim of size 1 may carry any stride (DLPack convention). */
            if (t->shape[i] != 1 && t->strides[i] != expect)
                return kdart__err(rt, KDART_ESTRIDE,
                                  "tensor %s is not contiguous (stride %lld of dim %d, expected %lld)", name,
                                  (long long)t->strides[i], i, (long long)expect);
            expect *= t->shape[i];
        }
    }
    return KDART_OK;
}

/* Checks one tensor; device_id is taken from the first tensor checked.
 * plan: only its layout (kdart_spec_for). */
static int check_tensor(kdart_rt *rt, const char *name, const DLTensor *t, int want, int ndim, const int64_t *dims,
                        int *device_id, int plan) {
    if (!t) return kdart__err(rt, KDART_ENULL, "tensor %s is NULL", name);
    if (plan) return check_layout(rt, name, t, want, ndim, dims); /* no memory is looked at */
    if (!t->data) return kdart__err(rt, KDART_ENULL, "tensor %s has NULL data", name);
    if (t->device.device_type != kDLCUDA)
        return kdart__err(rt, KDART_EDEVICE, "tensor %s is not in CUDA device memory (device_type %d)", name,
                          (int)t->device.device_type);
    if (*device_id < 0) *device_id = t->device.device_id;
    if (t->device.device_id != *device_id)
        return kdart__err(rt, KDART_EDEVICE, "tensor %s is on cuda:%d, the others on cuda:%d", name,
                          t->device.device_id, *device_id);
    int rc = check_layout(rt, name, t, want, ndim, dims);
    if (rc) return rc;
    if (addr(t) % 16 != 0)
        return kdart__err(rt, KDART_EALIGN, "tensor %s data is not 16-byte aligned (address %#llx)", name,
                          (unsigned long long)addr(t));
    return KDART_OK;
}

/* Outputs must not overlap each other, any input or cu_seqlens: the kernels
 * read the inputs of a chunk while other CTAs write their outputs. */
static int check_overlap(kdart_rt *rt, const kdart__op *op, const DLTensor *const *t, const DLTensor *cu) {
    for (int i = 0; i < op->ntargs; i++) {
        if (!(op->targs[i].flags & KDART__A_OUT) || !t[i]) continue;
        uintptr_t a0 = addr(t[i]), a1 = a0 + nbytes(t[i]);
        for (int j = 0; j < op->ntargs; j++) {
            const int jout = op->targs[j].flags & KDART__A_OUT;
            if (j == i || !t[j] || (j > i && jout)) continue;
            uintptr_t b0 = addr(t[j]), b1 = b0 + nbytes(t[j]);
            if (a0 < b1 && b0 < a1)
                return kdart__err(rt, KDART_EINVAL, "output %s overlaps %s %s (in-place is not supported)",
                                  op->targs[i].name, jout ? "output" : "input", op->targs[j].name);
        }
        if (cu) {
            uintptr_t b0 = addr(cu), b1 = b0 + nbytes(cu);
            if (a0 < b1 && b0 < a1) return kdart__err(rt, KDART_EINVAL, "output %s overlaps cu_seqlens", op->targs[i].name);
        }
    }
    return KDART_OK;
}

int kdart__check_head_dim(kdart_rt *rt, int64_t K) {
    if (K < 1 || K > 256)
        return kdart__err(rt, KDART_EUNSUPPORTED, "head dim K=%lld is not supported (K must be 1..256)", (long long)K);
    return KDART_OK;
}

int kdart__check_value_dim(kdart_rt *rt, int64_t V) {
    if (V < 1 || V > 512)
        return kdart__err(rt, KDART_EUNSUPPORTED, "value dim V=%lld is not supported (V must be 1..512)", (long long)V);
    return KDART_OK;
}

int kdart__check_heads(kdart_rt *rt, int64_t B, int64_t T, int64_t H, int64_t HV, const char *hv_from) {
    if (B < 1 || T < 1 || H < 1 || HV < 1)
        return kdart__err(rt, KDART_ESHAPE, "empty tensor: B=%lld T=%lld H=%lld HV=%lld", (long long)B,
                          (long long)T, (long long)H, (long long)HV);
    if (HV % H != 0)
        return kdart__err(rt, KDART_ESHAPE, "HV=%lld (value heads, from %s) is not a multiple of H=%lld (from q)",
                          (long long)HV, hv_from, (long long)H);
    return KDART_OK;
}

int kdart__call_io(kdart_rt *rt, kdart__call *c, const DLTensor *t, const char *name, int ndim) {
    if (!t) return kdart__err(rt, KDART_ENULL, "tensor %s is NULL", name);
    if (!t->shape || t->ndim != ndim)
        return kdart__err(rt, KDART_ESHAPE, "tensor %s has %d dims, expected %d", name, t->ndim, ndim);
    int io = kdart__dtype_of(t);
    if (io != 0 && io != 1)
        return kdart__err(rt, KDART_EDTYPE, "%s is %s; the io dtype must be bfloat16 or float16", name,
                          kdart__dtype_name(io));
    c->io = io;
    return KDART_OK;
}

/* ------------------------------------------------------------ sequences */

static int int_bits(const DLTensor *t) {
    return t->dtype.code == kDLInt && t->dtype.lanes == 1 && (t->dtype.bits == 32 || t->dtype.bits == 64)
               ? t->dtype.bits : 0;
}

/* cu_seqlens and fla's optional index tensors (chunk_offsets only where the
 * stage takes it): shapes and dtypes only, on the host; nothing here reads
 * device memory. */
int kdart__call_seqs(kdart_rt *rt, kdart__call *c, int64_t B, int64_t T) {
    const DLTensor *cu = kdart__arg(c, c->op->cu_off), *ci = kdart__arg(c, c->op->ci_off),
                   *co = kdart__arg(c, c->op->co_off);
    kdart__seqs *s = &c->sq;
    const int plan = c->plan;
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

int kdart__chunk_grid(kdart_rt *rt, kdart__call *c, int64_t B, int64_t T, int64_t HV, int varlen) {
    kdart__seqs *sq = &c->sq;
    /* Both bodies index with 64-bit offsets (problems past 2^32 elements need
     * nothing else); past the fixed-length grid's 65535 in y the varlen body
     * takes the batch: the same results, and the common case keeps its kernel. */
    if (varlen || B * HV > 65535) sq->varlen = 1;
    const int64_t NTC = (T + KDART_CHUNK - 1) / KDART_CHUNK;
    const int64_t grid_x = !sq->varlen ? T / KDART_CHUNK : sq->cu ? T / KDART_CHUNK + sq->N : B * NTC;
    const int64_t grid_y = sq->varlen ? HV : B * HV;
    /* (the kernels number their CTAs x + X y in 32 bits: kernel_src/kdart_varlen.cuh, chunk_cta) */
    if (T > INT32_MAX || HV > 65535 || grid_x > INT32_MAX || grid_x * grid_y > UINT32_MAX)
        return kdart__err(rt, KDART_EUNSUPPORTED, "problem too large (T=%lld, HV=%lld, %lld chunks)", (long long)T,
                          (long long)HV, (long long)grid_x);
    c->max_chunks = grid_x;
    c->grid[0] = (unsigned)grid_x;
    c->grid[1] = (unsigned)grid_y;
    return KDART_OK;
}

int kdart__packed_chunk_rows(kdart_rt *rt, const kdart__call *c, const DLTensor *t, const char *name, int svf,
                             int64_t *NT) {
    const kdart__seqs *s = &c->sq;
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
static int host_check(kdart_rt *rt, const kdart__seqs *s, int64_t T, int64_t max_chunks) {
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
    const kdart__kernel *k = kdart__kernel_at(kernel);
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

/* ------------------------------------------------------------ the engine */

static int op_call(kdart_rt *rt, const kdart__kernel *k, const void *args, void *stream, char *so_buf,
                   size_t so_n, void *extra) {
    KDART__CHECK_RT(rt);
    const kdart__op *op = k->op;
    if (!args) return kdart__err(rt, KDART_ENULL, "args is NULL");
    kdart__call c;
    memset(&c, 0, sizeof c);
    c.op = op;
    c.args = args;
    c.extra = extra;
    c.plan = so_buf != NULL;
    memcpy(&c.size, args, sizeof c.size); /* every args struct starts with uint32_t struct_size */
    if (c.size < op->args_first_new || c.size > op->args_size) {
        if (op->args_first_new == op->args_size) /* a struct with no older form */
            return kdart__err(rt, KDART_EINVAL, "args.struct_size is %u, expected %zu (sizeof(%s))", c.size,
                              op->args_size, op->args_type);
        return kdart__err(rt, KDART_EINVAL, "args.struct_size is %u, expected %zu (%s; %zu in its oldest accepted form)",
                          c.size, op->args_size, op->args_type, op->args_first_new);
    }
    c.d[KDART__D_64] = KDART_CHUNK;
    int rc = op->dims(rt, &c);
    if (rc) return rc;
    const DLTensor *t[KDART__MAX_TARGS];
    int device_id = -1;
    for (int i = 0; i < op->ntargs; i++) {
        const kdart__targ *a = &op->targs[i];
        t[i] = kdart__arg(&c, a->offset);
        if (!t[i] && (a->flags & KDART__A_OPTIONAL)) continue;
        int64_t want[5];
        for (int j = 0; j < a->ndim; j++) want[j] = c.d[a->dims[j]];
        if ((rc = check_tensor(rt, a->name, t[i], want_dtype(&c, a), a->ndim, want, &device_id, c.plan)) != KDART_OK)
            return rc;
    }
    if (c.plan) {
        if ((rc = op->choose(rt, &c)) != KDART_OK) return rc;
        int len = kdart__spec_format(k, c.vals, so_buf, so_n);
        if (len < 0) return kdart__err(rt, KDART_EINVAL, "the spec does not fit in %zu bytes", so_n);
        return len;
    }
    if ((rc = check_overlap(rt, op, t, c.sq.cu)) != KDART_OK) return rc;
    if (c.sq.cu && device_id >= 0 && c.sq.cu->device.device_id != device_id)
        return kdart__err(rt, KDART_EDEVICE, "cu_seqlens is on cuda:%d, the tensors on cuda:%d",
                          c.sq.cu->device.device_id, device_id);
    if ((rc = host_check(rt, &c.sq, c.d[KDART__D_T], c.max_chunks)) != KDART_OK) return rc;
    if ((rc = op->choose(rt, &c)) != KDART_OK) return rc;
    kdart__unit *u;
    void *fn;
    int *status = NULL;
    if ((rc = resolve(rt, kdart__kernel_index(k), c.vals, device_id, &u, &fn, c.sq.varlen ? &status : NULL)) != KDART_OK)
        return rc;
    return op->launch(rt, &c, u, fn, status, stream);
}

int kdart__op_call(kdart_rt *rt, const kdart__kernel *k, const void *args, void *stream, char *so_buf,
                   size_t so_n) {
    return op_call(rt, k, args, stream, so_buf, so_n, NULL);
}

int kdart__op_call_ex(kdart_rt *rt, const kdart__kernel *k, const void *args, void *stream, void *extra) {
    return op_call(rt, k, args, stream, NULL, 0, extra);
}

/* --------------------------------------------------- calls by stage name */

/* The stage named kernel, when it has an operation. */
static int op_kernel(kdart_rt *rt, const char *kernel, const char *call, const kdart__kernel **out) {
    const kdart__kernel *k = *out = kdart__kernel_find(kernel);
    if (!k) return kdart__err(rt, KDART_EKERNEL, "no kernel named '%s'", kernel);
    if (!k->op) {
        char names[160] = "";
        for (int i = 0, n = kdart__kernel_count(); i < n; i++) {
            const kdart__kernel *o = kdart__kernel_at(i);
            if (!o->op) continue;
            size_t u = strlen(names);
            snprintf(names + u, sizeof names - u, "%s%s", u ? ", " : "", o->name);
        }
        return kdart__err(rt, KDART_EINVAL, "%s has no operation of its own (%s takes %s)", kernel, call, names);
    }
    return KDART_OK;
}

int kdart_op_run(kdart_rt *rt, const char *kernel, const void *args, void *stream) {
    KDART__CHECK_RT(rt);
    if (!kernel) return kdart__err(rt, KDART_ENULL, "kernel must not be NULL");
    const kdart__kernel *k;
    int rc = op_kernel(rt, kernel, "kdart_op_run", &k);
    return rc ? rc : kdart__op_call(rt, k, args, stream, NULL, 0);
}

int kdart_spec_for(kdart_rt *rt, const char *kernel, const void *args, char *buf, size_t n) {
    KDART__CHECK_RT(rt);
    if (!kernel || !args || !buf) return kdart__err(rt, KDART_ENULL, "kernel, args and buf must not be NULL");
    const kdart__kernel *k;
    int rc = op_kernel(rt, kernel, "kdart_spec_for", &k);
    return rc ? rc : kdart__op_call(rt, k, args, NULL, buf, n);
}

int kdart_op_arg(const char *kernel, int index, kdart_op_arg_info *out) {
    const kdart__kernel *k = kdart__kernel_find(kernel);
    if (!k) return KDART_EKERNEL;
    const kdart__op *op = k->op;
    if (!op) return 0;
    const int nseq = (op->cu_off != 0) + (op->ci_off != 0) + (op->co_off != 0);
    const int n = op->ntargs + op->nsargs + nseq;
    if (index < 0 || index >= n) return index == 0 && n == 0 ? 0 : KDART_EINVAL;
    if (!out) return KDART_ENULL;
    static const char *const dtypes[] = {"io", "float32", "io|float32", "io?"};
    memset(out, 0, sizeof *out);
    out->args_size = (uint32_t)op->args_size;
    if (index < op->ntargs) {
        const kdart__targ *a = &op->targs[index];
        out->name = a->name;
        out->kind = a->flags & KDART__A_OUT ? KDART_ARG_OUTPUT : KDART_ARG_INPUT;
        out->optional = (a->flags & KDART__A_OPTIONAL) != 0;
        out->offset = (uint32_t)a->offset;
        out->dtype = dtypes[a->dtype];
        out->flag = a->flag;
        out->dims = a->dims_text;
        return n;
    }
    index -= op->ntargs;
    if (index < op->nsargs) {
        const kdart__sarg *s = &op->sargs[index];
        out->name = s->name;
        out->kind = s->type == 'f' ? KDART_ARG_FLOAT : KDART_ARG_INT;
        out->offset = (uint32_t)s->offset;
        return n;
    }
    index -= op->nsargs;
    const size_t offs[3] = {op->cu_off, op->ci_off, op->co_off};
    static const char *const names[3] = {"cu_seqlens", "chunk_indices", "chunk_offsets"};
    static const char *const dims[3] = {"N+1", "NT, 2", "N+1"};
    for (int i = 0; i < 3; i++) {
        if (!offs[i]) continue;
        if (index-- == 0) {
            out->name = names[i];
            out->kind = KDART_ARG_SEQS;
            out->optional = 1;
            out->offset = (uint32_t)offs[i];
            out->dtype = "int32|int64";
            out->dims = dims[i];
            break;
        }
    }
    return n;
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
    if ((rc = resolve(rt, kdart__kernel_index(k), vals, -1, &u, &fn, NULL)) != KDART_OK) return rc;
    out->function = fn;
    out->threads = u->threads;
    out->smem_bytes = u->smem;
    return KDART_OK;
}
