/*
 * rt.h: the runtime handle and the interfaces between the runtime's modules
 * (registry, source, compile, cuda, runtime, ops).  Internal: kdart__ names.
 *
 * Locking: rt->lock guards the stores, the unit list, the in-flight
 * compiles and every slow path (compile, load), and is released while a
 * compile runs and while a prepare waits for someone else's compile.  The
 * launch path reads a prepared unit through an atomic pointer in rt->slots
 * and takes no lock.  The background-compile queue (jobs.c) has its own
 * lock, never held together with rt->lock.
 */
#ifndef KDART_RT_H
#define KDART_RT_H

#include <pthread.h>
#include <stdatomic.h>

#include "internal.h"
#include "store.h"

#define KDART__MAGIC 0x6b646172u /* "kdar": armor against stale handles */
#define KDART__ERRMSG_MAX 4096
#define KDART__KEY_SCHEMA 1      /* bump when the manifest's meaning changes */
#define KDART__MAX_PARAMS 9
#define KDART__MAX_VALUES 4
#define KDART__MAX_SPECS 768     /* largest spec_count of any kernel (wy_dqkg); every stage file asserts its own */
#define KDART__MAX_CTX 32        /* CUDA contexts one unit remembers (8 GPUs of a node, each with a few contexts) */

/* ------------------------------------------------------------- registry */

typedef struct kdart__param {
    const char *name;                      /* "io" */
    int nvalues;
    const char *values[KDART__MAX_VALUES]; /* spellings users write: "bf16" */
    const char *targs[KDART__MAX_VALUES];  /* template arguments: "kdart::bf16" */
    int dflt;                              /* index of the default value */
} kdart__param;

typedef struct kdart__op kdart__op; /* a stage's operation: stage.h */

/* A stage: one kernel of kernel_src/ and the operation around it, all in one
 * file under runtime/core/stages/ (stage.h says what the engine does from it). */
typedef struct kdart__kernel {
    const char *name;   /* "bwd_intra" */
    const char *source; /* file in kernel_src/ */
    const char *entry;  /* template name: "kdart_bwd_intra" */
    int nparams;        /* in template-argument order */
    kdart__param params[KDART__MAX_PARAMS];
    /* Launch shape of a specialization: threads per CTA and dynamic shared
     * memory bytes.  Mirrors the traits struct of the kernel source. */
    void (*launch_shape)(const int *vals, int *threads, int *smem_bytes);
    /* In the default prewarm set (NULL: every specialization that is not a stub) */
    int (*prewarmed)(const int *vals);
    /* Compiles to a trap and is never launched or prewarmed (NULL: none) */
    int (*stub)(const int *vals);
    const kdart__op *op; /* NULL: no operation of its own (called by others' launches) */
} kdart__kernel;

/* The registry: the built-in stages (runtime/core/stages/), in this order,
 * then any a test registered (stage.h). */
#define KDART__MAX_KERNELS 12
extern const kdart__kernel kdart__stage_chunk_rcumsum, kdart__stage_bwd_intra, kdart__stage_bwd_dhu,
    kdart__stage_wy_dqkg, kdart__stage_recompute_wu, kdart__stage_bwd_dav, kdart__stage_fwd_h,
    kdart__stage_bwd_post;
int kdart__kernel_count(void);
const kdart__kernel *kdart__kernel_at(int index);
int kdart__kernel_index(const kdart__kernel *k);
const kdart__kernel *kdart__kernel_find(const char *name);
/* Parses a spec string into value indices (defaults filled in).  On error
 * returns KDART_ESPEC and writes why into err. */
int kdart__spec_parse(const kdart__kernel *k, const char *spec, int *vals, char *err, size_t errlen);
/* Finds kernel and parses spec, recording on rt why either fails (ENULL,
 * EKERNEL, ESPEC): the common start of every call that names a kernel. */
