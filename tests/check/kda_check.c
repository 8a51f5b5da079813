/*
 * kda_check.c: runs bwd_intra and bwd_dhu through kdart's public API on
 * fresh random inputs and measures them against the float64 reference.
 * Used by tests/gpu/test_gpu.c (with tolerances) and `kdart selftest`.
 *
 * Inputs follow spec section 6: unit-norm q/k rows, gates of a chosen
 * family turned into fp32 log2 chunk cumsums, beta in (0,2), dAqk/dAkk with
 * NaN and 1e30 in the triangles the kernel must not read, and for bwd_dhu
 * the WY-derived w/kg/qg of real training so the scan stays bounded.  The
 * io-dtype and fp32 roundings are applied to the inputs before the
 * reference sees them, so the reference computes on exactly the values the
 * kernel reads.  Every output is filled with NaN before every launch.
 *
 * bwd_dhu is checked two ways.  Against the exact float64 scan, the error
 * is dominated by the bf16 rounding of dH and dv2 where they are matrix
 * operands (fla's contract), which compounds over chunks.  The tight check
 * is teacher-forced: a float64 scan that takes the kernel's own rounded dH
 * checkpoints and dv2 as its operands, so one rounding flip cannot compound
 * and the remaining difference is the kernel's fp32 arithmetic.
 *
 * Interfaces (kda_check.h says the same): kdart's public API (kdart.h),
 * the kernels' launch ABI (kernel_src/kda_params.h, for the raw launch of
 * kc_launch_overhead), the float64 reference (tests/ref/kda_ref.h), and the
 * CUDA driver through a private dlopen of libcuda with its own table below
 * (the toolkit's cuda.h for the types): never kdart's internal headers, so
 * the CLI that links this file stays on the public API.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>

#include "kda_check.h"
#include "kda_params.h"
#include "kda_ref.h"

/* The driver entry points the harness calls, resolved by kc_init.  Its own
 * list, not the runtime's: the harness must not see kdart's internals.  The
 * types come from cuda.h's prototypes (which name the versioned symbols,
 * cuMemAlloc_v2 and the like), so no signature is written twice. */
#define KC_CUDA_FUNCS(X)                                                                                    \
    X(cuInit) X(cuGetErrorName) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain)             \
    X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuLaunchKernel) X(cuMemAlloc_v2) X(cuMemFree_v2)              \
    X(cuMemcpyHtoD_v2) X(cuMemcpyDtoH_v2) X(cuMemcpyDtoD_v2) X(cuMemsetD32_v2) X(cuStreamCreate)           \
    X(cuStreamDestroy_v2) X(cuStreamSynchronize) X(cuStreamBeginCapture_v2) X(cuStreamEndCapture)          \
    X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy)                \
    X(cuEventCreate) X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime_v2) X(cuEventDestroy_v2)

static struct kc_cuda {
#define KC_FIELD(name) __typeof__(&name) name;
    KC_CUDA_FUNCS(KC_FIELD)
#undef KC_FIELD
} cu;
static int cu_ready;
/* Device 0's primary context (kc_init), and the two entry points of
 * kc_ctx_create, resolved apart from the table: the runtime never creates
 * contexts, and a driver without them only loses that one test. */
static CUcontext primary_ctx;
static CUdevice dev0;
static CUresult (*ctx_create)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice);
static CUresult (*ctx_destroy)(CUcontext);

int kc_init(char *why, size_t n) {
    if (cu_ready) return 0;
    /* Exactly "1", as the runtime reads the switch (it warns about others). */
    const char *off = getenv("KDART_DISABLE_CUDA");
    if (off && strcmp(off, "1") == 0) {
        snprintf(why, n, "CUDA disabled by KDART_DISABLE_CUDA=1");
        return 77;
    }
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, n, "no CUDA driver (libcuda.so.1 not found)");
        return 77;
    }
