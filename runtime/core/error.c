/*
 * error.c: the status table and the per-thread error message of a handle.
 *
 * Status codes come from KDART_ERRNO_MAP in kdart.h, the one table that
 * generates the enum, kdart_strerror and kdart_errname, so a code and its
 * text cannot drift apart.  The detailed message of a failure (which
 * argument, the NVRTC log excerpt, the CUDA error name) is formatted where
 * the failure arises with kdart__err and stored for the calling thread, so
 * two threads sharing a handle never read each other's messages.  The log
 * callback sees it at DEBUG level only: the caller already has the status.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

const char *kdart_strerror(int status) {
    switch (status) {
#define KDART__XX(name, value, msg) \
    case value: return msg;
        KDART_ERRNO_MAP(KDART__XX)
#undef KDART__XX
    }
    return "unknown status";
}

const char *kdart_errname(int status) {
    switch (status) {
#define KDART__XX(name, value, msg) \
    case value: return #name;
        KDART_ERRNO_MAP(KDART__XX)
#undef KDART__XX
    }
    return "EUNKNOWN";
}

const char *kdart_version(void) { return KDART_VERSION_STRING; }

/* The calling thread's message buffer for rt, created on first use.  The
 * buffer is plain malloc memory (not the allocator seam): an out-of-memory
 * test must still be able to read why it failed.  Buffers are chained on
 * the handle and freed by kdart_close, whichever threads made them: a
 * thread-specific destructor would run only for threads that exit while
 * the handle lives, and leak the rest. */
struct kdart__errbuf {
    struct kdart__errbuf *next;
    char msg[KDART__ERRMSG_MAX];
};

static char *thread_buf(const kdart_rt *rt) {
    char *buf = pthread_getspecific(rt->err_key);
    if (!buf) {
        struct kdart__errbuf *e = calloc(1, sizeof *e);
        if (!e) return NULL;
        if (pthread_setspecific(rt->err_key, e->msg) != 0) {
            free(e);
            return NULL;
        }
        kdart_rt *mut = (kdart_rt *)rt; /* the chain, not the handle's state */
        pthread_mutex_lock(&mut->err_lock);
        e->next = mut->errbufs;
        mut->errbufs = e;
        pthread_mutex_unlock(&mut->err_lock);
        buf = e->msg;
    }
    return buf;
}

void kdart__errbufs_free(kdart_rt *rt) {
    for (struct kdart__errbuf *e = rt->errbufs, *next; e; e = next) {
        next = e->next;
        free(e);
    }
    rt->errbufs = NULL;
}

int kdart__err(const kdart_rt *rt, int status, const char *fmt, ...) {
    if (!rt) return status;
    char *buf = thread_buf(rt);
    if (!buf) return status;
    int n = snprintf(buf, KDART__ERRMSG_MAX, "%s: ", kdart_errname(status));
    if (n < 0 || n >= KDART__ERRMSG_MAX) n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, KDART__ERRMSG_MAX - (size_t)n, fmt, ap);
    va_end(ap);
    if (status != KDART_OK) kdart__log(rt, KDART_LOG_DEBUG, "%s", buf);
    return status;
}

void kdart__err_clear(const kdart_rt *rt) {
    char *buf = rt ? pthread_getspecific(rt->err_key) : NULL;
    if (buf) buf[0] = 0;
}

const char *kdart_last_error(const kdart_rt *rt) {
    if (!rt) return "no handle";
    const char *buf = pthread_getspecific(rt->err_key);
    return buf ? buf : "";
}

void kdart__log(const kdart_rt *rt, int level, const char *fmt, ...) {
    if (!rt || !rt->log || level > rt->log_level) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rt->log(rt->log_user, level, msg);
}
