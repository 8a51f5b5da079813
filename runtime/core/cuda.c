/*
 * cuda.c: libcuda by dlopen, contexts, per-context function handles, and
 * the launch itself.
 *
 * libcuda is opened once per process, on the first call that needs a GPU;
 * its absence is a status (KDART_ENOCUDA), not a link error, so everything
 * that only compiles or inspects works on machines with no driver.
 *
 * Cubins are loaded with cuLibraryLoadData, which is context-independent:
 * the driver loads the library into each context on first use.  Each unit
 * keeps a small table of (context, CUfunction) pairs, filled once per
 * context under the runtime lock, and sets the dynamic shared memory
 * attribute on each function when it is filled.  The launch path then only
 * reads the current context, scans at most KDART__MAX_CTX pairs with
 * atomic loads and calls cuLaunchKernel.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_api.h"
#include "rt.h"

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static struct kdart__cuda cuda_table;
static int cuda_status = KDART_ENOCUDA;
static char cuda_why[256];

/* KDART_DISABLE_CUDA is not read here: this runs once per process, and
 * the variable is a handle's to read (or, under KDART_OPEN_NO_ENV, to
 * ignore); kdart_open turns it into KDART_OPEN_NO_CUDA. */
static void cuda_load(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(cuda_why, sizeof cuda_why, "libcuda.so.1 not found (%s)", dlerror());
        return;
    }