#define KC_SYM(name)                                                 \
    if (!(*(void **)&cu.name = dlsym(lib, #name))) {                 \
        snprintf(why, n, "libcuda lacks %s", #name);                 \
        return 77;                                                   \
    }
    KC_CUDA_FUNCS(KC_SYM)
#undef KC_SYM
    int count = 0;
    CUdevice dev;
    CUcontext ctx;
    if (cu.cuInit(0) != CUDA_SUCCESS || cu.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
        snprintf(why, n, "no CUDA device");
        return 77;
    }
    if (cu.cuDeviceGet(&dev, 0) != CUDA_SUCCESS || cu.cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        cu.cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        snprintf(why, n, "cannot make device 0's primary context current");
        return 77;
    }
    primary_ctx = ctx;
    dev0 = dev;
    *(void **)&ctx_create = dlsym(lib, "cuCtxCreate_v4");
    *(void **)&ctx_destroy = dlsym(lib, "cuCtxDestroy_v2");
    cu_ready = 1;
    return 0;
}

int kc_ctx_create(void **ctx, char *why, size_t n) {
    *ctx = NULL;
    if (!cu_ready) return snprintf(why, n, "kc_init not called"), -1;
    if (!ctx_create || !ctx_destroy) return snprintf(why, n, "libcuda lacks cuCtxCreate_v4 (CUDA 12.5+)"), -1;
    CUcontext c;
    CUresult r = ctx_create(&c, NULL, 0, dev0);
    if (r != CUDA_SUCCESS) {
        const char *name = "?";
        cu.cuGetErrorName(r, &name);
        return snprintf(why, n, "cuCtxCreate: %s", name), -1;
    }
    /* cuCtxCreate pushed it; make it current the way the others are set. */
    if (cu.cuCtxSetCurrent(c) != CUDA_SUCCESS) {
        ctx_destroy(c);
        cu.cuCtxSetCurrent(primary_ctx);
        return snprintf(why, n, "cuCtxSetCurrent on the new context failed"), -1;
    }
    *ctx = c;
    return 0;
}

int kc_ctx_use(void *ctx) {
    return cu_ready && cu.cuCtxSetCurrent(ctx ? (CUcontext)ctx : primary_ctx) == CUDA_SUCCESS ? 0 : -1;
}

void kc_ctx_destroy(void *ctx) {
    if (!cu_ready) return;
    if (ctx && ctx_destroy) ctx_destroy((CUcontext)ctx);
    cu.cuCtxSetCurrent(primary_ctx);
}

/* ------------------------------------------------------------- buffers */

typedef struct dbuf {
    CUdeviceptr p;
    size_t bytes;
    DLTensor t;
    int64_t shape[5];
} dbuf;

enum { DT_IO = -1, DT_F32 = 32, DT_I32 = 132, DT_I64 = 164 };

/* Allocates a device tensor of the given shape; dtype is DT_F32, DT_I32,
 * DT_I64 or an io code (0 bf16, 1 fp16).  A zero-element tensor gets one
 * element of storage (a valid pointer). */
static int dalloc(dbuf *b, int dtype, int ndim, const int64_t *shape) {
    memset(b, 0, sizeof *b);
    size_t elems = 1;
    for (int i = 0; i < ndim; i++) {
        b->shape[i] = shape[i];
        elems *= (size_t)shape[i];
    }
    int bits = dtype == DT_F32 || dtype == DT_I32 ? 32 : dtype == DT_I64 ? 64 : 16;
    b->bytes = elems * (size_t)bits / 8;
    if (cu.cuMemAlloc_v2(&b->p, b->bytes ? b->bytes : 16) != CUDA_SUCCESS) return -1;
    b->t.data = (void *)b->p;
    b->t.device.device_type = kDLCUDA;
    b->t.device.device_id = 0;
    b->t.ndim = ndim;
    b->t.shape = b->shape;
    b->t.dtype.code = dtype == DT_I32 || dtype == DT_I64 ? kDLInt : dtype == DT_F32 ? kDLFloat : dtype == 0 ? kDLBfloat : kDLFloat;
    b->t.dtype.bits = (uint8_t)bits;
    b->t.dtype.lanes = 1;
    return 0;
}

static void dfree(dbuf *b) {
    if (b->p) cu.cuMemFree_v2(b->p);
    b->p = 0;
}

static size_t nelem(const dbuf *b) { return b->bytes / (b->t.dtype.bits / 8); }

/* Uploads doubles, converting to the buffer's dtype. */
static int dput(dbuf *b, const double *x) {
    size_t n = nelem(b);
    void *h = malloc(b->bytes);
    if (!h) return -1;
    if (b->t.dtype.bits == 32)
        for (size_t i = 0; i < n; i++) ((float *)h)[i] = (float)x[i];
    else if (b->t.dtype.code == kDLBfloat)
        for (size_t i = 0; i < n; i++) ((uint16_t *)h)[i] = kref_to_bf16(x[i]);
    else
        for (size_t i = 0; i < n; i++) ((uint16_t *)h)[i] = kref_to_fp16(x[i]);
    int rc = cu.cuMemcpyHtoD_v2(b->p, h, b->bytes) == CUDA_SUCCESS ? 0 : -1;
    free(h);
    return rc;
}

/* raw's first n elements (b's dtype: fp32 or an io one) as doubles */
static void as_doubles(const dbuf *b, const void *raw, size_t n, double *x) {
    for (size_t j = 0; j < n; j++)
        x[j] = b->t.dtype.bits == 32 ? ((const float *)raw)[j]
             : b->t.dtype.code == kDLBfloat ? kref_from_bf16(((const uint16_t *)raw)[j])
                                             : kref_from_fp16(((const uint16_t *)raw)[j]);
}

/* Downloads raw bytes into raw (b->bytes) and, if x, converts to double. */
static int dget(const dbuf *b, void *raw, double *x) {
    if (cu.cuMemcpyDtoH_v2(raw, b->p, b->bytes) != CUDA_SUCCESS) return -1;
    if (x) as_doubles(b, raw, nelem(b), x);
    return 0;
}

/* NaN in every element: 0x7fc00000 for fp32, a NaN pair for 16-bit. */
static int dpoison(const dbuf *b) {
    unsigned pat = b->t.dtype.bits == 32 ? 0x7fc00000u : b->t.dtype.code == kDLBfloat ? 0x7fc07fc0u : 0x7e007e00u;
    return cu.cuMemsetD32_v2(b->p, pat, b->bytes / 4) == CUDA_SUCCESS ? 0 : -1;
}

/* kc_tensor: a dbuf a test outside this file may hold (kda_check.h). */
static dbuf to_dbuf(const kc_tensor *k) {
    dbuf b;
    b.p = (CUdeviceptr)k->p, b.bytes = k->bytes, b.t = k->t;
    memcpy(b.shape, k->shape, sizeof b.shape);
    b.t.shape = b.shape;
    return b;
}
int kc_tensor_make(kc_tensor *k, int dtype, int ndim, const int64_t *shape) {
    dbuf b;
    memset(k, 0, sizeof *k);
    if (ndim < 1 || ndim > 5 || dalloc(&b, dtype == 32 ? DT_F32 : dtype, ndim, shape)) return -1;
    k->p = b.p, k->bytes = b.bytes, k->t = b.t;
    memcpy(k->shape, b.shape, sizeof k->shape);
    k->t.shape = k->shape;
    return 0;
}
int kc_tensor_put(kc_tensor *k, const double *x) {
    dbuf b = to_dbuf(k);
    return dput(&b, x);
}
int kc_tensor_get(const kc_tensor *k, double *x) {
    dbuf b = to_dbuf(k);
    void *raw = malloc(k->bytes ? k->bytes : 1);
    int rc = raw ? dget(&b, raw, x) : -1;
    free(raw);
    return rc;
}
int kc_tensor_poison(const kc_tensor *k) {
    dbuf b = to_dbuf(k);
    return dpoison(&b);
}
void kc_tensor_free(kc_tensor *k) {
    dbuf b = to_dbuf(k);
    dfree(&b);
    k->p = 0;
}
int kc_sync(void) { return cu.cuCtxSynchronize() == CUDA_SUCCESS ? 0 : -1; }

/* bwd_intra's tensors in kdart_bwd_intra_args order: in[0..9] are q, k, g,
 * beta, dAqk, dAkk, dq_in, dk_in, dg_in, db_in; out[0..3] (when out is not
 * NULL) dq, dk (out_dtype), dg, db.  Returns 0 or -1. */
static int intra_alloc_b(dbuf *in, dbuf *out, int B, int T, int H, int HV, int K, int io, int out_dtype,
                         int beta_dtype) {
    int64_t sqk[4] = {B, T, H, K}, sg[4] = {B, T, HV, K}, sb[3] = {B, T, HV}, sA[4] = {B, T, HV, 64};
    int ok = !dalloc(&in[0], io, 4, sqk) && !dalloc(&in[1], io, 4, sqk) && !dalloc(&in[2], DT_F32, 4, sg) &&
             !dalloc(&in[3], beta_dtype, 3, sb) && !dalloc(&in[4], DT_F32, 4, sA) && !dalloc(&in[5], DT_F32, 4, sA) &&
             !dalloc(&in[6], DT_F32, 4, sg) && !dalloc(&in[7], DT_F32, 4, sg) && !dalloc(&in[8], DT_F32, 4, sg) &&
             !dalloc(&in[9], DT_F32, 3, sb);
    if (ok && out)
        ok = !dalloc(&out[0], out_dtype, 4, sg) && !dalloc(&out[1], out_dtype, 4, sg) &&
             !dalloc(&out[2], DT_F32, 4, sg) && !dalloc(&out[3], DT_F32, 3, sb);
    return ok ? 0 : -1;
}
/* (beta in the io dtype) */
static int intra_alloc(dbuf *in, dbuf *out, int B, int T, int H, int HV, int K, int io, int out_dtype) {
    return intra_alloc_b(in, out, B, T, H, HV, K, io, out_dtype, io);
}

static kdart_bwd_intra_args intra_args(dbuf *in, dbuf *out, int fold_dg, int emit_bf16) {
    kdart_bwd_intra_args a = {sizeof a,  &in[0].t,  &in[1].t,  &in[2].t,  &in[3].t, &in[4].t,
                              &in[5].t,  &in[6].t,  &in[7].t,  &in[8].t,  &in[9].t, &out[0].t,
                              &out[1].t, &out[2].t, &out[3].t, fold_dg,   emit_bf16, NULL,    NULL};
    return a;
}

/* A valid bwd_intra problem without the reference's cost: every io value
 * 0x3c00 (bf16 0.0078, fp16 1.0), every fp32 input 0.0078 except g = -1 and
 * dAqk = dAkk = 0.  For validation and launch-overhead runs. */
static void intra_fill_small(dbuf *in) {
    for (int i = 0; i < 10; i++) cu.cuMemsetD32_v2(in[i].p, 0x3c003c00u, in[i].bytes / 4);
    cu.cuMemsetD32_v2(in[2].p, 0xbf800000u, in[2].bytes / 4);
    cu.cuMemsetD32_v2(in[4].p, 0, in[4].bytes / 4);
    cu.cuMemsetD32_v2(in[5].p, 0, in[5].bytes / 4);
}

/* bwd_dhu's inputs in kdart_bwd_dhu_args order: qg, kg, w, g, do, dv. */
static int dhu_alloc_inputs(dbuf *in, int B, int T, int HV, int K, int V, int io) {
    int64_t sk[4] = {B, T, HV, K}, sv[4] = {B, T, HV, V};
    int ok = !dalloc(&in[0], io, 4, sk) && !dalloc(&in[1], io, 4, sk) && !dalloc(&in[2], io, 4, sk) &&
             !dalloc(&in[3], DT_F32, 4, sk) && !dalloc(&in[4], io, 4, sv) && !dalloc(&in[5], io, 4, sv);
    return ok ? 0 : -1;
}

/* Rounds a host array to what the device will hold. */
static void round_to(double *x, size_t n, int dtype) {
    for (size_t i = 0; i < n; i++) x[i] = dtype == DT_F32 ? kref_round_f32(x[i]) : kref_round_io(x[i], dtype);
}

static double *dmalloc(size_t n) { return malloc((n ? n : 1) * sizeof(double)); }

static int fail(kc_report *r, const char *what) {
    snprintf(r->message, sizeof r->message, "harness: %s", what);
    return -1;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A launch closure, so determinism, graph and timing share one path. */
typedef int (*launch_fn)(kdart_rt *rt, const void *args, CUstream s);

static int launch_intra(kdart_rt *rt, const void *a, CUstream s) {
    return kdart_kda_bwd_intra(rt, (const kdart_bwd_intra_args *)a, (void *)s);
}
static int launch_dhu(kdart_rt *rt, const void *a, CUstream s) {
    return kdart_kda_bwd_dhu(rt, (const kdart_bwd_dhu_args *)a, (void *)s);
}

/* Poisons the outputs, launches, synchronizes, downloads raw bytes. */
static int run_once(kdart_rt *rt, launch_fn fn, const void *args, CUstream s, dbuf **outs, int nout, void **raw,
                    int use_graph, kc_report *r) {
    for (int i = 0; i < nout; i++)
        if (outs[i] && dpoison(outs[i])) return fail(r, "poisoning outputs");
    cu.cuCtxSynchronize();
    int st;
    if (use_graph) {
        CUgraph g;
        CUgraphExec ge;
        if (cu.cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL) != CUDA_SUCCESS)
            return fail(r, "cuStreamBeginCapture");
        st = fn(rt, args, s);
        if (cu.cuStreamEndCapture(s, &g) != CUDA_SUCCESS) return fail(r, "cuStreamEndCapture");
        if (st == KDART_OK) {
            if (cu.cuGraphInstantiateWithFlags(&ge, g, 0) != CUDA_SUCCESS) return fail(r, "cuGraphInstantiate");
            /* Replay twice: a graph is meant to be replayed. */
            for (int rep = 0; rep < 2; rep++)
                if (cu.cuGraphLaunch(ge, s) != CUDA_SUCCESS) return fail(r, "cuGraphLaunch");
            cu.cuGraphExecDestroy(ge);
        }
        cu.cuGraphDestroy(g);
    } else {
        st = fn(rt, args, s);
    }
    if (st != KDART_OK) {
        r->status = st;
        snprintf(r->message, sizeof r->message, "%s", kdart_last_error(rt));
        return 0;
    }
    CUresult e = cu.cuStreamSynchronize(s);
    if (e != CUDA_SUCCESS) {
        const char *name = "?";
        cu.cuGetErrorName(e, &name);
        r->status = KDART_ECUDA;
        snprintf(r->message, sizeof r->message, "kernel failed: %s", name);
        return 0;
    }
    for (int i = 0; i < nout; i++)
        if (outs[i] && dget(outs[i], raw[i], NULL)) return fail(r, "downloading outputs");
    return 0;
}

/* Median milliseconds per launch over reps launches. */
static double time_launches(kdart_rt *rt, launch_fn fn, const void *args, CUstream s, int reps) {
    CUevent e0, e1;
    double *ms = dmalloc((size_t)reps);
    cu.cuEventCreate(&e0, 0);
    cu.cuEventCreate(&e1, 0);
    for (int i = 0; i < 3; i++) fn(rt, args, s); /* warm-up */
    for (int i = 0; i < reps; i++) {
        float t = 0;
        cu.cuEventRecord(e0, s);
        fn(rt, args, s);
        cu.cuEventRecord(e1, s);
        cu.cuEventSynchronize(e1);
        cu.cuEventElapsedTime_v2(&t, e0, e1);
        ms[i] = t;
    }
    qsort(ms, (size_t)reps, sizeof *ms, cmp_double);
    double med = ms[reps / 2];
    free(ms);
    cu.cuEventDestroy_v2(e0);
    cu.cuEventDestroy_v2(e1);
    return med;
}

/* FNV-1a, 64 bits: a digest of an output's bytes (kc_report.digest). */
static unsigned long long fnv1a(const void *p, size_t n) {
    const unsigned char *b = p;
    unsigned long long h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* Runs the checked launch, the determinism launch, the graph launch and
 * the timing; fills the raw outputs of the first launch into raw. */
static int run_all(kdart_rt *rt, launch_fn fn, const void *args, dbuf **outs, int nout, void **raw, int graph,
                   int reps, kc_report *r) {
    CUstream s;
    if (cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return fail(r, "cuStreamCreate");
    int rc = run_once(rt, fn, args, s, outs, nout, raw, 0, r);
    if (rc == 0 && r->status == KDART_OK)
        for (int i = 0; i < nout; i++) r->digest[i] = outs[i] ? fnv1a(raw[i], outs[i]->bytes) : 0;
    void *again[7] = {0};
    r->deterministic = 0;
    r->graph_equal = -1;
    if (rc == 0 && r->status == KDART_OK) {
        for (int i = 0; i < nout; i++) again[i] = outs[i] ? malloc(outs[i]->bytes) : NULL;
        rc = run_once(rt, fn, args, s, outs, nout, again, 0, r);
        r->deterministic = 1;
        for (int i = 0; i < nout && rc == 0; i++)
            if (outs[i] && memcmp(raw[i], again[i], outs[i]->bytes) != 0) r->deterministic = 0;
        if (rc == 0 && graph) {
            rc = run_once(rt, fn, args, s, outs, nout, again, 1, r);
            r->graph_equal = 1;
            for (int i = 0; i < nout && rc == 0; i++)
                if (outs[i] && memcmp(raw[i], again[i], outs[i]->bytes) != 0) r->graph_equal = 0;
        }
        if (rc == 0 && r->status == KDART_OK && reps > 0) r->ms = time_launches(rt, fn, args, s, reps);
        for (int i = 0; i < nout; i++) free(again[i]);
    }
    cu.cuStreamDestroy_v2(s);
    return rc;
}

/* ----------------------------------------------------------- sequences */

/* The sequences of a case on the host: cu [N+1] and chunk offsets [N+1] over
 * T storage tokens of the packed layout (fixed length: cu = [0, T, .., BT],
 * which is the contiguous [B,T,...] array), and the device index tensors. */
typedef struct layout {
    int packed;          /* seqs.nseq > 0: one row, cu_seqlens passed */
    int B, T;            /* the tensors' B and T */
    int N;               /* sequences */
    int64_t *cu, *co;    /* [N+1] */
    int64_t chunks;      /* total chunks */
    int64_t tokens;      /* cu[N] */
    int64_t rows;        /* packed rows of the tensors: B * T */
    dbuf dcu, dci, dco;  /* cu_seqlens, chunk_indices [chunks,2], chunk_offsets (packed only) */
} layout;

static void layout_free(layout *L) {
    free(L->cu), free(L->co);
    dfree(&L->dcu), dfree(&L->dci), dfree(&L->dco);
    memset(L, 0, sizeof *L);
}

static int layout_make(layout *L, int B, int T, const kc_seqs *s, kref_rng *rng, kc_report *r) {
    memset(L, 0, sizeof *L);
    L->packed = s->nseq > 0;
    L->N = L->packed ? s->nseq : B;
    L->cu = calloc((size_t)L->N + 1, sizeof *L->cu);
    L->co = calloc((size_t)L->N + 1, sizeof *L->co);
    if (!L->cu || !L->co) return fail(r, "out of host memory");
    if (!L->packed) {
        for (int n = 0; n <= B; n++) L->cu[n] = (int64_t)n * T;
    } else if (s->cu) {
        for (int n = 0; n <= L->N; n++) L->cu[n] = s->cu[n];
    } else {
        kref_gen_cu_seqlens(rng, L->N, s->len_lo, s->len_hi, s->with_empty, L->cu);
    }
    L->tokens = L->cu[L->N];
    L->B = L->packed ? 1 : B;
    L->T = L->packed ? (T > 0 ? T : (int)L->tokens) : T;
    if (L->packed && (B != 1 || L->T < L->tokens || L->T < 1)) return fail(r, "packed case needs B = 1, T >= cu[N] >= 1");
    L->rows = (int64_t)L->B * L->T;
    L->chunks = kref_chunk_offsets(L->N, L->cu, L->co);
    r->nseq = L->N;
    r->tokens = (int)L->tokens;
    return 0;
}

/* Uploads cu_seqlens as int32 or int64 (and fla's chunk_indices, chunk_offsets:
 * [i, c] rows as fla's prepare_chunk_indices builds them). */
static int layout_upload(layout *L, const kc_seqs *s, kc_report *r) {
    if (!L->packed) return 0;
    const int dt = s->cu32 ? DT_I32 : DT_I64;
    const size_t w = s->cu32 ? 4 : 8;
    int64_t sh1[1] = {L->N + 1}, sh2[2] = {L->chunks, 2};
    if (dalloc(&L->dcu, dt, 1, sh1) || dalloc(&L->dco, dt, 1, sh1) || dalloc(&L->dci, dt, 2, sh2))
        return fail(r, "out of device memory");
    size_t nidx = (size_t)(L->N + 1) + 2 * (size_t)L->chunks;
    unsigned char *h = malloc(nidx * w);
    if (!h) return fail(r, "out of host memory");
    int64_t *v = calloc(nidx, sizeof *v);
    if (!v) {
        free(h);
        return fail(r, "out of host memory");
    }
    size_t at = 0;
    for (int n = 0; n < L->N; n++)
        for (int64_t c = 0; c < L->co[n + 1] - L->co[n]; c++) v[at++] = n, v[at++] = c;
    int rc = 0;
    const int64_t *src[3] = {L->cu, L->co, v};
    size_t cnt[3] = {(size_t)L->N + 1, (size_t)L->N + 1, 2 * (size_t)L->chunks};
    dbuf *dst[3] = {&L->dcu, &L->dco, &L->dci};
    for (int i = 0; i < 3 && rc == 0; i++) {
        for (size_t j = 0; j < cnt[i]; j++) {
            if (s->cu32) ((int32_t *)h)[j] = (int32_t)src[i][j];
            else ((int64_t *)h)[j] = src[i][j];
        }
        if (cnt[i] && cu.cuMemcpyHtoD_v2(dst[i]->p, h, cnt[i] * w) != CUDA_SUCCESS) rc = fail(r, "uploading indices");
    }
    free(h), free(v);
    return rc;
}

/* Overwrites the device cu_seqlens with a bad one (seqs.garbage). */
static int layout_garbage(layout *L, const kc_seqs *s, kc_report *r) {
    if (!L->packed || !s->garbage || s->garbage == 4) return 0;
    int64_t *g = malloc(((size_t)L->N + 1) * sizeof *g);
    if (!g) return fail(r, "out of host memory");
    memcpy(g, L->cu, ((size_t)L->N + 1) * sizeof *g);
    if (s->garbage == 1) { /* decreasing somewhere in the middle */
        int m = L->N / 2 + 1;
        g[m] = g[m - 1] - 5;
    } else if (s->garbage == 2) {
        g[L->N] = L->T + 64;
    } else {
        g[0] = 1;
    }
    unsigned char h[8];
    int rc = 0;
    for (int n = 0; n <= L->N && rc == 0; n++) {
        size_t w = s->cu32 ? 4 : 8;
        if (s->cu32) *(int32_t *)h = (int32_t)g[n];
        else memcpy(h, &g[n], 8);
        if (cu.cuMemcpyHtoD_v2(L->dcu.p + (CUdeviceptr)(n * w), h, w) != CUDA_SUCCESS) rc = fail(r, "uploading garbage");
    }
    free(g);
    return rc;
}

/* The start of every kc_run_*: the report cleared, the generator seeded, the case's sequences laid
 * out (0, or -1 with the report saying why: kc_init not called, or a bad layout, then freed). */
static int case_begin(int B, int T, const kc_seqs *seqs, unsigned long long seed, kref_rng *rng, layout *L,
                      kc_report *r) {
    memset(r, 0, sizeof *r);
    memset(L, 0, sizeof *L);
    if (!cu_ready) return fail(r, "kc_init not called");
    kref_rng_seed(rng, seed);
    if (layout_make(L, B, T, seqs, rng, r)) {
        layout_free(L);
        return -1;
    }
    return 0;
}

/* Gate entries set to -1000 (seqs.hard_gates), natural-log units, before the cumsum. */
static void harden_gates(kref_rng *rng, double frac, size_t n, double *a) {
    if (frac <= 0) return;
    for (size_t i = 0; i < n; i++)
        if (kref_rng_uniform(rng) < frac) a[i] = -1000.0;
}

/* 1 when every element of raw (bits-wide) in [from, to) holds the poison NaN. */
static int poison_intact(const dbuf *b, const void *raw, size_t from, size_t to) {
    int ok = 1;
    if (b->t.dtype.bits == 32)
        for (size_t i = from; i < to; i++) ok &= ((const uint32_t *)raw)[i] == 0x7fc00000u;
    else {
        uint16_t pat = b->t.dtype.code == kDLBfloat ? 0x7fc0u : 0x7e00u;
        for (size_t i = from; i < to; i++) ok &= ((const uint16_t *)raw)[i] == pat;
    }
    return ok;
}

/* Output i of a checked launch: its first n elements (the live tokens) against ref (and alt, the second
 * reference, or NULL), the rest of its total elements still poison; got is scratch of n doubles. */
static void score_output(kc_report *r, int i, const char *name, const dbuf *out, const void *raw, size_t n,
                         size_t total, int io, const double *ref, const double *alt, double *got) {
    r->untouched &= poison_intact(out, raw, n, total);
    if (out->t.dtype.bits == 32)
        for (size_t j = 0; j < n; j++) got[j] = ((const float *)raw)[j];
    else
        for (size_t j = 0; j < n; j++)
            got[j] = io == 0 ? kref_from_bf16(((const uint16_t *)raw)[j]) : kref_from_fp16(((const uint16_t *)raw)[j]);
    r->names[i] = name;
    r->rel_rms[i] = kref_rel_rms(ref, got, n);
    r->rel_rms_alt[i] = alt ? kref_rel_rms(alt, got, n) : NAN;
    r->max_abs[i] = kref_max_abs(ref, got, n);
}

/* After a garbage-cu launch: the status bits (read, and cleared unless
 * keep_status), and every output element still poison. */
static void garbage_verdict(kdart_rt *rt, const kc_seqs *s, dbuf **outs, void **raw, int nout, kc_report *r) {
    r->untouched = 1;
    for (int i = 0; i < nout; i++)
        if (outs[i]) r->untouched &= poison_intact(outs[i], raw[i], 0, nelem(outs[i]));
    int bits = 0;
    if (kdart_device_status(rt, &bits, !s->keep_status) != KDART_OK) bits = -1;
    r->devstatus = bits;
}

/* run_all, then what needs no reference: -1 on an error (r says what), 1
 * when the case is settled (kdart refused the launch, r->status says why;
 * or garbage cu_seqlens, judged by garbage_verdict), 0 when the outputs are
 * to be compared with the reference. */
static int run_settled(kdart_rt *rt, launch_fn fn, const void *args, dbuf **outs, int nout, void **raw,
                       const kc_seqs *seqs, int graph, int reps, kc_report *r) {
    if (run_all(rt, fn, args, outs, nout, raw, graph, reps, r)) return -1;
    if (r->status != KDART_OK) return 1;
    if (seqs->garbage) {
        garbage_verdict(rt, seqs, outs, raw, nout, r);
        return 1;
    }
    return 0;
}

/* ---------------------------------------------------------- bwd_intra */

int kc_run_intra(kdart_rt *rt, const kc_intra_case *c, kc_report *r) {
    kref_rng rng;
    layout L;
    if (case_begin(c->B, c->T, &c->seqs, c->seed, &rng, &L, r)) return -1;
    const int H = c->H, HV = c->HV, K = c->K, io = c->io;
    /* the packed view: one row of L.rows tokens, sequences per L.cu */
    const int B = L.B, T = L.T, P = (int)L.rows, N = L.N;
    const size_t nqk = (size_t)P * H * K, ng = (size_t)P * HV * K, nb = (size_t)P * HV, nA = (size_t)P * HV * 64;
    const size_t live = (size_t)L.tokens; /* tokens written; the rest keep NaN */
    double *q = dmalloc(nqk), *k = dmalloc(nqk), *a = dmalloc(ng), *g = dmalloc(ng), *beta = dmalloc(nb),
           *dAqk = dmalloc(nA), *dAkk = dmalloc(nA), *dq_in = dmalloc(ng), *dk_in = dmalloc(ng),
           *dg_in = dmalloc(ng), *db_in = dmalloc(nb), *rq = dmalloc(ng), *rk = dmalloc(ng), *rg = dmalloc(ng),
           *rb = dmalloc(nb), *got = dmalloc(ng);
    void *raw[4] = {malloc(ng * 4 + 4), malloc(ng * 4 + 4), malloc(ng * 4 + 4), malloc(nb * 4 + 4)};
    dbuf d[14];
    memset(d, 0, sizeof d);
    int rc = -1;
    if (!q || !k || !a || !g || !beta || !dAqk || !dAkk || !dq_in || !dk_in || !dg_in || !db_in || !rq || !rk ||
        !rg || !rb || !got || !raw[0] || !raw[1] || !raw[2] || !raw[3]) {
        fail(r, "out of host memory");
        goto out;
    }
    kref_gen_unit_rows(&rng, (size_t)P * H, K, q);
    kref_gen_unit_rows(&rng, (size_t)P * H, K, k);
    kref_gen_gate(&rng, (kref_gate_family)c->gate, 1, P, HV, K, a);
    harden_gates(&rng, c->seqs.hard_gates, ng, a);
    for (size_t x = 0; x < ng; x++) g[x] = NAN; /* tokens past cu[N]: never read */
    kref_gate_cumsum_varlen(P, HV, K, N, L.cu, a, g);
    kref_gen_beta(&rng, nb, beta);
    kref_gen_dA_varlen(&rng, P, HV, N, L.cu, 0, NAN, dAqk);
    kref_gen_dA_varlen(&rng, P, HV, N, L.cu, 1, 1e30, dAkk);
    kref_gen_normal(&rng, ng, 1.0, dq_in);
    kref_gen_normal(&rng, ng, 1.0, dk_in);
    kref_gen_normal(&rng, ng, 1.0, dg_in);
    kref_gen_normal(&rng, nb, 1.0, db_in);
    round_to(q, nqk, io);
    round_to(k, nqk, io);
    round_to(beta, nb, c->beta_f32 ? DT_F32 : io);
    round_to(g, ng, DT_F32);
    round_to(dAqk, nA, DT_F32);
    round_to(dAkk, nA, DT_F32);
    round_to(dq_in, ng, DT_F32);
    round_to(dk_in, ng, DT_F32);
    round_to(dg_in, ng, DT_F32);
    round_to(db_in, nb, DT_F32);

    if (intra_alloc_b(d, d + 10, B, T, H, HV, K, io, c->emit_bf16 ? io : DT_F32, c->beta_f32 ? DT_F32 : io) ||
        layout_upload(&L, &c->seqs, r)) {
        if (!r->message[0]) fail(r, "out of device memory");
        goto out;
    }
    const double *host_in[10] = {q, k, g, beta, dAqk, dAkk, dq_in, dk_in, dg_in, db_in};
    for (int i = 0; i < 10; i++)
        if (dput(&d[i], host_in[i])) {
            fail(r, "uploading inputs");
            goto out;
        }
    kdart_bwd_intra_args args = intra_args(d, d + 10, c->fold_dg, c->emit_bf16);
    if (L.packed) {
        args.cu_seqlens = &L.dcu.t;
        if (c->seqs.fla_indices) args.chunk_indices = &L.dci.t;
    }
    if (layout_garbage(&L, &c->seqs, r)) goto out;
    dbuf *outs[4] = {&d[10], &d[11], &d[12], &d[13]};
    const int settled = run_settled(rt, launch_intra, &args, outs, 4, raw, &c->seqs, c->graph, c->reps, r);
    if (settled) {
        if (settled > 0) rc = 0;
        goto out;
    }
    kref_bwd_intra_varlen(P, H, HV, K, N, L.cu, q, k, g, beta, dAqk, dAkk, dq_in, dk_in, dg_in, db_in, c->fold_dg,
                          rq, rk, rg, rb);
    const double *refs[4] = {rq, rk, rg, rb};
    static const char *names[4] = {"dq", "dk", "dg", "db"};
    r->nout = 4;
    r->untouched = 1;
    for (int i = 0; i < 4; i++) {
        const size_t per = i == 3 ? (size_t)HV : (size_t)HV * K;
        score_output(r, i, names[i], outs[i], raw[i], live * per, (size_t)P * per, io, refs[i], NULL, got);
    }
    rc = 0;
out:
    for (int i = 0; i < 14; i++) dfree(&d[i]);
    layout_free(&L);
    free(q), free(k), free(a), free(g), free(beta), free(dAqk), free(dAkk), free(dq_in), free(dk_in);
    free(dg_in), free(db_in), free(rq), free(rk), free(rg), free(rb), free(got);
    for (int i = 0; i < 4; i++) free(raw[i]);
    return rc;
}

/* ------------------------------------------------------------ bwd_dhu */

/* Teacher-forced float64 scan: the kg.dH and w.dv2 products use the
 * kernel's own rounded dh checkpoints and dv2 (kdh, kdv2); fills the
 * reference dh (rounded as the kernel stores it), dv2 (rounded) and dh0.
 * Packed layout: sequences per cu [N+1], chunk (n, c) at dh row co[n] + c,
 * a partial chunk's valid rows only, its decay by its last valid row. */
static void dhu_teacher_forced(int N, const int64_t *cu, const int64_t *co, int HV, int K, int V, int io,
                               const double *qg, const double *kg, const double *w, const double *g,
                               const double *dout, const double *dv, const double *dht, double scale,
                               const double *kdh, const double *kdv2, double *dh, double *dv2, double *dh0) {
    double *H = malloc(sizeof(double) * (size_t)K * V), *Hn = malloc(sizeof(double) * (size_t)K * V);
    for (int b = 0; b < N; b++)
        for (int hv = 0; hv < HV; hv++) {
            for (size_t i = 0; i < (size_t)K * V; i++)
                H[i] = dht ? dht[((size_t)b * HV + hv) * K * V + i] : 0.0;
            const int64_t len = cu[b + 1] - cu[b], nc = (len + 63) / 64;
            for (int64_t c = nc - 1; c >= 0; c--) {
                const int nvr = (int)(len - 64 * c < 64 ? len - 64 * c : 64);
                const size_t t0 = (size_t)(cu[b] + 64 * c);
                size_t ck = (((size_t)(co[b] + c)) * HV + hv) * K * V;
                for (size_t i = 0; i < (size_t)K * V; i++) dh[ck + i] = kref_round_io(H[i], io);
                for (int i = 0; i < nvr; i++) {
                    size_t t = t0 + i;
                    for (int v = 0; v < V; v++) {
                        double acc = dv[(t * HV + hv) * V + v];
                        for (int dd = 0; dd < K; dd++) acc += kg[(t * HV + hv) * K + dd] * kdh[ck + (size_t)dd * V + v];
                        dv2[(t * HV + hv) * V + v] = kref_round_io(acc, io);
                    }
                }
                for (int dd = 0; dd < K; dd++) {
                    size_t tl = t0 + nvr - 1;
                    double decay = exp2(g[(tl * HV + hv) * K + dd]);
                    for (int v = 0; v < V; v++) {
                        double qd = 0, wd = 0;
                        for (int i = 0; i < nvr; i++) {
                            size_t t = t0 + i;
                            qd += qg[(t * HV + hv) * K + dd] * dout[(t * HV + hv) * V + v];
                            wd += w[(t * HV + hv) * K + dd] * kdv2[(t * HV + hv) * V + v];
                        }
                        Hn[(size_t)dd * V + v] = decay * H[(size_t)dd * V + v] + scale * qd - wd;
                    }
                }
                memcpy(H, Hn, sizeof(double) * (size_t)K * V);
            }
            if (dh0) memcpy(dh0 + ((size_t)b * HV + hv) * K * V, H, sizeof(double) * (size_t)K * V);
        }
    free(H);
    free(Hn);
}

int kc_spec_bv(const char *spec) {
    const char *p = spec ? strstr(spec, "BV=") : NULL;
    return p ? atoi(p + 3) : 0;
}

int kc_spec_k(const char *spec) {
    const char *p = spec ? strstr(spec, ",K=") : NULL;
    return p ? atoi(p + 3) : 0;
}

int kc_spec_tail(const char *spec) { return spec && strstr(spec, "tail=1") != NULL; }

int kc_spec_beta_f32(const char *spec) { return strstr(spec, "beta=f32") != NULL; }

int kc_intra_spec_launchable(const char *spec) { return !(kc_spec_tail(spec) && strstr(spec, "varlen=0")); }

int kc_wy_spec_launchable(const char *spec) {
    /* intra=1 without dAqk: a trap stub; post=1: only kdart_kda_chunk_bwd picks it, inside its call */
    return !(strstr(spec, "intra=1") && strstr(spec, "dAqk=0")) && !strstr(spec, "post=1");
}

int kc_intra_spec_k(const char *spec) { return kc_spec_k(spec) - (kc_spec_tail(spec) ? 4 : 0); }

void kc_dhu_spec_dims(const char *spec, int variant, int *K, int *V, int *svf) {
    *K = kc_spec_k(spec);
    *svf = 0;
    if (spec && strstr(spec, "tail=2")) { /* the V-first state at native dims */
        *svf = 1;
        return;
    }
    if (!kc_spec_tail(spec)) return;
    switch (variant % 3) {
    case 0: *K -= 4; break;
    case 1: *V -= 4; break; /* BV >= 16 divides V: V - 4 leaves a partial last tile */
    default: *svf = 1, *K -= 4; /* the V-first state at a masked dim (at native ones: tail=2) */
    }
}

void kc_wy_spec_dims(const char *spec, int variant, int *K, int *V) {
    *K = kc_spec_k(spec), *V = 128;
    if (!kc_spec_tail(spec)) return;
    switch (variant & 3) { /* the tail path's copy granules in turn: 4, 4, 8 and 1 elements */
    case 0: *K -= 4; break;
    case 1: *V = 100; break;
    case 2: *K -= 8, *V = 72; break;
    default: *V = 101; break;
    }
}

/* state_v_first: nblk blocks of [R][C] (src) as [C][R] (dst) */
static void swap_kv(const double *src, double *dst, size_t nblk, int R, int C) {
    const size_t bs = (size_t)R * C;
    for (size_t b = 0; b < nblk; b++)
        for (int i = 0; i < R; i++)
            for (int j = 0; j < C; j++) dst[b * bs + (size_t)j * R + i] = src[b * bs + (size_t)i * C + j];
}

int kc_run_dhu(kdart_rt *rt, const kc_dhu_case *c, kc_report *r) {
    kref_rng rng;
    layout L;
    if (case_begin(c->B, c->T, &c->seqs, c->seed, &rng, &L, r)) return -1;
    const int HV = c->HV, K = c->K, V = c->V, io = c->io;
    const int B = L.B, T = L.T, P = (int)L.rows, N = L.N;
    /* dh rows: ceil(T/64) per row at fixed length; packed: the total plus spare rows */
    const int64_t NT = L.packed ? L.chunks + (c->seqs.garbage == 4 ? -1 : c->seqs.spare_rows) : (T + 63) / 64;
    const size_t nk = (size_t)P * HV * K, nv = (size_t)P * HV * V, ns = (size_t)N * HV * K * V,
                 nh = (size_t)B * NT * HV * K * V, nb = (size_t)P * HV;
    const size_t live_v = (size_t)L.tokens * HV * V, live_h = (size_t)L.chunks * HV * K * V;
    double *q = dmalloc(nk), *k = dmalloc(nk), *beta = dmalloc(nb), *a = dmalloc(nk), *g = dmalloc(nk),
           *w = dmalloc(nk), *kg = dmalloc(nk), *qg = dmalloc(nk), *dout = dmalloc(nv), *dv = dmalloc(nv),
           *dht = dmalloc(ns), *edh = dmalloc(nh), *edv2 = dmalloc(nv), *edh0 = dmalloc(ns), *kdh = dmalloc(nh),
           *kdv2 = dmalloc(nv), *kdh0 = dmalloc(ns), *tdh = dmalloc(nh), *tdv2 = dmalloc(nv), *tdh0 = dmalloc(ns);
    void *raw[3] = {malloc(nh * 2 + 4), malloc(nv * 2 + 4), malloc(ns * 4 + 4)};
    double *vf = NULL; /* V-first copies (state_v_first) */
    double *aq = c->fused ? dmalloc((size_t)P * HV * 64) : NULL;
    dbuf d[11];
    memset(d, 0, sizeof d);
    int rc = -1;
    if (!q || !k || !beta || !a || !g || !w || !kg || !qg || !dout || !dv || !dht || !edh || !edv2 || !edh0 ||
        !kdh || !kdv2 || !kdh0 || !tdh || !tdv2 || !tdh0 || !raw[0] || !raw[1] || !raw[2] || (c->fused && !aq)) {
        fail(r, "out of host memory");
        goto out;
    }
    /* Realistic WY inputs (spec 6.3): the scan stays bounded over T.  Tokens
     * past cu[N] hold NaN: never read. */
    kref_gen_unit_rows(&rng, (size_t)P * HV, K, q);
    kref_gen_unit_rows(&rng, (size_t)P * HV, K, k);
    kref_gen_beta(&rng, nb, beta);
    kref_gen_gate(&rng, KREF_GATE_LOGSIG, 1, P, HV, K, a);
    harden_gates(&rng, c->seqs.hard_gates, nk, a);
    for (size_t x = 0; x < nk; x++) g[x] = w[x] = kg[x] = qg[x] = NAN;
    kref_gate_cumsum_varlen(P, HV, K, N, L.cu, a, g);
    round_to(g, nk, DT_F32);
    kref_gen_dhu_inputs_varlen(P, HV, K, N, L.cu, q, k, beta, g, w, kg, qg);
    kref_gen_normal(&rng, nv, 1.0, dout);
    kref_gen_normal(&rng, nv, 1.0, dv);
    for (size_t x = live_v; x < nv; x++) dout[x] = dv[x] = NAN;
    kref_gen_normal(&rng, ns, 1.0, dht);
    round_to(w, nk, io);
    round_to(kg, nk, io);
    round_to(qg, nk, io);
    round_to(dout, nv, io);
    round_to(dv, nv, io);
    round_to(dht, ns, DT_F32);
    if (c->fused) { /* Aqk: random everywhere (above the diagonal too: never read); dv = Aqk^T do, exact */
        kref_gen_normal(&rng, (size_t)P * HV * 64, 0.5, aq);
        round_to(aq, (size_t)P * HV * 64, io);
        for (size_t x = (size_t)L.tokens * HV * 64; x < (size_t)P * HV * 64; x++) aq[x] = NAN;
        kref_bwd_dav_varlen(P, HV, V, N, L.cu, aq, dout, NULL, 0.0, NULL, dv);
    }
    const double scale = 1.0 / sqrt((double)K);
    const float scale_f = (float)scale;

    const int svf = c->state_v_first;
    const int64_t S1 = svf ? V : K, S2 = svf ? K : V;
    int64_t sv[4] = {B, T, HV, V}, ss[4] = {N, HV, S1, S2}, sh[5] = {B, NT, HV, S1, S2};
    vf = dmalloc(nh > ns ? nh : ns);
    if (!vf) {
        fail(r, "out of host memory");
        goto out;
    }
    if (svf) swap_kv(dht, vf, ns / ((size_t)K * V), K, V);
    int64_t sa[4] = {B, T, HV, 64};
    int ok = !dhu_alloc_inputs(d, B, T, HV, K, V, io) && !dalloc(&d[6], DT_F32, 4, ss) && !dalloc(&d[7], io, 5, sh) &&
             !dalloc(&d[8], io, 4, sv) && !dalloc(&d[9], DT_F32, 4, ss) && (!c->fused || !dalloc(&d[10], io, 4, sa));
    if (!ok || layout_upload(&L, &c->seqs, r)) {
        if (!r->message[0]) fail(r, "out of device memory");
        goto out;
    }
    const double *host_in[7] = {qg, kg, w, g, dout, dv, svf ? vf : dht};
    for (int i = 0; i < 7; i++)
        if ((!c->fused || i != 5) && dput(&d[i], host_in[i])) {
            fail(r, "uploading inputs");
            goto out;
        }
    if (c->fused && dput(&d[10], aq)) {
        fail(r, "uploading inputs");
        goto out;
    }
    kdart_bwd_dhu_args args = {sizeof args, &d[0].t, &d[1].t, &d[2].t, &d[3].t, &d[4].t, &d[5].t,
                               c->with_dht ? &d[6].t : NULL, &d[7].t, &d[8].t, c->with_dh0 ? &d[9].t : NULL,
                               scale_f, c->v_tile, NULL, NULL, NULL, svf, NULL};
    if (c->fused) args.dv = NULL, args.Aqk = &d[10].t;
    if (L.packed) {
        args.cu_seqlens = &L.dcu.t;
        if (c->seqs.fla_indices) args.chunk_indices = &L.dci.t, args.chunk_offsets = &L.dco.t;
    }
    if (layout_garbage(&L, &c->seqs, r)) goto out;
    dbuf *outs[3] = {&d[7], &d[8], &d[9]};
    /* dh0 is poisoned even when not requested: it must stay NaN then. */
    const int settled = run_settled(rt, launch_dhu, &args, outs, 3, raw, &c->seqs, c->graph, c->reps, r);
    if (settled) {
        if (settled > 0) rc = 0;
        goto out;
    }
    /* what must stay NaN: dh rows past the chunk count, dv2 past cu[N] */
    r->untouched = poison_intact(&d[7], raw[0], live_h, nh) && poison_intact(&d[8], raw[1], live_v, nv);
    for (size_t i = 0; i < live_h; i++)
        kdh[i] = io == 0 ? kref_from_bf16(((uint16_t *)raw[0])[i]) : kref_from_fp16(((uint16_t *)raw[0])[i]);
    for (size_t i = 0; i < live_v; i++)
        kdv2[i] = io == 0 ? kref_from_bf16(((uint16_t *)raw[1])[i]) : kref_from_fp16(((uint16_t *)raw[1])[i]);
    for (size_t i = 0; i < ns; i++) kdh0[i] = ((float *)raw[2])[i];
    if (svf) { /* back to the reference's K-first layout */
        swap_kv(kdh, vf, live_h / ((size_t)K * V), V, K);
        memcpy(kdh, vf, live_h * sizeof(double));
        swap_kv(kdh0, vf, ns / ((size_t)K * V), V, K);
        memcpy(kdh0, vf, ns * sizeof(double));
    }
    const double *dht_used = c->with_dht ? dht : NULL;
    kref_bwd_dhu_varlen(P, HV, K, V, N, L.cu, qg, kg, w, g, dout, dv, dht_used, scale_f, -1, edh, edv2, edh0);
    dhu_teacher_forced(N, L.cu, L.co, HV, K, V, io, qg, kg, w, g, dout, dv, dht_used, scale_f, kdh, kdv2, tdh, tdv2,
                       tdh0);
    static const char *names[3] = {"dh", "dv2", "dh0"};
    const double *tref[3] = {tdh, tdv2, tdh0}, *eref[3] = {edh, edv2, edh0}, *kout[3] = {kdh, kdv2, kdh0};
    size_t sizes[3] = {live_h, live_v, ns};
    r->nout = 3;
    for (int i = 0; i < 3; i++) {
        r->names[i] = names[i];
        if (i == 2 && !c->with_dh0) {
            /* Not requested: every element must still be the poison NaN. */
            int untouched = poison_intact(&d[9], raw[2], 0, ns);
            r->rel_rms[i] = r->rel_rms_alt[i] = untouched ? 0.0 : INFINITY;
            r->max_abs[i] = 0;
            continue;
        }
        r->rel_rms[i] = kref_rel_rms(tref[i], kout[i], sizes[i]);
        r->rel_rms_alt[i] = kref_rel_rms(eref[i], kout[i], sizes[i]);
        r->max_abs[i] = kref_max_abs(tref[i], kout[i], sizes[i]);
    }
    rc = 0;
out:
    for (int i = 0; i < 11; i++) dfree(&d[i]);
    layout_free(&L);
    free(aq);
    double *all[] = {q, k, beta, a, g, w, kg, qg, dout, dv, dht, edh, edv2, edh0, kdh, kdv2, kdh0, tdh, tdv2, tdh0};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    for (int i = 0; i < 3; i++) free(raw[i]);
    free(vf);
    return rc;
}

/* ------------------------------------------------------------ wy_dqkg */

/* A stand-in for the WY inverse Akk [P,HV,64]: per chunk row i, unit
 * diagonal, small entries below it, zeros above (and on rows past cu[N]). */
static void gen_wy_inverse(kref_rng *rng, int P, int HV, const layout *L, double *A) {
    for (size_t x = 0; x < (size_t)P * HV * 64; x++) A[x] = 0;
    for (int n = 0; n < L->N; n++)
        for (int64_t t = L->cu[n]; t < L->cu[n + 1]; t++) {
            const int i = (int)((t - L->cu[n]) % 64);
            for (int hv = 0; hv < HV; hv++)
                for (int j = 0; j <= i; j++)
                    A[((size_t)t * HV + hv) * 64 + j] = j == i ? 1.0 : 0.2 * kref_rng_normal(rng);
        }
}

static int launch_wy(kdart_rt *rt, const void *a, CUstream s) {
    return kdart_kda_wy_dqkg(rt, (const kdart_wy_dqkg_args *)a, (void *)s);
}

/* With intra, dA and dAqk are optional outputs (the kernel hands them to the intra part in shared memory): one
 * more launch without them must give the other five outputs' bytes again (else report.deterministic = 0). */
static int same_without_da(kdart_rt *rt, const kdart_wy_dqkg_args *args, dbuf **outs, void **raw, kc_report *r) {
    kdart_wy_dqkg_args bare = *args;
    bare.dA = NULL, bare.dAqk = NULL;
    void *again[5] = {0};
    CUstream s;
    if (cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return fail(r, "cuStreamCreate");
    int rc = 0;
    for (int i = 0; i < 5 && rc == 0; i++)
        if (!(again[i] = malloc(outs[i]->bytes))) rc = fail(r, "out of host memory");
    if (rc == 0) rc = run_once(rt, launch_wy, &bare, s, outs, 5, again, 0, r);
    for (int i = 0; i < 5 && rc == 0 && r->status == KDART_OK; i++)
        if (memcmp(raw[i], again[i], outs[i]->bytes) != 0) r->deterministic = 0;
    for (int i = 0; i < 5; i++) free(again[i]);
    cu.cuStreamDestroy_v2(s);
    return rc;
}

int kc_run_wy(kdart_rt *rt, const kc_wy_case *c, kc_report *r) {
    kref_rng rng;
    layout L;
    if (case_begin(c->B, c->T, &c->seqs, c->seed, &rng, &L, r)) return -1;
    const int H = c->H, HV = c->HV, K = c->K, V = c->V, io = c->io;
    const int B = L.B, T = L.T, P = (int)L.rows, N = L.N;
    const int64_t NT = L.packed ? L.chunks : (T + 63) / 64, HB = L.packed ? 1 : B;
    const size_t nqk = (size_t)P * H * K, nk = (size_t)P * HV * K, nv = (size_t)P * HV * V, nb = (size_t)P * HV,
                 nA = (size_t)P * HV * 64, nh = (size_t)HB * NT * HV * K * V;
    const size_t live = (size_t)L.tokens;
    double *q = dmalloc(nqk), *k = dmalloc(nqk), *v = dmalloc(nv), *vn = dmalloc(nv), *a = dmalloc(nk),
           *g = dmalloc(nk), *beta = dmalloc(nb), *A = dmalloc(nA), *h = dmalloc(nh), *dh = dmalloc(nh),
           *dout = dmalloc(nv), *dv = dmalloc(nv), *vf = dmalloc(nh),
           *got = dmalloc(nv > nk ? (nv > nA ? nv : nA) : (nk > nA ? nk : nA));
    const int NO = c->with_dAqk ? 7 : 6; /* outputs: fla's six, and dAqk */
    double *ref[7], *exact[7];
    const size_t per[7] = {(size_t)HV * K, (size_t)HV * K, (size_t)HV * V, (size_t)HV * K, (size_t)HV, (size_t)HV * 64,
                           (size_t)HV * 64};
    for (int i = 0; i < 7; i++) ref[i] = dmalloc(P * per[i]), exact[i] = dmalloc(P * per[i]);
    void *raw[7];
    for (int i = 0; i < 7; i++) raw[i] = malloc(P * per[i] * 4 + 4);
    dbuf d[18];
    memset(d, 0, sizeof d);
    int rc = -1;
    int ok = q && k && v && vn && a && g && beta && A && h && dh && dout && dv && vf && got;
    for (int i = 0; i < 7; i++) ok = ok && ref[i] && exact[i] && raw[i];
    if (!ok) {
        fail(r, "out of host memory");
        goto out;
    }
    kref_gen_unit_rows(&rng, (size_t)P * H, K, q);
    kref_gen_unit_rows(&rng, (size_t)P * H, K, k);
    kref_gen_normal(&rng, nv, 1.0, v);
    kref_gen_normal(&rng, nv, 1.0, vn);
    kref_gen_normal(&rng, nv, 1.0, dout);
    kref_gen_normal(&rng, nv, 1.0, dv);
    kref_gen_gate(&rng, (kref_gate_family)c->gate, 1, P, HV, K, a);
    harden_gates(&rng, c->seqs.hard_gates, nk, a);
    for (size_t x = 0; x < nk; x++) g[x] = NAN; /* tokens past cu[N]: never read */
    kref_gate_cumsum_varlen(P, HV, K, N, L.cu, a, g);
    kref_gen_beta(&rng, nb, beta);
    gen_wy_inverse(&rng, P, HV, &L, A);
    kref_gen_normal(&rng, nh, 0.5, h);
    kref_gen_normal(&rng, nh, 0.5, dh);
    for (size_t x = live * HV * V; x < nv; x++) v[x] = vn[x] = dout[x] = dv[x] = NAN;
    round_to(q, nqk, io), round_to(k, nqk, io), round_to(v, nv, io), round_to(vn, nv, io);
    round_to(dout, nv, io), round_to(dv, nv, io), round_to(A, nA, io), round_to(h, nh, io), round_to(dh, nh, io);
    round_to(g, nk, DT_F32);
    round_to(beta, nb, c->beta_f32 ? DT_F32 : io);

    const int svf = c->state_v_first;
    const int64_t S1 = svf ? V : K, S2 = svf ? K : V;
    int64_t sqk[4] = {B, T, H, K}, sk[4] = {B, T, HV, K}, sv[4] = {B, T, HV, V}, sb[3] = {B, T, HV},
            sA[4] = {B, T, HV, 64}, sh[5] = {HB, NT, HV, S1, S2};
    ok = !dalloc(&d[0], io, 4, sqk) && !dalloc(&d[1], io, 4, sqk) && !dalloc(&d[2], io, 4, sv) &&
         !dalloc(&d[3], io, 4, sv) && !dalloc(&d[4], DT_F32, 4, sk) && !dalloc(&d[5], c->beta_f32 ? DT_F32 : io, 3, sb) &&
         !dalloc(&d[6], io, 4, sA) && !dalloc(&d[7], io, 5, sh) && !dalloc(&d[8], io, 5, sh) &&
         !dalloc(&d[9], io, 4, sv) && !dalloc(&d[10], io, 4, sv) && !dalloc(&d[11], DT_F32, 4, sk) &&
         !dalloc(&d[12], DT_F32, 4, sk) && !dalloc(&d[13], io, 4, sv) && !dalloc(&d[14], DT_F32, 4, sk) &&
         !dalloc(&d[15], DT_F32, 3, sb) && !dalloc(&d[16], DT_F32, 4, sA) && !dalloc(&d[17], DT_F32, 4, sA);
    if (!ok || layout_upload(&L, &c->seqs, r)) {
        if (!r->message[0]) fail(r, "out of device memory");
        goto out;
    }
    const double *host_in[11] = {q, k, v, vn, g, beta, A, h, dh, dout, dv};
    for (int i = 0; i < 11; i++) {
        const double *src = host_in[i];
        if (svf && (i == 7 || i == 8)) {
            swap_kv(host_in[i], vf, nh / ((size_t)K * V), K, V);
            src = vf;
        }
        if (dput(&d[i], src)) {
            fail(r, "uploading inputs");
            goto out;
        }
    }
    const double scale = 1.0 / sqrt((double)K);
    kdart_wy_dqkg_args args = {sizeof args, &d[0].t,  &d[1].t,  &d[2].t,  &d[3].t,  &d[4].t,  &d[5].t,
                               &d[6].t,     &d[7].t,  &d[8].t,  &d[9].t,  &d[10].t, &d[11].t, &d[12].t,
                               &d[13].t,    &d[14].t, &d[15].t, &d[16].t, (float)scale, svf, NULL, NULL, NULL, 0};
    if (c->with_dAqk) args.dAqk = &d[17].t;
    args.intra = c->with_intra;
    if (L.packed) {
        args.cu_seqlens = &L.dcu.t;
        if (c->seqs.fla_indices) args.chunk_indices = &L.dci.t;
    }
    if (layout_garbage(&L, &c->seqs, r)) goto out;
    dbuf *outs[7] = {&d[11], &d[12], &d[13], &d[14], &d[15], &d[16], &d[17]};
    const int settled = run_settled(rt, launch_wy, &args, outs, NO, raw, &c->seqs, c->graph, c->reps, r);
    if (settled) {
        if (settled > 0) rc = 0;
        goto out;
    }
    if (c->with_intra && same_without_da(rt, &args, outs, raw, r)) goto out;
    const double fscale = (double)(float)scale;
    kref_wy_dqkg_varlen(P, H, HV, K, V, N, L.cu, q, k, v, vn, g, beta, A, h, dh, dout, dv, fscale, io, ref[0], ref[1],
                        ref[2], ref[3], ref[4], ref[5]);
    kref_wy_dqkg_varlen(P, H, HV, K, V, N, L.cu, q, k, v, vn, g, beta, A, h, dh, dout, dv, fscale, -1, exact[0],
                        exact[1], exact[2], exact[3], exact[4], exact[5]);
    if (c->with_dAqk) { /* no rounding inside: the same reference for both */
        kref_bwd_dav_varlen(P, HV, V, N, L.cu, NULL, dout, vn, fscale, ref[6], NULL);
        memcpy(exact[6], ref[6], (size_t)P * per[6] * sizeof(double));
    }
    if (c->with_intra) /* bwd_intra (fold_dg) over both references' wy outputs, as the launch does */
        for (int e = 0; e < 2; e++) {
            double **o = e ? exact : ref, *x[4];
            for (int i = 0; i < 4; i++) x[i] = dmalloc(P * per[i == 2 ? 3 : i == 3 ? 4 : i]);
            if (!x[0] || !x[1] || !x[2] || !x[3]) {
                for (int i = 0; i < 4; i++) free(x[i]);
                fail(r, "out of host memory");
                goto out;
            }
            kref_bwd_intra_varlen(P, H, HV, K, N, L.cu, q, k, g, beta, o[6], o[5], o[0], o[1], o[3], o[4], 1, x[0],
                                  x[1], x[2], x[3]);
            free(o[0]), free(o[1]), free(o[3]), free(o[4]);
            o[0] = x[0], o[1] = x[1], o[3] = x[2], o[4] = x[3];
        }
    static const char *names[7] = {"dq", "dk", "dv2", "dg", "db", "dA", "dAqk"};
    r->nout = NO;
    r->untouched = 1;
    for (int i = 0; i < NO; i++)
        score_output(r, i, names[i], outs[i], raw[i], live * per[i], (size_t)P * per[i], io, ref[i], exact[i], got);
    rc = 0;
out:
    for (int i = 0; i < 18; i++) dfree(&d[i]);
    layout_free(&L);
    double *all[] = {q, k, v, vn, a, g, beta, A, h, dh, dout, dv, vf, got};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    for (int i = 0; i < 7; i++) free(ref[i]), free(exact[i]), free(raw[i]);
    return rc;
}

/* ---------------------------------------------------------- recompute_wu */

static int launch_rwu(kdart_rt *rt, const void *a, CUstream s) {
    return kdart_kda_recompute_wu(rt, (const kdart_recompute_wu_args *)a, (void *)s);
}

/* Rows of an [P,H,K] tensor repeated for the HV / H value heads of each. */
static void expand_heads(const double *x, size_t P, int H, int HV, int K, double *y) {
    for (size_t t = 0; t < P; t++)
        for (int hv = 0; hv < HV; hv++)
            memcpy(y + (t * HV + hv) * K, x + (t * H + hv / (HV / H)) * K, sizeof(double) * K);
}

int kc_run_rwu(kdart_rt *rt, const kc_rwu_case *c, kc_report *r) {
    kref_rng rng;
    layout L;
    if (case_begin(c->B, c->T, &c->seqs, c->seed, &rng, &L, r)) return -1;
    const int H = c->H, HV = c->HV, K = c->K, V = c->V, io = c->io;
    const int B = L.B, T = L.T, P = (int)L.rows, N = L.N;
    const size_t nqk = (size_t)P * H * K, nk = (size_t)P * HV * K, nv = (size_t)P * HV * V, nb = (size_t)P * HV,
                 nA = (size_t)P * HV * 64, live = (size_t)L.tokens;
    double *q = dmalloc(nqk), *k = dmalloc(nqk), *qx = dmalloc(nk), *kx = dmalloc(nk), *v = dmalloc(nv),
           *beta = dmalloc(nb), *A = dmalloc(nA), *a = dmalloc(nk), *g = dmalloc(nk), *graw = dmalloc(nk),
           *alog = dmalloc(HV), *bias = dmalloc((size_t)HV * K), *got = dmalloc(nv > nk ? nv : nk);
    double *ref[4] = {dmalloc(nk), dmalloc(nv), dmalloc(nk), dmalloc(nk)}; /* w u kg qg */
    void *raw[5];
    for (int i = 0; i < 5; i++) raw[i] = malloc((nv > nk ? nv : nk) * 4 + 4);
    dbuf d[14];
    memset(d, 0, sizeof d);
    int rc = -1;
    int ok = q && k && qx && kx && v && beta && A && a && g && graw && alog && bias && got;
    for (int i = 0; i < 5; i++) ok = ok && raw[i] && (i == 4 || ref[i]);
    if (!ok) {
        fail(r, "out of host memory");
        goto out;
    }
    kref_gen_unit_rows(&rng, (size_t)P * H, K, q);
    kref_gen_unit_rows(&rng, (size_t)P * H, K, k);
    kref_gen_normal(&rng, nv, 1.0, v);
    kref_gen_beta(&rng, nb, beta);
    gen_wy_inverse(&rng, P, HV, &L, A);
    const int gate = c->gate != 0, graw_dt = c->graw_f32 ? DT_F32 : io;
    if (!gate) {
        kref_gen_gate(&rng, (kref_gate_family)c->family, 1, P, HV, K, a);
        harden_gates(&rng, c->seqs.hard_gates, nk, a);
    } else { /* chunk_kda's gate: exp(A_log) in [1, 16], dt_bias 0.5 randn (or none), g_raw 2 randn */
        for (int hv = 0; hv < HV; hv++) alog[hv] = kref_round_f32(log(1.0 + 15.0 * kref_rng_uniform(&rng)));
        for (int x = 0; x < HV * K; x++) bias[x] = c->with_bias ? kref_round_f32(0.5 * kref_rng_normal(&rng)) : 0.0;
        kref_gen_normal(&rng, nk, 2.0, graw);
        round_to(graw, nk, graw_dt);
        kref_gate_act((size_t)P * HV, HV, K, graw, alog, bias, c->gate == 2, c->lower_bound, a);
    }
    for (size_t x = 0; x < nk; x++) g[x] = NAN; /* tokens past cu[N]: never read */
    kref_gate_cumsum_varlen(P, HV, K, N, L.cu, a, g);
    for (size_t x = live * H * K; x < nqk; x++) q[x] = k[x] = NAN;
    for (size_t x = live * HV * V; x < nv; x++) v[x] = NAN;
    for (size_t x = live * HV * K; x < nk; x++) graw[x] = NAN;
    round_to(q, nqk, io), round_to(k, nqk, io), round_to(v, nv, io), round_to(A, nA, io);
    round_to(beta, nb, c->beta_f32 ? DT_F32 : io);

    int64_t sqk[4] = {B, T, H, K}, sk[4] = {B, T, HV, K}, sv[4] = {B, T, HV, V}, sb[3] = {B, T, HV},
            sA[4] = {B, T, HV, 64}, sh[1] = {HV}, sbias[2] = {HV, K};
    /* in: q k v beta A g g_raw A_log dt_bias; out: w u kg qg g_out */
    ok = !dalloc(&d[0], io, 4, sqk) && !dalloc(&d[1], io, 4, sqk) && !dalloc(&d[2], io, 4, sv) &&
         !dalloc(&d[3], c->beta_f32 ? DT_F32 : io, 3, sb) && !dalloc(&d[4], io, 4, sA) &&
         !dalloc(&d[5], DT_F32, 4, sk) && !dalloc(&d[6], graw_dt, 4, sk) && !dalloc(&d[7], DT_F32, 1, sh) &&
         !dalloc(&d[8], DT_F32, 2, sbias) && !dalloc(&d[9], io, 4, sk) && !dalloc(&d[10], io, 4, sv) &&
         !dalloc(&d[11], io, 4, sk) && !dalloc(&d[12], io, 4, sk) && !dalloc(&d[13], DT_F32, 4, sk);
    if (!ok || layout_upload(&L, &c->seqs, r)) {
        if (!r->message[0]) fail(r, "out of device memory");
        goto out;
    }
    const double *host_in[9] = {q, k, v, beta, A, g, graw, alog, bias};
    for (int i = 0; i < 9; i++)
        if (dput(&d[i], host_in[i])) {
            fail(r, "uploading inputs");
            goto out;
        }
    kdart_recompute_wu_args args = {sizeof args, c->with_q ? &d[0].t : NULL, &d[1].t, &d[2].t, &d[3].t, &d[4].t,
                                    gate ? NULL : &d[5].t, gate ? &d[6].t : NULL, gate ? &d[7].t : NULL,
                                    gate && c->with_bias ? &d[8].t : NULL, gate ? &d[13].t : NULL, &d[9].t,
                                    &d[10].t, c->with_q ? &d[12].t : NULL, &d[11].t, (float)c->lower_bound,
                                    c->gate == 2, NULL, NULL};
    if (L.packed) {
        args.cu_seqlens = &L.dcu.t;
        if (c->seqs.fla_indices) args.chunk_indices = &L.dci.t;
    }
    if (layout_garbage(&L, &c->seqs, r)) goto out;
    /* the outputs in order: w, u, kg, then qg and the gate's cumsum when asked for */
    static const char *const names[5] = {"w", "u", "kg", "qg", "g"};
    const size_t per[5] = {(size_t)HV * K, (size_t)HV * V, (size_t)HV * K, (size_t)HV * K, (size_t)HV * K};
    dbuf *outs[5];
    int which[5], NO = 0;
    for (int j = 0; j < 5; j++)
        if (j < 3 || (j == 3 && c->with_q) || (j == 4 && gate)) which[NO] = j, outs[NO++] = &d[9 + j];
    const int settled = run_settled(rt, launch_rwu, &args, outs, NO, raw, &c->seqs, c->graph, c->reps, r);
    if (settled) {
        if (settled > 0) rc = 0;
        goto out;
    }
    /* the exact float64 outputs (from the io-rounded inputs and the fp32-rounded cumsummed gate) */
    expand_heads(q, (size_t)P, H, HV, K, qx);
    expand_heads(k, (size_t)P, H, HV, K, kx);
    kref_recompute_w_u_varlen(P, HV, K, V, N, L.cu, kx, v, beta, g, A, ref[0], ref[1], ref[2]);
    for (size_t x = 0; x < live * HV * K; x++) ref[3][x] = qx[x] * exp2(g[x]);
    const double *refs[5] = {ref[0], ref[1], ref[2], ref[3], g};
    r->nout = NO;
    r->untouched = 1;
    for (int i = 0; i < NO; i++) {
        const int j = which[i];
        score_output(r, i, names[j], outs[i], raw[i], live * per[j], (size_t)P * per[j], io, refs[j], NULL, got);
    }
    rc = 0;
out:
    for (int i = 0; i < 14; i++) dfree(&d[i]);
    layout_free(&L);
    double *all[] = {q, k, qx, kx, v, beta, A, a, g, graw, alog, bias, got};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    for (int i = 0; i < 5; i++) free(raw[i]), free(i < 4 ? ref[i] : NULL);
    return rc;
}

/* --------------------------------------------------------------- bwd_dav */

static int launch_dav(kdart_rt *rt, const void *a, CUstream s) {
    return kdart_kda_bwd_dav(rt, (const kdart_bwd_dav_args *)a, (void *)s);
}

/* c->bad: the launch with one argument broken must fail with its status and leave both outputs as
 * poisoned (kdart validates everything before it launches): r->status and r->untouched say how it went.
 * The tensors it breaks are put back before returning. */
static int dav_bad_launch(kdart_rt *rt, kdart_bwd_dav_args *args, dbuf *d, int bad, void **raw, kc_report *r) {
    dbuf *outs[2] = {&d[3], &d[4]};
    const DLTensor keep_v = d[0].t, keep_dv = d[4].t;
    const int64_t keep_A = d[2].shape[3];
    if (bad == 1) d[4].t.data = (void *)(d[4].p + 2); /* dv misaligned */
    else if (bad == 2) d[2].shape[3] = 32;            /* A not [..,64] */
    else /* v in the other io dtype */
        d[0].t.dtype.code = d[0].t.dtype.code == kDLFloat ? kDLBfloat : kDLFloat;
    int rc = 0;
    CUstream s;
    if (cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) rc = fail(r, "cuStreamCreate");
    if (!rc) {
        rc = run_once(rt, launch_dav, args, s, outs, 2, raw, 0, r);
        cu.cuStreamDestroy_v2(s);
    }
    d[0].t = keep_v, d[4].t = keep_dv, d[2].shape[3] = keep_A;
    if (rc) return rc;
    if (r->status == KDART_OK) return fail(r, "the broken launch was accepted");
    r->untouched = 1;
    for (int i = 0; i < 2; i++) {
        if (dget(outs[i], raw[i], NULL)) return fail(r, "downloading outputs");
        r->untouched &= poison_intact(outs[i], raw[i], 0, nelem(outs[i]));
    }
    return 0;
}

int kc_run_dav(kdart_rt *rt, const kc_dav_case *c, kc_report *r) {
    kref_rng rng;
    layout L;
    if (case_begin(c->B, c->T, &c->seqs, c->seed, &rng, &L, r)) return -1;
    const int HV = c->HV, V = c->V, io = c->io;
    const int B = L.B, T = L.T, P = (int)L.rows, N = L.N;
    const size_t nv = (size_t)P * HV * V, nA = (size_t)P * HV * 64, live = (size_t)L.tokens;
    double *v = dmalloc(nv), *dout = dmalloc(nv), *A = dmalloc(nA), *rdA = dmalloc(nA), *rdv = dmalloc(nv),
           *got = dmalloc(nv > nA ? nv : nA);
    void *raw[2] = {malloc(nA * 4 + 4), malloc(nv * 2 + 4)};
    dbuf d[5];
    memset(d, 0, sizeof d);
    int rc = -1;
    if (!v || !dout || !A || !rdA || !rdv || !got || !raw[0] || !raw[1]) {
        fail(r, "out of host memory");
        goto out;
    }
    kref_gen_normal(&rng, nv, 1.0, v);
    kref_gen_normal(&rng, nv, 1.0, dout);
    /* Aqk: 0.5 randn on and below each chunk row's diagonal; above it garbage that must not be read
     * (NaN, and 1e30, which fp16 holds as infinity), as on the tokens past cu[N] */
    kref_gen_normal(&rng, nA, 0.5, A);
    for (int n = 0; n < N; n++)
        for (int64_t t = L.cu[n]; t < L.cu[n + 1]; t++)
            for (int hv = 0; hv < HV; hv++)
                for (int j = (int)((t - L.cu[n]) % 64) + 1; j < 64; j++)
                    A[((size_t)t * HV + hv) * 64 + j] = j & 1 ? NAN : 1e30;
    for (size_t x = live * HV * V; x < nv; x++) v[x] = dout[x] = NAN;
    for (size_t x = live * HV * 64; x < nA; x++) A[x] = NAN;
    round_to(v, nv, io), round_to(dout, nv, io), round_to(A, nA, io);

    int64_t sv[4] = {B, T, HV, V}, sA[4] = {B, T, HV, 64};
    /* in: v do A; out: dA dv */
    const int ok = !dalloc(&d[0], io, 4, sv) && !dalloc(&d[1], io, 4, sv) && !dalloc(&d[2], io, 4, sA) &&
                   !dalloc(&d[3], DT_F32, 4, sA) && !dalloc(&d[4], io, 4, sv);
    if (!ok || layout_upload(&L, &c->seqs, r)) {
        if (!r->message[0]) fail(r, "out of device memory");
        goto out;
    }
    const double *host_in[3] = {v, dout, A};
    for (int i = 0; i < 3; i++)
        if (dput(&d[i], host_in[i])) {
            fail(r, "uploading inputs");
            goto out;
        }
    const double scale = 1.0 / sqrt(128.0);
    kdart_bwd_dav_args args = {sizeof args, &d[0].t, &d[1].t, &d[2].t, &d[3].t, &d[4].t, (float)scale, NULL, NULL};
    if (L.packed) {
        args.cu_seqlens = &L.dcu.t;
        if (c->seqs.fla_indices) args.chunk_indices = &L.dci.t;
    }
    if (c->bad) {
        if (dav_bad_launch(rt, &args, d, c->bad, raw, r) == 0) rc = 0;
        goto out;
    }
    if (layout_garbage(&L, &c->seqs, r)) goto out;
    dbuf *outs[2] = {&d[3], &d[4]};
    const int settled = run_settled(rt, launch_dav, &args, outs, 2, raw, &c->seqs, c->graph, c->reps, r);
    if (settled) {
        if (settled > 0) rc = 0;
        goto out;
    }
    /* exact: no rounding inside but dv's store (fp32 products of io values) */
    kref_bwd_dav_varlen(P, HV, V, N, L.cu, A, dout, v, (double)(float)scale, rdA, rdv);
    static const char *const names[2] = {"dA", "dv"};
    const double *refs[2] = {rdA, rdv};
    const size_t per[2] = {(size_t)HV * 64, (size_t)HV * V};
    r->nout = 2;
    r->untouched = 1;
    for (int i = 0; i < 2; i++)
        score_output(r, i, names[i], outs[i], raw[i], live * per[i], (size_t)P * per[i], io, refs[i], NULL, got);
    rc = 0;
out:
    for (int i = 0; i < 5; i++) dfree(&d[i]);
    layout_free(&L);
    free(v), free(dout), free(A), free(rdA), free(rdv), free(got), free(raw[0]), free(raw[1]);
    return rc;
}

/* ---------------------------------------------------------------- fwd_h */

static int launch_fwdh(kdart_rt *rt, const void *a, CUstream s) {
    return kdart_kda_fwd_h(rt, (const kdart_fwd_h_args *)a, (void *)s);
}

int kc_run_fwdh(kdart_rt *rt, const kc_fwdh_case *c, kc_report *r) {
    kref_rng rng;
    layout L;
    if (case_begin(c->B, c->T, &c->seqs, c->seed, &rng, &L, r)) return -1;
    const int H = c->H, HV = c->HV, K = c->K, V = c->V, io = c->io, G = HV / H, svf = c->state_v_first;
    const int B = L.B, T = L.T, P = (int)L.rows, N = L.N;
    /* h rows: ceil(T/64) per row at fixed length; packed: the total plus spare rows (which must stay NaN),
     * or one row short (seqs.garbage 4) */
    const int64_t NT = L.packed ? L.chunks + (c->seqs.garbage == 4 ? -1 : c->seqs.spare_rows) : (T + 63) / 64;
    const size_t nkh = (size_t)P * H * K, nk = (size_t)P * HV * K, nv = (size_t)P * HV * V, nb = (size_t)P * HV,
                 ns = (size_t)N * HV * K * V, nh = (size_t)B * NT * HV * K * V, live = (size_t)L.tokens,
                 live_h = (size_t)L.chunks * HV * K * V;
    double *k = dmalloc(nkh), *kx = dmalloc(nk), *v = dmalloc(nv), *beta = dmalloc(nb), *a = dmalloc(nk),
           *g = dmalloc(nk), *Akk = dmalloc((size_t)P * HV * 64), *w = dmalloc(nk), *u = dmalloc(nv),
           *kg = dmalloc(nk), *kgh = dmalloc(nkh), *h0 = dmalloc(ns), *vf = dmalloc(nh > ns ? nh : ns),
           *uio = c->uv ? dmalloc(nv) : NULL, *ones = c->uv ? dmalloc(nb) : NULL;
    double *fref[3] = {dmalloc(nh), dmalloc(nv), dmalloc(ns)}, *eref[3] = {dmalloc(nh), dmalloc(nv), dmalloc(ns)},
           *got[3] = {dmalloc(nh), dmalloc(nv), dmalloc(ns)};
    void *raw[3] = {malloc(nh * 2 + 4), malloc(nv * 2 + 4), malloc(ns * 4 + 4)};
    dbuf d[10];
    memset(d, 0, sizeof d);
    int rc = -1;
    int ok = k && kx && v && beta && a && g && Akk && w && u && kg && kgh && h0 && vf && (!c->uv || (uio && ones));
    for (int i = 0; i < 3; i++) ok = ok && fref[i] && eref[i] && got[i] && raw[i];
    if (!ok) {
        fail(r, "out of host memory");
        goto out;
    }
    /* chunk_kda's recompute from realistic inputs (unit-norm keys, the WY inverse of each chunk), so the
     * scan stays bounded over any T; with grouped heads (G > 1) the heads of a group share k, beta and the
     * gate, so that their kg is one k head's, as the kernel reads it */
    kref_gen_unit_rows(&rng, (size_t)P * H, K, k);
    expand_heads(k, (size_t)P, H, HV, K, kx);
    kref_gen_normal(&rng, nv, 1.0, v);
    kref_gen_beta(&rng, nb, beta);
    kref_gen_gate(&rng, (kref_gate_family)c->gate, 1, P, HV, K, a);
    harden_gates(&rng, c->seqs.hard_gates, nk, a);
    for (size_t t = 0; t < (size_t)P; t++)
        for (int hv = 0; hv < HV; hv++) {
            const size_t src = t * HV + hv - hv % G;
            beta[t * HV + hv] = beta[src];
            memcpy(a + (t * HV + hv) * K, a + src * K, sizeof(double) * K);
        }
    for (size_t x = 0; x < nk; x++) g[x] = w[x] = kg[x] = NAN; /* tokens past cu[N]: never read */
    for (size_t x = 0; x < nv; x++) u[x] = NAN;
    /* uv: v, A and beta are inputs, so the references see them as the kernel reads them */
    if (c->uv) round_to(v, nv, io), round_to(beta, nb, c->uv == 2 ? DT_F32 : io);
    kref_gate_cumsum_varlen(P, HV, K, N, L.cu, a, g);
    round_to(g, nk, DT_F32);
    kref_wy_akk_varlen(P, HV, K, N, L.cu, kx, beta, g, Akk);
    if (c->uv) round_to(Akk, (size_t)P * HV * 64, io);
    if (c->uv) { /* the io reference's u = IO(A IO(v beta)): the same product on IO(v beta) with beta 1, u
                  * holding IO(v beta) meanwhile (u alone; the call below writes u again, with w and kg) */
        for (size_t x = 0; x < nv; x++) u[x] = v[x] * beta[x / V], uio[x] = NAN;
        round_to(u, nv, io);
        for (size_t x = 0; x < nb; x++) ones[x] = 1.0;
        kref_recompute_w_u_varlen(P, HV, K, V, N, L.cu, kx, u, ones, g, Akk, NULL, uio, NULL);
        round_to(uio, nv, io);
    }
    kref_recompute_w_u_varlen(P, HV, K, V, N, L.cu, kx, v, beta, g, Akk, w, u, kg);
    round_to(w, nk, io), round_to(u, nv, io), round_to(kg, nk, io);
    for (size_t t = 0; t < (size_t)P; t++)
        for (int hk = 0; hk < H; hk++) memcpy(kgh + (t * H + hk) * K, kg + (t * HV + hk * G) * K, sizeof(double) * K);
    kref_gen_normal(&rng, ns, 1.0, h0);
    round_to(h0, ns, DT_F32);

    const int64_t S1 = svf ? V : K, S2 = svf ? K : V;
    int64_t skh[4] = {B, T, H, K}, sk[4] = {B, T, HV, K}, sv[4] = {B, T, HV, V}, ss[4] = {N, HV, S1, S2},
            sh[5] = {B, NT, HV, S1, S2};
    /* in: k w u gk h0; out: h v_new ht */
    /* uv: v in u's place, A and beta (d[8], d[9]) */
    int64_t sa[4] = {B, T, HV, 64}, sb[3] = {B, T, HV};
    ok = !dalloc(&d[0], io, 4, skh) && !dalloc(&d[1], io, 4, sk) && !dalloc(&d[2], io, 4, sv) &&
         !dalloc(&d[3], DT_F32, 4, sk) && !dalloc(&d[4], DT_F32, 4, ss) && !dalloc(&d[5], io, 5, sh) &&
         !dalloc(&d[6], io, 4, sv) && !dalloc(&d[7], DT_F32, 4, ss) &&
         (!c->uv || (!dalloc(&d[8], io, 4, sa) && !dalloc(&d[9], c->uv == 2 ? DT_F32 : io, 3, sb)));
    if (!ok || layout_upload(&L, &c->seqs, r)) {
        if (!r->message[0]) fail(r, "out of device memory");
        goto out;
    }
    if (svf) swap_kv(h0, vf, ns / ((size_t)K * V), K, V);
    const double *host_in[7] = {kgh, w, c->uv ? v : u, g, svf ? vf : h0, Akk, beta};
    for (int i = 0; i < (c->uv ? 7 : 5); i++)
        if (dput(&d[i < 5 ? i : i + 3], host_in[i])) {
            fail(r, "uploading inputs");
            goto out;
        }
    kdart_fwd_h_args args = {sizeof args, &d[0].t, &d[1].t, &d[2].t, &d[3].t, c->with_h0 ? &d[4].t : NULL, &d[5].t,
                             c->with_vnew ? &d[6].t : NULL, c->with_ht ? &d[7].t : NULL, c->v_tile, svf,
                             NULL, NULL, NULL, NULL, NULL};
    if (c->uv) args.A = &d[8].t, args.beta = &d[9].t;
    if (L.packed) {
        args.cu_seqlens = &L.dcu.t;
        if (c->seqs.fla_indices) args.chunk_indices = &L.dci.t, args.chunk_offsets = &L.dco.t;
    }
    if (layout_garbage(&L, &c->seqs, r)) goto out;
    /* v_new and ht are poisoned even when not requested: they must stay NaN then */
    dbuf *outs[3] = {&d[5], &d[6], &d[7]};
    const int settled = run_settled(rt, launch_fwdh, &args, outs, 3, raw, &c->seqs, c->graph, c->reps, r);
    if (settled) {
        if (settled > 0) rc = 0;
        goto out;
    }
    const double *h0_used = c->with_h0 ? h0 : NULL;
    kref_fwd_h_varlen_io(P, HV, K, V, N, L.cu, kg, w, c->uv ? uio : u, g, h0_used, io, fref[0], fref[1], fref[2]);
    kref_fwd_h_varlen(P, HV, K, V, N, L.cu, kg, w, u, g, h0_used, eref[0], eref[1], eref[2]);
    static const char *const names[3] = {"h", "v_new", "ht"};
    const size_t nlive[3] = {live_h, live * HV * V, ns}, total[3] = {nh, nv, ns};
    const int asked[3] = {1, c->with_vnew, c->with_ht};
    r->nout = 3;
    r->untouched = 1;
    for (int i = 0; i < 3; i++) {
        r->names[i] = names[i];
        if (!asked[i]) { /* not requested: every element must still be the poison NaN */
            const int untouched = poison_intact(outs[i], raw[i], 0, total[i]);
            r->rel_rms[i] = r->rel_rms_alt[i] = untouched ? 0.0 : INFINITY;
            r->max_abs[i] = 0;
            continue;
        }
        r->untouched &= poison_intact(outs[i], raw[i], nlive[i], total[i]);
        for (size_t j = 0; j < nlive[i]; j++)
            got[i][j] = i == 2 ? ((const float *)raw[i])[j]
                               : io == 0 ? kref_from_bf16(((const uint16_t *)raw[i])[j])
                                         : kref_from_fp16(((const uint16_t *)raw[i])[j]);
        if (svf && i != 1) { /* back to the references' K-first layout */
            swap_kv(got[i], vf, nlive[i] / ((size_t)K * V), V, K);
            memcpy(got[i], vf, nlive[i] * sizeof(double));
        }
        r->rel_rms[i] = kref_rel_rms(fref[i], got[i], nlive[i]);
        r->rel_rms_alt[i] = kref_rel_rms(eref[i], got[i], nlive[i]);
        r->max_abs[i] = kref_max_abs(fref[i], got[i], nlive[i]);
    }
    rc = 0;
out:
    for (int i = 0; i < 10; i++) dfree(&d[i]);
    layout_free(&L);
    double *all[] = {k, kx, v, beta, a, g, Akk, w, u, kg, kgh, h0, vf, uio, ones};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    for (int i = 0; i < 3; i++) free(fref[i]), free(eref[i]), free(got[i]), free(raw[i]);
    return rc;
}

/* ------------------------------------------------------- bad arguments */

int kc_intra_bad_arg(kdart_rt *rt, int which, int *untouched, char *msg, size_t n) {
    enum { B = 1, T = 128, H = 2, HV = 4, K = 64 };
    dbuf d[14];
    memset(d, 0, sizeof d);
    *untouched = 0;
    int st = KDART_EINVAL;
    if (intra_alloc(d, d + 10, B, T, H, HV, K, 0, DT_F32)) {
        snprintf(msg, n, "harness: out of device memory");
        goto out;
    }
    /* Inputs: a valid problem (zeros would do for validation, but a valid
     * call must then produce finite outputs). */
    intra_fill_small(d);
    const unsigned sentinel = 0x5a5a5a5au;
    for (int i = 10; i < 14; i++) cu.cuMemsetD32_v2(d[i].p, sentinel, d[i].bytes / 4);
    cu.cuCtxSynchronize();
    kdart_bwd_intra_args a = intra_args(d, d + 10, 0, 0);
    int64_t bad_strides[4] = {T * H * K, H * K, 1, H};
    switch (which) {
    case 0: break;
    case 1: d[10].t.byte_offset = 4; break;
    case 2: d[2].t.dtype.code = kDLBfloat, d[2].t.dtype.bits = 16; break;
    case 3: d[5].shape[1] = T - 64; break;
    case 4: d[0].shape[3] = 257; break; /* K out of range (96 is served) */
    case 5: d[0].shape[1] = 100; break;
    case 6: d[2].shape[2] = 3; break;
    case 7: a.emit_bf16 = 1; break;
    case 8: d[0].t.strides = bad_strides; break;
    case 9: d[6].t.device.device_type = kDLCPU; break;
    case 10: a.dk = NULL; break;
    default: break;
    }
    st = kdart_kda_bwd_intra(rt, &a, NULL);
    snprintf(msg, n, "%s", st ? kdart_last_error(rt) : "ok");
    cu.cuCtxSynchronize();
    *untouched = 1;
    for (int i = 10; i < 14; i++) {
        uint32_t *h = malloc(d[i].bytes);
        cu.cuMemcpyDtoH_v2(h, d[i].p, d[i].bytes);
        for (size_t j = 0; j < d[i].bytes / 4; j++) *untouched &= h[j] == sentinel;
        free(h);
    }
out:
    for (int i = 0; i < 14; i++) dfree(&d[i]);
    return st;
}

/* ------------------------------------------------------------- bwd_post */

static int launch_post(kdart_rt *rt, const void *a, CUstream s) {
    return kdart_kda_bwd_post(rt, (const kdart_bwd_post_args *)a, (void *)s);
}

int kc_run_post(kdart_rt *rt, const kc_post_case *c, kc_report *r) {
    kref_rng rng;
    layout L;
    const kc_seqs none = {0};
    if (case_begin(c->B, c->T, &none, c->seed, &rng, &L, r)) return -1;
    const int B = c->B, T = c->T, H = c->H, HV = c->HV, K = c->K, io = c->io, G = HV / H;
    const int gdt = c->g_f32 ? DT_F32 : io, bdt = c->beta_f32 ? DT_F32 : io;
    const size_t P = (size_t)B * T, nh = P * H * K, nv = P * HV * K, nb = P * HV;
    double *dq_in = dmalloc(nv), *dk_in = dmalloc(nv), *dg_in = dmalloc(nv), *db_in = dmalloc(nb), *q = dmalloc(nh),
           *k = dmalloc(nh), *qr = dmalloc(P * H), *kr = dmalloc(P * H), *g = dmalloc(nv), *A_log = dmalloc(HV),
           *bias = dmalloc((size_t)HV * K), *beta = dmalloc(nb), *sum = dmalloc(nh), *rdq = dmalloc(nh),
           *rdk = dmalloc(nh), *rdg = dmalloc(nv), *rdb = dmalloc(nb), *rdA = dmalloc(HV),
           *rdbias = dmalloc((size_t)HV * K), *got = dmalloc(nv > nh ? nv : nh);
    void *raw[6] = {malloc(nh * 2 + 4), malloc(nh * 2 + 4), malloc(nv * 4 + 4), malloc(nb * 4 + 4),
                    malloc((size_t)HV * 4 + 4), malloc((size_t)HV * K * 4 + 4)};
    dbuf d[19];
    memset(d, 0, sizeof d);
    int rc = -1;
    int okh = dq_in && dk_in && dg_in && db_in && q && k && qr && kr && g && A_log && bias && beta && sum && rdq &&
              rdk && rdg && rdb && rdA && rdbias && got;
    for (int i = 0; i < 6; i++) okh = okh && raw[i];
    if (!okh) {
        fail(r, "out of host memory");
        goto out;
    }
    /* the chunk stages' fp32 gradients; unit rows of q and k with rstd in [0.5, 2.5); raw gates of both signs
     * up to +-20 (where softplus and the sigmoids saturate); A_log for decays exp(A_log) in [1, 16) */
    kref_gen_normal(&rng, nv, 1.0, dq_in), kref_gen_normal(&rng, nv, 1.0, dk_in);
    kref_gen_normal(&rng, nv, 1.0, dg_in), kref_gen_normal(&rng, nb, 1.0, db_in);
    kref_gen_unit_rows(&rng, P * H, K, q), kref_gen_unit_rows(&rng, P * H, K, k);
    for (size_t i = 0; i < P * H; i++) qr[i] = 0.5 + 2.0 * kref_rng_uniform(&rng), kr[i] = 0.5 + 2.0 * kref_rng_uniform(&rng);
    kref_gen_normal(&rng, nv, 5.0, g);
    for (size_t i = 0; i < nv; i++) g[i] = g[i] > 20 ? 20 : g[i] < -20 ? -20 : g[i];
    for (int h = 0; h < HV; h++) A_log[h] = log(1.0 + 15.0 * kref_rng_uniform(&rng));
    kref_gen_normal(&rng, (size_t)HV * K, 1.0, bias);
    if (!(c->gate && c->with_bias)) memset(bias, 0, sizeof(double) * (size_t)HV * K);
    kref_gen_normal(&rng, nb, 3.0, beta);
    round_to(dq_in, nv, DT_F32), round_to(dk_in, nv, DT_F32), round_to(dg_in, nv, DT_F32), round_to(db_in, nb, DT_F32);
    round_to(q, nh, io), round_to(k, nh, io), round_to(qr, P * H, DT_F32), round_to(kr, P * H, DT_F32);
    round_to(g, nv, gdt), round_to(A_log, HV, DT_F32), round_to(bias, (size_t)HV * K, DT_F32), round_to(beta, nb, bdt);

    int64_t s4v[4] = {B, T, HV, K}, s4h[4] = {B, T, H, K}, s3h[3] = {B, T, H}, s3v[3] = {B, T, HV}, s1[1] = {HV},
            s2[2] = {HV, K}, sw[1] = {kdart_bwd_post_workspace(H, HV, K)};
    /* in: dq_in dk_in q k q_rstd k_rstd dg_in g_raw A_log dt_bias db_in beta_raw workspace;
     * out: dq dk dg db dA_log ddt_bias */
    const int ok = !dalloc(&d[0], DT_F32, 4, s4v) && !dalloc(&d[1], DT_F32, 4, s4v) && !dalloc(&d[2], io, 4, s4h) &&
                   !dalloc(&d[3], io, 4, s4h) && !dalloc(&d[4], DT_F32, 3, s3h) && !dalloc(&d[5], DT_F32, 3, s3h) &&
                   !dalloc(&d[6], DT_F32, 4, s4v) && !dalloc(&d[7], gdt, 4, s4v) && !dalloc(&d[8], DT_F32, 1, s1) &&
                   !dalloc(&d[9], DT_F32, 2, s2) && !dalloc(&d[10], DT_F32, 3, s3v) && !dalloc(&d[11], bdt, 3, s3v) &&
                   !dalloc(&d[12], DT_F32, 1, sw) && !dalloc(&d[13], io, 4, s4h) && !dalloc(&d[14], io, 4, s4h) &&
                   !dalloc(&d[15], gdt, 4, s4v) && !dalloc(&d[16], bdt, 3, s3v) && !dalloc(&d[17], DT_F32, 1, s1) &&
                   !dalloc(&d[18], DT_F32, 2, s2);
    if (!ok) {
        fail(r, "out of device memory");
        goto out;
    }
    const double *host_in[12] = {dq_in, dk_in, q, k, qr, kr, dg_in, g, A_log, bias, db_in, beta};
    for (int i = 0; i < 12; i++)
        if (dput(&d[i], host_in[i])) {
            fail(r, "uploading inputs");
            goto out;
        }
    /* the counters (the workspace's last H elements) zero before the first launch */
    if (cu.cuMemsetD32_v2(d[12].p, 0, nelem(&d[12])) != CUDA_SUCCESS) {
        fail(r, "zeroing the workspace");
        goto out;
    }
    kdart_bwd_post_args args = {sizeof args, &d[0].t, &d[1].t, NULL, NULL, NULL, NULL, &d[6].t, NULL, NULL, NULL,
                                &d[10].t, NULL, NULL, &d[13].t, &d[14].t, &d[15].t, &d[16].t, NULL, NULL,
                                -5.0f, c->gate == 2, c->neg ? 2.0f : 1.0f, !c->g_f32, !c->beta_f32};
    if (c->l2norm) args.q = &d[2].t, args.k = &d[3].t, args.q_rstd = &d[4].t, args.k_rstd = &d[5].t;
    if (c->gate) {
        args.g_raw = &d[7].t, args.A_log = &d[8].t, args.workspace = &d[12].t, args.dA_log = &d[17].t;
        if (c->with_bias) args.dt_bias = &d[9].t, args.ddt_bias = &d[18].t;
    }
    if (c->sigmoid) args.beta_raw = &d[11].t;
    const int nout = c->gate ? (c->with_bias ? 6 : 5) : 4;
    dbuf *outs[6] = {&d[13], &d[14], &d[15], &d[16], &d[17], &d[18]};
    const kc_seqs seqs = {0};
    const int settled = run_settled(rt, launch_post, &args, outs, nout, raw, &seqs, c->graph, c->reps, r);
    if (settled) {
        if (settled > 0) rc = 0;
        goto out;
    }
    /* the reference: the value heads' sum, then each backward in float64 */
    for (int which = 0; which < 2; which++) {
        const double *din = which ? dk_in : dq_in;
        double *ref = which ? rdk : rdq;
        memset(sum, 0, sizeof(double) * nh);
        for (size_t t = 0; t < P; t++)
            for (int hv = 0; hv < HV; hv++)
                for (int x = 0; x < K; x++) sum[(t * H + hv / G) * K + x] += din[(t * HV + hv) * K + x];
        if (c->l2norm) kref_l2norm_bwd(P * H, K, which ? k : q, which ? kr : qr, sum, ref);
        else memcpy(ref, sum, sizeof(double) * nh);
    }
    if (c->gate) kref_gate_act_bwd(P * HV, HV, K, g, A_log, bias, c->gate == 2, -5.0, dg_in, rdg, rdA, rdbias);
    else memcpy(rdg, dg_in, sizeof(double) * nv);
    if (c->sigmoid) kref_beta_sigmoid_bwd(nb, c->neg ? 2.0 : 1.0, beta, db_in, rdb);
    else memcpy(rdb, db_in, sizeof(double) * nb);
    static const char *const names[6] = {"dq", "dk", "dg", "dbeta", "dA_log", "ddt_bias"};
    const double *refs[6] = {rdq, rdk, rdg, rdb, rdA, rdbias};
    const size_t n[6] = {nh, nh, nv, nb, (size_t)HV, (size_t)HV * K};
    const int dts[6] = {io, io, gdt == DT_F32 ? 0 : io, bdt == DT_F32 ? 0 : io, 0, 0};
    r->nout = nout;
    r->untouched = 1;
    for (int i = 0; i < nout; i++) score_output(r, i, names[i], outs[i], raw[i], n[i], n[i], dts[i], refs[i], NULL, got);
    rc = 0;
out:
    for (int i = 0; i < 19; i++) dfree(&d[i]);
    layout_free(&L);
    double *hs[] = {dq_in, dk_in, dg_in, db_in, q, k, qr, kr, g, A_log, bias, beta, sum, rdq, rdk, rdg, rdb, rdA, rdbias, got};
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) free(hs[i]);
    for (int i = 0; i < 6; i++) free(raw[i]);
    return rc;
}

/* ------------------------------------------------------------ the whole backward */

/* One kdart_kda_chunk_bwd call on h with every output poisoned first; raw[i] gets output i's bytes. */
static int chunk_call(kdart_rt *h, const kdart_chunk_bwd_args *a, dbuf *const *outs, void **raw, kc_report *r) {
    for (int i = 0; i < 8; i++)
        if (dpoison(outs[i])) return fail(r, "poisoning outputs");
    r->status = kdart_kda_chunk_bwd(h, a, NULL);
    if (r->status != KDART_OK) {
        snprintf(r->message, sizeof r->message, "%s", kdart_last_error(h));
        return 0;
    }
    if (kc_sync()) return fail(r, "synchronizing");
    for (int i = 0; i < 8; i++)
        if (dget(outs[i], raw[i], NULL)) return fail(r, "downloading outputs");
    return 0;
}

int kc_run_chunk_bwd(kdart_rt *rt, kdart_rt *rt2, const kc_chunk_case *c, kc_report *r) {
    kref_rng rng;
    layout L;
    if (case_begin(c->B, c->T, &c->seqs, c->seed, &rng, &L, r)) return -1;
    const int H = c->H, HV = c->HV, K = c->K, V = c->V, io = c->io, N = L.N;
    const int64_t B = L.B, T = L.T;
    const size_t P = (size_t)L.rows, nqk = P * H * K, ng = P * HV * K, nv = P * HV * V, nb = P * HV,
                 nA = P * HV * 64, ns = (size_t)N * HV * K * V;
    /* d[0..14] in: q k q_rstd k_rstd v g beta beta_raw A_log dt_bias Aqk Akk do dht h0;
     * d[15..22] out: dq dk dv dg dbeta dA_log ddt_bias dh0 */
    enum { NIN = 15, NB = 23 };
    dbuf d[NB];
    memset(d, 0, sizeof d);
    double *h[NIN] = {0}, *x = NULL, *y = NULL;
    void *raw[3][8];
    memset(raw, 0, sizeof raw);
    int rc = -1;
    CUdeviceptr ws = 0;
    int64_t sqk[4] = {B, T, H, K}, sr[3] = {B, T, H}, sg[4] = {B, T, HV, K}, sv[4] = {B, T, HV, V}, sb[3] = {B, T, HV},
            sA[4] = {B, T, HV, 64}, sst[4] = {N, HV, K, V}, s1[1] = {HV}, s2[2] = {HV, K};
    /* (plain: g is the fp32 g_cumsum, dg and dbeta fp32) */
    const int gdt = c->plain ? DT_F32 : io;
    const int dts[NB] = {io, io, DT_F32, DT_F32, io, gdt, DT_F32, io, DT_F32, DT_F32, io, io, io, DT_F32, DT_F32,
                         io, io, io, gdt, gdt, DT_F32, DT_F32, DT_F32};
    const int64_t *shp[NB] = {sqk, sqk, sr, sr, sv, sg, sb, sb, s1, s2, sA, sA, sv, sst, sst,
                              sqk, sqk, sv, sg, sb, s1, s2, sst};
    const int nd[NB] = {4, 4, 3, 3, 4, 4, 3, 3, 1, 2, 4, 4, 4, 4, 4, 4, 4, 4, 4, 3, 1, 2, 4};
    const size_t n_in[NIN] = {nqk, nqk, P * H, P * H, nv, ng, nb, nb, (size_t)HV, (size_t)HV * K, nA, nA, nv, ns, ns};
    const size_t big = nv > ng ? (nv > ns ? nv : ns) : (ng > ns ? ng : ns);
    int okh = (x = dmalloc(big)) && (y = dmalloc(big));
    for (int i = 0; i < NIN; i++) okh = okh && (h[i] = dmalloc(n_in[i]));
    if (!okh) {
        fail(r, "out of host memory");
        goto out;
    }
    if (layout_upload(&L, &c->seqs, r)) goto out;
    for (int i = 0; i < NB; i++)
        if (dalloc(&d[i], dts[i], nd[i], shp[i])) {
            fail(r, "out of device memory");
            goto out;
        }
    /* unit rows of q and k with rstd in [0.5, 1.5); raw gates and beta's logits N(0, 1), beta their sigmoid
     * (times 2 with allow_neg_eigval); decays exp(A_log) in [1, 16); Aqk and Akk N(0, 0.01) */
    kref_gen_unit_rows(&rng, P * H, K, h[0]), kref_gen_unit_rows(&rng, P * H, K, h[1]);
    for (size_t j = 0; j < P * H; j++) h[2][j] = 0.5 + kref_rng_uniform(&rng), h[3][j] = 0.5 + kref_rng_uniform(&rng);
    kref_gen_normal(&rng, nv, 1.0, h[4]), kref_gen_normal(&rng, ng, 1.0, h[5]);
    if (c->plain) { /* g_cumsum: the chunk-local cumsum of log-sigmoid decays (x: scratch until the outputs) */
        kref_gen_gate(&rng, KREF_GATE_LOGSIG, 1, (int)P, HV, K, x);
        kref_gate_cumsum_varlen((int)P, HV, K, N, L.cu, x, h[5]);
    }
    kref_gen_normal(&rng, nb, 1.0, h[7]);
    round_to(h[7], nb, io);
    for (size_t j = 0; j < nb; j++) h[6][j] = (c->neg ? 2.0 : 1.0) / (1.0 + exp(-h[7][j]));
    for (int j = 0; j < HV; j++) h[8][j] = log(1.0 + 15.0 * kref_rng_uniform(&rng));
    kref_gen_normal(&rng, (size_t)HV * K, 1.0, h[9]);
    kref_gen_normal(&rng, nA, 0.1, h[10]), kref_gen_normal(&rng, nA, 0.1, h[11]);
    kref_gen_normal(&rng, nv, 1.0, h[12]), kref_gen_normal(&rng, ns, 1.0, h[13]), kref_gen_normal(&rng, ns, 1.0, h[14]);
    for (int i = 0; i < NIN; i++)
        if (dput(&d[i], h[i])) {
            fail(r, "uploading inputs");
            goto out;
        }
    kdart_chunk_bwd_args a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    a.q = &d[0].t, a.k = &d[1].t, a.q_rstd = &d[2].t, a.k_rstd = &d[3].t, a.v = &d[4].t, a.g = &d[5].t;
    a.beta = &d[6].t, a.beta_raw = &d[7].t, a.A_log = &d[8].t, a.dt_bias = &d[9].t, a.Aqk = &d[10].t;
    a.Akk = &d[11].t, a.d_o = &d[12].t, a.dht = &d[13].t, a.h0 = &d[14].t;
    a.scale = (float)(1.0 / sqrt((double)K)), a.lower_bound = -5.0f, a.safe_gate = c->safe, a.allow_neg_eigval = c->neg;
    if (L.packed) a.cu_seqlens = &L.dcu.t, a.chunk_indices = &L.dci.t;
    a.dq = &d[15].t, a.dk = &d[16].t, a.dv = &d[17].t, a.dg = &d[18].t, a.dbeta = &d[19].t, a.dA_log = &d[20].t;
    a.ddt_bias = &d[21].t, a.dh0 = &d[22].t;
    if (c->plain) {
        a.g_cumsum = a.g, a.g = NULL, a.q_rstd = a.k_rstd = NULL, a.beta_raw = NULL, a.A_log = a.dt_bias = NULL;
        a.dA_log = a.ddt_bias = NULL;
    }
    const int64_t wsn = kdart_chunk_bwd_workspace(rt, &a), wsn2 = rt2 ? kdart_chunk_bwd_workspace(rt2, &a) : 0;
    if (wsn < 0 || wsn2 < 0) {
        r->status = (int)(wsn < 0 ? wsn : wsn2);
        snprintf(r->message, sizeof r->message, "%s", kdart_last_error(wsn < 0 ? rt : rt2));
        rc = 0;
        goto out;
    }
    int64_t wshape[1] = {wsn > wsn2 ? wsn : wsn2};
    DLTensor wt;
    memset(&wt, 0, sizeof wt);
    if (cu.cuMemAlloc_v2(&ws, (size_t)wshape[0] + 256) != CUDA_SUCCESS) {
        ws = 0;
        fail(r, "out of device memory (workspace)");
        goto out;
    }
    wt.data = (void *)ws, wt.device.device_type = kDLCUDA, wt.ndim = 1, wt.shape = wshape;
    wt.dtype.code = kDLUInt, wt.dtype.bits = 8, wt.dtype.lanes = 1;
    a.workspace = &wt;
    dbuf *outs[8] = {&d[15], &d[16], &d[17], &d[18], &d[19], &d[20], &d[21], &d[22]};
    for (int k2 = 0; k2 < 3; k2++)
        for (int i = 0; i < 8; i++)
            if (!(raw[k2][i] = malloc(outs[i]->bytes + 4))) {
                fail(r, "out of host memory");
                goto out;
            }
    /* rt, rt again, then rt2; a refusal ends the case (r->status, r->message) */
    if (chunk_call(rt, &a, outs, raw[0], r) || r->status != KDART_OK) goto settled;
    if (chunk_call(rt, &a, outs, raw[1], r) || r->status != KDART_OK) goto settled;
    r->deterministic = 1;
    for (int i = 0; i < 8; i++) r->deterministic &= memcmp(raw[0][i], raw[1][i], outs[i]->bytes) == 0;
    if (rt2 && (chunk_call(rt2, &a, outs, raw[2], r) || r->status != KDART_OK)) goto settled;
    static const char *const names[8] = {"dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dh0"};
    const size_t rowlen[8] = {(size_t)H * K, (size_t)H * K, (size_t)HV * V, (size_t)HV * K, (size_t)HV, 0, 0, 0};
    r->nout = 8;
    r->untouched = 1; /* here: every element of a live token written, on both handles */
    for (int i = 0; i < 8; i++) {
        const size_t n = nelem(outs[i]),
                     live = c->plain && (i == 5 || i == 6) ? 0 /* (not produced) */
                            : rowlen[i] ? (size_t)L.tokens * rowlen[i] : n;
        r->names[i] = names[i];
        r->digest[i] = fnv1a(raw[0][i], outs[i]->bytes);
        as_doubles(outs[i], raw[0][i], n, x);
        as_doubles(outs[i], rt2 ? raw[2][i] : raw[0][i], n, y);
        for (size_t j = 0; j < live; j++) r->untouched &= isfinite(x[j]) && isfinite(y[j]);
        double num = 0, den = 0, mx = 0;
        int nan_mismatch = 0;
        size_t ndiff = 0, nlive = 0;
        for (size_t j = 0; j < n; j++) {
            if (isnan(x[j]) || isnan(y[j])) {
                nan_mismatch |= isnan(x[j]) != isnan(y[j]);
                continue;
            }
            const double e = x[j] - y[j];
            num += e * e, den += y[j] * y[j];
            if (fabs(e) > mx) mx = fabs(e);
            ndiff += e != 0, nlive++;
        }
        r->rel_rms[i] = nan_mismatch ? INFINITY : num == 0 ? 0 : sqrt(num / (den > 0 ? den : 1e-300));
        r->rel_rms_alt[i] = NAN;
        r->max_abs[i] = mx;
        r->frac_diff[i] = nlive ? (double)ndiff / (double)nlive : 0;
        /* apart by more than one rounding to the output's dtype (one unit in the last place of the larger),
         * give or take fp32 noise of 1e-5 of the output's RMS (an element near zero after a cancellation) */
        const int mant = outs[i]->t.dtype.bits == 32 ? 23 : outs[i]->t.dtype.code == kDLBfloat ? 7 : 10;
        const double rms = nlive ? sqrt(den / (double)nlive) : 0;
        r->n_far[i] = nan_mismatch ? 1 : 0;
        for (size_t j = 0; j < n; j++) {
            if (isnan(x[j]) || isnan(y[j]) || x[j] == y[j]) continue;
            int ex;
            frexp(fmax(fabs(x[j]), fabs(y[j])), &ex);
            r->n_far[i] += fabs(x[j] - y[j]) > ldexp(1.0, ex - 1 - mant) + 1e-5 * rms;
        }
    }
settled:
    rc = r->message[0] && strncmp(r->message, "harness:", 8) == 0 ? -1 : 0;
out:
    for (int i = 0; i < NB; i++) dfree(&d[i]);
    if (ws) cu.cuMemFree_v2(ws);
    for (int k2 = 0; k2 < 3; k2++)
        for (int i = 0; i < 8; i++) free(raw[k2][i]);
    for (int i = 0; i < NIN; i++) free(h[i]);
    free(x), free(y);
    layout_free(&L);
    return rc;
}


/* ------------------------------------------------------------ selftest */

/* The varlen=1 specializations run 5 packed sequences of 1..700 tokens
 * (T = 0 in the shape column: cu[N] tokens), the others B = 2 rows of 512;
 * every other tail=1 bwd_intra spec runs the fixed-length rows too (kdart
 * sends a head dim below its tile to the varlen body at fixed length). */
#define SELFTEST_SEQS(spec) \
    (strstr(spec, "varlen=1") ? (kc_seqs){5, NULL, 1, 700, 0, 0, 1, 1, 0, 0.0, 0} : (kc_seqs){0})

/* One selftest line: the case's error per output against its tolerance (tol[i], a '!' marks one above
 * it), or why it did not run.  Returns the failures it counts. */
static int selftest_row(FILE *out, const char *kernel, const char *spec, const char *shape, int ran,
                        const kc_report *r, const double *tol) {
    if (!ran || r->status != KDART_OK) {
        fprintf(out, "%-10s %-58s %-28s FAILED: %s\n", kernel, spec, shape, r->message);
        return 1;
    }
    char errs[160] = "";
    int failures = 0;
    for (int i = 0; i < r->nout; i++) {
        const size_t u = strlen(errs);
        const int bad = !(r->rel_rms[i] <= tol[i]);
        snprintf(errs + u, sizeof errs - u, "%s %.1e%s ", r->names[i], r->rel_rms[i], bad ? "!" : "");
        failures += bad;
    }
    fprintf(out, "%-10s %-58s %-28s %-44s %9.4f\n", kernel, spec, shape, errs, r->ms);
    return failures;
}

/* The shape column of a selftest line: "B2 T512 " or "N5 T0 " (packed), then dims. */
static void selftest_shape(char *out, size_t n, const kc_seqs *sq, int B, int T, const char *dims) {
    snprintf(out, n, "%s%d T%d %s", sq->nseq ? "N" : "B", sq->nseq ? sq->nseq : B, T, dims);
}

int kc_selftest(kdart_rt *rt, FILE *out, const char *only) {
    char why[256];
    if (kc_init(why, sizeof why) != 0) {
        fprintf(out, "selftest: %s\n", why);
        return -1;
    }
    int failures = 0;
    uint64_t seed = kref_pick_seed();
    fprintf(out, "kdart selftest (seed %llu): error vs the float64 reference (rel RMS), time per call\n",
            (unsigned long long)seed);
    fprintf(out, "%-10s %-58s %-28s %-44s %9s\n", "kernel", "spec", "shape", "rel RMS per output", "ms/call");
    for (int s = 0; (!only || strcmp(only, "bwd_intra") == 0) && s < kdart_spec_count("bwd_intra"); s++) {
        char spec[128];
        kdart_spec_at("bwd_intra", s, spec, sizeof spec);
        if (!kc_intra_spec_launchable(spec)) continue; /* varlen=0,tail=1: a stub */
        kc_intra_case c = {2, 512, 2, 4, kc_intra_spec_k(spec), strstr(spec, "fp16") != NULL,
                           strstr(spec, "fold_dg=1") != NULL, strstr(spec, "emit_bf16=1") != NULL,
                           KREF_GATE_FUSED, seed + (uint64_t)s, 20, 0, SELFTEST_SEQS(spec),
                           kc_spec_beta_f32(spec)};
        if (kc_spec_tail(spec) && ((s >> 2) & 1)) c.seqs.nseq = 0; /* fixed length */
        if (c.emit_bf16) c.HV = c.H;
        if (c.seqs.nseq) c.B = 1, c.T = 0;
        kc_report r;
        char shape[64];
        snprintf(shape, sizeof shape, "%s%d T%d H%d HV%d K%d", c.seqs.nseq ? "N" : "B", c.seqs.nseq ? c.seqs.nseq : c.B,
                 c.T, c.H, c.HV, c.K);
        const int ran = kc_run_intra(rt, &c, &r) == 0;
        const double tq = c.emit_bf16 ? (c.io == 0 ? 4e-3 : 5e-4) : 1e-4; /* dq, dk in the io dtype */
        const double tol[] = {tq, tq, 1e-4, 1e-4};
        failures += selftest_row(out, "bwd_intra", spec, shape, ran, &r, tol);
    }
    for (int s = 0; (!only || strcmp(only, "bwd_dhu") == 0) && s < kdart_spec_count("bwd_dhu"); s++) {
        char spec[128];
        kdart_spec_at("bwd_dhu", s, spec, sizeof spec);
        int K, V = 128, svf;
        kc_dhu_spec_dims(spec, s >> 1, &K, &V, &svf); /* tail=1: K, V or the layout selects it, rotating */
        kc_dhu_case c = {2, 512, 4, K, V, strstr(spec, "fp16") != NULL, 1, 1,
                         seed + 100 + (uint64_t)s, 20, 0, kc_spec_bv(spec), SELFTEST_SEQS(spec), svf, 0};
        if (c.seqs.nseq) c.B = 1, c.T = 0;
        kc_report r;
        char shape[64];
        snprintf(shape, sizeof shape, "%s%d T%d HV%d K%d V%d%s", c.seqs.nseq ? "N" : "B",
                 c.seqs.nseq ? c.seqs.nseq : c.B, c.T, c.HV, c.K, c.V, svf ? " Vfirst" : "");
        const int ran = kc_run_dhu(rt, &c, &r) == 0;
        const double tol[] = {1e-3, 1e-3, 1e-5};
        failures += selftest_row(out, "bwd_dhu", spec, shape, ran, &r, tol);
    }
    for (int s = 0; (!only || strcmp(only, "wy_dqkg") == 0) && s < kdart_spec_count("wy_dqkg"); s++) {
        char spec[128];
        kdart_spec_at("wy_dqkg", s, spec, sizeof spec);
        int K, V;
        kc_wy_spec_dims(spec, s >> 1, &K, &V); /* tail=1: each copy granule in turn */
        kc_wy_case c = {2, 512, 2, 4, K, V, strstr(spec, "fp16") != NULL, kc_spec_beta_f32(spec),
                        strstr(spec, "svf=1") != NULL, KREF_GATE_FUSED, seed + 300 + (uint64_t)s, 20, 0,
                        SELFTEST_SEQS(spec), strstr(spec, "dAqk=1") != NULL, strstr(spec, "intra=1") != NULL};
        if (!kc_wy_spec_launchable(spec)) continue;
        if (c.seqs.nseq) c.B = 1, c.T = 0;
        kc_report r;
        char shape[64], dims[48];
        snprintf(dims, sizeof dims, "HV%d K%d V%d", c.HV, c.K, c.V);
        selftest_shape(shape, sizeof shape, &c.seqs, c.B, c.T, dims);
        const int ran = kc_run_wy(rt, &c, &r) == 0;
        const double tol[] = {2e-3, 2e-3, 2e-3, 2e-3, 2e-3, 2e-3, 2e-3};
        failures += selftest_row(out, "wy_dqkg", spec, shape, ran, &r, tol);
    }
    /* the tail specs at K = 100 / V = 72 (each stage's masked copies); the gate specs alternate the plain and
     * the safe form of the raw gate */
    for (int s = 0; (!only || strcmp(only, "recompute_wu") == 0) && s < kdart_spec_count("recompute_wu"); s++) {
        char spec[128];
        kdart_spec_at("recompute_wu", s, spec, sizeof spec);
        const int tail = kc_spec_tail(spec), gate = strstr(spec, "gate=1") != NULL;
        kc_rwu_case c = {2, 512, 2, 4, tail ? 100 : 128, tail ? 72 : 128, strstr(spec, "io=fp16") != NULL,
                         kc_spec_beta_f32(spec), gate ? 1 + ((s >> 1) & 1) : 0, KREF_GATE_STRONG, 0, 1, -5.0, 1,
                         seed + 400 + (uint64_t)s, 20, 0, SELFTEST_SEQS(spec)};
        if (c.seqs.nseq) c.B = 1, c.T = 0;
        kc_report r;
        char shape[64], dims[48];
        snprintf(dims, sizeof dims, "HV%d K%d V%d", c.HV, c.K, c.V);
        selftest_shape(shape, sizeof shape, &c.seqs, c.B, c.T, dims);
        const int ran = kc_run_rwu(rt, &c, &r) == 0;
        double tol[8];
        for (int i = 0; i < 8; i++) tol[i] = i < r.nout && strcmp(r.names[i], "g") == 0 ? 1e-5 : c.io ? 1.5e-3 : 8e-3;
        failures += selftest_row(out, "recompute_wu", spec, shape, ran, &r, tol);
    }
    for (int s = 0; (!only || strcmp(only, "bwd_dav") == 0) && s < kdart_spec_count("bwd_dav"); s++) {
        char spec[128];
        kdart_spec_at("bwd_dav", s, spec, sizeof spec);
        kc_dav_case c = {2, 512, 4, kc_spec_tail(spec) ? 100 : 128, strstr(spec, "io=fp16") != NULL,
                         seed + 500 + (uint64_t)s, 20, 0, SELFTEST_SEQS(spec), 0};
        if (c.seqs.nseq) c.B = 1, c.T = 0;
        kc_report r;
        char shape[64], dims[48];
        snprintf(dims, sizeof dims, "HV%d V%d", c.HV, c.V);
        selftest_shape(shape, sizeof shape, &c.seqs, c.B, c.T, dims);
        const int ran = kc_run_dav(rt, &c, &r) == 0;
        const double tol[] = {1e-5, c.io ? 5e-4 : 4e-3};
        failures += selftest_row(out, "bwd_dav", spec, shape, ran, &r, tol);
    }
    for (int s = 0; (!only || strcmp(only, "fwd_h") == 0) && s < kdart_spec_count("fwd_h"); s++) {
        char spec[128];
        kdart_spec_at("fwd_h", s, spec, sizeof spec);
        const int tail = kc_spec_tail(spec), K = kc_spec_k(spec) - (tail ? 4 : 0), V = tail ? 100 : 128;
        kc_fwdh_case c = {2, 512, 4, 4, K, V, strstr(spec, "io=fp16") != NULL, KREF_GATE_STRONG, 0, 1, 1, 1,
                          kc_spec_bv(spec), seed + 600 + (uint64_t)s, 20, 0, SELFTEST_SEQS(spec),
                          strstr(spec, "uv=1") != NULL};
        if (c.seqs.nseq) c.B = 1, c.T = 0;
        kc_report r;
        char shape[64], dims[48];
        snprintf(dims, sizeof dims, "HV%d K%d V%d", c.HV, c.K, c.V);
        selftest_shape(shape, sizeof shape, &c.seqs, c.B, c.T, dims);
        const int ran = kc_run_fwdh(rt, &c, &r) == 0;
        const double t = c.io ? 3e-3 : 1e-2, tol[] = {t, t, t, t};
        failures += selftest_row(out, "fwd_h", spec, shape, ran, &r, tol);
    }
    for (int s = 0; (!only || strcmp(only, "bwd_post") == 0) && s < kdart_spec_count("bwd_post"); s++) {
        char spec[128];
        kdart_spec_at("bwd_post", s, spec, sizeof spec);
        kc_post_case c = {2, 512, 2, 4, kc_spec_tail(spec) ? 63 : 128, strstr(spec, "io=fp16") != NULL, 1, 1 + (s & 1),
                          1, strstr(spec, "g_io=0") != NULL, 1, strstr(spec, "beta_io=0") != NULL, 0,
                          seed + 700 + (uint64_t)s, 20, 0};
        kc_report r;
        char shape[64];
        snprintf(shape, sizeof shape, "B%d T%d H%d HV%d K%d", c.B, c.T, c.H, c.HV, c.K);
        const int ran = kc_run_post(rt, &c, &r) == 0;
        const double t = c.io ? 1e-3 : 8e-3;
        const double tol[] = {t, t, c.g_f32 ? 1e-5 : t, c.beta_f32 ? 1e-5 : t, 1e-5, 1e-5};
        failures += selftest_row(out, "bwd_post", spec, shape, ran, &r, tol);
    }
    fprintf(out, "selftest: %d failure(s)%s", failures, failures ? " (! marks an error above its tolerance)" : "");
    fprintf(out, "\n");
    return failures;
}

/* ------------------------------------------------------------ benchmark */

const kc_shape kc_standard_shapes[] = {
    {"prod8192", 16, 8192, 16, 16, 128, 256, 0, 0},
    {"1x8192 H96", 1, 8192, 96, 96, 128, 128, 0, 0},
    {"1x32768 H32", 1, 32768, 32, 32, 128, 128, 0, 0},
    {"1x8192 H32", 1, 8192, 32, 32, 128, 128, 0, 0},
    {"4x4096 H32", 4, 4096, 32, 32, 128, 128, 0, 0},
    {"2x8192 H16", 2, 8192, 16, 16, 128, 128, 0, 0},
    {"8x2048 H32", 8, 2048, 32, 32, 128, 128, 0, 0},
    {"1x2048 H16", 1, 2048, 16, 16, 128, 128, 0, 0},
    {"4x4096 H16 HV32", 4, 4096, 16, 32, 128, 128, 0, 0},
    {"2x4096 H32 K64", 2, 4096, 32, 32, 64, 64, 0, 0},
    {"prod8192 fold", 16, 8192, 16, 16, 128, 256, 1, 0},
    {"prod8192 fold+emit", 16, 8192, 16, 16, 128, 256, 1, 1},
};
const int kc_n_standard = (int)(sizeof kc_standard_shapes / sizeof kc_standard_shapes[0]);

/* Fills a device tensor by tiling a host block of `block` elements (a
 * whole number of 64-row chunks), so huge tensors fill fast while every
 * chunk still holds valid, non-zero data.  kind: 0 randn*scale, 1 gate
 * cumsum (monotone per chunk, row width w), 2 dA lower (row width 64). */
static int fill_tiled(dbuf *b, size_t block, int kind, int w, double scale, kref_rng *rng) {
    size_t n = nelem(b);
    if (block > n) block = n;
    double *x = dmalloc(block);
    if (!x) return -1;
    if (kind == 0) {
        kref_gen_normal(rng, block, scale, x);
    } else if (kind == 1) { /* block = 64 rows of w channels */
        for (size_t i = 0; i < block; i++) x[i] = -fabs(kref_rng_normal(rng)) * 0.3 - 0.01;
        for (size_t r = 1; r < block / (size_t)w; r++)
            for (int j = 0; j < w; j++) x[r * (size_t)w + (size_t)j] += x[(r - 1) * (size_t)w + (size_t)j] * ((r % 64) != 0);
    } else { /* rows of 64 columns: row r of a chunk keeps s <= r */
        for (size_t i = 0; i < block; i++) {
            size_t row = (i / 64), col = i % 64, r = (row / (size_t)(w / 64 ? w / 64 : 1)) % 64;
            x[i] = col <= r ? 0.1 * kref_rng_normal(rng) : 0.0;
        }
    }
    dbuf tmp = *b;
    tmp.bytes = block * (size_t)(b->t.dtype.bits / 8);
    size_t done = 0;
    int rc = 0;
    /* Upload the block once, then copy it device-to-device along. */
    if (dput(&tmp, x)) rc = -1;
    for (done = tmp.bytes; rc == 0 && done < b->bytes; done += tmp.bytes) {
        size_t len = b->bytes - done < tmp.bytes ? b->bytes - done : tmp.bytes;
        if (cu.cuMemcpyDtoD_v2(b->p + done, b->p, len) != CUDA_SUCCESS) rc = -1;
    }
    free(x);
    return rc;
}

double kc_copy_ceiling(void) {
    size_t bytes = (size_t)1 << 30;
    CUdeviceptr a, b;
    if (cu.cuMemAlloc_v2(&a, bytes) != CUDA_SUCCESS) return 0;
    if (cu.cuMemAlloc_v2(&b, bytes) != CUDA_SUCCESS) {
        cu.cuMemFree_v2(a);
        return 0;
    }
    cu.cuMemsetD32_v2(a, 0x3f800000u, bytes / 4);
    CUevent e0, e1;
    cu.cuEventCreate(&e0, 0);
    cu.cuEventCreate(&e1, 0);
    double best = 0;
    for (int i = 0; i < 6; i++) {
        float ms = 0;
        cu.cuEventRecord(e0, NULL);
        cu.cuMemcpyDtoD_v2(b, a, bytes);
        cu.cuEventRecord(e1, NULL);
        cu.cuEventSynchronize(e1);
        cu.cuEventElapsedTime_v2(&ms, e0, e1);
        double gbs = 2.0 * (double)bytes / (ms * 1e6);
        if (i > 0 && gbs > best) best = gbs;
    }
    cu.cuEventDestroy_v2(e0);
    cu.cuEventDestroy_v2(e1);
    cu.cuMemFree_v2(a);
    cu.cuMemFree_v2(b);
    return best;
}

/* One benchmark launch set: args per rotating input set. */
typedef struct bench_sets {
    int n;
    void *args[4];
    launch_fn fn;
} bench_sets;

static double time_sets(kdart_rt *rt, const bench_sets *s, int reps, int *status) {
    CUstream st;
    cu.cuStreamCreate(&st, CU_STREAM_NON_BLOCKING);
    *status = KDART_OK;
    for (int i = 0; i < 3 && *status == KDART_OK; i++) *status = s->fn(rt, s->args[i % s->n], st);
    if (*status != KDART_OK || cu.cuStreamSynchronize(st) != CUDA_SUCCESS) {
        if (*status == KDART_OK) *status = KDART_ECUDA;
        cu.cuStreamDestroy_v2(st);
        return 0;
    }
    CUevent ev[2 * 64];
    if (reps > 64) reps = 64;
    for (int i = 0; i < 2 * reps; i++) cu.cuEventCreate(&ev[i], 0);
    for (int i = 0; i < reps; i++) {
        cu.cuEventRecord(ev[2 * i], st);
        s->fn(rt, s->args[i % s->n], st);
        cu.cuEventRecord(ev[2 * i + 1], st);
    }
    cu.cuStreamSynchronize(st);
    double ms[64];
    for (int i = 0; i < reps; i++) {
        float t = 0;
        cu.cuEventElapsedTime_v2(&t, ev[2 * i], ev[2 * i + 1]);
        ms[i] = t;
    }
    for (int i = 0; i < 2 * reps; i++) cu.cuEventDestroy_v2(ev[i]);
    cu.cuStreamDestroy_v2(st);
    qsort(ms, (size_t)reps, sizeof ms[0], cmp_double);
    return ms[reps / 2];
}

static int sets_for(size_t set_bytes) {
    /* Enough sets that the rotation exceeds the 50 MB L2 several times. */
    size_t want = (size_t)256 << 20;
    int n = (int)((want + set_bytes - 1) / set_bytes);
    return n < 1 ? 1 : n > 4 ? 4 : n;
}

static void bench_row(FILE *out, const char *stage, const kc_shape *s, double ms, double bytes, double ceiling,
                      int status, kdart_rt *rt) {
    char shape[64];
    snprintf(shape, sizeof shape, "B%d T%d H%d HV%d K%d V%d", s->B, s->T, s->H, s->HV, s->K, s->V);
    if (status != KDART_OK) {
        fprintf(out, "%-9s %-20s %-34s FAILED: %s\n", stage, s->name, shape, kdart_last_error(rt));
        return;
    }
    double gbs = bytes / (ms * 1e6);
    fprintf(out, "%-9s %-20s %-34s %9.3f ms %8.1f MB %8.0f GB/s %5.1f%% of copy\n", stage, s->name, shape, ms,
            bytes / 1e6, gbs, 100.0 * gbs / ceiling);
    fflush(out);
}

static int bench_intra(kdart_rt *rt, const kc_shape *s, int io, int reps, double ceiling, FILE *out) {
    const int B = s->B, T = s->T, H = s->H, HV = s->HV, K = s->K;
    double set_bytes = 2.0 * B * T * H * K * 2 + 4.0 * B * T * HV * K * 4 + 2.0 * B * T * HV + 4.0 * B * T * HV +
                       2.0 * 4 * B * T * HV * 64;
    int odt = s->emit_bf16 ? io : DT_F32;
    double out_bytes = 2.0 * B * T * HV * K * (s->emit_bf16 ? 2 : 4) + 4.0 * B * T * HV * K + 4.0 * B * T * HV;
    int nsets = sets_for((size_t)set_bytes);
    dbuf in[4][10], o[4];
    memset(in, 0, sizeof in);
    memset(o, 0, sizeof o);
    kdart_bwd_intra_args args[4];
    kref_rng rng;
    kref_rng_seed(&rng, 1234);
    int rc = -1, ok = 1;
    for (int k = 0; k < nsets && ok; k++) {
        dbuf *d = in[k];
        /* One set of outputs, written by every set's launch. */
        ok &= !intra_alloc(d, k == 0 ? o : NULL, B, T, H, HV, K, io, odt);
        if (!ok) break;
        size_t rows = 64; /* one chunk of rows per tile */
        ok &= !fill_tiled(&d[0], rows * H * K * 4, 0, 0, 0.09, &rng) &&
              !fill_tiled(&d[1], rows * H * K * 4, 0, 0, 0.09, &rng) &&
              !fill_tiled(&d[2], rows * HV * K * 4, 1, HV * K, 0, &rng) &&
              !fill_tiled(&d[3], rows * HV * 4, 0, 0, 0.5, &rng) &&
              !fill_tiled(&d[4], rows * HV * 64 * 4, 2, HV * 64, 0, &rng) &&
              !fill_tiled(&d[5], rows * HV * 64 * 4, 2, HV * 64, 0, &rng) &&
              !fill_tiled(&d[6], rows * HV * K * 4, 0, 0, 1, &rng) && !fill_tiled(&d[7], rows * HV * K * 4, 0, 0, 1, &rng) &&
              !fill_tiled(&d[8], rows * HV * K * 4, 0, 0, 1, &rng) && !fill_tiled(&d[9], rows * HV * 4, 0, 0, 1, &rng);
        args[k] = intra_args(d, o, s->fold_dg, s->emit_bf16);
    }
    if (!ok) {
        fprintf(out, "%-9s %-20s skipped: out of device memory or fill failed\n", "bwd_intra", s->name);
        goto done;
    }
    bench_sets bs = {nsets, {&args[0], &args[1], &args[2], &args[3]}, launch_intra};
    int status;
    double ms = time_sets(rt, &bs, reps, &status);
    bench_row(out, "bwd_intra", s, ms, set_bytes + out_bytes, ceiling, status, rt);
    rc = 0;
done:
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 10; i++) dfree(&in[k][i]);
    for (int i = 0; i < 4; i++) dfree(&o[i]);
    return rc;
}

/* bwd_dhu, and where it runs (K 64 or 128, V a multiple of 64) its fused form "bwd_dhu+Aqk" that reads
 * chunk_kda's Aqk [B,T,HV,64] in place of dv (fla's dAv dv, computed inside). */
static int bench_dhu(kdart_rt *rt, const kc_shape *s, int io, int reps, double ceiling, FILE *out) {
    const int B = s->B, T = s->T, HV = s->HV, K = s->K, V = s->V, NT = T / 64;
    int64_t sv[4] = {B, T, HV, V}, sh[5] = {B, NT, HV, K, V}, sa[4] = {B, T, HV, 64};
    const int can_fuse = (K == 64 || K == 128) && V % 64 == 0;
    int rc = 0;
    for (int fused = 0; fused <= can_fuse && rc == 0; fused++) {
        /* Inputs as in prod8192: no dht, no dh0 (the production call). g is
         * read at one row per chunk. */
        double set_bytes = 3.0 * B * T * HV * K * 2 + 4.0 * B * NT * HV * K + 2.0 * B * T * HV * V +
                           (fused ? 2.0 * B * T * HV * 64 : 2.0 * B * T * HV * V);
        double out_bytes = 2.0 * B * NT * HV * K * V + 2.0 * B * T * HV * V;
        int nsets = sets_for((size_t)set_bytes);
        dbuf in[4][7], o[2];
        memset(in, 0, sizeof in);
        memset(o, 0, sizeof o);
        kdart_bwd_dhu_args args[4];
        kref_rng rng;
        kref_rng_seed(&rng, 4321);
        int ok = !dalloc(&o[0], io, 5, sh) && !dalloc(&o[1], io, 4, sv);
        for (int k = 0; k < nsets && ok; k++) {
            dbuf *d = in[k];
            ok &= !dhu_alloc_inputs(d, B, T, HV, K, V, io) && (!fused || !dalloc(&d[6], io, 4, sa));
            if (!ok) break;
            size_t rows = 64;
            ok &= !fill_tiled(&d[0], rows * HV * K * 4, 0, 0, 0.1, &rng) &&
                  !fill_tiled(&d[1], rows * HV * K * 4, 0, 0, 0.1, &rng) &&
                  !fill_tiled(&d[2], rows * HV * K * 4, 0, 0, 0.1, &rng) &&
                  !fill_tiled(&d[3], rows * HV * K * 4, 1, HV * K, 0, &rng) &&
                  !fill_tiled(&d[4], rows * HV * V * 4, 0, 0, 1, &rng) &&
                  !fill_tiled(&d[5], rows * HV * V * 4, 0, 0, 1, &rng) &&
                  (!fused || !fill_tiled(&d[6], rows * HV * 64 * 4, 2, HV * 64, 0, &rng));
            kdart_bwd_dhu_args a = {sizeof a, &d[0].t, &d[1].t, &d[2].t, &d[3].t, &d[4].t, &d[5].t,
                                    NULL,     &o[0].t, &o[1].t, NULL,    (float)(1.0 / sqrt((double)K)), 0,
                                    NULL,     NULL,    NULL,    0,       NULL};
            if (fused) a.dv = NULL, a.Aqk = &d[6].t;
            args[k] = a;
        }
        if (!ok) {
            fprintf(out, "%-9s %-20s skipped: out of device memory or fill failed\n", "bwd_dhu", s->name);
            rc = -1;
        } else {
            bench_sets bs = {nsets, {&args[0], &args[1], &args[2], &args[3]}, launch_dhu};
            int status;
            double ms = time_sets(rt, &bs, reps, &status);
            bench_row(out, fused ? "bwd_dhu+Aqk" : "bwd_dhu", s, ms, set_bytes + out_bytes, ceiling, status, rt);
        }
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < 7; i++) dfree(&in[k][i]);
        for (int i = 0; i < 2; i++) dfree(&o[i]);
    }
    return rc;
}

/* wy_dqkg (fp32 beta, as chunk_kda's production configuration hands it over), without and with its
 * fused dAqk output ("wy_dqkg+dAqk": fla's dAv dA), and with bwd_intra's terms in the same launch too
 * ("wy+dAqk+intra": the bytes are the same, the intra part's reads come from L2); one input set (the
 * tensors are large). */
static int bench_wy(kdart_rt *rt, const kc_shape *s, int io, int reps, double ceiling, FILE *out) {
    const int B = s->B, T = s->T, H = s->H, HV = s->HV, K = s->K, V = s->V, NT = T / 64;
    int64_t sqk[4] = {B, T, H, K}, sk[4] = {B, T, HV, K}, sv[4] = {B, T, HV, V}, sb[3] = {B, T, HV},
            sA[4] = {B, T, HV, 64}, sh[5] = {B, NT, HV, K, V};
    const double tq = (double)B * T * H * K, tk = (double)B * T * HV * K, tv = (double)B * T * HV * V,
                 ta = (double)B * T * HV * 64, th = (double)B * NT * HV * K * V, tb = (double)B * T * HV;
    dbuf d[18];
    memset(d, 0, sizeof d);
    kref_rng rng;
    kref_rng_seed(&rng, 4322);
    int ok = !dalloc(&d[0], io, 4, sqk) && !dalloc(&d[1], io, 4, sqk) && !dalloc(&d[2], io, 4, sv) &&
             !dalloc(&d[3], io, 4, sv) && !dalloc(&d[4], DT_F32, 4, sk) && !dalloc(&d[5], DT_F32, 3, sb) &&
             !dalloc(&d[6], io, 4, sA) && !dalloc(&d[7], io, 5, sh) && !dalloc(&d[8], io, 5, sh) &&
             !dalloc(&d[9], io, 4, sv) && !dalloc(&d[10], io, 4, sv) && !dalloc(&d[11], DT_F32, 4, sk) &&
             !dalloc(&d[12], DT_F32, 4, sk) && !dalloc(&d[13], io, 4, sv) && !dalloc(&d[14], DT_F32, 4, sk) &&
             !dalloc(&d[15], DT_F32, 3, sb) && !dalloc(&d[16], DT_F32, 4, sA) && !dalloc(&d[17], DT_F32, 4, sA);
    const size_t rows = 64;
    ok = ok && !fill_tiled(&d[0], rows * H * K, 0, 0, 0.1, &rng) && !fill_tiled(&d[1], rows * H * K, 0, 0, 0.1, &rng) &&
         !fill_tiled(&d[2], rows * HV * V, 0, 0, 1, &rng) && !fill_tiled(&d[3], rows * HV * V, 0, 0, 1, &rng) &&
         !fill_tiled(&d[4], rows * HV * K, 1, HV * K, 0, &rng) && !fill_tiled(&d[5], rows * HV, 0, 0, 0.5, &rng) &&
         !fill_tiled(&d[6], rows * HV * 64, 2, HV * 64, 0, &rng) &&
         !fill_tiled(&d[7], (size_t)HV * K * V, 0, 0, 0.1, &rng) && !fill_tiled(&d[8], (size_t)HV * K * V, 0, 0, 0.1, &rng) &&
         !fill_tiled(&d[9], rows * HV * V, 0, 0, 1, &rng) && !fill_tiled(&d[10], rows * HV * V, 0, 0, 1, &rng);
    int rc = 0;
    if (!ok) {
        fprintf(out, "%-9s %-20s skipped: out of device memory or fill failed\n", "wy_dqkg", s->name);
        rc = -1;
    }
    for (int with = 0; with <= 2 && ok; with++) {
        kdart_wy_dqkg_args a = {sizeof a, &d[0].t,  &d[1].t,  &d[2].t,  &d[3].t,  &d[4].t,  &d[5].t,
                                &d[6].t,  &d[7].t,  &d[8].t,  &d[9].t,  &d[10].t, &d[11].t, &d[12].t,
                                &d[13].t, &d[14].t, &d[15].t, &d[16].t, (float)(1.0 / sqrt((double)K)), 0,
                                NULL,     NULL,     with ? &d[17].t : NULL, with == 2};
        /* what the stage must move: its inputs once, its outputs once */
        const double bytes = 2 * 2 * tq + 4 * 2 * tv + 4 * tk + 4 * tb + 2 * ta + 2 * 2 * th + 3 * 4 * tk + 2 * tv +
                             4 * tb + 4 * ta + (with ? 4 * ta : 0);
        bench_sets bs = {1, {&a}, launch_wy};
        int status;
        double ms = time_sets(rt, &bs, reps, &status);
        bench_row(out, with == 2 ? "wy+dAqk+intra" : with ? "wy_dqkg+dAqk" : "wy_dqkg", s, ms, bytes, ceiling, status,
                  rt);
    }
    for (int i = 0; i < 18; i++) dfree(&d[i]);
    return rc;
}

int kc_bench(kdart_rt *rt, const kc_shape *shapes, int n, int io, int reps, double ceiling, FILE *out) {
    char why[256];
    if (kc_init(why, sizeof why) != 0) {
        fprintf(out, "bench: %s\n", why);
        return -1;
    }
    fprintf(out, "%-9s %-20s %-34s %12s %11s %13s %s\n", "stage", "row", "shape", "median", "must move", "achieved",
            "vs copy ceiling");
    for (int i = 0; i < n; i++) {
        bench_intra(rt, &shapes[i], io, reps, ceiling, out);
        if (!shapes[i].fold_dg && !shapes[i].emit_bf16) {
            bench_dhu(rt, &shapes[i], io, reps, ceiling, out);
            bench_wy(rt, &shapes[i], io, reps, ceiling, out);
        }
    }
    return 0;
}

int kc_launch_overhead(kdart_rt *rt, double *kdart_us, double *raw_us) {
    char why[256];
    if (kc_init(why, sizeof why) != 0) return -1;
    /* The smallest valid problem: the GPU work is a few microseconds, and
     * launches are timed on the host in batches short enough that the
     * launch queue never fills (so the host never waits for the GPU). */
    dbuf d[14];
    memset(d, 0, sizeof d);
    int rc = -1;
    if (intra_alloc(d, d + 10, 1, 64, 1, 1, 64, 0, DT_F32)) goto done;
    intra_fill_small(d);
    kdart_bwd_intra_args a = intra_args(d, d + 10, 0, 0);
    kdart_launch_info li;
    if (kdart_get_function(rt, "bwd_intra", "io=bf16,fold_dg=0,emit_bf16=0,K=64", &li) != KDART_OK) goto done;
    kdart_bwd_intra_params p = {(void *)d[0].p,  (void *)d[1].p,  (float *)d[2].p, (void *)d[3].p,
                                (float *)d[4].p, (float *)d[5].p, (float *)d[6].p, (float *)d[7].p,
                                (float *)d[8].p, (float *)d[9].p, (void *)d[10].p, (void *)d[11].p,
                                (float *)d[12].p, (float *)d[13].p, 1, 64, 1, 1, NULL, NULL, 1, 1, 0, 64};
    void *params[] = {&p};
    CUstream st;
    cu.cuStreamCreate(&st, CU_STREAM_NON_BLOCKING);
    enum { BATCH = 64, ROUNDS = 60 };
    double tk[ROUNDS], tr[ROUNDS];
    for (int round = 0; round < ROUNDS; round++) {
        struct timespec t0, t1, r0, r1;
        cu.cuStreamSynchronize(st);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < BATCH; i++) kdart_kda_bwd_intra(rt, &a, st);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        cu.cuStreamSynchronize(st);
        clock_gettime(CLOCK_MONOTONIC, &r0);
        for (int i = 0; i < BATCH; i++)
            cu.cuLaunchKernel((CUfunction)li.function, 1, 1, 1, (unsigned)li.threads, 1, 1, (unsigned)li.smem_bytes,
                              st, params, NULL);
        clock_gettime(CLOCK_MONOTONIC, &r1);
        tk[round] = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1e3 / BATCH;
        tr[round] = ((double)(r1.tv_sec - r0.tv_sec) * 1e9 + (double)(r1.tv_nsec - r0.tv_nsec)) / 1e3 / BATCH;
    }
    cu.cuStreamSynchronize(st);
    cu.cuStreamDestroy_v2(st);
    qsort(tk, ROUNDS, sizeof tk[0], cmp_double);
    qsort(tr, ROUNDS, sizeof tr[0], cmp_double);
    *kdart_us = tk[ROUNDS / 2];
    *raw_us = tr[ROUNDS / 2];
    rc = 0;
done:
    for (int i = 0; i < 14; i++) dfree(&d[i]);
    return rc;
}
