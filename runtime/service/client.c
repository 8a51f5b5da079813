/*
 * client.c: the compile service's wire protocol (docs/protocol.md), the
 * blocking client of it (kdart_service_*), and the KDART_SERVICE hook
 * that lets kdart_prepare ask the node's service to compile.
 *
 * DESIGN.  A frame is a 4-byte big-endian length and at most 64 KiB of
 * payload; a payload is "key=value\n" lines, the first of which is
 * kdart-proto=1.  Values escape backslash, newline, tab and CR, so a
 * compiler log travels in one field.  One decoder (kdart__proto_parse)
 * serves the service's requests and the client's replies; it is a pure
 * function of its bytes, so it is fuzzed directly (tests/test_service.c).
 *
 * The client is deliberately plain: a blocking AF_UNIX socket, one
 * request, one reply, poll() for the deadline, send() with MSG_NOSIGNAL
 * (a service that went away must not kill the caller with SIGPIPE).
 *
 * The hook (kdart__service_prepare) never makes a prepare fail that would
 * have worked without the service: every failure of the service, the
 * transport or the shared cache means "compile here", logged once.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "service.h"

_Thread_local int kdart__service_worker;

/* ------------------------------------------------------------ protocol */

const char *kdart__proto_op_name(int op) {
    switch (op) {
    case KDART__OP_PING: return "ping";
    case KDART__OP_PREPARE: return "prepare";
    case KDART__OP_PREWARM: return "prewarm";
    case KDART__OP_STATS: return "stats";
    case KDART__OP_STOP: return "stop";
    default: return "";
    }
}

