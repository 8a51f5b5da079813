/*
 * alloc.c: the allocator seam.
 *
 * All of kdart's heap memory comes from here.  In production these are
 * malloc and free.  Tests arm kdart__alloc_fail_at(n) to make the n-th
 * allocation from then fail, walk n upward until an operation succeeds, and
 * check after each failure that the right status came back and that
 * kdart__alloc_live() returned to where it started (nothing leaked).
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

static atomic_long fail_countdown; /* 0: off; else fail when it reaches 1 */
static atomic_long live;

static int should_fail(void) {
    long n = atomic_load(&fail_countdown);
    while (n > 0) {
        if (atomic_compare_exchange_weak(&fail_countdown, &n, n - 1)) return n == 1;
    }
    return 0;
}

long kdart__alloc_fail_at(long n) { return atomic_exchange(&fail_countdown, n > 0 ? n : 0); }
long kdart__alloc_live(void) { return atomic_load(&live); }

void *kdart__malloc(size_t n) {
    if (should_fail()) return NULL;
    void *p = malloc(n ? n : 1);
    if (p) atomic_fetch_add(&live, 1);
    return p;
}

void *kdart__calloc(size_t count, size_t n) {
    if (should_fail()) return NULL;
    void *p = calloc(count ? count : 1, n ? n : 1);
    if (p) atomic_fetch_add(&live, 1);
    return p;
}

void *kdart__realloc(void *p, size_t n) {
    if (!p) return kdart__malloc(n);
    if (should_fail()) return NULL;
    return realloc(p, n ? n : 1);
}

void kdart__free(void *p) {
    if (!p) return;
    atomic_fetch_sub(&live, 1);
    free(p);
}

char *kdart__strndup(const char *s, size_t n) {
    if (!s) return NULL;
    size_t len = strnlen(s, n);
    char *d = kdart__malloc(len + 1);
    if (!d) return NULL;
    memcpy(d, s, len);
    d[len] = 0;
    return d;
}

char *kdart__strdup(const char *s) { return s ? kdart__strndup(s, (size_t)-1) : NULL; }

/* Makes room for need bytes (the NUL included), doubling from 256; false
 * after an allocation failure, which the buffer then remembers. */
static int buf_reserve(kdart__buf *b, size_t need) {
    if (b->oom) return 0;
    if (need <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap *= 2;
    char *s = kdart__realloc(b->s, cap);
    if (!s) {
        b->oom = 1;
        return 0;
    }
    b->s = s;
    b->cap = cap;
    return 1;
}

void kdart__buf_add(kdart__buf *b, const char *text, size_t n) {
    if (!buf_reserve(b, b->len + n + 1)) return;
    memcpy(b->s + b->len, text, n);
    b->len += n;
    b->s[b->len] = 0;
}

void kdart__buf_str(kdart__buf *b, const char *text) { kdart__buf_add(b, text, strlen(text)); }

void kdart__buf_fmt(kdart__buf *b, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        kdart__buf_add(b, tmp, (size_t)n);
        return;
    }
    /* Longer than the stack buffer: format straight into the buffer. */
    if (!buf_reserve(b, b->len + (size_t)n + 1)) return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void kdart__buf_free(kdart__buf *b) {
    kdart__free(b->s);
    memset(b, 0, sizeof *b);
}
