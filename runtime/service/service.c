/*
 * service.c: kdart_serve, the per-node compile service (`kdart serve`).
 *
 * DESIGN.  One libuv loop on the calling thread owns every socket: the
 * listening uv_pipe bound to the socket path, one uv_pipe per client, the
 * signal watchers and one uv_async through which the workers hand results
 * back.  Compiles run on a small pthread pool of the service's own, never
 * on libuv's pool (which also serves file I/O): a worker takes a job from
 * a mutex-guarded queue, calls kdart_prepare (KDART_PREPARE_NO_LOAD), puts
 * the result on the done list and wakes the loop with uv_async_send.  A
 * long compile therefore never delays another client's ping.
 *
 * Jobs are keyed by (kernel, canonical spec, arch, flags); a request for a
 * key that is already queued or compiling waits on that job instead of
 * queueing another, so each key is compiled once however many clients ask
 * at once.  Only the loop thread touches a job's waiters; workers touch
 * only its inputs and results.
 *
 * Connections: frames are read into a per-connection buffer that starts
 * small (READ_CHUNK) and grows only as far as the frame being read needs
 * (at most 4 + 64 KiB), and are handled in order, one at a time: while a
 * request waits for its jobs, reading stops, so a client may pipeline and
 * still gets replies in order.
 *
 * Accepting.  libuv's listener accepts until the backlog is empty, which
 * under a storm of connects never happens, and meanwhile nothing else
 * runs: not the reads that would free slots (a client's EOF), not the
 * pings, not the close phase that frees closed handles.  So a loop
 * iteration admits at most ACCEPT_BATCH connections; the next one, and any
 * that finds every slot taken, is left with libuv (which stops watching
 * the listener until we take it) and decided in the check phase, after
 * this iteration's reads have freed what slots they could: admitted if one
 * is free now, else refused.  A slot is free as soon as its connection is
 * being closed, not only once libuv has finished with it.
 *
 * A refused connection costs no buffer and no conn: it is accepted into
 * the one handle kept for refusals, sent a fixed EAGAIN reply with one
 * non-blocking write from the stack, and closed at once (the fd goes at
 * once; the handle is back for the next iteration after this one's close
 * phase).  One refusal per iteration is plenty: each takes a few
 * microseconds, and refusing many in a row would only refuse connections
 * that the next iteration's EOFs could have served.  Whatever the
 * connection rate, the service's memory stays at the slots' worth.
 *
 * Idle connections: a slot is held only while the client makes use of it.
 * A connection must deliver a complete request within idle_timeout_ms of
 * being accepted or of its last reply being queued (partial frames do not
 * count, so a frame trickled byte by byte is no use); one timer sweeps the
 * connections a few times per timeout and closes the late ones with an
 * ETIMEDOUT reply (or without one, when it does not read its replies).  A
 * connection waiting for its compiles is not idle, and neither is the one
 * that asked the service to stop.
 *
 * Malformed payloads get an error reply and the connection stays; framing
 * errors (a length over 64 KiB, a frame cut short by EOF) get an error
 * reply and the connection is closed.
 *
 * Shutdown (SIGTERM, SIGINT, or a stop request): close the listener and
 * remove the socket file (only if it is still ours: same inode), answer
 * queued jobs with ECANCELED, let running compiles finish and answer them,
 * then shut every connection down (pending replies flushed), close the
 * remaining handles, join the workers and return.  The connection that
 * asked to stop is closed last of all, which is how the asker knows the
 * service is done.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <uv.h>

#include "service.h"

#define FRAME_HDR 4
#define CONN_BUF (FRAME_HDR + KDART__PROTO_MAX_FRAME)
/* What a connection's read buffer starts with: requests are a few hundred
 * bytes, so most connections never grow it. */
#define READ_CHUNK 4096
/* Connections admitted per loop iteration, at most: one batch costs well
 * under a millisecond, and a burst of clients is admitted in a few
 * iterations. */
#define ACCEPT_BATCH 64
/* Replies not yet written to a client that does not read them: past this
 * many the service stops reading its requests, so a client cannot make it
 * buffer without bound. */
#define MAX_QUEUED_REPLIES 16

typedef struct service service;
typedef struct conn conn;
typedef struct job job;

typedef struct waiter {
    struct waiter *next;
    conn *c;
} waiter;

struct job {
    job *next_queue;  /* queue or done list (under svc->mu) */
    job *next_active; /* active list (loop thread) */
    char kernel[64];
    char spec[256];   /* canonical */
    char arch[32];    /* "" : the runtime's default */
    uint32_t flags;
    /* results, written by the worker */
    int status;
    char key[65];
    int source;
    double compile_ms;
    char *message;
    /* loop thread */
    waiter *waiters;
};

struct conn {
    uv_pipe_t pipe;      /* first: the handle's address is the conn's */
    service *svc;
    conn *next, *prev;   /* svc->conns */
    int refs;            /* the open handle + one per waiter */
    int closing;         /* uv_close called or about to be */
    int close_after_write;
    int writes_pending;
    int reading;
    int shut;            /* uv_shutdown issued */
    int stop_asker;      /* sent "stop": closed last */
    int in_process;      /* conn_process is on the stack (no re-entry) */
    int timed_out;       /* the idle sweep answered ETIMEDOUT; the next sweep closes */
    uint64_t since;      /* uv_now when it began waiting for a request (idle clock) */
    /* the request being served (one at a time) */
    int busy;
    int pending;         /* jobs still to answer */
    kdart__proto_req req;
    int entries, compiled, hits, failed, first_status;
    char *first_message;
    job *single;         /* prepare: the one job's result holder */
    int single_status;
    char single_key[65];
    int single_source;
    double single_ms;
    char *single_message;
    size_t len;          /* bytes in buf */
    size_t cap;          /* buf's size: 0 until the first read */
    unsigned char *buf;
};