static int key_char(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

int kdart__proto_parse(const void *payload, size_t len, kdart__proto_kv_fn fn, void *user, char *err,
                       size_t errlen) {
    const char *p = payload, *end = p + len;
    char key[KDART__PROTO_MAX_KEY + 1];
    char *value = malloc(KDART__PROTO_MAX_VALUE + 1);
    int rc = KDART_OK, line = 0;
    if (!value) {
        snprintf(err, errlen, "out of memory");
        return KDART_ENOMEM;
    }
    if (len == 0) {
        snprintf(err, errlen, "empty payload (a request starts with kdart-proto=%d)", KDART__PROTO_VERSION);
        rc = KDART_EINVAL;
        goto out;
    }
    if (memchr(p, '\0', len)) {
        snprintf(err, errlen, "NUL byte in the payload");
        rc = KDART_EINVAL;
        goto out;
    }
    while (p < end) {
        line++;
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        const char *eq = memchr(p, '=', (size_t)(le - p));
        if (le == p) {
            snprintf(err, errlen, "line %d is empty", line);
            rc = KDART_EINVAL;
            goto out;
        }
        if (!eq) {
            snprintf(err, errlen, "line %d has no '=' (expected key=value)", line);
            rc = KDART_EINVAL;
            goto out;
        }
        size_t klen = (size_t)(eq - p);
        if (klen == 0 || klen > KDART__PROTO_MAX_KEY) {
            snprintf(err, errlen, "line %d: field name of %zu bytes (1..%d allowed)", line, klen,
                     KDART__PROTO_MAX_KEY);
            rc = KDART_EINVAL;
            goto out;
        }
        for (size_t i = 0; i < klen; i++)
            if (!key_char((unsigned char)p[i])) {
                snprintf(err, errlen, "line %d: field name has a byte 0x%02x outside [a-z0-9_.-]", line,
                         (unsigned char)p[i]);
                rc = KDART_EINVAL;
                goto out;
            }
        memcpy(key, p, klen);
        key[klen] = 0;
        size_t vlen = 0;
        for (const char *v = eq + 1; v < le; v++) {
            char ch = *v;
            if (ch == '\\') {
                if (v + 1 == le) {
                    snprintf(err, errlen, "line %d (%s): value ends in a lone backslash", line, key);
                    rc = KDART_EINVAL;
                    goto out;
                }
                switch (*++v) {
                case '\\': ch = '\\'; break;
                case 'n': ch = '\n'; break;
                case 't': ch = '\t'; break;
                case 'r': ch = '\r'; break;
                default:
                    snprintf(err, errlen, "line %d (%s): unknown escape \\%c", line, key,
                             (*v >= 0x20 && *v < 0x7f) ? *v : '?');
                    rc = KDART_EINVAL;
                    goto out;
                }
            }
            if (vlen == KDART__PROTO_MAX_VALUE) {
                snprintf(err, errlen, "line %d (%s): value longer than %d bytes", line, key, KDART__PROTO_MAX_VALUE);
                rc = KDART_EINVAL;
                goto out;
            }
            value[vlen++] = ch;
        }
        value[vlen] = 0;
        if (line == 1) {
            if (strcmp(key, "kdart-proto") != 0) {
                snprintf(err, errlen, "the first line must be kdart-proto=%d", KDART__PROTO_VERSION);
                rc = KDART_EINVAL;
                goto out;
            }
            size_t d = strspn(value, "0123456789");
            if (vlen == 0 || d != vlen || vlen > 9) {
                snprintf(err, errlen, "kdart-proto wants a version number");
                rc = KDART_EINVAL;
                goto out;
            }
            if (atoi(value) != KDART__PROTO_VERSION) {
                snprintf(err, errlen, "protocol version %s is not supported (this side speaks %d)", value,
                         KDART__PROTO_VERSION);
                rc = KDART_EUNSUPPORTED;
                goto out;
            }
        }
        if ((rc = fn(user, key, value, vlen, err, errlen)) != KDART_OK) goto out;
        p = nl ? nl + 1 : end;
    }
out:
    free(value);
    return rc;
}

/* Copies a request field after checking it: printable ASCII, fits. */
static int req_field(char *dst, size_t cap, const char *key, const char *value, size_t vlen, int *seen, char *err,
                     size_t errlen) {
    if (*seen) {
        snprintf(err, errlen, "field %s given twice", key);
        return KDART_EINVAL;
    }
    *seen = 1;
    if (vlen >= cap) {
        snprintf(err, errlen, "field %s is longer than %zu bytes", key, cap - 1);
        return KDART_EINVAL;
    }
    for (size_t i = 0; i < vlen; i++)
        if ((unsigned char)value[i] < 0x20 || (unsigned char)value[i] > 0x7e) {
            snprintf(err, errlen, "field %s has a byte 0x%02x outside printable ASCII", key, (unsigned char)value[i]);
            return KDART_EINVAL;
        }
    memcpy(dst, value, vlen);
    dst[vlen] = 0;
    return KDART_OK;
}

typedef struct req_state {
    kdart__proto_req *req;
    int seen_version, seen_op, seen_id, seen_kernel, seen_spec, seen_arch, seen_flags;
} req_state;

static int req_kv(void *user, const char *key, const char *value, size_t vlen, char *err, size_t errlen) {
    req_state *s = user;
    kdart__proto_req *r = s->req;
    if (strcmp(key, "kdart-proto") == 0) {
        if (s->seen_version++) {
            snprintf(err, errlen, "field kdart-proto given twice");
            return KDART_EINVAL;
        }
        return KDART_OK;
    }
    if (strcmp(key, "op") == 0) {
        char op[16];
        int rc = req_field(op, sizeof op, key, value, vlen, &s->seen_op, err, errlen);
        if (rc) {
            if (vlen >= sizeof op) snprintf(err, errlen, "unknown op (ping, prepare, prewarm, stats, stop)");
            return rc;
        }
        for (int o = KDART__OP_PING; o <= KDART__OP_STOP; o++)
            if (strcmp(op, kdart__proto_op_name(o)) == 0) r->op = o;
        if (r->op == KDART__OP_NONE) {
            snprintf(err, errlen, "unknown op '%s' (ping, prepare, prewarm, stats, stop)", op);
            return KDART_EINVAL;
        }
        return KDART_OK;
    }
    if (strcmp(key, "id") == 0) return req_field(r->id, sizeof r->id, key, value, vlen, &s->seen_id, err, errlen);
    if (strcmp(key, "kernel") == 0)
        return req_field(r->kernel, sizeof r->kernel, key, value, vlen, &s->seen_kernel, err, errlen);
    if (strcmp(key, "spec") == 0)
        return req_field(r->spec, sizeof r->spec, key, value, vlen, &s->seen_spec, err, errlen);
    if (strcmp(key, "arch") == 0)
        return req_field(r->arch, sizeof r->arch, key, value, vlen, &s->seen_arch, err, errlen);
    if (strcmp(key, "flags") == 0) {
        char flags[128];
        int rc = req_field(flags, sizeof flags, key, value, vlen, &s->seen_flags, err, errlen);
        if (rc) return rc;
        char *save = NULL;
        for (char *t = strtok_r(flags, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            if (strcmp(t, "force") == 0)
                r->flags |= KDART_PREPARE_FORCE;
            else {
                snprintf(err, errlen, "unknown flag '%.32s' (known: force)", t);
                return KDART_EINVAL;
            }
        }
        return KDART_OK;
    }
    return KDART_OK; /* unknown fields are ignored: newer clients may add optional ones */
}

int kdart__proto_decode_request(const void *payload, size_t len, kdart__proto_req *req, char *err,
                                size_t errlen) {
    memset(req, 0, sizeof *req);
    req_state s;
    memset(&s, 0, sizeof s);
    s.req = req;
    if (errlen) err[0] = 0;
    int rc = kdart__proto_parse(payload, len, req_kv, &s, err, errlen);
    if (rc != KDART_OK) return rc;
    if (!s.seen_op) {
        snprintf(err, errlen, "no op field (ping, prepare, prewarm, stats, stop)");
        return KDART_EINVAL;
    }
    if (req->op == KDART__OP_PREPARE && !req->kernel[0]) {
        snprintf(err, errlen, "prepare needs a kernel field");
        return KDART_EINVAL;
    }
    if (req->op == KDART__OP_PREWARM && req->spec[0] && !req->kernel[0]) {
        snprintf(err, errlen, "prewarm with a spec needs a kernel field");
        return KDART_EINVAL;
    }
    return KDART_OK;
}

/* ------------------------------------------------------ reply building */

/* Appends "key=escaped(value)\n", value cut at max bytes of output. */
static void put_limited(kdart__proto_buf *b, const char *key, const char *value, size_t max) {
    char tmp[512];
    size_t t = 0, out = 0;
    size_t start = b->text.len;
    kdart__buf_add(&b->text, key, strlen(key));
    kdart__buf_add(&b->text, "=", 1);
    for (const char *v = value ? value : ""; *v; v++) {
        char esc[2] = {0, 0};
        unsigned char c = (unsigned char)*v;
        size_t n = 1;
        if (c == '\\') esc[0] = '\\', esc[1] = '\\', n = 2;
        else if (c == '\n') esc[0] = '\\', esc[1] = 'n', n = 2;
        else if (c == '\t') esc[0] = '\\', esc[1] = 't', n = 2;
        else if (c == '\r') esc[0] = '\\', esc[1] = 'r', n = 2;
        else esc[0] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
        if (out + n > max) break;
        if (t + n > sizeof tmp) {
            kdart__buf_add(&b->text, tmp, t);
            t = 0;
        }
        memcpy(tmp + t, esc, n);
        t += n;
        out += n;
    }
    kdart__buf_add(&b->text, tmp, t);
    kdart__buf_add(&b->text, "\n", 1);
    if (!b->text.oom && b->text.len > KDART__PROTO_MAX_FRAME) {
        b->text.len = start;
        b->text.s[start] = 0;
        b->overflow = 1;
    }
}

void kdart__proto_put(kdart__proto_buf *b, const char *key, const char *value) {
    put_limited(b, key, value, (size_t)-1);
}

void kdart__proto_put_trunc(kdart__proto_buf *b, const char *key, const char *value) {
    size_t room = KDART__PROTO_MAX_FRAME - 1024 > b->text.len ? KDART__PROTO_MAX_FRAME - 1024 - b->text.len : 0;
    put_limited(b, key, value, room);
}

void kdart__proto_putf(kdart__proto_buf *b, const char *key, const char *fmt, ...) {
    char v[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    kdart__proto_put(b, key, v);
}

void kdart__proto_buf_free(kdart__proto_buf *b) {
    kdart__buf_free(&b->text);
    b->overflow = 0;
}

/* --------------------------------------------------------------- client */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Waits for fd to be ready for events; KDART_OK, ETIMEDOUT or EIO. */
static int wait_fd(int fd, short events, double deadline, char *err, size_t errlen) {
    for (;;) {
        int ms = -1;
        if (deadline > 0) {
            double left = deadline - now_ms();
            if (left <= 0) {
                snprintf(err, errlen, "timed out waiting for the service");
                return KDART_ETIMEDOUT;
            }
            ms = left > 1e9 ? 1000000000 : (int)left + 1;
        }
        struct pollfd pfd = {fd, events, 0};
        int n = poll(&pfd, 1, ms);
        if (n > 0) return KDART_OK;
        if (n < 0 && errno != EINTR) {
            snprintf(err, errlen, "poll: %s", strerror(errno));
            return KDART_EIO;
        }
    }
}

static int send_all(int fd, const void *data, size_t n, double deadline, char *err, size_t errlen) {
    const char *p = data;
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int rc = wait_fd(fd, POLLOUT, deadline, err, errlen);
            if (rc) return rc;
            continue;
        }
        snprintf(err, errlen, "sending to the service: %s", strerror(errno));
        return KDART_EIO;
    }
    return KDART_OK;
}

/* Reads exactly n bytes; *eof set when the peer closed before any byte. */
static int recv_all(int fd, void *data, size_t n, double deadline, int *eof, char *err, size_t errlen) {
    char *p = data;
    size_t got = 0;
    if (eof) *eof = 0;
    while (got < n) {
        ssize_t r = recv(fd, p + got, n - got, MSG_DONTWAIT);
        if (r > 0) {
            got += (size_t)r;
            continue;
        }
        if (r == 0) {
            if (eof && got == 0) *eof = 1;
            snprintf(err, errlen, "the service closed the connection%s", got ? " in the middle of a reply" : "");
            return KDART_EIO;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int rc = wait_fd(fd, POLLIN, deadline, err, errlen);
            if (rc) return rc;
            continue;
        }
        snprintf(err, errlen, "reading from the service: %s", strerror(errno));
        return KDART_EIO;
    }
    return KDART_OK;
}

/* Connects to the socket at path; returns the fd or a negative status. */
static int connect_to(const char *path, double deadline, char *err, size_t errlen) {
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (!path || !path[0] || strlen(path) >= sizeof sa.sun_path) {
        snprintf(err, errlen, "socket path '%.200s' is empty or longer than %zu bytes", path ? path : "",
                 sizeof sa.sun_path - 1);
        return KDART_EINVAL;
    }
    memcpy(sa.sun_path, path, strlen(path));
    for (;;) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            snprintf(err, errlen, "socket: %s", strerror(errno));
            return KDART_EIO;
        }
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
            /* Only a service of our own user (or root) is trusted: the
             * socket is 0600, so anything else is not what we meant. */
            struct ucred cred;
            socklen_t cl = sizeof cred;
            if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0 && cred.uid != getuid() && cred.uid != 0) {
                close(fd);
                snprintf(err, errlen, "the service on %s runs as uid %u, not as this user (uid %u)", path,
                         (unsigned)cred.uid, (unsigned)getuid());
                return KDART_EIO;
            }
            return fd;
        }
        int e = errno;
        close(fd);
        if (e == EAGAIN || e == EINTR) { /* backlog full: try again shortly */
            if (deadline > 0 && now_ms() > deadline) {
                snprintf(err, errlen, "timed out connecting to %s", path);
                return KDART_ETIMEDOUT;
            }
            struct timespec ts = {0, 2 * 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        snprintf(err, errlen, "cannot connect to %s: %s", path, strerror(e));
        if (e == ENOENT || e == ENOTDIR) return KDART_ENOENT;
        if (e == ECONNREFUSED) return KDART_EAGAIN;
        return KDART_EIO;
    }
}

