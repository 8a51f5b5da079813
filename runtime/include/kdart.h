/*
 * kdart.h: the one header users of kdart include.
 *
 * kdart is a runtime JIT compiler service for the backward pass of KDA (Kimi
 * Delta Attention).  It reads CUDA C++ kernel sources at run time,
 * specializes them with NVRTC, links them with nvJitLink into cubins, keeps
 * every cubin in an SQLite compile cache with the full manifest of what went
 * into it, and launches them through the CUDA Driver API.
 *
 * Contract, in brief:
 *   - Every function returns a status: KDART_OK (0) or a negative KDART_E*
 *     code from the one table below.  kdart_strerror() names the code; the
 *     detailed message of the last failure (NVRTC log excerpt, CUDA error
 *     name, SQLite message, which argument was wrong) is kept on the handle
 *     and read with kdart_last_error().
 *   - The library never exits, aborts or prints.  It reports through the log
 *     callback given in kdart_options, and only there.
 *   - libcuda is loaded with dlopen on first use, so compiling, prewarming
 *     and inspecting the cache work on machines with no GPU or driver.
 *   - Codes are stable: a code is never renumbered or reused.
 *
 * Threading: a kdart_rt may be used from any number of threads at once; each
 * thread's last error message is kept separately (kdart_last_error returns
 * the calling thread's).  Preparing a specialization takes an internal lock;
 * launching one that is prepared takes none.
 */
#ifndef KDART_H
#define KDART_H

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(KDART_BUILDING) && defined(__GNUC__)
#define KDART_EXTERN __attribute__((visibility("default")))
#else
#define KDART_EXTERN
#endif

#define KDART_VERSION_MAJOR 0
#define KDART_VERSION_MINOR 1
#define KDART_VERSION_PATCH 0
#define KDART_VERSION_HEX \
    ((KDART_VERSION_MAJOR << 16) | (KDART_VERSION_MINOR << 8) | KDART_VERSION_PATCH)

/* ---------------------------------------------------------------- errors */

/* XX(NAME, value, message).  Never renumber or reuse a value. */
#define KDART_ERRNO_MAP(XX)                                                      \
    XX(OK, 0, "success")                                                         \
    XX(EINVAL, -1, "invalid argument")                                           \
    XX(ENOMEM, -2, "out of memory")                                              \
    XX(EIO, -3, "file system error")                                             \
    XX(ENOENT, -4, "not found")                                                  \
    XX(ECOMPILE, -5, "kernel compilation failed")                                \
    XX(ELINK, -6, "kernel link failed")                                          \
    XX(ECACHE, -7, "compile cache error")                                        \
    XX(ECORRUPT, -8, "compile cache entry is damaged")                           \
    XX(ENOCUDA, -9, "CUDA driver not available")                                 \
    XX(ECUDA, -10, "CUDA driver call failed")                                    \
    XX(EKERNEL, -11, "unknown kernel")                                           \
    XX(ESPEC, -12, "unsupported specialization")                                 \
    XX(EARCH, -13, "unsupported or malformed target architecture")               \
    XX(ESOURCE, -14, "kernel source missing or unreadable")                      \
    XX(EAMBIGUOUS, -15, "key prefix matches more than one entry")                \
    XX(EAGAIN, -16, "resource busy, try again")                                  \
    XX(EMISUSE, -17, "library misuse")                                           \
    XX(ENULL, -18, "null pointer argument")                                      \
    XX(EDTYPE, -19, "tensor has the wrong dtype")                                \
    XX(ESHAPE, -20, "tensor shape mismatch")                                     \
    XX(ESTRIDE, -21, "tensor strides not supported")                             \
    XX(EALIGN, -22, "tensor data misaligned")                                    \
    XX(EDEVICE, -23, "tensor on the wrong device")                               \
    XX(EUNSUPPORTED, -24, "shape or option not supported")                       \
    XX(ENODEVICE, -25, "no CUDA device or context")                              \
    XX(ECANCELED, -26, "operation canceled")                                     \
    XX(ETIMEDOUT, -27, "timed out")