int kdart__kernel_spec(kdart_rt *rt, const char *kernel, const char *spec, const kdart__kernel **k, int *vals);
/* Mixed-radix index of vals (first parameter slowest), and back. */
int kdart__spec_index(const kdart__kernel *k, const int *vals);
void kdart__spec_values(const kdart__kernel *k, int index, int *vals);
/* Canonical "a=x,b=y" text; returns length or KDART_EINVAL if n too small. */
int kdart__spec_format(const kdart__kernel *k, const int *vals, char *buf, size_t n);
/* "kdart_bwd_intra<kdart::bf16, false, false, 128>" */
int kdart__spec_entry(const kdart__kernel *k, const int *vals, char *buf, size_t n);
/* bwd_dhu's V tile width BV (grid.x = V / BV): the index of a width in the
 * BV parameter (-1 if it is not one), and the width kdart launches for
 * B x HV scans of V columns at head dim K on a device with sms SMs. */
int kdart__dhu_bv_index(int bv);
int kdart__dhu_pick_bv(long long B, long long HV, long long V, int K, int sms);
/* 1 where bwd_dhu runs its V split at BV 64: packed sequences (cu_seqlens given) on N x HV scans of
 * V columns at head dim K, at most four waves of 64-column scans on sms SMs */
int kdart__dhu_v_split(int packed, long long N, long long HV, long long V, int64_t K, int sms);
/* K tile of a head dim (64, 128 or 256; -1 outside 1..256), the K parameter's
 * value index of a tile. */
int kdart__k_tile(int64_t K);
int kdart__k_index(int k_tile);
/* The K tile of KDART__K_PARAM's value index i (0, 1, 2: 64, 128, 256): kdart__k_index's inverse. */
int kdart__k_tile_at(int i);
/* bwd_dhu's K tiles: those and 192 (head dims 129..192) */
int kdart__dhu_k_tile(int64_t K);
int kdart__dhu_k_index(int k_tile);
/* 1 if spec index `spec` of kernel is a varlen=1 specialization (its units
 * take the context's device status word, see kdart__status_word). */
int kdart__spec_is_varlen(int kernel, int spec);
/* 1 if spec is in the default prewarm set (kdart_spec_prewarmed) */
int kdart__spec_prewarmed(int kernel, int spec);
/* Checks "sm_<digits>[a|f]", sm_90 or newer, without asking NVRTC (option
 * parsing); returns KDART_OK or KDART_EARCH. */
int kdart__arch_check(const char *arch);
/* kdart_arch_supported's body: kdart__arch_check and NVRTC's list. */
int kdart__arch_supported(const char *arch, char *msg, size_t n);

/* ---------------------------------------------------------------- source */

/* A file of kernel_src/ the unit includes, by name relative to kernel_dir. */
typedef struct kdart__file {
    char *name;
    char *text;
    size_t size;
    char sha256[65];
} kdart__file;

typedef struct kdart__sources {
    kdart__file *files; /* files[0] is the kernel's own source */
    int nfiles;
} kdart__sources;

/* File-system seam: reads a whole file.  Tests replace it to inject faults.
 * KDART_OK, KDART_ENOENT, KDART_ENOMEM, KDART_ESOURCE (not a regular file:
 * refused without reading or waiting) or KDART_EIO. */
typedef int (*kdart__read_file_fn)(const char *path, char **text, size_t *size);
extern kdart__read_file_fn kdart__read_file;
int kdart__read_file_default(const char *path, char **text, size_t *size);

/* The kernel directory of a handle opened with no kernel_dir and no
 * KDART_KERNEL_DIR: the source tree from kdart's build tree, else the
 * install's share/kdart/kernel_src found relative to the library's (or the
 * program's) own file (locate.c).  Allocated; NULL on OOM. */
char *kdart__default_kernel_dir(void);
/* 1 if path names a directory (stat follows links); locate.c. */
int kdart__is_dir(const char *path);

/* Loads the kernel's source and, transitively, every quoted #include.
 * Needs no lock (it reads only kernel_dir, fixed at open). */
int kdart__sources_load(kdart_rt *rt, const char *source, kdart__sources *out);
void kdart__sources_free(kdart__sources *s);

/* --------------------------------------------------------------- compile */

typedef struct kdart__compile_in {
    const char *tu;             /* generated translation unit */
    const kdart__sources *src;  /* headers handed to NVRTC by name */
    const char *entry;          /* name expression */
    const char *const *nvrtc_opts;
    int n_nvrtc_opts;
    const char *const *link_opts;
    int n_link_opts;
} kdart__compile_in;