static int read_frame(int fd, char **reply, size_t *reply_len, double deadline, int *eof, char *err, size_t errlen) {
    unsigned char hdr[4];
    int rc = recv_all(fd, hdr, 4, deadline, eof, err, errlen);
    if (rc) return rc;
    uint32_t n = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
    if (n > KDART__PROTO_MAX_FRAME) {
        snprintf(err, errlen, "reply frame of %u bytes exceeds %d", n, KDART__PROTO_MAX_FRAME);
        return KDART_EIO;
    }
    char *buf = malloc((size_t)n + 1);
    if (!buf) {
        snprintf(err, errlen, "out of memory");
        return KDART_ENOMEM;
    }
    if ((rc = recv_all(fd, buf, n, deadline, NULL, err, errlen)) != KDART_OK) {
        free(buf);
        return rc;
    }
    buf[n] = 0;
    *reply = buf;
    if (reply_len) *reply_len = n;
    return KDART_OK;
}

/* Sends one request on a fresh connection and reads the first reply frame;
 * returns the fd (still open, for more) with *reply set, or a negative
 * status. */
static int request_reply(const char *path, const char *payload, size_t len, double deadline, char **reply,
                         size_t *reply_len, char *err, size_t errlen) {
    if (len > KDART__PROTO_MAX_FRAME) {
        snprintf(err, errlen, "request of %zu bytes exceeds %d", len, KDART__PROTO_MAX_FRAME);
        return KDART_EINVAL;
    }
    int fd = connect_to(path, deadline, err, errlen);
    if (fd < 0) return fd;
    unsigned char hdr[4] = {(unsigned char)(len >> 24), (unsigned char)(len >> 16), (unsigned char)(len >> 8),
                            (unsigned char)len};
    int rc = send_all(fd, hdr, 4, deadline, err, errlen);
    if (!rc) rc = send_all(fd, payload, len, deadline, err, errlen);
    /* A full service answers EAGAIN and closes without reading: the send
     * may then fail (EPIPE), but the reply is there to read. */
    if (rc == KDART_EIO) {
        char e2[64];
        if (read_frame(fd, reply, reply_len, deadline, NULL, e2, sizeof e2) == KDART_OK) return fd;
    } else if (rc == KDART_OK) {
        rc = read_frame(fd, reply, reply_len, deadline, NULL, err, errlen);
    }
    if (rc) {
        close(fd);
        return rc;
    }
    return fd;
}