struct service {
    kdart_rt *rt;
    const char *path;
    uv_loop_t loop;
    uv_pipe_t server;
    uv_signal_t sigterm, sigint;
    uv_async_t wake;
    uv_timer_t sweep;  /* the idle sweep */
    uv_check_t decide; /* each iteration: takes the connection left with libuv */
    uv_pipe_t refuser; /* the handle refused connections are accepted into */
    int have_server, have_signals, have_wake, have_sweep, have_decide;
    dev_t sock_dev;
    ino_t sock_ino;
    int stopping, finished;
    const char *stop_reason;
    int max_clients;
    uint64_t idle_ms;  /* idle_timeout_ms */
    conn *conns;
    int nconns;      /* in svc->conns, closing or not */
    int held;        /* not closing: the slots in use (max_clients) */
    int batch;       /* connections admitted in this loop iteration */
    int deferred;    /* a connection waits in libuv for uv_accept, for decide_cb */
    int refusing;    /* refuser is closing */
    job *active;     /* loop thread: jobs queued or running */
    /* worker pool */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *queue_head, *queue_tail; /* under mu */
    job *done;                    /* under mu */
    int running;                  /* under mu: jobs being compiled */
    int quit;                     /* under mu */
    pthread_t *threads;
    int nthreads;
    double t0;
    const char *cache_path, *default_arch; /* from kdart_info, owned by rt */
    /* statistics (loop thread) */
    long long st_connections, st_requests, st_errors, st_prepares, st_compiled, st_hits, st_failed, st_coalesced,
        st_canceled, st_rejected;
};

static void conn_release(conn *c);
static void conn_process(conn *c);
static void maybe_finish(service *svc);

/* -------------------------------------------------------------- workers */

static void *worker_main(void *arg) {
    service *svc = arg;
    kdart__service_worker = 1;
    pthread_mutex_lock(&svc->mu);
    for (;;) {
        while (!svc->quit && !svc->queue_head) pthread_cond_wait(&svc->cv, &svc->mu);
        if (!svc->queue_head) break; /* quit and nothing queued */
        job *j = svc->queue_head;
        svc->queue_head = j->next_queue;
        if (!svc->queue_head) svc->queue_tail = NULL;
        j->next_queue = NULL;
        svc->running++;
        pthread_mutex_unlock(&svc->mu);

        kdart_prepared p;
        memset(&p, 0, sizeof p);
        j->status = kdart_prepare(svc->rt, j->kernel, j->spec, j->arch[0] ? j->arch : NULL,
                                  KDART_PREPARE_NO_LOAD | j->flags, &p);
        memcpy(j->key, p.key, sizeof j->key);
        j->source = p.source;
        j->compile_ms = p.compile_ms;
        if (j->status != KDART_OK) j->message = kdart__strdup(kdart_last_error(svc->rt));

        pthread_mutex_lock(&svc->mu);
        svc->running--;
        j->next_queue = svc->done;
        svc->done = j;
        pthread_mutex_unlock(&svc->mu);
        uv_async_send(&svc->wake);
        pthread_mutex_lock(&svc->mu);
    }
    pthread_mutex_unlock(&svc->mu);
    return NULL;
}

/* ---------------------------------------------------------------- writes */

typedef struct write_req {
    uv_write_t req;
    conn *c;
    size_t len;
    unsigned char data[];
} write_req;

static void close_cb(uv_handle_t *h) {
    conn *c = (conn *)h;
    service *svc = c->svc;
    if (c->prev)
        c->prev->next = c->next;
    else
        svc->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    c->next = c->prev = NULL;
    svc->nconns--;
    conn_release(c);
    maybe_finish(svc);
}

static void conn_close(conn *c) {
    if (c->closing) return;
    c->closing = 1;
    c->svc->held--; /* nothing more is read or served: the slot is free */
    if (!uv_is_closing((uv_handle_t *)&c->pipe)) uv_close((uv_handle_t *)&c->pipe, close_cb);
}

static void write_cb(uv_write_t *req, int status) {
    write_req *w = (write_req *)req;
    conn *c = w->c;
    kdart__free(w);
    c->writes_pending--;
    if (status < 0 && status != UV_ECANCELED) conn_close(c);
    else if (c->close_after_write && c->writes_pending == 0) conn_close(c);
    else if (!c->closing && c->writes_pending == MAX_QUEUED_REPLIES - 1) conn_process(c); /* resume */
    conn_release(c);
}

/* Sends a reply frame; on failure the connection is closed. */
static void conn_send(conn *c, kdart__proto_buf *b) {
    if (c->closing || b->text.oom) {
        if (b->text.oom) conn_close(c);
        return;
    }
    write_req *w = kdart__malloc(sizeof *w + FRAME_HDR + b->text.len);
    if (!w) {
        conn_close(c);
        return;
    }
    w->c = c;
    w->len = FRAME_HDR + b->text.len;
    w->data[0] = (unsigned char)(b->text.len >> 24);
    w->data[1] = (unsigned char)(b->text.len >> 16);
    w->data[2] = (unsigned char)(b->text.len >> 8);
    w->data[3] = (unsigned char)b->text.len;
    memcpy(w->data + FRAME_HDR, b->text.s, b->text.len);
    uv_buf_t ub = uv_buf_init((char *)w->data, (unsigned)w->len);
    c->refs++;
    c->writes_pending++;
    if (uv_write(&w->req, (uv_stream_t *)&c->pipe, &ub, 1, write_cb) != 0) {
        c->refs--;
        c->writes_pending--;
        kdart__free(w);
        conn_close(c);
    }
}

static void reply_head(kdart__proto_buf *b, const kdart__proto_req *req, int status) {
    kdart__proto_putf(b, "kdart-proto", "%d", KDART__PROTO_VERSION);
    if (req && req->id[0]) kdart__proto_put(b, "id", req->id);
    if (req && req->op) kdart__proto_put(b, "op", kdart__proto_op_name(req->op));
    kdart__proto_putf(b, "status", "%d", status);
    kdart__proto_put(b, "status_name", kdart_errname(status));
}