typedef struct kdart__compile_out {
    unsigned char *cubin;
    size_t cubin_size;
    char *lowered;  /* mangled entry name */
    char *log;      /* NVRTC log, then nvJitLink info and error logs */
    char *report;   /* parsed ptxas report, "name=value\n" lines */
    double ms;
} kdart__compile_out;

/* Compiler seam: the whole NVRTC + nvJitLink step.  Returns KDART_OK,
 * KDART_ECOMPILE or KDART_ELINK (log says why) or KDART_ENOMEM. */
typedef int (*kdart__compile_fn)(void *user, const kdart__compile_in *in, kdart__compile_out *out);
int kdart__compile_nvrtc(void *user, const kdart__compile_in *in, kdart__compile_out *out);
void kdart__compile_out_free(kdart__compile_out *out);
/* Fills rt's NVRTC and nvJitLink versions. */
int kdart__toolchain_versions(kdart_rt *rt);
/* Compiler seam for the targets NVRTC knows: fills archs (up to max) with
 * the SM numbers nvrtcGetSupportedArchs lists (75, 80, ..., 120) and
 * returns how many, or a negative status.  Tests substitute it. */
typedef int (*kdart__archs_fn)(int *archs, int max);
extern kdart__archs_fn kdart__nvrtc_archs;
int kdart__nvrtc_archs_default(int *archs, int max);
/* NVRTC's build banner ("CL-36424714"), found by compiling an empty kernel
 * to PTX once.  Caller frees. */
int kdart__nvrtc_build_id(char **out);

/* ------------------------------------------------------------------ cuda */

typedef struct kdart__cuda kdart__cuda; /* driver entry points, see cuda.c */

/* Loads libcuda (once per process) and initializes it.  KDART_ENOCUDA if
 * libcuda is absent, KDART_ENODEVICE if it has no device. */
int kdart__cuda_get(kdart_rt *rt, const kdart__cuda **out);
/* Returns the current context, making device 0's primary context current
 * when the thread has none.  Fills the arch string of its device. */
int kdart__cuda_context(kdart_rt *rt, void **ctx, char arch[16]);
/* The same, also returning the context's device ordinal. */
int kdart__cuda_context_dev(kdart_rt *rt, void **ctx, char arch[16], int *dev);
/* The number of SMs of the current context's device (cached per thread). */
int kdart__cuda_sm_count(kdart_rt *rt, int *sms);

/* ------------------------------------------------------------------ units */

/* One compiled specialization known to this process. */
typedef struct kdart__unit {
    struct kdart__unit *next;
    char key[65];
    int kernel;          /* kdart__kernel_index */
    int spec;            /* spec index */
    char arch[16];
    unsigned char *cubin;
    size_t cubin_size;
    char *lowered;
    int threads, smem;   /* launch shape */
    void *library;       /* CUlibrary, once loaded */
    void *kernel_handle; /* CUkernel */
    /* Per-context function handles, filled once each. */
    _Atomic(void *) ctx[KDART__MAX_CTX];
    _Atomic(void *) fn[KDART__MAX_CTX];
} kdart__unit;

/* ------------------------------------------------------------ in flight */

/* Single flight (prepare.c): one record per key this handle is compiling
 * (or waiting for another process to compile).  Threads that miss the same
 * key wait on cond instead of compiling it again.  Guarded by rt->lock;
 * freed by whoever drops refs to 0. */
typedef struct kdart__flight {
    struct kdart__flight *next;
    char key[65];
    int done;            /* the owner finished: rc and msg are final */
    int rc;              /* the owner's status */
    char *msg;           /* the owner's error message, for waiters */
    int refs;            /* the owner and every waiter */
    int leased;          /* lease holds a lease of the writable cache */
    kdart__lease lease;  /* renewed by the heartbeat thread while leased */
    double renewed_ms;   /* kdart__now_ms() of the take or the last renewal */
    pthread_cond_t cond;
} kdart__flight;

#define KDART__LEASE_TTL_MS 60000     /* a lease not renewed for this long expires */
#define KDART__LEASE_RENEW_MS 5000    /* heartbeat period while compiling */
#define KDART__LEASE_WAIT_MS 600000   /* longest wait for another process (KDART_LEASE_WAIT_MS) */

typedef struct kdart__jobs kdart__jobs; /* jobs.c */

/* ------------------------------------------------------- remote prepare */