int kdart__service_call(const char *path, const char *payload, size_t len, char **reply, size_t *reply_len,
                        int timeout_ms, char *err, size_t errlen) {
    *reply = NULL;
    double deadline = timeout_ms > 0 ? now_ms() + timeout_ms : 0;
    int fd = request_reply(path, payload, len, deadline, reply, reply_len, err, errlen);
    if (fd < 0) return fd;
    close(fd);
    return KDART_OK;
}

/* The message of this thread's last client call that did not end in
 * KDART_OK (kdart_service_error): the handle-less calls have no
 * kdart_last_error, and without it a caller could only print the status's
 * generic text ("file system error" for EACCES and for a foreign uid). */
static _Thread_local char last_error[sizeof((kdart_service_result *)0)->message];

/* Records the outcome of a client call: msg if it failed, "" if not. */
static int note(int rc, const char *msg) {
    snprintf(last_error, sizeof last_error, "%s", rc != KDART_OK && msg ? msg : "");
    return rc;
}

const char *kdart_service_error(void) { return last_error; }

/* ------------------------------------------------------ reply decoding */

typedef struct reply_state {
    kdart_service_result *res;
    int have_status;
} reply_state;

static int reply_kv(void *user, const char *key, const char *value, size_t vlen, char *err, size_t errlen) {
    reply_state *s = user;
    kdart_service_result *r = s->res;
    (void)err;
    (void)errlen;
    if (strcmp(key, "status") == 0) {
        r->status = atoi(value);
        s->have_status = 1;
    } else if (strcmp(key, "message") == 0) {
        snprintf(r->message, sizeof r->message, "%s", value);
    } else if (strcmp(key, "key") == 0 && vlen == 64) {
        memcpy(r->key, value, 65);
    } else if (strcmp(key, "source") == 0) {
        r->source = strcmp(value, "memory") == 0     ? KDART_FROM_MEMORY
                    : strcmp(value, "cache") == 0    ? KDART_FROM_CACHE
                    : strcmp(value, "ro_cache") == 0 ? KDART_FROM_RO_CACHE
                                                     : KDART_FROM_COMPILE;
    } else if (strcmp(key, "compile_ms") == 0) {
        r->compile_ms = atof(value);
    } else if (strcmp(key, "entries") == 0) {
        r->entries = atoi(value);
    } else if (strcmp(key, "compiled") == 0) {
        r->compiled = atoi(value);
    } else if (strcmp(key, "hits") == 0) {
        r->hits = atoi(value);
    } else if (strcmp(key, "failed") == 0) {
        r->failed = atoi(value);
    }
    return KDART_OK;
}

