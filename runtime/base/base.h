/*
 * base.h: the base layer, the helpers every other layer stands on: the
 * allocator seam (alloc.c), the clocks (clock.c), SHA-256 (sha256.c),
 * parsing of numbers people write (parse.c) and reading the environment
 * (env.c).  Internal: kdart__ names.
 *
 * The store (cache/) and the core (runtime/core/) both use it, so it may
 * use neither: it includes only libc and the public header, whose status
 * codes it returns (docs/design.md, "Layers").
 */
#ifndef KDART_BASE_H
#define KDART_BASE_H

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

/* ---------------------------------------------------------- environment */

/* The value of a variable, NULL when it is unset or empty, and NULL for
 * every name when no_env (a handle opened with KDART_OPEN_NO_ENV reads no
 * variable). */
const char *kdart__env_get(int no_env, const char *name);
/* Reads a numeric variable's text: a count 0..max, or with bytes a size as
 * kdart_parse_bytes reads it (and at most max).  KDART_OK and *out, else
 * KDART_EINVAL; the caller says why (it knows the variable's use). */
int kdart__env_parse(const char *text, int bytes, int64_t max, int64_t *out);

#endif /* KDART_BASE_H */