#define KDART__CUDA_SYM(name, ret, args)                                              \
    if (!(*(void **)&cuda_table.name = dlsym(lib, #name))) {                        \
        snprintf(cuda_why, sizeof cuda_why, "libcuda lacks %s (driver too old)", #name); \
        return;                                                                      \
    }
    KDART__CUDA_FUNCS(KDART__CUDA_SYM)
#undef KDART__CUDA_SYM
    CUresult r = cuda_table.cuInit(0);
    int count = 0;
    if (r == CUDA_SUCCESS) r = cuda_table.cuDeviceGetCount(&count);
    if (r != CUDA_SUCCESS || count == 0) {
        const char *name = "?";
        if (r != CUDA_SUCCESS) cuda_table.cuGetErrorName(r, &name);
        snprintf(cuda_why, sizeof cuda_why, "no CUDA device (%s)", r != CUDA_SUCCESS ? name : "count 0");
        cuda_status = KDART_ENODEVICE;
        return;
    }
    /* The handle stays open for the life of the process: unloading a driver
     * that other libraries in the process may also use is never safe. */
    cuda_status = KDART_OK;
}

int kdart__cuda_get(kdart_rt *rt, const kdart__cuda **out) {
    *out = NULL;
    if (rt->flags & KDART_OPEN_NO_CUDA)
        return kdart__err(rt, KDART_ENOCUDA, "CUDA not used (%s)",
                          rt->cuda_off_by_env ? "KDART_DISABLE_CUDA=1" : "opened with KDART_OPEN_NO_CUDA");
    pthread_once(&cuda_once, cuda_load);
    if (cuda_status != KDART_OK) return kdart__err(rt, cuda_status, "%s", cuda_why);
    *out = &cuda_table;
    return KDART_OK;
}

static int cuda_fail(kdart_rt *rt, const char *what, CUresult r) {
    const char *name = "CUDA_ERROR_UNKNOWN";
    cuda_table.cuGetErrorName(r, &name);
    return kdart__err(rt, KDART_ECUDA, "%s failed: %s", what, name);
}

/* The last context this thread saw, with its device and arch: the launch
 * path asks for them on every call, and cuCtxGetDevice plus two attribute
 * queries would cost most of a microsecond each time.  A context handle
 * stays bound to one device for its life; primary contexts (what CUDA
 * runtime and PyTorch use) live as long as the process. */
static _Thread_local struct {
    CUcontext ctx;
    int dev;
    int sms; /* multiprocessors: bwd_dhu sizes its grid by them */
    char arch[16];
} tl_ctx;

int kdart__cuda_context(kdart_rt *rt, void **ctx_out, char arch[16]) {
    return kdart__cuda_context_dev(rt, ctx_out, arch, NULL);
}

int kdart__cuda_context_dev(kdart_rt *rt, void **ctx_out, char arch[16], int *dev_out) {
    const kdart__cuda *cu;
    int rc = kdart__cuda_get(rt, &cu);
    if (rc) return rc;
    CUcontext ctx = NULL;
    CUresult r = cu->cuCtxGetCurrent(&ctx);
    if (r != CUDA_SUCCESS) return cuda_fail(rt, "cuCtxGetCurrent", r);
    if (ctx && ctx == tl_ctx.ctx) {
        if (arch) memcpy(arch, tl_ctx.arch, 16);
        if (dev_out) *dev_out = tl_ctx.dev;
        *ctx_out = ctx;
        return KDART_OK;
    }
    if (!ctx) {
        /* No context on this thread: use device 0's primary context, the
         * one the CUDA runtime (and so PyTorch) would use. */
        CUdevice dev;
        if ((r = cu->cuDeviceGet(&dev, 0)) != CUDA_SUCCESS) return cuda_fail(rt, "cuDeviceGet", r);
        if ((r = cu->cuDevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS)
            return cuda_fail(rt, "cuDevicePrimaryCtxRetain", r);
        if ((r = cu->cuCtxSetCurrent(ctx)) != CUDA_SUCCESS) return cuda_fail(rt, "cuCtxSetCurrent", r);
    }
    CUdevice dev;
    int major = 0, minor = 0;
    if ((r = cu->cuCtxGetDevice(&dev)) != CUDA_SUCCESS) return cuda_fail(rt, "cuCtxGetDevice", r);
    cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    cu->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    int sms = 0;
    cu->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    tl_ctx.sms = sms; /* 0 if the query failed: kdart__dhu_pick_bv treats it as 1 */
    tl_ctx.ctx = ctx;
    tl_ctx.dev = (int)dev;
    /* Arch-specific targets (the "a" suffix) from Hopper on: the kernels
     * may use wgmma and setmaxnreg, which exist only there. */
    snprintf(tl_ctx.arch, sizeof tl_ctx.arch, "sm_%d%d%s", major, minor, major >= 9 ? "a" : "");
    if (arch) memcpy(arch, tl_ctx.arch, 16);
    if (dev_out) *dev_out = tl_ctx.dev;
    *ctx_out = ctx;
    return KDART_OK;
}

int kdart__cuda_sm_count(kdart_rt *rt, int *sms) {
    void *ctx;
    int rc = kdart__cuda_context_dev(rt, &ctx, NULL, NULL);
    if (rc) return rc;
    *sms = tl_ctx.sms; /* filled for ctx by the call above */
    return KDART_OK;
}

/* Loads the unit's cubin as a context-independent library.  Under lock. */
static int unit_load(kdart_rt *rt, kdart__unit *u) {
    if (u->kernel_handle) return KDART_OK;
    const kdart__cuda *cu;
    int rc = kdart__cuda_get(rt, &cu);
    if (rc) return rc;
    CUlibrary lib;
    CUresult r = cu->cuLibraryLoadData(&lib, u->cubin, NULL, NULL, 0, NULL, NULL, 0);
    if (r != CUDA_SUCCESS) return cuda_fail(rt, "cuLibraryLoadData", r);
    CUkernel k;
    if ((r = cu->cuLibraryGetKernel(&k, lib, u->lowered)) != CUDA_SUCCESS) {
        cu->cuLibraryUnload(lib);
        return cuda_fail(rt, "cuLibraryGetKernel", r);
    }
    u->library = lib;
    u->kernel_handle = k;
    return KDART_OK;
}

/* The status word of ctx, allocated and zeroed on the first call for ctx.
 * Under lock (unit_bind, when a varlen unit is bound: never on the launch
 * path once the specialization is prepared in the context). */
static int status_alloc(kdart_rt *rt, void *ctx) {
    int slot = -1;
    for (int i = 0; i < KDART__MAX_CTX; i++) {
        void *c = atomic_load(&rt->status_ctx[i]);
        if (c == ctx) return KDART_OK;
        if (!c && slot < 0) slot = i;
    }
    if (slot < 0) return kdart__err(rt, KDART_EUNSUPPORTED, "more than %d CUDA contexts use kdart", KDART__MAX_CTX);
    CUdeviceptr p;
    CUresult r = cuda_table.cuMemAlloc_v2(&p, sizeof(int));
    if (r != CUDA_SUCCESS) return cuda_fail(rt, "cuMemAlloc (device status word)", r);
    const int zero = 0;
    if ((r = cuda_table.cuMemcpyHtoD_v2(p, &zero, sizeof zero)) != CUDA_SUCCESS) {
        cuda_table.cuMemFree_v2(p);
        return cuda_fail(rt, "cuMemcpyHtoD (device status word)", r);
    }
    atomic_store(&rt->status_ptr[slot], (unsigned long long)p);
    atomic_store(&rt->status_ctx[slot], ctx);
    return KDART_OK;
}

int *kdart__status_word(kdart_rt *rt, void *ctx) {
    for (int i = 0; i < KDART__MAX_CTX; i++) {
        void *c = atomic_load_explicit(&rt->status_ctx[i], memory_order_acquire);
        if (c == ctx) return (int *)(uintptr_t)atomic_load_explicit(&rt->status_ptr[i], memory_order_relaxed);
        if (!c) break;
    }
    return NULL;
}

void kdart__status_free(kdart_rt *rt) {
    for (int i = 0; i < KDART__MAX_CTX; i++) {
        unsigned long long p = atomic_load(&rt->status_ptr[i]);
        /* a context already destroyed took its memory with it: the error is moot */
        if (p && cuda_status == KDART_OK) cuda_table.cuMemFree_v2((CUdeviceptr)p);
        atomic_store(&rt->status_ptr[i], 0ull);
        atomic_store(&rt->status_ctx[i], NULL);
    }
}

int kdart__copy_to_host(kdart_rt *rt, void *dst, const void *src, size_t n) {
    const kdart__cuda *cu;
    int rc = kdart__cuda_get(rt, &cu);
    if (rc) return rc;
    CUresult r = cu->cuMemcpyDtoH_v2(dst, (CUdeviceptr)(uintptr_t)src, n);
    return r == CUDA_SUCCESS ? KDART_OK : cuda_fail(rt, "cuMemcpyDtoH", r);
}

int kdart_device_status(kdart_rt *rt, int *bits, int clear) {
    KDART__CHECK_RT(rt);
    if (!bits) return kdart__err(rt, KDART_ENULL, "bits must not be NULL");
    void *ctx;
    int rc = kdart__cuda_context(rt, &ctx, NULL);
    if (rc) return rc;
    CUresult r = cuda_table.cuCtxSynchronize();
    if (r != CUDA_SUCCESS) return cuda_fail(rt, "cuCtxSynchronize", r);
    int *w = kdart__status_word(rt, ctx), v = 0;
    if (w) {
        if ((r = cuda_table.cuMemcpyDtoH_v2(&v, (CUdeviceptr)(uintptr_t)w, sizeof v)) != CUDA_SUCCESS)
            return cuda_fail(rt, "cuMemcpyDtoH (device status word)", r);
        const int zero = 0;
        if (clear && v && (r = cuda_table.cuMemcpyHtoD_v2((CUdeviceptr)(uintptr_t)w, &zero, sizeof zero)) != CUDA_SUCCESS)
            return cuda_fail(rt, "cuMemcpyHtoD (device status word)", r);
    }
    *bits = v;
    return KDART_OK;
}

/* Resolves the unit's function in ctx, sets its shared memory limit and
 * checks that the launch shape fits.  Under lock. */
static int unit_bind(kdart_rt *rt, kdart__unit *u, void *ctx, void **fn_out) {
    int rc = unit_load(rt, u);
    if (rc) return rc;
    const kdart__cuda *cu = rt->cu ? rt->cu : &cuda_table;
    int slot = -1;
    for (int i = 0; i < KDART__MAX_CTX; i++) {
        void *c = atomic_load(&u->ctx[i]);
        if (c == ctx) {
            *fn_out = atomic_load(&u->fn[i]);
            return KDART_OK;
        }
        if (!c && slot < 0) slot = i;
    }
    if (slot < 0)
        return kdart__err(rt, KDART_EUNSUPPORTED, "more than %d CUDA contexts use one kernel", KDART__MAX_CTX);
    CUfunction f;
    CUresult r = cu->cuKernelGetFunction(&f, (CUkernel)u->kernel_handle);
    if (r != CUDA_SUCCESS) return cuda_fail(rt, "cuKernelGetFunction", r);
    if (u->smem > 0 &&
        (r = cu->cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, u->smem)) != CUDA_SUCCESS)
        return cuda_fail(rt, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", r);
    int max_threads = 0;
    cu->cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f);
    if (max_threads < u->threads)
        return kdart__err(rt, KDART_ECUDA, "kernel %s allows %d threads per block, launch needs %d", u->lowered,
                          max_threads, u->threads);
    if (kdart__spec_is_varlen(u->kernel, u->spec) && (rc = status_alloc(rt, ctx)) != KDART_OK) return rc;
    /* Publish fn before ctx: a lock-free reader that sees the context is
     * then guaranteed to see its function. */
    atomic_store(&u->fn[slot], (void *)f);
    atomic_store(&u->ctx[slot], ctx);
    *fn_out = f;
    return KDART_OK;
}

int kdart__unit_function(kdart_rt *rt, kdart__unit *u, void *ctx, void **fn) {
    for (int i = 0; i < KDART__MAX_CTX; i++) {
        void *c = atomic_load_explicit(&u->ctx[i], memory_order_acquire);
        if (c == ctx) {
            *fn = atomic_load_explicit(&u->fn[i], memory_order_relaxed);
            return KDART_OK;
        }
        if (!c) break;
    }
    pthread_mutex_lock(&rt->lock);
    int rc = unit_bind(rt, u, ctx, fn);
    pthread_mutex_unlock(&rt->lock);
    return rc;
}

int kdart__memset32_async(kdart_rt *rt, void *dst, unsigned value, size_t n, void *stream) {
    void *ctx;
    char arch[16];
    int rc = kdart__cuda_context(rt, &ctx, arch); /* (CUDA there, a context current: as for a launch) */
    if (rc) return rc;
    CUresult r = cuda_table.cuMemsetD32Async((CUdeviceptr)(uintptr_t)dst, value, n, (CUstream)stream);
    if (r != CUDA_SUCCESS) return cuda_fail(rt, "cuMemsetD32Async", r);
    return KDART_OK;
}

int kdart__launch(kdart_rt *rt, void *fn, unsigned gx, unsigned gy, unsigned gz, int threads, int smem,
                  void *stream, void *params) {
    void *args[] = {params};
    CUresult r = cuda_table.cuLaunchKernel((CUfunction)fn, gx, gy, gz, (unsigned)threads, 1, 1, (unsigned)smem,
                                           (CUstream)stream, args, NULL);
    if (r != CUDA_SUCCESS) return cuda_fail(rt, "cuLaunchKernel", r);
    return KDART_OK;
}

/* A TMA tensor map of a bf16 or fp16 tensor of rank 2 or 3 (dims innermost first, strides of dims 1..
 * in bytes), boxes of box[] elements, the 128-byte swizzle (a box's inner extent is 128 bytes), zeros
 * outside the tensor.  Encoding reads no device memory: a host call of about a microsecond. */
int kdart__tmap(kdart_rt *rt, void *map, int fp16, const void *base, int rank, const uint64_t *dims,
                const uint64_t *strides, const uint32_t *box) {
    const cuuint32_t one[3] = {1, 1, 1};
    CUresult r = cuda_table.cuTensorMapEncodeTiled(
        (CUtensorMap *)map, fp16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        (cuuint32_t)rank, (void *)base, (const cuuint64_t *)dims, (const cuuint64_t *)strides, (const cuuint32_t *)box,
        one, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) return cuda_fail(rt, "cuTensorMapEncodeTiled", r);
    return KDART_OK;
}

/* Releases the unit's library.  Called from kdart_close. */
void kdart__unit_unload(kdart_rt *rt, kdart__unit *u) {
    if (u->library && cuda_status == KDART_OK) cuda_table.cuLibraryUnload((CUlibrary)u->library);
    u->library = NULL;
    u->kernel_handle = NULL;
}