/* An error reply; close: a framing error, the connection cannot go on. */
static void conn_error(conn *c, const kdart__proto_req *req, int status, const char *msg, int close) {
    kdart__proto_buf b = {0};
    reply_head(&b, req, status);
    kdart__proto_put_trunc(&b, "message", msg);
    c->svc->st_errors++;
    if (close) c->close_after_write = 1;
    conn_send(c, &b);
    kdart__proto_buf_free(&b);
    if (close && c->writes_pending == 0) conn_close(c);
}

static const char *source_name(int s) {
    switch (s) {
    case KDART_FROM_MEMORY: return "memory";
    case KDART_FROM_CACHE: return "cache";
    case KDART_FROM_RO_CACHE: return "ro_cache";
    default: return "compile";
    }
}

/* ------------------------------------------------------------------ jobs */

/* Adds c as a waiter of the job for (kernel, spec, arch, flags), creating
 * and queueing it when none is active.  spec is canonical. */
static int job_want(service *svc, conn *c, const char *kernel, const char *spec, const char *arch, uint32_t flags) {
    waiter *w = kdart__calloc(1, sizeof *w);
    if (!w) return KDART_ENOMEM;
    job *j;
    for (j = svc->active; j; j = j->next_active)
        if (strcmp(j->kernel, kernel) == 0 && strcmp(j->spec, spec) == 0 && strcmp(j->arch, arch) == 0 &&
            j->flags == flags)
            break;
    if (j) {
        svc->st_coalesced++;
    } else {
        j = kdart__calloc(1, sizeof *j);
        if (!j) {
            kdart__free(w);
            return KDART_ENOMEM;
        }
        snprintf(j->kernel, sizeof j->kernel, "%s", kernel);
        snprintf(j->spec, sizeof j->spec, "%s", spec);
        snprintf(j->arch, sizeof j->arch, "%s", arch);
        j->flags = flags;
        j->next_active = svc->active;
        svc->active = j;
        pthread_mutex_lock(&svc->mu);
        if (svc->queue_tail)
            svc->queue_tail->next_queue = j;
        else
            svc->queue_head = j;
        svc->queue_tail = j;
        pthread_cond_signal(&svc->cv);
        pthread_mutex_unlock(&svc->mu);
    }
    w->c = c;
    w->next = j->waiters;
    j->waiters = w;
    c->refs++;
    c->pending++;
    svc->st_prepares++;
    return KDART_OK;
}

/* Sends the reply of c's current request and moves on to its next frame. */
static void conn_finish_request(conn *c) {
    kdart__proto_req *req = &c->req;
    kdart__proto_buf b = {0};
    if (req->op == KDART__OP_PREPARE) {
        reply_head(&b, req, c->single_status);
        if (c->single_key[0]) kdart__proto_put(&b, "key", c->single_key);
        if (c->single_status == KDART_OK) kdart__proto_put(&b, "source", source_name(c->single_source));
        kdart__proto_putf(&b, "compile_ms", "%.3f", c->single_ms);
        kdart__proto_put_trunc(&b, "message", c->single_message ? c->single_message : "");
    } else { /* prewarm */
        int st = c->failed ? (c->first_status ? c->first_status : KDART_ECOMPILE) : KDART_OK;
        reply_head(&b, req, st);
        kdart__proto_putf(&b, "entries", "%d", c->entries);
        kdart__proto_putf(&b, "compiled", "%d", c->compiled);
        kdart__proto_putf(&b, "hits", "%d", c->hits);
        kdart__proto_putf(&b, "failed", "%d", c->failed);
        kdart__proto_put_trunc(&b, "message", c->first_message ? c->first_message : "");
    }
    if (c->single_status != KDART_OK && req->op == KDART__OP_PREPARE) c->svc->st_errors++;
    conn_send(c, &b);
    kdart__proto_buf_free(&b);
    kdart__free(c->single_message);
    kdart__free(c->first_message);
    c->single_message = c->first_message = NULL;
    c->busy = 0;
    c->since = uv_now(&c->svc->loop);
    if (!c->closing) conn_process(c);
}

static void job_free(job *j) {
    kdart__free(j->message);
    kdart__free(j);
}

/* The finished jobs, taken off the shared list under the lock. */
static job *take_done(service *svc) {
    pthread_mutex_lock(&svc->mu);
    job *list = svc->done;
    svc->done = NULL;
    pthread_mutex_unlock(&svc->mu);
    return list;
}

/* Hands a finished (or canceled) job's result to its waiters, frees it. */
static void job_deliver(service *svc, job *j) {
    for (job **pp = &svc->active; *pp; pp = &(*pp)->next_active)
        if (*pp == j) {
            *pp = j->next_active;
            break;
        }
    if (j->status == KDART_OK && j->source == KDART_FROM_COMPILE) svc->st_compiled++;
    else if (j->status == KDART_OK) svc->st_hits++;
    else if (j->status == KDART_ECANCELED) svc->st_canceled++;
    else svc->st_failed++;
    for (waiter *w = j->waiters, *next; w; w = next) {
        next = w->next;
        conn *c = w->c;
        kdart__free(w);
        if (c->busy && c->pending > 0) {
            c->pending--;
            if (c->req.op == KDART__OP_PREPARE) {
                c->single_status = j->status;
                memcpy(c->single_key, j->key, sizeof c->single_key);
                c->single_source = j->source;
                c->single_ms = j->compile_ms;
                kdart__free(c->single_message);
                c->single_message = j->message ? kdart__strdup(j->message) : NULL;
            } else {
                c->entries++;
                if (j->status == KDART_OK && j->source == KDART_FROM_COMPILE) c->compiled++;
                else if (j->status == KDART_OK) c->hits++;
                else {
                    if (!c->failed++) {
                        c->first_status = j->status;
                        char m[1200];
                        snprintf(m, sizeof m, "%s %s %s: %s", j->kernel, j->spec, j->arch[0] ? j->arch : "(default)",
                                 j->message ? j->message : kdart_errname(j->status));
                        c->first_message = kdart__strdup(m);
                    }
                }
            }
            if (c->pending == 0 && !c->closing) conn_finish_request(c);
        }
        conn_release(c);
    }
    job_free(j);
}

