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
 *   - The library never exits or aborts.  It reports through the log
 *     callback given in kdart_options; without one, warnings and errors go
 *     to stderr ("kdart: warning: ...", once each where they could repeat),
 *     so that a refused setting or a fallback is never silent
 *     (KDART_LOG=off: nothing; KDART_LOG=info or debug: more).
 *   - libcuda is loaded with dlopen on first use, so compiling, prewarming
 *     and inspecting the cache work on machines with no GPU or driver.
 *   - Codes are stable: a code is never renumbered or reused.
 *
 * Threading: a kdart_rt may be used from any number of threads at once
 * (every call but kdart_close); each thread's last error message is kept
 * separately (kdart_last_error returns the calling thread's).  Preparing
 * takes an internal lock, released while compiling and while waiting for
 * another thread's or process's compile of the same key; launching a
 * prepared specialization takes none.  N threads (or processes sharing
 * one cache) preparing the same uncompiled specialization cause one
 * compile; the others wait for it.  Each declaration below says what it
 * adds to this.  The handle starts threads of its own only when asked to:
 * compile workers and a uv loop thread (kdart_prepare_async) and a lease
 * heartbeat (while a compile shared with other processes runs).
 */
#ifndef KDART_H
#define KDART_H

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

/* libuv's loop type, declared here so that only callers of
 * kdart_prepare_async need libuv's headers (uv_loop_t is this struct). */
struct uv_loop_s;

#ifdef __cplusplus
extern "C" {
#endif

#if defined(KDART_BUILDING) && defined(__GNUC__)
#define KDART_EXTERN __attribute__((visibility("default")))
#else
#define KDART_EXTERN
#endif

/* The one place the version is written: CMake reads these four lines
 * (project version, SOVERSION, kdart.pc, kdartConfigVersion.cmake) and the
 * Python package reads KDART_VERSION_STRING; CMake refuses to configure
 * when the string and the numbers disagree. */
#define KDART_VERSION_MAJOR 0
#define KDART_VERSION_MINOR 2
#define KDART_VERSION_PATCH 0
#define KDART_VERSION_STRING "0.2.0"
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

/* Short message for a status code; never NULL ("unknown status" if foreign).
 * These three read constant tables: any thread, no handle needed. */
KDART_EXTERN const char *kdart_strerror(int status);
/* The code's name without prefix ("EINVAL"); never NULL. */
KDART_EXTERN const char *kdart_errname(int status);
KDART_EXTERN const char *kdart_version(void);

/* Parses a byte size as KDART_CACHE_MAX_BYTES and `kdart gc --max-bytes`
 * read it: decimal digits, up to six decimals before a suffix, and an
 * optional binary suffix K, M, G or T (1024-based, any case, optionally
 * followed by "iB" or "B": 512K, 1.5G, 2GiB, 100B).  Nothing else: no
 * sign, space, exponent, "inf" or "nan".  KDART_OK and *out, or
 * KDART_EINVAL when the text is not such a size or exceeds INT64_MAX
 * bytes (*out untouched); KDART_ENULL for NULL.  Any thread. */
KDART_EXTERN int kdart_parse_bytes(const char *text, int64_t *out);

/* ----------------------------------------------------------- the handle */

typedef struct kdart_rt kdart_rt;

enum kdart_log_level { KDART_LOG_ERROR = 0, KDART_LOG_WARN = 1, KDART_LOG_INFO = 2, KDART_LOG_DEBUG = 3 };

/* Called from whichever thread produced the message (a caller's thread, a
 * compile worker, the lease heartbeat), possibly from several at once, and
 * sometimes with the handle's internal lock held: it must be thread-safe
 * and must not call any function on the same kdart_rt. */
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
                                      current device's, else sm_100a.  A malformed arch
                                      here fails kdart_open (EARCH); a bad KDART_ARCH does
                                      not: it is warned about, and prepares for the
                                      default arch fail with EARCH naming it */
    kdart_log_fn log;              /* NULL: warnings and errors to stderr (KDART_LOG: off,
                                      stderr or warn, info, debug) */
    void *log_user;
    int log_level;                 /* most verbose level passed to log; KDART_LOG_WARN default */
    int compile_threads;           /* compile workers of kdart_prepare_async, started
                                      on demand; 0: number of CPUs */
    int64_t cache_max_bytes;       /* 0: KDART_CACHE_MAX_BYTES ("0" there: unlimited; a value
                                      kdart_parse_bytes refuses is warned about and
                                      ignored), else 2 GiB; <0: unlimited */
    uint32_t flags;                /* KDART_OPEN_* */
} kdart_options;

#define KDART_OPEN_NO_ENV 0x1u     /* ignore every KDART_* environment variable */
#define KDART_OPEN_NO_CUDA 0x2u    /* never load libcuda (compile and inspect only) */
#define KDART_OPEN_CHECK 0x4u      /* debugging: before each variable-length launch, copy
                                      cu_seqlens to the host (synchronously) and validate it
                                      (also KDART_CHECK=1); such launches cannot be captured */
#define KDART_OPEN_NO_CREATE 0x8u  /* use the writable cache only if its file exists: never create it
                                      or its directory (tools that only read; the runtime then
                                      compiles in memory, without a warning) */

/* Fills defaults; touches only *opts (any thread). */
KDART_EXTERN void kdart_options_init(kdart_options *opts);

/* Opens a runtime.  opts may be NULL for defaults.  On failure *out is NULL
 * and the status says why; a cache that cannot be opened is not a failure
 * (the runtime compiles in memory and warns once through the log).  Any
 * thread; handles are independent (several may share one cache file, in
 * one process or many). */
KDART_EXTERN int kdart_open(kdart_rt **out, const kdart_options *opts);
/* Closes a runtime; NULL is a no-op.  No other call on the handle may be in
 * flight or start during or after it (the caller ensures this).  It stops
 * the handle's threads: queued background jobs are cancelled, running ones
 * are waited for (a compile cannot be interrupted), then the workers, kdart's
 * own uv loop and the heartbeat are joined; see kdart_prepare_async for
 * what happens to their callbacks.  Never call it from a callback running
 * on kdart's own loop (it would wait for itself). */
KDART_EXTERN void kdart_close(kdart_rt *rt);
/* The calling thread's last error message on this handle; "" when none.
 * It starts with the status name and a colon ("ESHAPE: tensor dAkk ...").
 * Any thread; valid until that thread's next call on the handle. */
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
/* Any thread.  The strings point into the handle (valid until kdart_close).
 * May load libcuda and make device 0's primary context current on the
 * calling thread when it has none, as a launch would. */
KDART_EXTERN int kdart_info(kdart_rt *rt, kdart_rt_info *info);

/* ------------------------------------------------------------ registry */

/* Kernels and their specialization parameters.  A spec string names values
 * as "name=value" pairs separated by commas, e.g.
 * "io=bf16,fold_dg=1,emit_bf16=0,K=128"; omitted parameters take their
 * defaults; kdart_spec_canonical rewrites a spec in canonical form.
 * These read a constant table: any thread, no handle needed. */
KDART_EXTERN int kdart_kernel_count(void);
KDART_EXTERN const char *kdart_kernel_name(int index);       /* NULL if out of range */
KDART_EXTERN const char *kdart_kernel_params(const char *kernel); /* "io={bf16,fp16} K={64,128}" */
/* Number of specializations (the product of every parameter's values). */
KDART_EXTERN int kdart_spec_count(const char *kernel);
/* The index-th specialization in canonical form.  Returns the string length
 * or a negative status; writes at most n bytes including the terminator. */
KDART_EXTERN int kdart_spec_at(const char *kernel, int index, char *buf, size_t n);
KDART_EXTERN int kdart_spec_canonical(const char *kernel, const char *spec, char *buf, size_t n);
/* 1 if the index-th specialization is in the default prewarm set ('kdart
 * prewarm' without --all, and the compile service's prewarm without a spec),
 * 0 if it compiles on first use only, a negative status for an unknown
 * kernel (EKERNEL) or index (EINVAL).  The set: every native specialization
 * (tail=0; at bwd_dhu's K=192, bf16 only; bwd_intra's beta=f32 with
 * fold_dg=1, emit_bf16=0 only) and the tail ones most calls need (bf16
 * bwd_intra with fold_dg=1, emit_bf16=0, varlen=1; bf16 bwd_dhu at K=128;
 * wy_dqkg's V-first state and tails in bf16 with fp32 beta; bwd_dav's in
 * bf16; fwd_h's native ones and its tails at K=128, in bf16);
 * never the stubs that the runtime does not launch (bwd_intra tail=1 with
 * varlen=0, wy_dqkg intra=1 with dAqk=0 and post=1 without intra or with
 * tail=1).  The rest compile on first use, 0.5-1.5 s each. */
KDART_EXTERN int kdart_spec_prewarmed(const char *kernel, int index);

/* Whether kdart can compile for arch ("sm_90a"): "sm_" and 2 or 3 digits
 * with an optional "a" or "f" suffix, sm_90 or newer (the kernels use
 * Hopper instructions; older ones are refused with "needs sm_90 or
 * newer"), and a target the NVRTC in use knows (nvrtcGetSupportedArchs,
 * asked once per process).  KDART_OK, or KDART_EARCH with a one-line
 * reason in msg (when msg is not NULL).  kdart_prepare, kdart_why,
 * kdart_prepare_async and the compile service refuse such an arch before
 * compiling, so nothing is recorded in the cache.  Any thread. */
KDART_EXTERN int kdart_arch_supported(const char *arch, char *msg, size_t n);

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
#define KDART_PREPARE_NO_WAIT 0x4u   /* KDART_EAGAIN instead of waiting when another thread
                                        or process is compiling this specialization */

/* Compiles (or finds in the cache) one specialization for arch (NULL: the
 * runtime's default) and, when arch matches the current device and CUDA is
 * available, loads it into the current context.  out may be NULL.
 * Any thread, concurrently: different specializations compile in parallel;
 * threads asking for one that is being compiled wait for that compile (or
 * return KDART_EAGAIN with KDART_PREPARE_NO_WAIT), and so do processes
 * sharing the writable cache (a lease row in the cache, renewed while the
 * compile runs; a dead compiler blocks nobody past the lease's expiry,
 * 60 s; the longest wait is KDART_LEASE_WAIT_MS, default 600000, after
 * which the waiter compiles itself).  Loading uses the calling thread's
 * current CUDA context (device 0's primary context if it has none). */
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
 * during the call (cubin, log and manifest are not filled in by list).
 * The cache calls below may be made from any thread; they hold the handle's
 * lock for their duration (so they wait for, and delay, other threads'
 * cache lookups, never their compiles).  fn is called with that lock held:
 * it must not call functions on the same handle. */
typedef int (*kdart_entry_fn)(void *user, const kdart_entry *entry);
KDART_EXTERN int kdart_cache_list(kdart_rt *rt, kdart_entry_fn fn, void *user);
/* Looks an entry up by key or unique key prefix (KDART_EAMBIGUOUS otherwise)
 * and fills *out; free with kdart_entry_free. */
KDART_EXTERN int kdart_cache_get(kdart_rt *rt, const char *key_prefix, kdart_entry **out);
/* Frees an entry of kdart_cache_get; any thread, handle not needed. */
KDART_EXTERN void kdart_entry_free(kdart_entry *entry);

typedef struct kdart_cache_stats {
    int64_t entries, failed_entries, quarantined, bytes, hits, max_bytes;
    double compile_ms_total;
    int64_t misses;             /* lookups that found no entry in any cache (then compiled by
                                   this process, the compile service or another process
                                   this one waited for), counted in the writable cache file
                                   over its life; -1 if unreadable */
} kdart_cache_stats;
KDART_EXTERN int kdart_cache_stats_get(kdart_rt *rt, kdart_cache_stats *out);
/* Checks SQLite integrity and every blob's checksum; damaged rows are
 * quarantined.  Damaged indexes are rebuilt, and damage in the file's
 * pages that REINDEX cannot repair is healed in place: every entry that
 * can still be read (from every page of the file, not only down the
 * damaged b-tree) is kept, the rest is lost, and a copy of the damaged
 * file is kept beside it.  A file too damaged to open at all is healed so
 * by kdart_open, and the next verify reports that.  *checked counts the
 * entries found, *damaged those quarantined or lost.  KDART_ECORRUPT if
 * any damage was found (kdart_last_error says what and what was done);
 * the next call finds the cache clean.  A cache operation that meets such
 * damage leaves a note beside the file, and the next kdart_open heals it
 * the same way. */
KDART_EXTERN int kdart_cache_verify(kdart_rt *rt, int64_t *checked, int64_t *damaged);
/* Evicts least recently used entries until the cache holds at most
 * max_bytes of cubins. */
KDART_EXTERN int kdart_cache_gc(kdart_rt *rt, int64_t max_bytes, int64_t *evicted, int64_t *freed_bytes);
/* Evicts the entries not used for at least `seconds` (recorded failures
 * too): ccache's --evict-older-than. */
KDART_EXTERN int kdart_cache_gc_age(kdart_rt *rt, int64_t seconds, int64_t *evicted, int64_t *freed_bytes);
/* Keeps max_bytes in the writable cache file as its own size limit: every
 * handle that opens it without kdart_options.cache_max_bytes or
 * KDART_CACHE_MAX_BYTES then keeps its cubins under it (-1: no limit; 0:
 * forget it, back to the 2 GiB default).  This handle's limit changes too,
 * unless an option or the variable set it.  Evicts nothing by itself
 * (kdart_cache_gc does). */
KDART_EXTERN int kdart_cache_set_max_bytes(kdart_rt *rt, int64_t max_bytes);
/* Zeroes the writable cache's statistics: every entry's hit count and the
 * miss count (kdart_cache_stats_get's hits and misses). */
KDART_EXTERN int kdart_cache_zero_stats(kdart_rt *rt);
/* The handle's settings, one per index from 0: *name ("cache_path",
 * "kernel_dir", "default_arch", "cache_max_bytes", "compile_threads"),
 * *value as text, and *origin, where the value came from
 * ("kdart_options.cache_path", "KDART_CACHE_DIR", "the cache file", "the
 * local GPU", "default (...)").  KDART_EINVAL past the last.  The strings
 * stay valid until kdart_close, or until the setting changes. */
KDART_EXTERN int kdart_setting(kdart_rt *rt, int index, const char **name, const char **value,
                               const char **origin);
/* Removes the writable cache's entry whose key starts with key_prefix (a
 * unique prefix, as for kdart_cache_get; entries of read-only caches are
 * never touched: KDART_ENOENT if it is only there).  removed_key (may be
 * NULL) receives the full key.  Units already loaded in this process stay
 * usable; the next process to need the key compiles it again. */
KDART_EXTERN int kdart_cache_remove(kdart_rt *rt, const char *key_prefix, char removed_key[65]);
/* Removes every entry (and every quarantined row) of the writable cache in
 * one transaction; *removed (may be NULL) counts the entries. */
KDART_EXTERN int kdart_cache_clear(kdart_rt *rt, int64_t *removed);
/* Explains what key (kernel, spec, arch) would have and how the nearest
 * cached entries differ.  *text is allocated with malloc; free() it. */
KDART_EXTERN int kdart_why(kdart_rt *rt, const char *kernel, const char *spec, const char *arch,
                           char **text);

/* ----------------------------------------------------------- operations */

/* Tensors are DLPack DLTensors: data, device, dtype, shape and strides
 * (strides NULL means contiguous).  The caller owns every buffer, outputs
 * included.  Layouts are contiguous, fla's (shapes below).
 *
 * Before any launch every argument is validated: null or misaligned (16
 * bytes) pointers, dtypes, shapes against each other, strides, devices
 * (all on the same CUDA device), K in 1..256 (and V in 1..512 for bwd_dhu,
 * wy_dqkg, recompute_wu, bwd_dav and fwd_h), HV a multiple of H.  Head dims: a kernel of K tile 64, 128 or
 * 256 serves every K up to its tile (1..64, 65..128, 129..256; bwd_dhu's tile
 * 192 takes 129..192) with masked loads and stores, and bwd_dhu and wy_dqkg
 * any V with the last V tile masked.  A failure returns its own status with
 * a message naming the argument, and launches nothing and writes nothing.
 *
 * Sequences (fla 0.6.0's contract).  Fixed length: B rows of any T >= 1
 * tokens; each row is ceil(T/64) chunks, the last partial when T % 64 != 0
 * (only its valid rows are read or written; bwd_dhu decays a partial chunk
 * by g at its last valid row).  Variable length: cu_seqlens [N+1] (int32 or
 * int64, in device memory, cu[0] = 0, non-decreasing, cu[N] <= T) with B = 1:
 * sequence n is tokens [cu[n], cu[n+1]), ceil(T_n/64) chunks that never span
 * two sequences; zero-length sequences are allowed.  Chunk c of sequence n
 * is row chunk_offsets[n] + c of dh (chunk_offsets: the exclusive prefix sum
 * of the chunk counts); dht, dh0 are [N,HV,K,V]; dh rows past the total and
 * tokens past cu[N] are never written.
 *
 * kdart never reads cu_seqlens on the host (without KDART_OPEN_CHECK): the
 * kernels derive what they need (sequence bounds, chunk offsets) on the
 * device, and every CTA validates the whole array first.  fla's
 * chunk_indices [NT,2] and chunk_offsets [N+1] may be passed (the dtype of
 * cu_seqlens); kdart checks only their dtype and shape on the host (and,
 * for chunk_indices, that dh has at least NT rows) and never reads them:
 * what it derives is always its own.  What is only knowable on the device
 * (cu_seqlens decreasing or cu[0] != 0, cu[N] > T, more chunks than dh has
 * rows) never causes an out-of-bounds access: the kernel then writes
 * nothing and sets KDART_DEVERR_* bits (kda_params.h) in the context's
 * device status word, which kdart_device_status reads.
 *
 * Sizes: any tensor size (offsets are 64-bit; a tensor of more than 2^32
 * elements is fine), T <= 2^31 - 1; bwd_intra and wy_dqkg take any batch
 * (past B*HV = 65535 they run their variable-length body, same results),
 * bwd_dhu at most 65535 serial scans N*HV (EUNSUPPORTED beyond).
 *
 * The launch path allocates nothing and synchronizes nothing, so it may be
 * captured in a CUDA graph, variable-length launches included (with a fixed
 * capacity: the tensors' T and dh's rows; cu_seqlens is read by the kernels).  The specialization is prepared on first use
 * (compiled or loaded from the cache, in the calling thread) unless
 * kdart_prepare was called for it ahead.  stream is a CUstream (NULL: the
 * legacy default stream of the current context).
 * Any thread, concurrently.  Once the specialization is prepared for the
 * current device, the call takes no lock (atomic loads only); the first
 * call prepares it in the calling thread, which may wait for a compile. */

typedef struct kdart_bwd_intra_args {
    uint32_t struct_size;      /* sizeof(kdart_bwd_intra_args) */
    const DLTensor *q, *k;     /* [B,T,H,K]   bf16 or fp16 (the io dtype) */
    const DLTensor *g;         /* [B,T,HV,K]  fp32, chunk-local cumsum, log2 units */
    const DLTensor *beta;      /* [B,T,HV]    io dtype or fp32 (each its own specialization) */
    const DLTensor *dAqk;      /* [B,T,HV,64] fp32 */
    const DLTensor *dAkk;      /* [B,T,HV,64] fp32 */
    const DLTensor *dq_in, *dk_in, *dg_in; /* [B,T,HV,K] fp32 */
    const DLTensor *db_in;     /* [B,T,HV]    fp32 */
    const DLTensor *dq, *dk;   /* out [B,T,HV,K] fp32, or io dtype with emit_bf16 */
    const DLTensor *dg;        /* out [B,T,HV,K] fp32 */
    const DLTensor *db;        /* out [B,T,HV]   fp32 */
    int fold_dg;               /* dg returned reverse-cumsummed within each chunk */
    int emit_bf16;             /* dq, dk written in the io dtype (HV == H only) */
    /* Added in 0.2 (variable length), read only when struct_size covers them (0.1 callers' smaller
     * struct_size means NULL): */
    const DLTensor *cu_seqlens;    /* [N+1] int32/int64 on the device, or NULL: fixed length */
    const DLTensor *chunk_indices; /* [NT,2] dtype of cu_seqlens, or NULL (shape-checked only) */
} kdart_bwd_intra_args;

typedef struct kdart_bwd_dhu_args {
    uint32_t struct_size;      /* sizeof(kdart_bwd_dhu_args) */
    const DLTensor *qg, *kg, *w; /* [B,T,HV,K] io dtype */
    const DLTensor *g;         /* [B,T,HV,K] fp32 (the last valid row of each chunk is read) */
    const DLTensor *d_o;       /* [B,T,HV,V] io dtype ("do") */
    const DLTensor *dv;        /* [B,T,HV,V] io dtype */
    const DLTensor *dht;       /* [B,HV,K,V] fp32 ([N,HV,K,V] varlen), or NULL: start from zero */
    const DLTensor *dh;        /* out [B,NT,HV,K,V] io dtype, NT = ceil(T/64); varlen: [1,NT,..]
                                  with NT >= the total chunk count (fla: len(chunk_indices)) */
    const DLTensor *dv2;       /* out [B,T,HV,V] io dtype */
    const DLTensor *dh0;       /* out [B,HV,K,V] fp32 ([N,HV,K,V] varlen), or NULL: not produced */
    float scale;
    int v_tile;                /* V columns per scan (the spec's BV): 0 lets kdart pick
                                  for the device (kdart_dhu_v_tile), or 16, 32, 64 (every K
                                  tile has all three) */
    /* Added in 0.2 (variable length), read only when struct_size covers them (0.1 callers' smaller
     * struct_size means NULL): */
    const DLTensor *cu_seqlens;    /* [N+1] int32/int64 on the device, or NULL: fixed length */
    const DLTensor *chunk_indices; /* [NT,2] dtype of cu_seqlens, or NULL: dh's NT >= it */
    const DLTensor *chunk_offsets; /* [N+1] dtype of cu_seqlens, or NULL (shape-checked only) */
    /* Added in 0.2 after the varlen fields (head dims), read only when struct_size covers it
     * (smaller: 0): the state's
     * V-first layout (fla's transposed state): dht, dh0 [N,HV,V,K] and dh [B,NT,HV,V,K]. */
    int state_v_first;
    /* Added in 0.2 (fla's chunk_kda_bwd_dAv fused), read only when struct_size covers it (smaller:
     * NULL): chunk_kda's Aqk [B,T,HV,64] io dtype, or NULL.  Given, dv must be NULL: the scan adds
     * dv_intra = Aqk^T do itself (Aqk's lower triangle, diagonal included, as fla reads it) where
     * fla's chunk_kda_bwd_dAv wrote dv, without rounding it to the io dtype first.  K up to 128,
     * native V tiles (V a multiple of 64, K 64 or 128), v_tile 0 or 64; with v_tile 0 not on packed
     * sequences whose grid is at most 4 waves of 64-column scans (there kdart's unfused scan splits its
     * V tiles, which balances one long sequence against the rest); other calls EUNSUPPORTED. */
    const DLTensor *Aqk;
} kdart_bwd_dhu_args;

/* wy_dqkg: the WY backward fused with the state-gradient products (fla's
 * chunk_kda_bwd_wy_dqkg_fused).  Any T, packed sequences (as bwd_intra: no
 * chunk_offsets needed), K in 1..256, V in 1..512, HV a multiple of H (q and
 * k have H heads, everything else HV), beta in the io dtype or fp32, either
 * state layout.  h and dh have one row per chunk: [B,NT,HV,K,V] with NT =
 * ceil(T/64), or [1,NT,HV,K,V] for packed sequences with NT >= the total
 * chunk count (fla's h and bwd_dhu's dh as they are). */
typedef struct kdart_wy_dqkg_args {
    uint32_t struct_size;      /* sizeof(kdart_wy_dqkg_args) */
    const DLTensor *q, *k;     /* [B,T,H,K]   io dtype */
    const DLTensor *v, *v_new; /* [B,T,HV,V]  io dtype */
    const DLTensor *g;         /* [B,T,HV,K]  fp32, chunk-local cumsum, log2 units */
    const DLTensor *beta;      /* [B,T,HV]    io dtype or fp32 */
    const DLTensor *A;         /* [B,T,HV,64] io dtype (Akk, the WY inverse) */
    const DLTensor *h, *dh;    /* [B,NT,HV,K,V] io dtype ([..,V,K] with state_v_first) */
    const DLTensor *d_o;       /* [B,T,HV,V]  io dtype ("do") */
    const DLTensor *dv;        /* [B,T,HV,V]  io dtype (bwd_dhu's dv2) */
    const DLTensor *dq, *dk;   /* out [B,T,HV,K] fp32 */
    const DLTensor *dv2;       /* out [B,T,HV,V] io dtype */
    const DLTensor *dg;        /* out [B,T,HV,K] fp32 */
    const DLTensor *db;        /* out [B,T,HV]   fp32 */
    const DLTensor *dA;        /* out [B,T,HV,64] fp32 (strictly lower; zeros above); with intra, or NULL */
    float scale;
    int state_v_first;
    const DLTensor *cu_seqlens;    /* [N+1] int32/int64 on the device, or NULL: fixed length */
    const DLTensor *chunk_indices; /* [NT,2] dtype of cu_seqlens, or NULL (shape-checked only) */
    /* Added in 0.2 (fla's chunk_kda_bwd_dAv fused), read only when struct_size covers it (smaller:
     * NULL): out [B,T,HV,64] fp32, or NULL: dAqk = scale * do v_new^T on and below the diagonal,
     * zeros above (fla's chunk_kda_bwd_dAv dA, for bwd_intra). */
    const DLTensor *dAqk;
    /* Added in 0.2 (bwd_intra fused), read only when struct_size covers it (smaller: 0): nonzero adds bwd_intra's
     * intra-chunk terms in the same launch (kdart_kda_bwd_intra with fold_dg, fp32 outputs, dAqk
     * and dA its dAqk and dAkk): dq, dk, dg, db are then what bwd_intra would return for them
     * (dg suffix-summed down each chunk).  The intra part takes dA and dAqk from shared memory:
     * both outputs are optional then (NULL: not written; given, they hold this stage's dA and
     * dAqk).  The intermediate gradients stay in L2 instead of a round trip through memory. */
    int intra;
} kdart_wy_dqkg_args;

/* recompute_wu: the backward's forward recompute of the WY factors from Akk
 * (fla's recompute_w_u_fwd: w = Akk (beta k exp2(g)), u = Akk (beta v), qg =
 * q exp2(g), kg = k exp2(g_last - g), rounded to the io dtype as fla does),
 * with the gate's chunk-local cumsum in front when the gate is computed inside
 * chunk_kda (fla's kda_gate_chunk_cumsum): pass g_raw, A_log (and dt_bias)
 * with g_out instead of g, and g_out receives the cumsummed gate in log2
 * units, -exp(A_log) softplus(g_raw + dt_bias), or with safe_gate
 * lower_bound sigmoid(exp(A_log) (g_raw + dt_bias)), summed over each chunk's
 * rows and divided by ln 2.  Any T, packed sequences (as bwd_intra), K in
 * 1..256, V in 1..512, HV a multiple of H, beta in the io dtype or fp32. */
typedef struct kdart_recompute_wu_args {
    uint32_t struct_size;      /* sizeof(kdart_recompute_wu_args) */
    const DLTensor *q;         /* [B,T,H,K]   io dtype, or NULL (then qg NULL too) */
    const DLTensor *k;         /* [B,T,H,K]   io dtype */
    const DLTensor *v;         /* [B,T,HV,V]  io dtype */
    const DLTensor *beta;      /* [B,T,HV]    io dtype or fp32 */
    const DLTensor *A;         /* [B,T,HV,64] io dtype (Akk, the WY inverse) */
    const DLTensor *g;         /* [B,T,HV,K]  fp32, chunk-local cumsum, log2 units; or NULL with g_raw */
    const DLTensor *g_raw;     /* [B,T,HV,K]  io dtype or fp32: the raw gate; or NULL with g */
    const DLTensor *A_log;     /* [HV]        fp32 (with g_raw) */
    const DLTensor *dt_bias;   /* [HV,K]      fp32, or NULL (with g_raw) */
    const DLTensor *g_out;     /* out [B,T,HV,K] fp32 (with g_raw) */
    const DLTensor *w;         /* out [B,T,HV,K] io dtype */
    const DLTensor *u;         /* out [B,T,HV,V] io dtype, or NULL (v unread: fwd_h can make u) */
    const DLTensor *qg;        /* out [B,T,HV,K] io dtype, or NULL (with q NULL) */
    const DLTensor *kg;        /* out [B,T,HV,K] io dtype */
    float lower_bound;         /* the safe gate's bound */
    int safe_gate;             /* the gate's form (with g_raw): nonzero the safe (sigmoid) one */
    const DLTensor *cu_seqlens;    /* [N+1] int32/int64 on the device, or NULL: fixed length */
    const DLTensor *chunk_indices; /* [NT,2] dtype of cu_seqlens, or NULL (shape-checked only) */
} kdart_recompute_wu_args;

/* bwd_dav: fla's chunk_kda_bwd_dAv as a kernel of its own, for the calls that
 * bwd_dhu and wy_dqkg cannot take fused (kdart_bwd_dhu_args.Aqk,
 * kdart_wy_dqkg_args.dAqk): per chunk of 64 rows, dA = scale do v^T on and
 * below the diagonal, zeros above (fp32; rows past a sequence's end are not
 * written), and dv = A^T do (A: chunk_kda's Aqk, whose lower triangle,
 * diagonal included, is read: what lies above may hold anything), rounded to
 * the io dtype once.  fla's q and k are not taken: only their shapes enter
 * fla's call.  Any T, packed sequences (as bwd_intra), V in 1..512, any HV. */
typedef struct kdart_bwd_dav_args {
    uint32_t struct_size;      /* sizeof(kdart_bwd_dav_args) */
    const DLTensor *v;         /* [B,T,HV,V]  io dtype (chunk_kda_bwd's v_new) */
    const DLTensor *d_o;       /* [B,T,HV,V]  io dtype ("do") */
    const DLTensor *A;         /* [B,T,HV,64] io dtype (Aqk) */
    const DLTensor *dA;        /* out [B,T,HV,64] fp32, or NULL: dv alone (v is then not read) */
    const DLTensor *dv;        /* out [B,T,HV,V]  io dtype */
    float scale;               /* applied to dA, as fla does */
    const DLTensor *cu_seqlens;    /* [N+1] int32/int64 on the device, or NULL: fixed length */
    const DLTensor *chunk_indices; /* [NT,2] dtype of cu_seqlens, or NULL (shape-checked only) */
} kdart_bwd_dav_args;

/* fwd_h: fla's chunk_gated_delta_rule_fwd_h as chunk_kda_bwd calls it (the
 * backward's recompute of the forward's states; chunk_kda's forward calls it
 * the same way): per sequence, value head and V tile, a serial scan over the
 * chunks from h0 (or zero) that writes the state entering each chunk, h =
 * IO(S), and v_new = IO(u - w IO(S)), then S = diag(exp2(g_last)) S +
 * k^T v_new, g_last the gate gk at the chunk's last valid row (k: chunk_kda's
 * kg, already decayed; its head for value head hv is hv / (HV/H)); ht = S
 * (fp32) when given.  Any T, packed sequences (as bwd_dhu: h has a row per
 * chunk of every sequence), K in 1..256, V in 1..512, both state layouts. */
typedef struct kdart_fwd_h_args {
    uint32_t struct_size;      /* sizeof(kdart_fwd_h_args) */
    const DLTensor *k;         /* [B,T,H,K]  io dtype (chunk_kda's kg); HV a multiple of H */
    const DLTensor *w;         /* [B,T,HV,K] io dtype */
    const DLTensor *u;         /* [B,T,HV,V] io dtype; with A and beta: v, from which u is made */
    const DLTensor *gk;        /* [B,T,HV,K] fp32, the chunk-local gate cumsum in log2 units */
    const DLTensor *h0;        /* [N,HV,K,V] fp32 ([N,HV,V,K] V-first), or NULL: start from zero */
    const DLTensor *h;         /* out [B,NT,HV,K,V] io dtype ([..,V,K] V-first), NT = ceil(T/64);
                                  packed: [1,NT,..] with NT >= the total chunk count */
    const DLTensor *v_new;     /* out [B,T,HV,V] io dtype, or NULL: not written */
    const DLTensor *ht;        /* out [N,HV,K,V] fp32 ([N,HV,V,K] V-first), or NULL: not written */
    int v_tile;                /* V columns per scan (the spec's BV): 0 lets kdart pick for the
                                  device (kdart_fwd_h_v_tile), or 32, 64 */
    int state_v_first;         /* nonzero: fla's V-first state layout for h, h0 and ht */
    const DLTensor *cu_seqlens;    /* [N+1] int32/int64 on the device, or NULL: fixed length */
    const DLTensor *chunk_indices; /* [NT,2] dtype of cu_seqlens, or NULL: h's NT >= its rows */
    const DLTensor *chunk_offsets; /* [N+1] dtype of cu_seqlens, or NULL (shape-checked only) */
    /* Given both, u is made in the scan from the v passed as `u`: u = A (v beta), rounded as
     * recompute_wu rounds it (the same bits); kdart_kda_chunk_bwd calls fwd_h so */
    const DLTensor *A;         /* [B,T,HV,64] io dtype (chunk_kda's Akk), or NULL: u is given */
    const DLTensor *beta;      /* [B,T,HV] io dtype or fp32, with A */
} kdart_fwd_h_args;

/* The CUDA function of a specialization in the current context, prepared
 * and loaded if needed, with its launch shape: for callers that launch it
 * themselves (cuLaunchKernel with one kdart_*_params struct from
 * kernel_src/kda_params.h; grids as in the kernel sources' headers). */
typedef struct kdart_launch_info {
    void *function;  /* CUfunction, valid until kdart_close */
    int threads;     /* threads per CTA */
    int smem_bytes;  /* dynamic shared memory per CTA (the limit is already set) */
} kdart_launch_info;
KDART_EXTERN int kdart_get_function(kdart_rt *rt, const char *kernel, const char *spec, kdart_launch_info *out);

/* bwd_post: the backward's last step, from the chunk stages' fp32 gradients
 * to the gradients of chunk_kda's inputs, per token (sequences do not matter):
 *   dq = l2norm_bwd(q, q_rstd, sum of dq_in over the head's HV/H value heads)
 *        (without q_rstd: the sum), dk alike;
 *   dg = the gate's backward of dg_in at the raw gate g_raw (chunk_kda's
 *        use_gate_in_kernel: -exp(A_log) softplus(g_raw + dt_bias), or with
 *        safe_gate lower_bound sigmoid(exp(A_log) (g_raw + dt_bias))), with
 *        dA_log and ddt_bias summed over every token deterministically
 *        (without g_raw: dg = dg_in);
 *   db = db_in * beta_scale * s (1 - s), s = sigmoid(beta_raw) (chunk_kda's
 *        use_beta_sigmoid_in_kernel; without beta_raw: db = db_in);
 * each computed in fp32 and rounded once.  workspace (with g_raw): fp32 of
 * kdart_bwd_post_workspace(H, HV, K) elements whose last H must be zero
 * before the first launch; each launch leaves them zero again (one workspace
 * per stream).  K in 1..256, any HV multiple of H. */
typedef struct kdart_bwd_post_args {
    uint32_t struct_size;      /* sizeof(kdart_bwd_post_args) */
    const DLTensor *dq_in;     /* [B,T,HV,K] fp32 */
    const DLTensor *dk_in;     /* [B,T,HV,K] fp32 */
    const DLTensor *q;         /* [B,T,H,K]  io dtype, the l2-normalized q; with q_rstd, or NULL */
    const DLTensor *k;         /* [B,T,H,K]  io dtype; with k_rstd, or NULL */
    const DLTensor *q_rstd;    /* [B,T,H]    fp32, or NULL: no l2norm backward of q */
    const DLTensor *k_rstd;    /* [B,T,H]    fp32, or NULL */
    const DLTensor *dg_in;     /* [B,T,HV,K] fp32, after the reverse chunk cumsum */
    const DLTensor *g_raw;     /* [B,T,HV,K] io dtype (g_io) or fp32, or NULL */
    const DLTensor *A_log;     /* [HV]       fp32 (with g_raw) */
    const DLTensor *dt_bias;   /* [HV,K]     fp32, or NULL */
    const DLTensor *db_in;     /* [B,T,HV]   fp32 */
    const DLTensor *beta_raw;  /* [B,T,HV]   io dtype (beta_io) or fp32: the logits, or NULL */
    const DLTensor *workspace; /* [kdart_bwd_post_workspace(H, HV, K)] fp32 (with g_raw), or NULL */
    const DLTensor *dq;        /* out [B,T,H,K]  io dtype */
    const DLTensor *dk;        /* out [B,T,H,K]  io dtype */
    const DLTensor *dg;        /* out [B,T,HV,K] io dtype (g_io) or fp32 */
    const DLTensor *db;        /* out [B,T,HV]   io dtype (beta_io) or fp32 */
    const DLTensor *dA_log;    /* out [HV]   fp32 (with g_raw) */
    const DLTensor *ddt_bias;  /* out [HV,K] fp32 (with dt_bias) */
    float lower_bound;         /* safe_gate's bound */
    int safe_gate;             /* the gate form */
    float beta_scale;          /* 1, or 2 (allow_neg_eigval) */
    int g_io;                  /* g_raw and dg in the io dtype (else fp32) */
    int beta_io;               /* beta_raw and db in the io dtype (else fp32) */
} kdart_bwd_post_args;

/* The elements of bwd_post's workspace (0 for sizes below 1). */
KDART_EXTERN int64_t kdart_bwd_post_workspace(int64_t H, int64_t HV, int64_t K);

/* The whole backward of fla's chunk_kda (chunk 64) in one call: from what its forward saved to every
 * gradient, every kernel kdart's, as kdart.torch.chunk_kda_bwd runs them (the same stages, order and
 * results): the recompute (the gate's cumsum with w, u, qg, kg), fwd_h, bwd_dhu with fla's dAv fused
 * (or bwd_dav first on grids where that is faster), wy_dqkg with bwd_intra's terms in its launch,
 * bwd_post.  Launches only, on one stream; every stage's arguments are checked before
 * the first launch, so a refused call launches nothing.  Packed sequences need chunk_indices (NT = its
 * rows).  Outputs may not overlap inputs or each other; the intermediates live in workspace. */
typedef struct kdart_chunk_bwd_args {
    uint32_t struct_size;      /* sizeof(kdart_chunk_bwd_args) */
    const DLTensor *q, *k;     /* [B,T,H,K]  io dtype (bf16 or fp16), l2-normalized with q_rstd/k_rstd */
    const DLTensor *v;         /* [B,T,HV,V] io dtype; HV a multiple of H */
    const DLTensor *g;         /* [B,T,HV,K] io dtype or fp32: the raw gate (use_gate_in_kernel: with
                                  A_log), or NULL */
    const DLTensor *g_cumsum;  /* [B,T,HV,K] fp32: the forward's chunk-local gate cumsum (log2 units),
                                  needed without A_log (and with w below), else NULL */
    const DLTensor *beta;      /* [B,T,HV]   io dtype or fp32: beta after the sigmoid */
    const DLTensor *Aqk, *Akk; /* [B,T,HV,64] io dtype: the forward's */
    const DLTensor *d_o;       /* [B,T,HV,V] io dtype ("do") */
    const DLTensor *dht;       /* [N,HV,K,V] fp32 ([N,HV,V,K] with state_v_first), or NULL */
    const DLTensor *h0;        /* [N,HV,K,V] fp32 the initial state, or NULL */
    const DLTensor *q_rstd, *k_rstd; /* [B,T,H] fp32 (use_qk_l2norm_in_kernel), or NULL */
    const DLTensor *beta_raw;  /* [B,T,HV] the logits (use_beta_sigmoid_in_kernel), or NULL */
    const DLTensor *A_log;     /* [HV] fp32 (the gate in the kernel), or NULL */
    const DLTensor *dt_bias;   /* [HV,K] fp32, or NULL */
    float scale;               /* fla's scale (K^-0.5 by default: the caller's choice here) */
    float lower_bound;         /* safe_gate's bound */
    int safe_gate;             /* nonzero: lower_bound sigmoid(exp(A_log) x); else -exp(A_log) softplus(x) */
    int allow_neg_eigval;      /* nonzero: beta = 2 sigmoid(logits) */
    int state_v_first;         /* nonzero: fla's V-first state layout (h0, dht, dh0, h) */
    const DLTensor *cu_seqlens;    /* [N+1] int32/int64 on the device (B = 1), or NULL: fixed length */
    const DLTensor *chunk_indices; /* [NT,2] dtype of cu_seqlens: needed with cu_seqlens */
    const DLTensor *chunk_offsets; /* [N+1] dtype of cu_seqlens, or NULL (shape-checked only) */
    /* fla's disable_recompute: the forward's w, qg, kg [B,T,HV,K], u, v_new [B,T,HV,V] (io dtype) and
     * h [B,NT,HV,K,V] (io dtype) with g_cumsum; all NULL: recomputed */
    const DLTensor *w, *u, *qg, *kg, *v_new, *h;
    const DLTensor *dq, *dk;   /* out [B,T,H,K]  io dtype */
    const DLTensor *dv;        /* out [B,T,HV,V] io dtype */
    const DLTensor *dg;        /* out [B,T,HV,K] g's dtype (fp32 or the io dtype; without g either) */
    const DLTensor *dbeta;     /* out [B,T,HV]   beta_raw's dtype (without it: fp32 or the io dtype) */
    const DLTensor *dA_log;    /* out [HV] fp32 (with A_log), else NULL */
    const DLTensor *ddt_bias;  /* out [HV,K] fp32 (with dt_bias), else NULL */
    const DLTensor *dh0;       /* out [N,HV,K,V] fp32, or NULL: not produced */
    const DLTensor *workspace; /* [kdart_chunk_bwd_workspace(rt, args) or more] uint8 on the device,
                                  256-byte aligned, any contents (the call clears what it needs zero,
                                  on the stream); one call at a time per workspace */
} kdart_chunk_bwd_args;

/* The workspace bytes kdart_kda_chunk_bwd needs for these args on the current device (its outputs and
 * workspace are not read); a negative KDART_E* for args it cannot size. */
KDART_EXTERN int64_t kdart_chunk_bwd_workspace(kdart_rt *rt, const kdart_chunk_bwd_args *args);
KDART_EXTERN int kdart_kda_chunk_bwd(kdart_rt *rt, const kdart_chunk_bwd_args *args, void *stream);

KDART_EXTERN int kdart_kda_bwd_intra(kdart_rt *rt, const kdart_bwd_intra_args *args, void *stream);
KDART_EXTERN int kdart_kda_bwd_dhu(kdart_rt *rt, const kdart_bwd_dhu_args *args, void *stream);
KDART_EXTERN int kdart_kda_wy_dqkg(kdart_rt *rt, const kdart_wy_dqkg_args *args, void *stream);
KDART_EXTERN int kdart_kda_recompute_wu(kdart_rt *rt, const kdart_recompute_wu_args *args, void *stream);
KDART_EXTERN int kdart_kda_bwd_dav(kdart_rt *rt, const kdart_bwd_dav_args *args, void *stream);
KDART_EXTERN int kdart_kda_fwd_h(kdart_rt *rt, const kdart_fwd_h_args *args, void *stream);
KDART_EXTERN int kdart_kda_bwd_post(kdart_rt *rt, const kdart_bwd_post_args *args, void *stream);

/* The device status word of the current CUDA context: the KDART_DEVERR_*
 * bits (kernel_src/kda_params.h: 1 cu_seqlens out of order or cu[0] != 0,
 * 2 cu[N] > T, 4 more chunks than dh rows) that variable-length launches
 * found since the last clear; those launches wrote nothing.  The caller's
 * explicit choice: it synchronizes the context (cuCtxSynchronize), then
 * reads the word into *bits and, when clear is nonzero, zeroes it.  The word
 * is allocated (zeroed) once per context when a varlen specialization is
 * loaded into it; before that *bits is 0.  Not capturable; any thread. */
KDART_EXTERN int kdart_device_status(kdart_rt *rt, int *bits, int clear);

/* The V tile width (16, 32 or 64) that kdart_kda_bwd_dhu launches with
 * v_tile = 0 for B x HV scans of V columns at head dim K on the current
 * device.  Each CTA runs one serial scan of BV columns, so the choice trades
 * waves of CTAs (B*HV*V/BV of them) against the time per chunk of a tile,
 * from measurements on the H200 (docs/performance.md).  For callers that launch the "BV="
 * specialization themselves. */
KDART_EXTERN int kdart_dhu_v_tile(kdart_rt *rt, int64_t B, int64_t HV, int64_t K, int64_t V, int *v_tile);

/* The V tile width (32 or 64) that kdart_kda_fwd_h launches with v_tile = 0
 * for N x HV scans of V columns at head dim K on the current device: 64,
 * unless the grid of 64-column scans would fill fewer than two waves of the
 * device's SMs (each scan is serial over the chunks, so only the grid runs in
 * parallel). */
KDART_EXTERN int kdart_fwd_h_v_tile(kdart_rt *rt, int64_t N, int64_t HV, int64_t K, int64_t V, int *v_tile);

/* The specialization that kdart_kda_<kernel> would launch for these
 * arguments (args: the kernel's args struct, e.g. kdart_wy_dqkg_args for
 * "wy_dqkg"), in canonical form, written into buf (n bytes
 * with the terminator); returns its length or a negative status.  The call
 * makes every check of the operation that does not look at memory (shapes,
 * dtypes, strides, sizes, cu_seqlens's shape; not the tensors' devices,
 * data pointers, alignment or overlaps) and the same choices (K tile,
 * varlen, tail, beta; bwd_dhu's V tile, which needs the current device's SM
 * count unless args.v_tile names one), and launches nothing.  Bindings use
 * it to prepare exactly what a launch will need (kdart.torch.prepare_for)
 * without writing down kdart's rules a second time.  Any thread. */
KDART_EXTERN int kdart_spec_for(kdart_rt *rt, const char *kernel, const void *args, char *buf, size_t n);

/* Any stage's operation by name: kdart_op_run(rt, "wy_dqkg", &args, stream)
 * is kdart_kda_wy_dqkg(rt, &args, stream).  KDART_EINVAL for a kernel with
 * no operation of its own (chunk_rcumsum runs inside bwd_intra's). */
KDART_EXTERN int kdart_op_run(kdart_rt *rt, const char *kernel, const void *args, void *stream);

/* An operation's arguments, described from the same table its checks read,
 * so that a binding can build the args struct, allocate the outputs and ask
 * kdart_spec_for without writing any stage's rules down again. */
enum { KDART_ARG_INPUT = 1, KDART_ARG_OUTPUT = 2, KDART_ARG_SEQS = 3, KDART_ARG_INT = 4, KDART_ARG_FLOAT = 5 };
typedef struct kdart_op_arg_info {
    const char *name;   /* "q", "do", "scale", "cu_seqlens" */
    int kind;           /* KDART_ARG_*: a tensor (input, output, or one of cu_seqlens, chunk_indices,
                           chunk_offsets) or an int / float scalar */
    int optional;       /* tensors: 1 when it may be NULL */
    uint32_t offset;    /* of the field in the args struct (const DLTensor *, int or float) */
    uint32_t args_size; /* sizeof the args struct (the same in every answer) */
    const char *dtype;  /* tensors: "io" (bfloat16 or float16, one per call), "float32", "io|float32", or
                           "io?" (the io dtype when the int scalar named by flag is nonzero, else float32);
                           cu_seqlens and the index tensors: "int32|int64"; scalars: NULL */
    const char *flag;   /* "io?": the scalar that picks the dtype; else NULL */
    const char *dims;   /* tensors: their shape in sizes, "B, T, HV, K" (B batch rows, T tokens, H query
                           heads, HV value heads, K head dim, V value dim, N sequences, NT chunk rows of a
                           state, HB a state's batch (B; 1 when packed), S1, S2 a state's trailing dims
                           (K, V; V, K with state_v_first), 64 the chunk); scalars: NULL */
} kdart_op_arg_info;
/* Describes argument `index` of kernel's operation into *out and returns the
 * number of arguments (tensors in the order of the args struct's checks,
 * then scalars, then the sequence tensors); 0 for a kernel with no
 * operation; KDART_EKERNEL, KDART_EINVAL (index out of range), KDART_ENULL.
 * Constant tables: any thread, no handle needed. */
KDART_EXTERN int kdart_op_arg(const char *kernel, int index, kdart_op_arg_info *out);

/* ------------------------------------------------------ compile service */

/* `kdart serve`: one compile service per node, on a Unix domain socket
 * (never a network interface), so that the ranks of a job and the servers
 * of a node compile each key once, in one place, into the shared cache.
 * Wire protocol: docs/protocol.md (length-prefixed "key=value" frames,
 * versioned with kdart-proto=1).
 *
 * Clients: the library itself when the environment has KDART_SERVICE=PATH
 * (and the handle was not opened with KDART_OPEN_NO_ENV): a prepare that
 * misses every cache asks the service to compile the key, then reads the
 * cubin from its own writable cache, which must be the service's.  When the
 * service is unreachable, answers an error, or prepared another key (other
 * sources or compiler), the library compiles itself and logs one warning.
 * KDART_SERVICE_TIMEOUT (seconds, default 300) bounds the wait. */

#define KDART_SERVE_NO_SIGNALS 0x1u /* do not stop on SIGTERM/SIGINT (a service run in a thread) */
#define KDART_SERVE_IDLE_TIMEOUT_MS 10000 /* idle_timeout_ms's default */

/* Called once on the service's thread when the socket accepts connections. */
typedef void (*kdart_serve_ready_fn)(void *user, const char *socket_path);

typedef struct kdart_serve_options {
    uint32_t struct_size;      /* sizeof(kdart_serve_options): set by kdart_serve_options_init */
    int jobs;                  /* compile worker threads; 0: the number of CPUs */
    int max_clients;           /* connections at once; 0: 1024.  Beyond: EAGAIN reply, closed */
    uint32_t flags;            /* KDART_SERVE_* */
    kdart_serve_ready_fn ready;
    void *ready_user;
    /* A connection that sends no complete request for this long after it
     * was accepted or last answered (idle, or trickling a frame) gets an
     * ETIMEDOUT reply and is closed, so that idle clients cannot hold every
     * slot; one waiting for its compiles is not idle.  0: 10 s
     * (KDART_SERVE_IDLE_TIMEOUT_MS), well under the clients' 300 s. */
    int idle_timeout_ms;
} kdart_serve_options;

KDART_EXTERN void kdart_serve_options_init(kdart_serve_options *opts);

/* Runs the compile service of rt on socket_path until SIGTERM or SIGINT
 * (unless KDART_SERVE_NO_SIGNALS) or a "stop" request, then shuts down
 * cleanly: stops accepting, removes the socket file, cancels queued work
 * (ECANCELED replies), finishes the compiles in flight and answers them,
 * closes every connection, and returns KDART_OK.
 *
 * The socket is created with mode 0600.  A path where another service
 * answers is refused (KDART_EAGAIN); a stale socket file (nobody listens)
 * is replaced; a path that exists and is not a socket is refused
 * (KDART_EINVAL).  Requests are compiled on opts->jobs worker threads of
 * the service's own (not libuv's shared pool), through kdart_prepare with
 * KDART_PREPARE_NO_LOAD; identical requests in flight share one compile.
 * The calling thread runs the event loop; rt may be used by other threads
 * meanwhile.  SIGPIPE is set to SIG_IGN if it was SIG_DFL. */
KDART_EXTERN int kdart_serve(kdart_rt *rt, const char *socket_path, const kdart_serve_options *opts);

/* Asks the service at socket_path to stop and waits (up to timeout_ms;
 * <= 0: no limit) until it has finished its in-flight work and closed.
 * KDART_ENOENT: no socket there; KDART_EAGAIN: a stale socket (nobody
 * listens), or the service's own EAGAIN reply when it is full (its
 * max_clients connections are open; kdart_service_error says which);
 * KDART_ETIMEDOUT; KDART_EIO: another transport failure. */
KDART_EXTERN int kdart_serve_stop_request(const char *socket_path, int timeout_ms);

/* What the service answered. */
typedef struct kdart_service_result {
    int status;          /* the service's status for the request: KDART_OK or KDART_E* */
    char message[2048];  /* its message ("ECOMPILE: ..." with the log tail), or the transport's */
    char key[65];        /* prepare: the key */
    int source;          /* prepare: KDART_FROM_* on the service's side */
    double compile_ms;   /* prepare: the service's compile time (0 on a hit) */
    int entries, compiled, hits, failed; /* prewarm: counts */
} kdart_service_result;

/* Client calls.  Each opens one connection, sends one request and waits up
 * to timeout_ms (<= 0: no limit) for the reply.  The return value is the
 * transport's status (KDART_OK when a reply arrived: then out->status is
 * the service's); errors as for kdart_serve_stop_request. */
/* The reply's status, or the transport's: KDART_EAGAIN is then either a
 * full service's reply or nobody listening; kdart_service_request, whose
 * return is the transport's alone, tells them apart. */
KDART_EXTERN int kdart_service_ping(const char *socket_path, int timeout_ms);
KDART_EXTERN int kdart_service_prepare(const char *socket_path, const char *kernel, const char *spec,
                                       const char *arch, uint32_t flags, int timeout_ms,
                                       kdart_service_result *out);
/* Every specialization of kernel (NULL: of every kernel) for each arch of
 * the comma list (NULL: the service's default). */
KDART_EXTERN int kdart_service_prewarm(const char *socket_path, const char *kernel, const char *arch,
                                       uint32_t flags, int timeout_ms, kdart_service_result *out);
/* A raw request payload (docs/protocol.md); *reply (malloc) is the reply
 * payload, NUL-terminated. */
KDART_EXTERN int kdart_service_request(const char *socket_path, const char *request, char **reply,
                                       int timeout_ms);
/* Why the calling thread's last client call (kdart_service_*,
 * kdart_serve_stop_request) did not end in KDART_OK: the transport's own
 * words ("cannot connect to PATH: Permission denied", "the service on PATH
 * runs as uid 65534, not as this user (uid 1000)") or the service's reply
 * message; "" after a success.  Never NULL; valid until the thread's next
 * client call. */
KDART_EXTERN const char *kdart_service_error(void);

/* ------------------------------------------------- background compiles */

/* kdart_prepare on kdart's own compile workers (up to
 * kdart_options.compile_threads threads of the handle, started as jobs
 * arrive; never libuv's thread pool, which serves file I/O), with the
 * result posted to a libuv loop.  Jobs start in FIFO order.
 *
 * A job runs kdart_prepare(rt, kernel, spec, arch, flags, &info) on a
 * worker.  When it ends, cb(user, status, info) runs exactly once:
 *   - loop != NULL: on the thread running `loop` (through a uv_async_t the
 *     job owns; a pending job keeps the loop alive).  kdart_prepare_async
 *     must then be called on the loop's thread, or while the loop is not
 *     running (libuv allows uv_async_init nowhere else).
 *   - loop == NULL: on a thread of kdart's own running a loop kdart owns,
 *     started on first use and joined by kdart_close.
 * info is never NULL and is valid only during the call; on failure it
 * holds what was known (the key, once computed); on KDART_ECANCELED it is
 * zeroed.  kdart_job_error(job) gives the failure's message during the
 * call.  Unless flags has KDART_PREPARE_NO_LOAD, the unit is loaded into
 * device 0's primary context (workers have no context of their own).
 *
 * kdart_prepare_async checks its arguments (handle, kernel, spec, arch,
 * cb) and starts what it needs before queuing; when it returns an error
 * (EMISUSE, ENULL, EKERNEL, ESPEC, EARCH, ENOMEM, ECANCELED after close
 * began), nothing was queued and cb is never called.  On KDART_OK, *job
 * (job may be NULL) identifies the job until cb returns; the job is freed
 * right after, so the pointer must not be used once cb has run.  Any
 * thread (with the loop rule above).
 *
 * kdart_close cancels queued jobs (status KDART_ECANCELED) and waits for
 * running ones.  Callbacks are never dropped: those of jobs on kdart's own
 * loop run before kdart_close returns; those of jobs on a caller's loop
 * run the next time that loop runs, which may be after kdart_close
 * returned: such a callback must not use the handle (it is gone), and
 * gets KDART_ECANCELED unless its compile had started before the close.
 * Run the loop until it is idle before uv_loop_close (jobs are freed by
 * their loop, after their callback). */
typedef struct kdart_job kdart_job;
typedef void (*kdart_prepare_cb)(void *user, int status, const kdart_prepared *info);

KDART_EXTERN int kdart_prepare_async(kdart_rt *rt, const char *kernel, const char *spec, const char *arch,
                                     uint32_t flags, struct uv_loop_s *loop, kdart_prepare_cb cb, void *user,
                                     kdart_job **job);
/* Cancels a job that is still queued: returns KDART_OK, and its callback
 * then runs (on its loop, as usual) with KDART_ECANCELED.  Returns
 * KDART_EAGAIN once the job has started or finished (its callback reports
 * the real status), KDART_ENULL for NULL.  Any thread, until the job's
 * callback has returned (on the loop thread, that includes inside it), but
 * not while kdart_close runs (after it, every job has finished: EAGAIN). */
KDART_EXTERN int kdart_job_cancel(kdart_job *job);
/* The message of a failed job (as kdart_last_error would give on the
 * worker), "" on success.  Valid during the job's callback only. */
KDART_EXTERN const char *kdart_job_error(const kdart_job *job);

#ifdef __cplusplus
}
#endif
#endif /* KDART_H */
