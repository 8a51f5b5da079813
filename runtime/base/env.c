/*
 * env.c: reading KDART_* variables.  The lookup honours a handle's
 * KDART_OPEN_NO_ENV in one place, and a numeric value is read by the same
 * strict parsers as the command line's (parse.c), so a variable and the
 * option it stands for never read one text two ways.  Warning about a
 * value that does not read is the caller's (it has the log).
 * Base layer: no handle, no allocation, any thread.
 */
#include <stdint.h>
#include <stdlib.h>

#include "base.h"

const char *kdart__env_get(int no_env, const char *name) {
    if (no_env) return NULL;
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

int kdart__env_parse(const char *text, int bytes, int64_t max, int64_t *out) {
    int64_t n;
    int rc = bytes ? kdart_parse_bytes(text, &n) : kdart__parse_count(text, max, &n);
    if (rc != KDART_OK || n > max) return KDART_EINVAL;
    *out = n;
    return KDART_OK;
}
