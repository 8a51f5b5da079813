/*
 * clock.c: the two clocks the runtime reads.  Monotonic milliseconds for
 * timing compiles and loads; wall-clock seconds for the cache's created
 * and last_used columns (comparable across processes and machines).
 */
#include <time.h>

#include "base.h"

double kdart__now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int64_t kdart__unix_time(void) { return (int64_t)time(NULL); }
