/*
 * parse.c: numbers written by people (environment variables, command-line
 * options): byte sizes with binary suffixes and plain decimal counts.
 *
 * One parser for every caller, so that KDART_CACHE_MAX_BYTES and
 * `kdart gc --max-bytes` read "1T" alike, and strict on purpose: a value
 * it cannot read exactly is refused (the caller warns and keeps its
 * default) rather than read as something else.  strtod would accept
 * "inf", "nan" and "1e30", whose conversion to int64_t is undefined
 * behaviour, and stop silently at "1T" or "abc"; so this reads digits
 * itself, in integers, with every multiplication checked for overflow.
 * Base layer: no handle, no allocation, any thread.
 */
#include <stdint.h>
#include <string.h>

#include "base.h"

/* Decimal digits into *v (<= max).  Returns the first byte after them, or
 * NULL when there is no digit or the value exceeds max. */
static const char *digits(const char *s, uint64_t max, uint64_t *v) {
    const char *p = s;
    *v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (*v > (max - d) / 10) return NULL;
        *v = *v * 10 + d;
    }
    return p == s ? NULL : p;
}

int kdart__parse_count(const char *text, int64_t max, int64_t *out) {
    uint64_t v;
    if (!text || !out || max < 0) return KDART_EINVAL;
    const char *end = digits(text, (uint64_t)max, &v);
    if (!end || *end) return KDART_EINVAL;
    *out = (int64_t)v;
    return KDART_OK;
}

int kdart_parse_bytes(const char *text, int64_t *out) {
    static const char units[] = "KMGT";
    uint64_t whole, frac = 0, scale = 1, mul = 1;
    if (!text || !out) return KDART_ENULL;
    const char *p = digits(text, (uint64_t)INT64_MAX, &whole);
    if (!p) return KDART_EINVAL;
    if (*p == '.') {
        /* Up to six decimals: frac * 2^40 stays far below 2^63. */
        const char *q = ++p;
        for (; *p >= '0' && *p <= '9'; p++) {
            if (p - q == 6) return KDART_EINVAL;
            frac = frac * 10 + (uint64_t)(*p - '0');
            scale *= 10;
        }
        if (p == q) return KDART_EINVAL;
    }
    const char *u = *p ? strchr(units, *p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p) : NULL;
    if (u && *p) {
        for (const char *k = units; k <= u; k++) mul *= 1024;
        p++;
        if (*p == 'i') p++;
        if (*p == 'B' || *p == 'b') p++;
        else if (p[-1] == 'i') return KDART_EINVAL; /* "1Ki" */
    } else if (*p == 'B' || *p == 'b') {
        p++;
    }
    if (*p) return KDART_EINVAL;
    if (scale > 1 && mul == 1) return KDART_EINVAL; /* "1.5" bytes */
    uint64_t v;
    if (__builtin_mul_overflow(whole, mul, &v) || __builtin_add_overflow(v, frac * mul / scale, &v) ||
        v > (uint64_t)INT64_MAX)
        return KDART_EINVAL;
    *out = (int64_t)v;
    return KDART_OK;
}
