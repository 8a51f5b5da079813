/*
 * internal.h: declarations shared between kdart's modules.  Nothing here is
 * API; every name is kdart__ (two underscores) and may change at any time.
 * This header holds the helpers every module uses (allocator, SHA-256,
 * parsing, clocks); the runtime's own interfaces are in rt.h, the service's
 * in service.h, the store's in cache/store.h.
 *
 * Modules (runtime/ unless named):
 *   alloc.c      the allocator seam and the growable string (kdart__buf)
 *   sha256.c     SHA-256 for cache keys and blob digests
 *   parse.c      sizes and counts people write (kdart_parse_bytes)
 *   clock.c      monotonic and wall-clock time
 *   error.c      the status table, per-thread messages, the log
 *   registry.c   the kernel table: parameters, specs, launch shapes, the
 *                default prewarm set, bwd_dhu's V-tile choice
 *   source.c     kernel_src loading and its include closure
 *   locate.c     where the kernels are when nobody said
 *   compile.c    NVRTC + nvJitLink behind the compiler seam
 *   cuda.c       libcuda by dlopen (the table in cuda_api.h), per-context
 *                function tables and status words, the launch
 *   runtime.c    kdart_open / kdart_close: options, environment, the
 *                cache tiers
 *   prepare.c    kdart_prepare and kdart_why: manifest, key, cache
 *                lookup, compile leases, compile and load
 *   jobs.c       background compiles (kdart_prepare_async) and the
 *                handle's threads
 *   cache_api.c  the public cache calls (list, stats, verify, gc, ...)
 *   ops.c        the KDA operations: argument checks, specialization
 *                choice, launch
 *   client.c     the compile service's protocol and client, and the
 *                KDART_SERVICE hook of the prepare path
 *   service.c    kdart_serve, the compile service itself (libuv)
 *   cache/store.c  the SQLite compile cache
 */
#ifndef KDART_INTERNAL_H
#define KDART_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kdart.h"

/* ------------------------------------------------------------ allocator */

/* Every heap allocation of the library goes through these, so tests can
 * fail the n-th one (kdart__alloc_fail_at) and count leaks. */
void *kdart__malloc(size_t n);
void *kdart__calloc(size_t count, size_t n);
void *kdart__realloc(void *p, size_t n);
void kdart__free(void *p);
char *kdart__strdup(const char *s);
char *kdart__strndup(const char *s, size_t n);

/* Test seam: the n-th allocation from now fails (n >= 1); 0 disables.
 * Returns the countdown it replaces: nonzero means the previously armed
 * failure never fired (the operation made fewer allocations).
 * kdart__alloc_live counts allocations not yet freed. */
long kdart__alloc_fail_at(long n);
long kdart__alloc_live(void);

/* A growable NUL-terminated string on the allocator seam.  On an
 * allocation failure it keeps what it has and sets oom, so callers append
 * freely and check once.  Zero-initialize; free with kdart__buf_free. */
typedef struct kdart__buf {
    char *s;
    size_t len, cap;
    int oom;
} kdart__buf;
void kdart__buf_add(kdart__buf *b, const char *text, size_t n);
void kdart__buf_str(kdart__buf *b, const char *text);
void kdart__buf_fmt(kdart__buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kdart__buf_free(kdart__buf *b);

/* ----------------------------------------------------------------- sha256 */

typedef struct kdart__sha256 {
    uint32_t state[8];
    uint64_t bytes;
    unsigned char buf[64];
    size_t used;
} kdart__sha256;

void kdart__sha256_init(kdart__sha256 *c);
void kdart__sha256_update(kdart__sha256 *c, const void *data, size_t n);
void kdart__sha256_final(kdart__sha256 *c, unsigned char out[32]);
/* Hex digest (64 chars + NUL) of a buffer. */
void kdart__sha256_hex(const void *data, size_t n, char out[65]);

/* ---------------------------------------------------------------- parse */

/* A decimal count 0..max, digits only (parse.c; sizes: kdart_parse_bytes).
 * KDART_OK and *out, else KDART_EINVAL. */
int kdart__parse_count(const char *text, int64_t max, int64_t *out);

/* ----------------------------------------------------------------- time */

double kdart__now_ms(void);   /* monotonic milliseconds */
int64_t kdart__unix_time(void);

#endif /* KDART_INTERNAL_H */