static int parse_reply(const char *reply, size_t len, kdart_service_result *res) {
    reply_state s = {res, 0};
    char err[256];
    int rc = kdart__proto_parse(reply, len, reply_kv, &s, err, sizeof err);
    if (rc == KDART_OK && !s.have_status) {
        snprintf(err, sizeof err, "reply without a status field");
        rc = KDART_EIO;
    }
    if (rc) {
        res->status = KDART_EIO;
        snprintf(res->message, sizeof res->message, "malformed reply from the service: %s", err);
        return KDART_EIO;
    }
    if (res->status > 0 || res->status <= KDART__STATUS_MIN) res->status = KDART_EIO;
    return KDART_OK;
}

/* Builds and sends a request, decodes the reply into res. */
static int call(const char *path, int op, const char *kernel, const char *spec, const char *arch, uint32_t flags,
                int timeout_ms, kdart_service_result *res) {
    kdart_service_result dummy;
    if (!res) res = &dummy;
    memset(res, 0, sizeof *res);
    res->status = KDART_EIO;
    if (!path) {
        snprintf(res->message, sizeof res->message, "socket path is NULL");
        return note(KDART_ENULL, res->message);
    }
    kdart__proto_buf b = {0};
    kdart__proto_putf(&b, "kdart-proto", "%d", KDART__PROTO_VERSION);
    kdart__proto_put(&b, "op", kdart__proto_op_name(op));
    if (kernel && kernel[0]) kdart__proto_put(&b, "kernel", kernel);
    if (spec && spec[0]) kdart__proto_put(&b, "spec", spec);
    if (arch && arch[0]) kdart__proto_put(&b, "arch", arch);
    if (flags & KDART_PREPARE_FORCE) kdart__proto_put(&b, "flags", "force");
    if (b.text.oom || b.overflow) {
        kdart__proto_buf_free(&b);
        snprintf(res->message, sizeof res->message, "request too large or out of memory");
        return note(b.text.oom ? KDART_ENOMEM : KDART_EINVAL, res->message);
    }
    char *reply = NULL;
    size_t rlen = 0;
    int rc = kdart__service_call(path, b.text.s, b.text.len, &reply, &rlen, timeout_ms, res->message, sizeof res->message);
    kdart__proto_buf_free(&b);
    if (rc) return note(rc, res->message);
    rc = parse_reply(reply, rlen, res);
    free(reply);
    note(rc != KDART_OK ? rc : res->status, res->message);
    return rc;
}

