/*
 * service.h: the compile service's wire protocol (docs/protocol.md), its
 * blocking client, and the KDART_SERVICE hook of the prepare path.
 * Internal: kdart__ names.  The server is in service.c, the protocol
 * codec and the client in client.c.  The service layer stands on the core
 * (rt.h) and the core never includes this header: the client reaches the
 * prepare path only through the hook it installs on a handle.
 */
#ifndef KDART_SERVICE_H
#define KDART_SERVICE_H

#include <stddef.h>
#include <stdint.h>

#include "rt.h"

#define KDART__PROTO_VERSION 1
#define KDART__PROTO_MAX_FRAME 65536 /* largest payload, bytes (the 4-byte length excluded) */
#define KDART__PROTO_MAX_KEY 32      /* longest field name */
#define KDART__PROTO_MAX_VALUE 4096  /* longest field value in a request, after unescaping */

enum {
    KDART__OP_NONE = 0,
    KDART__OP_PING,
    KDART__OP_PREPARE,
    KDART__OP_PREWARM,
    KDART__OP_STATS,
    KDART__OP_STOP,
};

/* A decoded request.  Every string is NUL-terminated and fits its array. */
typedef struct kdart__proto_req {
    int op;            /* KDART__OP_* */
    char id[64];       /* echoed in the reply; "" when absent */
    char kernel[64];   /* "" when absent */
    char spec[256];    /* "" when absent: the defaults */
    char arch[256];    /* "" when absent: the service's default; prewarm: a comma list */
    uint32_t flags;    /* KDART_PREPARE_FORCE */
} kdart__proto_req;

/* Name of an op ("prepare"), "" for none. */
const char *kdart__proto_op_name(int op);

/* Calls fn for each "key=value" line of a payload, values unescaped
 * (\\ \n \t \r).  Stops at fn's first nonzero return and returns it.
 * Checks the framing rules: no NUL, no empty line, a '=' on every line,
 * keys of [a-z0-9_.-] up to KDART__PROTO_MAX_KEY, values up to
 * KDART__PROTO_MAX_VALUE, valid escapes; the first line must be
 * kdart-proto=<digits>.  Returns KDART_OK, KDART_EINVAL (malformed) or
 * KDART_EUNSUPPORTED (another protocol version), with a message in err. */
typedef int (*kdart__proto_kv_fn)(void *user, const char *key, const char *value, size_t vlen, char *err,
                                  size_t errlen);
int kdart__proto_parse(const void *payload, size_t len, kdart__proto_kv_fn fn, void *user, char *err,
                       size_t errlen);

/* Decodes one request payload (the frame without its length).  Returns
 * KDART_OK with *req filled, or KDART_EINVAL / KDART_EUNSUPPORTED with a
 * one-line message in err.  Never reads outside [payload, payload+len). */
int kdart__proto_decode_request(const void *payload, size_t len, kdart__proto_req *req, char *err,
                                size_t errlen);

/* A growing payload: appends "key=value\n" with the value escaped.  Stops
 * growing at KDART__PROTO_MAX_FRAME (overflow set; the text stays valid). */
typedef struct kdart__proto_buf {
    kdart__buf text; /* the payload so far */
    int overflow;
} kdart__proto_buf;
void kdart__proto_put(kdart__proto_buf *b, const char *key, const char *value);
void kdart__proto_putf(kdart__proto_buf *b, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Like put, but cuts value so that the payload stays under the limit. */
void kdart__proto_put_trunc(kdart__proto_buf *b, const char *key, const char *value);
void kdart__proto_buf_free(kdart__proto_buf *b);

/* One request-reply exchange over the socket at path, within timeout_ms
 * (<= 0: no limit).  *reply is the reply payload, NUL-terminated,
 * allocated with malloc.  Transport failures: KDART_ENOENT (no socket
 * there), KDART_EAGAIN (connection refused: nobody listens), KDART_ETIMEDOUT,
 * KDART_EIO (anything else, or a malformed reply), with a message in err. */
int kdart__service_call(const char *path, const char *payload, size_t len, char **reply, size_t *reply_len,
                        int timeout_ms, char *err, size_t errlen);

/* The KDART_SERVICE hook of the prepare path: a kdart__remote_prepare_fn
 * (rt.h, which gives the contract: when it is called, with which lock,
 * what KDART_OK means).  ctx is unused.
 *   KDART_ENOENT: no service is configured (KDART_SERVICE unset, handle
 *     opened with KDART_OPEN_NO_ENV, or the caller is one of the service's
 *     own workers) or it could not help (unreachable, an error, another
 *     key, another cache): the caller goes on as without a service.  A
 *     failure is logged once as a warning, until the service answers again. */
int kdart__service_prepare(void *ctx, kdart_rt *rt, const char *kernel, const char *spec, const char *arch,
                           uint32_t flags, const char *key);
/* Installs kdart__service_prepare as rt's remote-prepare hook, unless rt
 * was opened with KDART_OPEN_NO_ENV (kdart_open, runtime/open.c). */
void kdart__client_install(kdart_rt *rt);

/* Set on the service's worker threads, so that their prepares never ask
 * the service (themselves) again. */
extern _Thread_local int kdart__service_worker;

#endif /* KDART_SERVICE_H */