typedef enum kdart_status {
#define KDART__XX(name, value, msg) KDART_##name = value,
    KDART_ERRNO_MAP(KDART__XX)
#undef KDART__XX
    KDART__STATUS_MIN = -28
} kdart_status;

/* Short message for a status code; never NULL ("unknown status" if foreign). */
KDART_EXTERN const char *kdart_strerror(int status);
/* The code's name without prefix ("EINVAL"); never NULL. */
KDART_EXTERN const char *kdart_errname(int status);
KDART_EXTERN const char *kdart_version(void);

/* ----------------------------------------------------------- the handle */

typedef struct kdart_rt kdart_rt;

enum kdart_log_level { KDART_LOG_ERROR = 0, KDART_LOG_WARN = 1, KDART_LOG_INFO = 2, KDART_LOG_DEBUG = 3 };

/* Called from whichever thread produced the message; must not call back into
 * the same kdart_rt's prepare path. */
typedef void (*kdart_log_fn)(void *user, int level, const char *message);

typedef struct kdart_options {
    uint32_t struct_size;          /* sizeof(kdart_options): set by kdart_options_init */
    const char *cache_path;        /* writable cache file; NULL: KDART_CACHE_DIR/kdart.db,
                                      else $XDG_CACHE_HOME/kdart/kdart.db, else
                                      ~/.cache/kdart/kdart.db; "" or ":memory:": none */
    const char *const *ro_cache_paths; /* read-only caches searched after the writable one */
    size_t n_ro_cache_paths;
    const char *kernel_dir;        /* NULL: KDART_KERNEL_DIR, else the installed kernel_src */
    const char *arch;              /* default target, "sm_90a"; NULL: KDART_ARCH, else the
                                      current device's, else sm_100a */
    kdart_log_fn log;              /* NULL: silent, unless KDART_LOG=stderr */
    void *log_user;
    int log_level;                 /* most verbose level passed to log; KDART_LOG_WARN default */
    int compile_threads;           /* 0: number of CPUs */
    int64_t cache_max_bytes;       /* 0: KDART_CACHE_MAX_BYTES, else 2 GiB; <0: unlimited */
    uint32_t flags;                /* KDART_OPEN_* */
} kdart_options;

#define KDART_OPEN_NO_ENV 0x1u     /* ignore every KDART_* environment variable */
#define KDART_OPEN_NO_CUDA 0x2u    /* never load libcuda (compile and inspect only) */

KDART_EXTERN void kdart_options_init(kdart_options *opts);

/* Opens a runtime.  opts may be NULL for defaults.  On failure *out is NULL
 * and the status says why; a cache that cannot be opened is not a failure
 * (the runtime compiles in memory and warns once through the log). */
KDART_EXTERN int kdart_open(kdart_rt **out, const kdart_options *opts);
/* Closes a runtime; NULL is a no-op.  No other call may be in flight. */
KDART_EXTERN void kdart_close(kdart_rt *rt);
/* The calling thread's last error message on this handle; "" when none.
 * It starts with the status name and a colon ("ESHAPE: tensor dAkk ..."). */
KDART_EXTERN const char *kdart_last_error(const kdart_rt *rt);

/* What the runtime resolved at open time (paths, arch, versions). */
typedef struct kdart_rt_info {
    const char *cache_path;     /* "" when running without a disk cache */
    int cache_writable;
    const char *kernel_dir;
    const char *default_arch;
    int nvrtc_major, nvrtc_minor;
    const char *nvrtc_build;    /* "CL-36424714" */
    int nvjitlink_major, nvjitlink_minor;
    int cuda_available;         /* 1 if libcuda loaded and a device exists */
    int64_t cache_max_bytes;
} kdart_rt_info;
KDART_EXTERN int kdart_info(kdart_rt *rt, kdart_rt_info *info);

/* ------------------------------------------------------------ registry */