static void wake_cb(uv_async_t *a) {
    service *svc = a->data;
    job *list = take_done(svc);
    while (list) {
        job *j = list;
        list = j->next_queue;
        job_deliver(svc, j);
    }
    maybe_finish(svc);
}

/* -------------------------------------------------------------- requests */

static void handle_stats(conn *c) {
    service *svc = c->svc;
    kdart__proto_buf b = {0};
    pthread_mutex_lock(&svc->mu);
    int running = svc->running, queued = 0;
    for (job *j = svc->queue_head; j; j = j->next_queue) queued++;
    pthread_mutex_unlock(&svc->mu);
    reply_head(&b, &c->req, KDART_OK);
    kdart__proto_putf(&b, "pid", "%ld", (long)getpid());
    kdart__proto_put(&b, "version", kdart_version());
    kdart__proto_putf(&b, "uptime_s", "%.1f", (kdart__now_ms() - svc->t0) / 1000.0);
    kdart__proto_putf(&b, "jobs", "%d", svc->nthreads);
    kdart__proto_putf(&b, "clients", "%d", svc->held);
    kdart__proto_putf(&b, "connections", "%lld", svc->st_connections);
    kdart__proto_putf(&b, "rejected", "%lld", svc->st_rejected);
    kdart__proto_putf(&b, "requests", "%lld", svc->st_requests);
    kdart__proto_putf(&b, "errors", "%lld", svc->st_errors);
    kdart__proto_putf(&b, "prepares", "%lld", svc->st_prepares);
    kdart__proto_putf(&b, "coalesced", "%lld", svc->st_coalesced);
    kdart__proto_putf(&b, "compiled", "%lld", svc->st_compiled);
    kdart__proto_putf(&b, "hits", "%lld", svc->st_hits);
    kdart__proto_putf(&b, "failed", "%lld", svc->st_failed);
    kdart__proto_putf(&b, "canceled", "%lld", svc->st_canceled);
    kdart__proto_putf(&b, "running", "%d", running);
    kdart__proto_putf(&b, "queued", "%d", queued);
    kdart__proto_put(&b, "cache", svc->cache_path);
    kdart__proto_put(&b, "default_arch", svc->default_arch);
    conn_send(c, &b);
    kdart__proto_buf_free(&b);
}

static void begin_shutdown(service *svc, const char *why);

/* Starts the jobs of a prepare or prewarm request; 0 if it was answered
 * at once (an error), 1 if it now waits for jobs. */