int kdart_service_ping(const char *socket_path, int timeout_ms) {
    kdart_service_result r;
    int rc = call(socket_path, KDART__OP_PING, NULL, NULL, NULL, 0, timeout_ms, &r);
    return rc ? rc : r.status;
}

int kdart_service_prepare(const char *socket_path, const char *kernel, const char *spec, const char *arch,
                          uint32_t flags, int timeout_ms, kdart_service_result *out) {
    if (!kernel) {
        if (out) memset(out, 0, sizeof *out), out->status = KDART_ENULL;
        return KDART_ENULL;
    }
    return call(socket_path, KDART__OP_PREPARE, kernel, spec, arch, flags, timeout_ms, out);
}

int kdart_service_prewarm(const char *socket_path, const char *kernel, const char *arch, uint32_t flags,
                          int timeout_ms, kdart_service_result *out) {
    return call(socket_path, KDART__OP_PREWARM, kernel, NULL, arch, flags, timeout_ms, out);
}

int kdart_service_request(const char *socket_path, const char *request, char **reply, int timeout_ms) {
    if (!socket_path || !request || !reply) return note(KDART_ENULL, "NULL argument");
    char err[512];
    int rc = kdart__service_call(socket_path, request, strlen(request), reply, NULL, timeout_ms, err, sizeof err);
    return note(rc, err);
}

int kdart_serve_stop_request(const char *socket_path, int timeout_ms) {
    if (!socket_path) return note(KDART_ENULL, "socket path is NULL");
    char err[sizeof((kdart_service_result *)0)->message] = "";
    double deadline = timeout_ms > 0 ? now_ms() + timeout_ms : 0;
    char payload[64];
    int n = snprintf(payload, sizeof payload, "kdart-proto=%d\nop=stop\n", KDART__PROTO_VERSION);
    char *reply = NULL;
    size_t rlen = 0;
    int fd = request_reply(socket_path, payload, (size_t)n, deadline, &reply, &rlen, err, sizeof err);
    if (fd < 0) return note(fd, err);
    kdart_service_result r;
    memset(&r, 0, sizeof r);
    int rc = parse_reply(reply, rlen, &r);
    if (rc == KDART_OK) rc = r.status;
    snprintf(err, sizeof err, "%s", r.message);
    free(reply);
    /* The service closes this connection last, once its in-flight work is
     * done and its socket is gone: wait for that. */
    if (rc == KDART_OK) {
        char *extra = NULL;
        int eof = 0;
        int r2 = read_frame(fd, &extra, NULL, deadline, &eof, err, sizeof err);
        free(extra);
        if (r2 == KDART_ETIMEDOUT) rc = KDART_ETIMEDOUT;
    }
    close(fd);
    return note(rc, err);
}