/* Kernels and their specialization parameters.  A spec string names values
 * as "name=value" pairs separated by commas, e.g.
 * "io=bf16,fold_dg=1,emit_bf16=0,K=128"; omitted parameters take their
 * defaults; kdart_spec_canonical rewrites a spec in canonical form. */
KDART_EXTERN int kdart_kernel_count(void);
KDART_EXTERN const char *kdart_kernel_name(int index);       /* NULL if out of range */
KDART_EXTERN const char *kdart_kernel_params(const char *kernel); /* "io={bf16,fp16} K={64,128}" */
/* Number of specializations (the product of every parameter's values). */
KDART_EXTERN int kdart_spec_count(const char *kernel);
/* The index-th specialization in canonical form.  Returns the string length
 * or a negative status; writes at most n bytes including the terminator. */
KDART_EXTERN int kdart_spec_at(const char *kernel, int index, char *buf, size_t n);
KDART_EXTERN int kdart_spec_canonical(const char *kernel, const char *spec, char *buf, size_t n);

/* ----------------------------------------------------------- preparing */

typedef struct kdart_prepared {
    char key[65];          /* SHA-256 of the manifest, hex */
    int source;            /* where the cubin came from: KDART_FROM_* */
    double compile_ms;     /* this call's compile time (0 on a hit) */
    double lookup_ms;      /* cache lookup time */
    double load_ms;        /* module load time (0 when not loaded) */
    int loaded;            /* 1 if loaded into the current CUDA context */
} kdart_prepared;

enum { KDART_FROM_MEMORY = 0, KDART_FROM_CACHE = 1, KDART_FROM_RO_CACHE = 2, KDART_FROM_COMPILE = 3 };

#define KDART_PREPARE_NO_LOAD 0x1u   /* compile/cache only, do not load into CUDA */
#define KDART_PREPARE_FORCE 0x2u     /* recompile even on a hit, and replace the entry */

/* Compiles (or finds in the cache) one specialization for arch (NULL: the
 * runtime's default) and, when arch matches the current device and CUDA is
 * available, loads it into the current context.  out may be NULL. */
KDART_EXTERN int kdart_prepare(kdart_rt *rt, const char *kernel, const char *spec,
                               const char *arch, uint32_t flags, kdart_prepared *out);

/* ---------------------------------------------------------------- cache */

typedef struct kdart_entry {
    char key[65];
    const char *kernel, *spec, *arch;
    int failed;                 /* 1: a recorded compile failure (log kept) */
    int tier;                   /* 0: writable cache, 1..: read-only caches in order */
    const char *manifest;       /* "name=value" lines, sorted: everything in the key */
    const char *report;         /* "name=value" lines: registers, spills, smem, ... */
    const char *log;            /* NVRTC and nvJitLink logs */
    const void *cubin;
    size_t cubin_size;
    const char *cubin_sha256;
    double compile_ms;
    int64_t created, last_used, hits; /* unix seconds; hit count */
} kdart_entry;

/* Called once per entry; return nonzero to stop. The entry is valid only
 * during the call (cubin, log and manifest are not filled in by list). */
typedef int (*kdart_entry_fn)(void *user, const kdart_entry *entry);
KDART_EXTERN int kdart_cache_list(kdart_rt *rt, kdart_entry_fn fn, void *user);
/* Looks an entry up by key or unique key prefix (KDART_EAMBIGUOUS otherwise)
 * and fills *out; free with kdart_entry_free. */
KDART_EXTERN int kdart_cache_get(kdart_rt *rt, const char *key_prefix, kdart_entry **out);
KDART_EXTERN void kdart_entry_free(kdart_entry *entry);

typedef struct kdart_cache_stats {
    int64_t entries, failed_entries, quarantined, bytes, hits, max_bytes;
    double compile_ms_total;
} kdart_cache_stats;
KDART_EXTERN int kdart_cache_stats_get(kdart_rt *rt, kdart_cache_stats *out);
/* Checks SQLite integrity and every blob's checksum; damaged rows are
 * quarantined.  *damaged counts them.  KDART_ECORRUPT if any was found. */