static int start_compile(conn *c) {
    service *svc = c->svc;
    kdart__proto_req *req = &c->req;
    char err[512];
    if (svc->stopping) {
        conn_error(c, req, KDART_ECANCELED, "the service is stopping", 0);
        return 0;
    }
    /* Validate everything before queueing anything. */
    const char *arches[16];
    int narch = 0;
    char archbuf[sizeof req->arch];
    snprintf(archbuf, sizeof archbuf, "%s", req->arch);
    char *save = NULL;
    for (char *t = strtok_r(archbuf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (narch == 16 || (req->op == KDART__OP_PREPARE && narch == 1)) {
            conn_error(c, req, KDART_EARCH,
                       req->op == KDART__OP_PREPARE ? "prepare takes one arch" : "at most 16 arches", 0);
            return 0;
        }
        /* Refused here, before any compile: nothing is recorded for it.  A
         * supported arch ("sm_100a") fits the job's arch[]. */
        if (kdart__arch_supported(t, err, sizeof err) != KDART_OK) {
            conn_error(c, req, KDART_EARCH, err, 0);
            return 0;
        }
        arches[narch++] = t;
    }
    if (narch == 0) arches[narch++] = svc->default_arch;
    int k0 = 0, k1 = kdart_kernel_count();
    if (req->kernel[0]) {
        for (k0 = 0; k0 < k1; k0++)
            if (strcmp(kdart_kernel_name(k0), req->kernel) == 0) break;
        if (k0 == k1) {
            snprintf(err, sizeof err, "no kernel named '%.64s'", req->kernel);
            conn_error(c, req, KDART_EKERNEL, err, 0);
            return 0;
        }
        k1 = k0 + 1;
    }
    char canon[256];
    if (req->op == KDART__OP_PREPARE || req->spec[0]) {
        int rc = kdart_spec_canonical(req->kernel, req->spec, canon, sizeof canon);
        if (rc < 0) {
            snprintf(err, sizeof err, "'%.200s' is not a specialization of %s (parameters: %s)", req->spec,
                     req->kernel, kdart_kernel_params(req->kernel));
            conn_error(c, req, rc, err, 0);
            return 0;
        }
    }
    c->busy = 1;
    c->pending = 0;
    c->entries = c->compiled = c->hits = c->failed = c->first_status = 0;
    c->single_status = KDART_OK;
    c->single_key[0] = 0;
    c->single_source = 0;
    c->single_ms = 0;
    /* The waiter count is held up by one while queueing, so that a job
     * finishing at once cannot complete the request half-way. */
    c->pending++;
    int rc = KDART_OK;
    for (int k = k0; k < k1 && rc == KDART_OK; k++) {
        const char *name = kdart_kernel_name(k);
        int nspec = (req->op == KDART__OP_PREPARE || req->spec[0]) ? 1 : kdart_spec_count(name);
        for (int s = 0; s < nspec && rc == KDART_OK; s++) {
            char spec[256];
            if (req->op == KDART__OP_PREPARE || req->spec[0])
                snprintf(spec, sizeof spec, "%s", canon);
            else if (kdart_spec_prewarmed(name, s) != 1 || kdart_spec_at(name, s, spec, sizeof spec) < 0)
                continue; /* the default set only (as kdart prewarm without --all) */
            for (int a = 0; a < narch && rc == KDART_OK; a++) rc = job_want(svc, c, name, spec, arches[a], req->flags);
        }
    }
    c->pending--;
    if (rc != KDART_OK) {
        /* Jobs already queued still answer into this request; report the
         * failure as its first one. */
        c->failed++;
        c->entries++;
        if (!c->first_status) c->first_status = rc;
        c->single_status = rc;
    }
    if (c->pending == 0) {
        conn_finish_request(c);
        return 0;
    }
    return 1;
}

/* Handles one complete frame payload. */
static void handle_frame(conn *c, const unsigned char *payload, size_t len) {
    service *svc = c->svc;
    char err[512];
    svc->st_requests++;
    int rc = kdart__proto_decode_request(payload, len, &c->req, err, sizeof err);
    if (rc != KDART_OK) {
        kdart__proto_req none;
        memset(&none, 0, sizeof none);
        conn_error(c, &none, rc, err, 0);
        return;
    }
    switch (c->req.op) {
    case KDART__OP_PING: {
        kdart__proto_buf b = {0};
        reply_head(&b, &c->req, KDART_OK);
        kdart__proto_putf(&b, "pid", "%ld", (long)getpid());
        kdart__proto_put(&b, "version", kdart_version());
        kdart__proto_put(&b, "message", svc->stopping ? "stopping" : "pong");
        conn_send(c, &b);
        kdart__proto_buf_free(&b);
        break;
    }
    case KDART__OP_STATS: handle_stats(c); break;
    case KDART__OP_STOP: {
        kdart__proto_buf b = {0};
        reply_head(&b, &c->req, KDART_OK);
        kdart__proto_put(&b, "message", "stopping");
        conn_send(c, &b);
        kdart__proto_buf_free(&b);
        c->stop_asker = 1;
        begin_shutdown(svc, "a stop request");
        break;
    }
    case KDART__OP_PREPARE:
    case KDART__OP_PREWARM: start_compile(c); break;
    default: conn_error(c, &c->req, KDART_EINVAL, "unknown op", 0); break;
    }
}

/* ------------------------------------------------------------ connections */

static void conn_release(conn *c) {
    if (--c->refs == 0) {
        kdart__free(c->single_message);
        kdart__free(c->first_message);
        kdart__free(c->buf);
        kdart__free(c);
    }
}

/* The big-endian length at the start of a frame. */
static uint32_t frame_len(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Room for the next read: the rest of the frame whose length is in the
 * buffer, else READ_CHUNK more.  A failed allocation hands libuv an empty
 * buffer, which it reports as UV_ENOBUFS: read_cb closes. */
static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    conn *c = (conn *)h;
    (void)suggested;
    size_t need = c->len + READ_CHUNK;
    if (c->len >= FRAME_HDR) {
        uint32_t n = frame_len(c->buf);
        if (n <= KDART__PROTO_MAX_FRAME && FRAME_HDR + n > need) need = FRAME_HDR + n;
    }
    if (need > CONN_BUF) need = CONN_BUF;
    if (need > c->cap) {
        unsigned char *b = kdart__realloc(c->buf, need);
        if (!b) {
            *buf = uv_buf_init(NULL, 0);
            return;
        }
        c->buf = b;
        c->cap = need;
    }
    *buf = uv_buf_init((char *)c->buf + c->len, (unsigned)(c->cap - c->len));
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
    conn *c = (conn *)s;
    (void)buf;
    if (nread == 0) return;
    if (nread < 0) {
        uv_read_stop(s);
        c->reading = 0;
        if (nread == UV_EOF && c->len > 0 && !c->busy)
            conn_error(c, NULL, KDART_EINVAL, "connection closed in the middle of a frame", 1);
        else if (nread == UV_EOF && c->writes_pending)
            c->close_after_write = 1; /* flush the replies, then close */
        else
            conn_close(c);
        return;
    }
    c->len += (size_t)nread;
    conn_process(c);
}

/* Handles the complete frames in c's buffer, in order, until one has to
 * wait for compiles; reads more when the buffer holds no complete frame. */
static void conn_process(conn *c) {
    /* A request answered while its frame is being handled (an error found
     * after validation) must not make a nested call handle that frame
     * again: the outer call carries on with the next one. */
    if (c->in_process) return;
    c->in_process = 1;
    while (!c->busy && !c->closing && !c->close_after_write && c->writes_pending < MAX_QUEUED_REPLIES &&
           c->len >= FRAME_HDR) {
        uint32_t n = frame_len(c->buf);
        if (n > KDART__PROTO_MAX_FRAME) {
            char m[128];
            snprintf(m, sizeof m, "frame of %u bytes exceeds the limit of %d", n, KDART__PROTO_MAX_FRAME);
            c->len = 0;
            conn_error(c, NULL, KDART_EINVAL, m, 1);
            break;
        }
        if (c->len < FRAME_HDR + n) break;
        handle_frame(c, c->buf + FRAME_HDR, n);
        c->since = uv_now(&c->svc->loop); /* answered, or busy: the clock starts again */
        if (c->closing) break;
        memmove(c->buf, c->buf + FRAME_HDR + n, c->len - FRAME_HDR - n);
        c->len -= FRAME_HDR + n;
    }
    if (c->len == 0 && c->cap > READ_CHUNK) { /* a large frame is done: give its buffer back */
        kdart__free(c->buf);
        c->buf = NULL;
        c->cap = 0;
    }
    int want = !c->busy && !c->closing && !c->close_after_write && !c->shut && c->writes_pending < MAX_QUEUED_REPLIES;
    if (want && !c->reading) {
        if (uv_read_start((uv_stream_t *)&c->pipe, alloc_cb, read_cb) == 0) c->reading = 1;
        else conn_close(c);
    } else if (!want && c->reading) {
        uv_read_stop((uv_stream_t *)&c->pipe);
        c->reading = 0;
    }
    c->in_process = 0;
}

static void refused_close_cb(uv_handle_t *h) {
    service *svc = h->data;
    svc->refusing = 0;
}

/* The connection libuv holds, over max_clients (answer set: answered
 * EAGAIN) or one that could not get a conn: closed at once, with nothing
 * allocated.  The reply is written from the stack, or not at all when the
 * socket cannot take it at once (the client then sees just the close). */
static void refuse(service *svc, int answer) {
    uv_pipe_t *p = &svc->refuser;
    uv_pipe_init(&svc->loop, p, 0);
    p->data = svc;
    svc->refusing = 1;
    svc->st_connections++;
    svc->st_rejected++;
    svc->st_errors++;
    if (uv_accept((uv_stream_t *)&svc->server, (uv_stream_t *)p) == 0 && answer) {
        char frame[FRAME_HDR + 256];
        int n = snprintf(frame + FRAME_HDR, sizeof frame - FRAME_HDR,
                         "kdart-proto=%d\nstatus=%d\nstatus_name=%s\nclients=%d\nmax_clients=%d\n"
                         "message=the service is full (%d clients); try again\n",
                         KDART__PROTO_VERSION, KDART_EAGAIN, kdart_errname(KDART_EAGAIN), svc->held,
                         svc->max_clients, svc->held);
        frame[0] = frame[1] = 0;
        frame[2] = (char)(n >> 8);
        frame[3] = (char)n;
        uv_buf_t b = uv_buf_init(frame, (unsigned)(FRAME_HDR + n));
        (void)uv_try_write((uv_stream_t *)p, &b, 1);
    }
    uv_close((uv_handle_t *)p, refused_close_cb); /* the fd is closed here and now */
}

/* Takes the connection libuv holds into a new conn, if a slot is free and
 * memory allows; 0 if not (it stays with libuv). */
static int admit(service *svc) {
    if (svc->held >= svc->max_clients) return 0;
    conn *c = kdart__calloc(1, sizeof *c);
    if (!c) return 0;
    if (uv_pipe_init(&svc->loop, &c->pipe, 0) != 0) {
        kdart__free(c);
        return 0;
    }
    c->svc = svc;
    c->refs = 1;
    c->next = svc->conns;
    if (svc->conns) svc->conns->prev = c;
    svc->conns = c;
    svc->nconns++;
    svc->held++;
    if (uv_accept((uv_stream_t *)&svc->server, (uv_stream_t *)&c->pipe) != 0) {
        conn_close(c);
        return 1;
    }
    svc->st_connections++;
    c->since = uv_now(&svc->loop);
    conn_process(c);
    return 1;
}

/* In the poll phase, as libuv accepts each connection. */
static void on_connection(uv_stream_t *server, int status) {
    service *svc = server->data;
    if (status < 0 || svc->stopping) return;
    if (svc->batch < ACCEPT_BATCH && admit(svc)) {
        svc->batch++;
        return;
    }
    svc->deferred = 1; /* libuv keeps it and stops accepting: decide_cb takes it */
}

/* The check phase, after the poll phase's reads and writes: the batch is
 * over, and the connection left with libuv is admitted (a slot may have
 * been freed since) or refused, which lets libuv accept again. */
static void decide_cb(uv_check_t *h) {
    service *svc = h->data;
    svc->batch = 0;
    if (!svc->deferred || svc->stopping) return;
    if (admit(svc)) {
        svc->batch++;
    } else if (!svc->refusing) { /* refuser comes back in this iteration's close phase: never seen busy here */
        refuse(svc, svc->held >= svc->max_clients); /* else out of memory: dropped, not left with libuv */
    } else {
        return;
    }
    svc->deferred = 0;
}

/* Closes the connections that kept their slot idle for idle_ms: first an
 * ETIMEDOUT reply (the client learns why), and on the next sweep, if that
 * reply could not be flushed either, the connection itself. */
static void sweep_cb(uv_timer_t *t) {
    service *svc = t->data;
    uint64_t now = uv_now(&svc->loop);
    for (conn *c = svc->conns, *next; c; c = next) {
        next = c->next; /* closing only marks c; close_cb unlinks it later */
        if (c->closing || c->busy || c->stop_asker || c->shut || now - c->since < svc->idle_ms) continue;
        if (c->timed_out || c->writes_pending) {
            conn_close(c); /* it does not read: no reply would get through */
            continue;
        }
        char m[160];
        snprintf(m, sizeof m, "no complete request for %llu ms; closing the connection",
                 (unsigned long long)svc->idle_ms);
        c->timed_out = 1;
        conn_error(c, NULL, KDART_ETIMEDOUT, m, 1);
    }
}

/* ------------------------------------------------------------- shutdown */

static void shutdown_cb(uv_shutdown_t *req, int status) {
    conn *c = req->data;
    (void)status;
    kdart__free(req);
    conn_close(c);
    conn_release(c);
}

/* Flushes c's replies, then closes it. */
static void conn_shutdown(conn *c) {
    if (c->closing || c->shut) return;
    c->shut = 1;
    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->pipe);
        c->reading = 0;
    }
    uv_shutdown_t *req = kdart__malloc(sizeof *req);
    if (!req) {
        conn_close(c);
        return;
    }
    req->data = c;
    c->refs++;
    if (uv_shutdown(req, (uv_stream_t *)&c->pipe, shutdown_cb) != 0) {
        kdart__free(req);
        c->refs--;
        conn_close(c);
    }
}