/* ----------------------------------------------------------- the hook */

/* 0: no trouble seen, 1: failing (warned).  One warning per outage per
 * process, not one per prepare. */
static atomic_int service_down;

static void service_failed(kdart_rt *rt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void service_failed(kdart_rt *rt, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int was = atomic_exchange(&service_down, 1);
    kdart__log(rt, was ? KDART_LOG_DEBUG : KDART_LOG_WARN, "%s; compiling in this process", msg);
}

static void service_ok(kdart_rt *rt, const char *path) {
    if (atomic_exchange(&service_down, 0)) kdart__log(rt, KDART_LOG_INFO, "compile service %s answers again", path);
}

/* KDART_SERVICE_TIMEOUT: whole seconds, 1 to 2000000 (the int milliseconds
 * the transport takes); anything else, 0 included, is refused with a
 * warning (the same strict reading as every numeric KDART_* variable) and
 * 300 s is used. */
static int service_timeout_ms(const kdart_rt *rt) {
    int64_t s = 0;
    if (!kdart__env_number(rt, "KDART_SERVICE_TIMEOUT", 0, 1, 2000000, &s)) s = 300;
    return (int)(s * 1000);
}

int kdart__service_prepare(void *ctx, kdart_rt *rt, const char *kernel, const char *spec, const char *arch,
                           uint32_t flags, const char *key) {
    if (kdart__service_worker) return KDART_ENOENT;
    const char *path = kdart__env_get((rt->flags & KDART_OPEN_NO_ENV) != 0, "KDART_SERVICE");
    if (!path) return KDART_ENOENT;
    if (!rt->rw || kdart__store_readonly(rt->rw)) {
        service_failed(rt, "compile service %s not used: this process has no writable cache to share with it", path);
        return KDART_ENOENT;
    }
    /* The service may take seconds: let the other threads of this process
     * use the runtime meanwhile (this thread owns the key's flight). */
    char cache_path[1024];
    snprintf(cache_path, sizeof cache_path, "%s", kdart__store_path(rt->rw));
    kdart_service_result res;
    pthread_mutex_unlock(&rt->lock);
    int rc = kdart_service_prepare(path, kernel, spec, arch, flags & KDART_PREPARE_FORCE, service_timeout_ms(rt), &res);
    pthread_mutex_lock(&rt->lock);
    if (rc != KDART_OK) {
        service_failed(rt, "compile service %s unreachable (%s: %.300s)", path, kdart_errname(rc), res.message);
        return KDART_ENOENT;
    }
    int failed_compile = res.status == KDART_ECOMPILE || res.status == KDART_ELINK;
    if (res.status != KDART_OK && !failed_compile) {
        service_failed(rt, "compile service %s answered %s: %.400s", path, kdart_errname(res.status), res.message);
        return KDART_ENOENT;
    }
    if (res.key[0] && strcmp(res.key, key) != 0) {
        service_failed(rt,
                       "compile service %s prepared key %.12s, this process wants %.12s (other kernel sources or "
                       "compiler?)",
                       path, res.key, key);
        return KDART_ENOENT;
    }
    char found[65];
    if (!rt->rw || kdart__store_resolve(rt->rw, key, found) != KDART_OK) {
        service_failed(rt,
                       "compile service %s prepared %.12s, but it is not in this process's cache %s (does the "
                       "service use another cache?)",
                       path, key, cache_path);
        return KDART_ENOENT;
    }
    service_ok(rt, path);
    kdart__log(rt, KDART_LOG_INFO, "compile service %s %s %s %s for %s (key %.12s)", path,
               failed_compile ? "failed to compile" : res.source == KDART_FROM_COMPILE ? "compiled" : "had", kernel,
               spec, arch, key);
    return KDART_OK;
}

/* Every handle that reads the environment gets the hook, and the hook reads
 * KDART_SERVICE at each prepare, so a variable set after kdart_open is
 * still honoured. */
void kdart__client_install(kdart_rt *rt) {
    if (rt->flags & KDART_OPEN_NO_ENV) return;
    rt->remote_prepare = kdart__service_prepare;
    rt->remote_ctx = NULL;
}
