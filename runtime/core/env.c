/*
 * env.c: a handle's numeric KDART_* variables (kdart__env_number), read
 * the one strict way the base layer parses them (base/env.c), and refused
 * out loud through the handle's log when a value does not read.  Opening a
 * handle (runtime.c) and preparing a kernel (prepare.c) both read their
 * variables here.
 */
#include <stdio.h>

#include "rt.h"

/* A numeric KDART_* variable: 1 and *out when it is set and reads as a
 * count min..max (bytes: a size, kdart_parse_bytes); 0 when unset.  A
 * value that does not read, or lies outside the range, is refused with a
 * warning naming it, its value and the values allowed (0: the caller keeps
 * its default), never half-read nor silently replaced.  A switch is the
 * range 0..1: exactly "0" or "1", so that "yes", "10" or "1junk" are
 * refused out loud rather than read as something. */
int kdart__env_number(const kdart_rt *rt, const char *name, int bytes, int64_t min, int64_t max, int64_t *out) {
    const char *v = kdart__env_get((rt->flags & KDART_OPEN_NO_ENV) != 0, name);
    if (!v) return 0;
    int64_t n;
    if (kdart__env_parse(v, bytes, max, &n) == KDART_OK && n >= min) {
        *out = n;
        return 1;
    }
    char allowed[96];
    if (bytes)
        snprintf(allowed, sizeof allowed, "a size like 512M or 2G");
    else if (min == 0 && max == 1)
        snprintf(allowed, sizeof allowed, "0 or 1");
    else
        snprintf(allowed, sizeof allowed, "a whole number from %lld to %lld", (long long)min, (long long)max);
    kdart__log(rt, KDART_LOG_WARN, "%s=%.80s ignored: not %s (using the default)", name, v, allowed);
    return 0;
}