static void unlink_ours(service *svc) {
    struct stat st;
    if (lstat(svc->path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == svc->sock_dev &&
        st.st_ino == svc->sock_ino)
        unlink(svc->path);
}

static void begin_shutdown(service *svc, const char *why) {
    if (svc->stopping) return;
    svc->stopping = 1;
    svc->stop_reason = why;
    kdart__log(svc->rt, KDART_LOG_INFO, "compile service %s: stopping (%s)", svc->path, why);
    if (svc->have_server && !uv_is_closing((uv_handle_t *)&svc->server)) uv_close((uv_handle_t *)&svc->server, NULL);
    unlink_ours(svc);
    /* Queued jobs are answered ECANCELED; running ones finish. */
    pthread_mutex_lock(&svc->mu);
    job *q = svc->queue_head;
    svc->queue_head = svc->queue_tail = NULL;
    pthread_mutex_unlock(&svc->mu);
    while (q) {
        job *j = q;
        q = j->next_queue;
        j->status = KDART_ECANCELED;
        j->message = kdart__strdup("ECANCELED: the service is stopping");
        job_deliver(svc, j);
    }
    maybe_finish(svc);
}

/* The last step of a shutdown, once no job is left. */
static void maybe_finish(service *svc) {
    if (!svc->stopping || svc->finished) return;
    if (svc->active) return; /* compiles still running: their replies first */
    /* Every connection but the stop asker's, then that one. */
    int open_others = 0;
    for (conn *c = svc->conns; c; c = c->next)
        if (!c->stop_asker) {
            conn_shutdown(c);
            open_others++;
        }
    if (open_others) return; /* called again from their close_cb */
    for (conn *c = svc->conns; c; c = c->next) conn_shutdown(c);
    if (svc->conns) return;
    svc->finished = 1;
    if (svc->have_wake) uv_close((uv_handle_t *)&svc->wake, NULL);
    if (svc->have_sweep) uv_close((uv_handle_t *)&svc->sweep, NULL);
    if (svc->have_decide) uv_close((uv_handle_t *)&svc->decide, NULL);
    if (svc->have_signals) {
        uv_close((uv_handle_t *)&svc->sigterm, NULL);
        uv_close((uv_handle_t *)&svc->sigint, NULL);
    }
}

static void signal_cb(uv_signal_t *s, int signum) {
    service *svc = s->data;
    begin_shutdown(svc, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* ------------------------------------------------------------- binding */

/* Creates the listening socket at path, mode 0600: returns the fd or a
 * negative status (message set on rt). */
static int bind_socket(service *svc) {
    kdart_rt *rt = svc->rt;
    const char *path = svc->path;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof sa.sun_path)
        return kdart__err(rt, KDART_EINVAL, "socket path '%s' is longer than %zu bytes", path, sizeof sa.sun_path - 1);
    memcpy(sa.sun_path, path, strlen(path));

    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            return kdart__err(rt, KDART_EINVAL, "%s exists and is not a socket; not touching it", path);
        int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (probe < 0) return kdart__err(rt, KDART_EIO, "socket: %s", strerror(errno));
        int r = connect(probe, (struct sockaddr *)&sa, sizeof sa);
        int e = errno;
        close(probe);
        if (r == 0 || e == EAGAIN)
            return kdart__err(rt, KDART_EAGAIN, "another compile service is listening on %s", path);
        if (e != ECONNREFUSED)
            return kdart__err(rt, KDART_EIO, "cannot probe the existing socket %s: %s", path, strerror(e));
        kdart__log(rt, KDART_LOG_INFO, "removing the stale socket %s (nobody listens on it)", path);
        if (unlink(path) != 0 && errno != ENOENT)
            return kdart__err(rt, KDART_EIO, "cannot remove the stale socket %s: %s", path, strerror(errno));
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return kdart__err(rt, KDART_EIO, "socket: %s", strerror(errno));
    /* On Linux the mode of an unbound socket's inode becomes the mode of
     * the file bind() creates: no window in which others could connect,
     * and no process-wide umask change. */
    if (fchmod(fd, 0600) != 0) {
        int e = errno;
        close(fd);
        return kdart__err(rt, KDART_EIO, "fchmod on the socket: %s", strerror(e));
    }
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int e = errno;
        close(fd);
        return kdart__err(rt, e == EADDRINUSE ? KDART_EAGAIN : KDART_EIO, "cannot bind %s: %s", path, strerror(e));
    }
    if (chmod(path, 0600) != 0 || lstat(path, &st) != 0 || listen(fd, 512) != 0) {
        int e = errno;
        close(fd);
        unlink(path);
        return kdart__err(rt, KDART_EIO, "cannot listen on %s: %s", path, strerror(e));
    }
    svc->sock_dev = st.st_dev;
    svc->sock_ino = st.st_ino;
    return fd;
}

/* -------------------------------------------------------------- the API */

void kdart_serve_options_init(kdart_serve_options *opts) {
    if (!opts) return;
    memset(opts, 0, sizeof *opts);
    opts->struct_size = sizeof *opts;
}

static void close_walk_cb(uv_handle_t *h, void *arg) {
    (void)arg;
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

int kdart_serve(kdart_rt *rt, const char *socket_path, const kdart_serve_options *user_opts) {
    KDART__CHECK_RT(rt);
    if (!socket_path || !socket_path[0]) return kdart__err(rt, KDART_ENULL, "socket path is NULL or empty");
    kdart_serve_options opts;
    kdart_serve_options_init(&opts);
    if (user_opts) {
        if (user_opts->struct_size < sizeof(uint32_t) || user_opts->struct_size > sizeof opts)
            return kdart__err(rt, KDART_EINVAL, "kdart_serve_options.struct_size is %u", user_opts->struct_size);
        memcpy(&opts, user_opts, user_opts->struct_size);
        opts.struct_size = sizeof opts;
    }
    if (opts.jobs < 0 || opts.jobs > 1024 || opts.max_clients < 0 || opts.idle_timeout_ms < 0)
        return kdart__err(rt, KDART_EINVAL, "jobs must be 0..1024, max_clients and idle_timeout_ms >= 0");

    service *svc = kdart__calloc(1, sizeof *svc);
    if (!svc) return kdart__err(rt, KDART_ENOMEM, "allocating the service");
    svc->rt = rt;
    svc->path = socket_path;
    svc->max_clients = opts.max_clients ? opts.max_clients : 1024;
    svc->idle_ms = (uint64_t)(opts.idle_timeout_ms ? opts.idle_timeout_ms : KDART_SERVE_IDLE_TIMEOUT_MS);
    svc->t0 = kdart__now_ms();
    int rc = KDART_OK;
    /* Resolved once, here: it may load libcuda, which the loop must not wait for. */
    kdart_rt_info info;
    if ((rc = kdart_info(rt, &info)) != KDART_OK) {
        kdart__free(svc);
        return rc;
    }
    svc->cache_path = info.cache_path;
    svc->default_arch = info.default_arch;
    int mu_ok = 0, loop_ok = 0;

    /* A client that goes away while we write must not kill the service. */
    struct sigaction old;
    if (sigaction(SIGPIPE, NULL, &old) == 0 && old.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);

    if (pthread_mutex_init(&svc->mu, NULL) != 0 || pthread_cond_init(&svc->cv, NULL) != 0) {
        rc = kdart__err(rt, KDART_ENOMEM, "initializing the service's lock");
        goto out;
    }
    mu_ok = 1;
    int e = uv_loop_init(&svc->loop);
    if (e) {
        rc = kdart__err(rt, KDART_EIO, "uv_loop_init: %s", uv_strerror(e));
        goto out;
    }
    loop_ok = 1;
    svc->loop.data = svc;
    if ((e = uv_async_init(&svc->loop, &svc->wake, wake_cb)) != 0) {
        rc = kdart__err(rt, KDART_EIO, "uv_async_init: %s", uv_strerror(e));
        goto out;
    }
    svc->wake.data = svc;
    svc->have_wake = 1;
    /* A few sweeps per timeout (at least one a second), so a connection
     * goes at most a quarter of the timeout late. */
    uint64_t every = svc->idle_ms / 4 > 1000 ? 1000 : svc->idle_ms / 4 ? svc->idle_ms / 4 : 1;
    if ((e = uv_timer_init(&svc->loop, &svc->sweep)) != 0 ||
        (e = uv_timer_start(&svc->sweep, sweep_cb, every, every)) != 0) {
        rc = kdart__err(rt, KDART_EIO, "uv_timer_start: %s", uv_strerror(e));
        goto out;
    }
    svc->sweep.data = svc;
    svc->have_sweep = 1;
    if ((e = uv_check_init(&svc->loop, &svc->decide)) != 0 || (e = uv_check_start(&svc->decide, decide_cb)) != 0) {
        rc = kdart__err(rt, KDART_EIO, "uv_check_start: %s", uv_strerror(e));
        goto out;
    }
    svc->decide.data = svc;
    svc->have_decide = 1;
    uv_unref((uv_handle_t *)&svc->decide); /* it alone does not keep the loop running */

    int fd = bind_socket(svc);
    if (fd < 0) {
        rc = fd;
        goto out;
    }
    uv_pipe_init(&svc->loop, &svc->server, 0);
    svc->server.data = svc;
    svc->have_server = 1;
    if ((e = uv_pipe_open(&svc->server, fd)) != 0) close(fd); /* else the handle owns fd */
    if (e == 0) e = uv_listen((uv_stream_t *)&svc->server, 512, on_connection);
    if (e != 0) {
        unlink_ours(svc);
        rc = kdart__err(rt, KDART_EIO, "cannot listen on %s: %s", socket_path, uv_strerror(e));
        goto out;
    }
    if (!(opts.flags & KDART_SERVE_NO_SIGNALS)) {
        uv_signal_init(&svc->loop, &svc->sigterm);
        uv_signal_init(&svc->loop, &svc->sigint);
        svc->sigterm.data = svc->sigint.data = svc;
        svc->have_signals = 1;
        if (uv_signal_start(&svc->sigterm, signal_cb, SIGTERM) != 0 ||
            uv_signal_start(&svc->sigint, signal_cb, SIGINT) != 0) {
            unlink_ours(svc);
            rc = kdart__err(rt, KDART_EIO, "cannot watch SIGTERM/SIGINT");
            goto out;
        }
    }

    int jobs = opts.jobs > 0 ? opts.jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (jobs < 1) jobs = 1;
    svc->threads = kdart__calloc((size_t)jobs, sizeof *svc->threads);
    if (!svc->threads) {
        unlink_ours(svc);
        rc = kdart__err(rt, KDART_ENOMEM, "allocating the workers");
        goto out;
    }
    for (; svc->nthreads < jobs; svc->nthreads++)
        if (pthread_create(&svc->threads[svc->nthreads], NULL, worker_main, svc) != 0) break;
    if (svc->nthreads == 0) {
        unlink_ours(svc);
        rc = kdart__err(rt, KDART_ENOMEM, "cannot start a worker thread");
        goto out;
    }

    kdart__log(rt, KDART_LOG_INFO, "compile service listening on %s (%d workers)", socket_path, svc->nthreads);
    if (opts.ready) opts.ready(opts.ready_user, socket_path);
    uv_run(&svc->loop, UV_RUN_DEFAULT);
    kdart__log(rt, KDART_LOG_INFO, "compile service %s stopped (%s): %lld connections, %lld requests, %lld compiled",
               socket_path, svc->stop_reason ? svc->stop_reason : "?", svc->st_connections, svc->st_requests,
               svc->st_compiled);

out:
    if (mu_ok) {
        pthread_mutex_lock(&svc->mu);
        svc->quit = 1;
        pthread_cond_broadcast(&svc->cv);
        pthread_mutex_unlock(&svc->mu);
    }
    for (int i = 0; i < svc->nthreads; i++) pthread_join(svc->threads[i], NULL);
    if (loop_ok) {
        /* Results of jobs that finished after the loop ended (error paths). */
        job *list = take_done(svc);
        while (list) {
            job *j = list;
            list = j->next_queue;
            job_free(j);
        }
        uv_walk(&svc->loop, close_walk_cb, NULL);
        uv_run(&svc->loop, UV_RUN_DEFAULT);
        uv_loop_close(&svc->loop);
    }
    if (mu_ok) {
        pthread_cond_destroy(&svc->cv);
        pthread_mutex_destroy(&svc->mu);
    }
    kdart__free(svc->threads);
    kdart__free(svc);
    return rc;
}