/* The remote-prepare hook: another process (the node's compile service)
 * compiles a key on this handle's behalf.  The core only calls it; a layer
 * above installs it on the handle (runtime/open.c installs the service
 * client's, runtime/service/client.c), so the core never names the service.
 * Called by the flight's owner (prepare.c, find_or_compile) after a miss in
 * every cache and BEFORE it takes the key's compile lease (the remote side
 * takes that lease in its own process; holding it here would make it wait
 * for us).  Called and returns with rt->lock held; it may release the lock
 * while it waits.
 *   KDART_OK: key is published (a cubin or a recorded compile failure) in
 *     rt's writable cache: the caller reads it from there.
 *   KDART_ENOENT: it could not help: the caller goes on as without a hook. */
typedef int (*kdart__remote_prepare_fn)(void *ctx, kdart_rt *rt, const char *kernel, const char *spec,
                                        const char *arch, uint32_t flags, const char *key);

/* --------------------------------------------------------------- handle */

struct kdart_rt {
    uint32_t magic;
    pthread_mutex_t lock;
    pthread_key_t err_key;   /* the calling thread's message buffer */
    pthread_mutex_t err_lock;
    struct kdart__errbuf *errbufs; /* every thread's buffer, freed by kdart_close */

    char *cache_path;       /* "" when none */
    char *kernel_dir;
    char *default_arch;
    int arch_from_env;      /* default_arch is KDART_ARCH's, maybe unusable (fixed at open) */
    int cuda_off_by_env;    /* KDART_OPEN_NO_CUDA came from KDART_DISABLE_CUDA=1 */
    char **ro_paths;
    size_t n_ro;
    kdart__store *rw;       /* NULL when the cache could not be opened */
    kdart__store **tiers;   /* lookup order: tiers[0] = rw, tiers[1..n_ro] the
                               read-only caches; NULL where unavailable */
    int64_t cache_max_bytes;
    int max_bytes_chosen;   /* an option or KDART_CACHE_MAX_BYTES set it: the cache file's does not */
    /* where each setting's value came from, for kdart_setting (static strings) */
    const char *from_cache_path, *from_kernel_dir, *from_arch, *from_max_bytes, *from_threads;
    char setting_buf[32], setting_buf2[16]; /* kdart_setting's numbers as text */
    int cache_warned;       /* a cache failure was logged at WARN (under lock) */
    int compile_threads;
    uint32_t flags;
    int fuse_post;         /* how much of the last step kdart_kda_chunk_bwd hands to wy_dqkg's launch where it
                               can: 2 (the default) all it can, 1 the gate's part, 0 nothing (KDART_FUSE_POST) */
    int fuse_u;            /* 1 (the default): kdart_kda_chunk_bwd's fwd_h makes u from v (KDART_FUSE_U) */
    int fuse_dav;          /* 1 (the default): kdart_kda_chunk_bwd runs fla's dAv inside bwd_dhu where the scan
                               can; 0: bwd_dav is a launch of its own on every grid (KDART_FUSE_DAV) */

    kdart_log_fn log;
    void *log_user;
    int log_level;

    int nvrtc_major, nvrtc_minor;
    unsigned jl_major, jl_minor;
    char *nvrtc_build;      /* lazily, under lock */

    kdart__compile_fn compile; /* seam: tests substitute a failing compiler */
    void *compile_user;

    int cuda_state;         /* 0 untried, 1 ok, <0 the failure status */
    const kdart__cuda *cu;
    kdart__unit *units;     /* every unit compiled or loaded, newest first */
    /* Units prepared for the current device's arch, by kernel and spec:
     * what the launch path reads. */
    _Atomic(kdart__unit *) slots[KDART__MAX_KERNELS][KDART__MAX_SPECS];
    /* The device status word (one int) of each context that a varlen unit was
     * bound in, allocated then under rt->lock (cuda.c); read lock-free. */
    _Atomic(void *) status_ctx[KDART__MAX_CTX];
    _Atomic(unsigned long long) status_ptr[KDART__MAX_CTX];