KDART_EXTERN int kdart_cache_verify(kdart_rt *rt, int64_t *checked, int64_t *damaged);
/* Evicts least recently used entries until the cache holds at most
 * max_bytes of cubins. */
KDART_EXTERN int kdart_cache_gc(kdart_rt *rt, int64_t max_bytes, int64_t *evicted, int64_t *freed_bytes);
/* Explains what key (kernel, spec, arch) would have and how the nearest
 * cached entries differ.  *text is allocated with malloc; free() it. */
KDART_EXTERN int kdart_why(kdart_rt *rt, const char *kernel, const char *spec, const char *arch,
                           char **text);

/* ----------------------------------------------------------- operations */

/* Tensors are DLPack DLTensors: data, device, dtype, shape and strides
 * (strides NULL means contiguous).  The caller owns every buffer, outputs
 * included.  Layouts are contiguous and as in the spec (shapes below).
 *
 * Before any launch every argument is validated: null or misaligned (16
 * bytes) pointers, dtypes, shapes against each other, strides, devices
 * (all on the same CUDA device), K in {64, 128}, T a multiple of 64, HV a
 * multiple of H.  A failure returns its own status with a message naming
 * the argument, and launches nothing and writes nothing.
 *
 * The launch path allocates nothing and synchronizes nothing, so it may be
 * captured in a CUDA graph.  The specialization is prepared on first use
 * (compiled or loaded from the cache, in the calling thread) unless
 * kdart_prepare was called for it ahead.  stream is a CUstream (NULL: the
 * legacy default stream of the current context). */

typedef struct kdart_bwd_intra_args {
    uint32_t struct_size;      /* sizeof(kdart_bwd_intra_args) */
    const DLTensor *q, *k;     /* [B,T,H,K]   bf16 or fp16 (the io dtype) */
    const DLTensor *g;         /* [B,T,HV,K]  fp32, chunk-local cumsum, log2 units */
    const DLTensor *beta;      /* [B,T,HV]    io dtype */
    const DLTensor *dAqk;      /* [B,T,HV,64] fp32 */
    const DLTensor *dAkk;      /* [B,T,HV,64] fp32 */
    const DLTensor *dq_in, *dk_in, *dg_in; /* [B,T,HV,K] fp32 */
    const DLTensor *db_in;     /* [B,T,HV]    fp32 */
    const DLTensor *dq, *dk;   /* out [B,T,HV,K] fp32, or io dtype with emit_bf16 */
    const DLTensor *dg;        /* out [B,T,HV,K] fp32 */
    const DLTensor *db;        /* out [B,T,HV]   fp32 */
    int fold_dg;               /* dg returned reverse-cumsummed within each chunk */
    int emit_bf16;             /* dq, dk written in the io dtype (HV == H only) */
} kdart_bwd_intra_args;

typedef struct kdart_bwd_dhu_args {
    uint32_t struct_size;      /* sizeof(kdart_bwd_dhu_args) */
    const DLTensor *qg, *kg, *w; /* [B,T,HV,K] io dtype */
    const DLTensor *g;         /* [B,T,HV,K] fp32 (row 63 of each chunk is read) */
    const DLTensor *d_o;       /* [B,T,HV,V] io dtype ("do") */
    const DLTensor *dv;        /* [B,T,HV,V] io dtype */
    const DLTensor *dht;       /* [B,HV,K,V] fp32, or NULL: start from zero */
    const DLTensor *dh;        /* out [B,NT,HV,K,V] io dtype, NT = T/64 */
    const DLTensor *dv2;       /* out [B,T,HV,V] io dtype */
    const DLTensor *dh0;       /* out [B,HV,K,V] fp32, or NULL: not produced */
    float scale;
} kdart_bwd_dhu_args;

KDART_EXTERN int kdart_kda_bwd_intra(kdart_rt *rt, const kdart_bwd_intra_args *args, void *stream);
KDART_EXTERN int kdart_kda_bwd_dhu(kdart_rt *rt, const kdart_bwd_dhu_args *args, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* KDART_H */