    /* Concurrency (prepare.c, jobs.c); zero-initialized by kdart_open's
     * calloc, set up lazily under rt->lock. */
    kdart__flight *flights;     /* keys being compiled by this handle */
    int lease_init;             /* lease_* below resolved */
    int64_t lease_ttl_ms;       /* tests may set these before the first prepare */
    int64_t lease_renew_ms;
    int64_t lease_wait_ms;      /* KDART_LEASE_WAIT_MS, else KDART__LEASE_WAIT_MS */
    int heartbeat_started;
    pthread_t heartbeat;
    pthread_cond_t heartbeat_cond; /* CLOCK_MONOTONIC; initialized with the thread */
    _Atomic int stopping;       /* kdart_close is shutting the threads down */
    _Atomic long compiles;      /* compiles this handle ran (statistics, tests) */
    kdart__jobs *jobs;          /* background compiles; NULL until the first */

    kdart__remote_prepare_fn remote_prepare; /* NULL: none; set once, before the handle is shared */
    void *remote_ctx;
};

/* kdart_open's body (runtime.c): the handle, with no remote-prepare hook;
 * kdart_open (runtime/open.c) adds the layers above the core. */
int kdart__open(kdart_rt **out, const kdart_options *opts);

/* A numeric KDART_* variable (env.c): 1 and *out when set and valid
 * (a count min..max, or with bytes a size as kdart_parse_bytes reads it,
 * at least min and at most max; a switch is 0..1); 0 when unset, or when
 * invalid, which is logged as a warning naming the variable, its value and
 * what is allowed.  Honors KDART_OPEN_NO_ENV. */
int kdart__env_number(const kdart_rt *rt, const char *name, int bytes, int64_t min, int64_t max, int64_t *out);

int kdart__err(const kdart_rt *rt, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void kdart__err_clear(const kdart_rt *rt);
/* Frees every thread's message buffer (kdart_close). */
void kdart__errbufs_free(kdart_rt *rt);
void kdart__log(const kdart_rt *rt, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Validates the handle at the API boundary. */
#define KDART__CHECK_RT(rt) \
    do { \
        if (!(rt) || (rt)->magic != KDART__MAGIC) return KDART_EMISUSE; \
    } while (0)

/* kdart_prepare's body for callers that already parsed the spec; returns
 * the unit (loaded into the current context unless no_load). */
int kdart__prepare(kdart_rt *rt, int kernel, const int *vals, const char *arch, uint32_t flags,
                   kdart_prepared *info, kdart__unit **unit);
/* Stops the handle's threads (compile workers, kdart's own uv loop, the
 * lease heartbeat), cancelling queued jobs.  First thing kdart_close does. */
/* The byte budget when no option or variable chose one: the cache file's
 * kept limit (kept != 0; -1 is none), else 2 GiB; applied to the store.
 * Under the handle's lock, or before the handle is shared. */
void kdart__cache_limit_adopt(kdart_rt *rt, int64_t kept);
void kdart__threads_stop(kdart_rt *rt);
/* Heartbeat (prepare.c): stops and joins the lease heartbeat thread. */
void kdart__heartbeat_stop(kdart_rt *rt);
/* The CUfunction of a loaded unit in the current context, resolved once. */
int kdart__unit_function(kdart_rt *rt, kdart__unit *u, void *ctx, void **fn);
void kdart__unit_unload(kdart_rt *rt, kdart__unit *u);
/* The device status word of ctx (NULL if no varlen unit was bound there);
 * lock-free.  And freeing every context's word (kdart_close). */
int *kdart__status_word(kdart_rt *rt, void *ctx);
void kdart__status_free(kdart_rt *rt);
/* Copies n bytes of device memory to the host, synchronously (KDART_CHECK). */
int kdart__copy_to_host(kdart_rt *rt, void *dst, const void *src, size_t n);
/* Sets n 32-bit words at dst to value, on stream (a memset node under capture). */
int kdart__memset32_async(kdart_rt *rt, void *dst, unsigned value, size_t n, void *stream);
/* Launches through the driver (grid, block, dyn smem, stream, params). */
int kdart__launch(kdart_rt *rt, void *fn, unsigned gx, unsigned gy, unsigned gz, int threads,
                  int smem, void *stream, void *params);
/* Encodes a TMA tensor map (bf16 or fp16, rank 2 or 3, 128-byte swizzle). */
int kdart__tmap(kdart_rt *rt, void *map, int fp16, const void *base, int rank, const uint64_t *dims,
                const uint64_t *strides, const uint32_t *box);

#endif /* KDART_RT_H */
