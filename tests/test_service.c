/*
 * test_service.c: `kdart serve`, the compile service, and its clients.
 *
 * The service runs either in a thread of the test (kdart_serve on a runtime
 * whose compiler seam counts compiles, so "each key compiled once" is
 * measured, not assumed) or as the built CLI in a child process (signals,
 * `serve --stop`, the socket file's fate, exit codes).  Every test has its
 * own mkdtemp directory holding the cache and the socket; every inherited
 * KDART_* variable is dropped.  chunk_rcumsum, the cheapest kernel, for
 * sm_90a is the only thing compiled, except in the two-rank tests: two
 * processes sharing one cache, with and without the service, prepare a
 * few small specializations of all three kernels for sm_100a.
 * No GPU is needed.
 *
 * Each test prints one "test_service: ..." line with its figures.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rt.h"
#include "service.h"
#include "testlib.h"

extern char **environ;

#define ARCH "sm_90a"
#define KERNEL "chunk_rcumsum"

static char dir[256];
static char sock_path[512];

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void drop_kdart_env(void) {
    for (;;) {
        char name[256] = "";
        for (char **e = environ; *e; e++)
            if (strncmp(*e, "KDART_", 6) == 0) {
                size_t n = strcspn(*e, "=");
                snprintf(name, sizeof name, "%.*s", (int)n, *e);
                break;
            }
        if (!name[0]) return;
        unsetenv(name);
    }
}

static void setup(void) {
    drop_kdart_env();
    test_tmpdir(dir, sizeof dir);
    snprintf(sock_path, sizeof sock_path, "%s/kdart.sock", dir);
}

static void teardown(void) { test_rmtree(dir); }

static int raw_connect(void);
static void raw_frame(int fd, const char *payload, size_t n);
static int raw_reply(int fd, char **reply, int timeout_ms);

/* ------------------------------------------------- in-thread service */

static atomic_int compiles;      /* compiles done by the service's runtime */
static atomic_int local_compiles; /* compiles done by a client's runtime */
static atomic_int slow_compile_ms;

static int counting_compile(void *user, const kdart__compile_in *in, kdart__compile_out *out) {
    atomic_fetch_add(&compiles, 1);
    int slow = atomic_load(&slow_compile_ms);
    if (slow) sleep_ms(slow);
    return kdart__compile_nvrtc(user, in, out);
}

static int local_counting_compile(void *user, const kdart__compile_in *in, kdart__compile_out *out) {
    atomic_fetch_add(&local_compiles, 1);
    return kdart__compile_nvrtc(user, in, out);
}

typedef struct svc_thread {
    pthread_t thread;
    kdart_rt *rt;
    test_log log;
    int jobs;
    int max_clients;
    int idle_ms;
    int rc;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ready;
} svc_thread;

static void svc_ready(void *user, const char *path) {
    svc_thread *s = user;
    (void)path;
    pthread_mutex_lock(&s->mu);
    s->ready = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void *svc_main(void *arg) {
    svc_thread *s = arg;
    kdart_serve_options o;
    kdart_serve_options_init(&o);
    o.jobs = s->jobs;
    o.max_clients = s->max_clients;
    o.idle_timeout_ms = s->idle_ms;
    o.flags = KDART_SERVE_NO_SIGNALS;
    o.ready = svc_ready;
    o.ready_user = s;
    s->rc = kdart_serve(s->rt, sock_path, &o);
    svc_ready(s, NULL); /* also when it failed to start */
    return NULL;
}

static void svc_start_idle(svc_thread *s, int jobs, int max_clients, int idle_ms) {
    memset(s, 0, sizeof *s);
    s->max_clients = max_clients;
    s->idle_ms = idle_ms;
    char db[512];
    snprintf(db, sizeof db, "%s/kdart.db", dir);
    s->rt = test_open(db, NULL, NULL);
    ck_assert_ptr_nonnull(s->rt);
    s->rt->compile = counting_compile;
    s->jobs = jobs;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    ck_assert_int_eq(pthread_create(&s->thread, NULL, svc_main, s), 0);
    pthread_mutex_lock(&s->mu);
    while (!s->ready) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    ck_assert_int_eq(s->rc, KDART_OK);
}

static void svc_start_max(svc_thread *s, int jobs, int max_clients) { svc_start_idle(s, jobs, max_clients, 0); }
static void svc_start(svc_thread *s, int jobs) { svc_start_max(s, jobs, 0); }

static void svc_stop(svc_thread *s) {
    ck_assert_int_eq(kdart_serve_stop_request(sock_path, 60000), KDART_OK);
    pthread_join(s->thread, NULL);
    ck_assert_int_eq(s->rc, KDART_OK);
    struct stat st;
    ck_assert_msg(lstat(sock_path, &st) != 0 && errno == ENOENT, "socket %s left behind", sock_path);
    kdart_close(s->rt);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
}

/* A field of a reply payload ("" when absent), in a static buffer. */
static const char *field(const char *reply, const char *key) {
    static _Thread_local char v[1024]; /* the client threads call it at once */
    size_t kl = strlen(key);
    v[0] = 0;
    for (const char *p = reply; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (n > kl && strncmp(p, key, kl) == 0 && p[kl] == '=') {
            snprintf(v, sizeof v, "%.*s", (int)(n - kl - 1), p + kl + 1);
            break;
        }
        p = nl ? nl + 1 : p + n;
    }
    return v;
}

static long stat_field(const char *key) {
    double t0 = now_ms();
    for (;;) { /* EAGAIN while a closed client still holds its slot (max_clients) */
        char *reply = NULL;
        ck_assert_int_eq(kdart_service_request(sock_path, "kdart-proto=1\nop=stats\n", &reply, 10000), KDART_OK);
        int st = atoi(field(reply, "status"));
        long v = atol(field(reply, key));
        free(reply);
        if (st == KDART_OK) return v;
        ck_assert_msg(st == KDART_EAGAIN && now_ms() - t0 < 5000, "stats: %s", kdart_errname(st));
        sleep_ms(10);
    }
}

/* -------------------------------------------------- 32 clients at once */

#define NCLIENTS 32

typedef struct client_arg {
    int index;
    pthread_barrier_t *barrier;
    int ping_rc, rc, status;
    char key[65];
    char reply_id[64];
} client_arg;

static void *client_main(void *p) {
    client_arg *a = p;
    pthread_barrier_wait(a->barrier);
    a->ping_rc = kdart_service_ping(sock_path, 30000);
    const char *spec = a->index % 2 ? "K=64" : "K=128";
    if (a->index % 4 == 3) {
        /* A quarter speak the protocol raw, with an id to be echoed. */
        char req[256], *reply = NULL;
        snprintf(req, sizeof req, "kdart-proto=1\nop=prepare\nid=client-%d\nkernel=%s\nspec=%s\narch=%s\n", a->index,
                 KERNEL, spec, ARCH);
        a->rc = kdart_service_request(sock_path, req, &reply, 60000);
        if (a->rc == KDART_OK) {
            a->status = atoi(field(reply, "status"));
            snprintf(a->key, sizeof a->key, "%s", field(reply, "key"));
            snprintf(a->reply_id, sizeof a->reply_id, "%s", field(reply, "id"));
        }
        free(reply);
    } else {
        kdart_service_result r;
        a->rc = kdart_service_prepare(sock_path, KERNEL, spec, ARCH, 0, 60000, &r);
        a->status = r.status;
        memcpy(a->key, r.key, sizeof a->key);
    }
    return NULL;
}

START_TEST(test_concurrent_clients) {
    svc_thread s;
    svc_start(&s, 4);
    struct stat st;
    ck_assert_int_eq(lstat(sock_path, &st), 0);
    ck_assert(S_ISSOCK(st.st_mode));
    ck_assert_int_eq(st.st_mode & 0777, 0600);

    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, NCLIENTS);
    client_arg args[NCLIENTS];
    pthread_t th[NCLIENTS];
    double t0 = now_ms();
    for (int i = 0; i < NCLIENTS; i++) {
        memset(&args[i], 0, sizeof args[i]);
        args[i].index = i;
        args[i].barrier = &barrier;
        ck_assert_int_eq(pthread_create(&th[i], NULL, client_main, &args[i]), 0);
    }
    for (int i = 0; i < NCLIENTS; i++) pthread_join(th[i], NULL);
    double took = now_ms() - t0;
    pthread_barrier_destroy(&barrier);

    /* What the keys must be: a runtime of our own on the same cache finds
     * both in it (no compile), with the same keys. */
    char db[512];
    snprintf(db, sizeof db, "%s/kdart.db", dir);
    kdart_rt *mine = test_open(db, NULL, NULL);
    ck_assert_ptr_nonnull(mine);
    mine->compile = local_counting_compile;
    kdart_prepared p64, p128;
    ck_assert_int_eq(kdart_prepare(mine, KERNEL, "K=64", ARCH, KDART_PREPARE_NO_LOAD, &p64), KDART_OK);
    ck_assert_int_eq(kdart_prepare(mine, KERNEL, "K=128", ARCH, KDART_PREPARE_NO_LOAD, &p128), KDART_OK);
    ck_assert_int_eq(p64.source, KDART_FROM_CACHE);
    ck_assert_int_eq(p128.source, KDART_FROM_CACHE);
    ck_assert_int_eq(atomic_load(&local_compiles), 0);
    kdart_close(mine);

    int ok = 0;
    for (int i = 0; i < NCLIENTS; i++) {
        ck_assert_msg(args[i].ping_rc == KDART_OK, "client %d: ping %s", i, kdart_errname(args[i].ping_rc));
        ck_assert_msg(args[i].rc == KDART_OK, "client %d: transport %s", i, kdart_errname(args[i].rc));
        ck_assert_msg(args[i].status == KDART_OK, "client %d: status %s", i, kdart_errname(args[i].status));
        ck_assert_str_eq(args[i].key, i % 2 ? p64.key : p128.key);
        if (i % 4 == 3) {
            char want[64];
            snprintf(want, sizeof want, "client-%d", i);
            ck_assert_str_eq(args[i].reply_id, want);
        }
        ok++;
    }
    /* prewarm through the protocol: both entries are there now (K = 256 is compiled). */
    kdart_service_result pw;
    ck_assert_int_eq(kdart_service_prewarm(sock_path, KERNEL, ARCH, 0, 60000, &pw), KDART_OK);
    ck_assert_int_eq(pw.status, KDART_OK);
    ck_assert_int_eq(pw.entries, 3); /* K = 64, 128 (the clients') and 256 */
    ck_assert_int_eq(pw.hits, 2);
    ck_assert_int_eq(pw.compiled, 1);
    ck_assert_int_eq(kdart_service_prewarm(sock_path, KERNEL, "sm_90a,vax", 0, 60000, &pw), KDART_OK);
    ck_assert_int_eq(pw.status, KDART_EARCH);

    /* A client that pipelines 200 pings before reading any reply gets all
     * 200, in order (the service stops reading while replies queue up). */
    {
        int fd = raw_connect();
        char req[64];
        for (int i = 0; i < 200; i++) {
            int n = snprintf(req, sizeof req, "kdart-proto=1\nop=ping\nid=%d\n", i);
            raw_frame(fd, req, (size_t)n);
        }
        for (int i = 0; i < 200; i++) {
            char *reply = NULL;
            ck_assert_int_eq(raw_reply(fd, &reply, 10000), 1);
            ck_assert_int_eq(atoi(field(reply, "id")), i);
            free(reply);
        }
        close(fd);
    }

    long compiled = stat_field("compiled"), coalesced = stat_field("coalesced"), conns = stat_field("connections");
    ck_assert_int_eq(atomic_load(&compiles), 3); /* each key compiled exactly once (the prewarm's K = 256 too) */
    ck_assert_int_eq(compiled, 3);
    printf("test_service: %d concurrent clients served (%d pings + %d prepares, all correct) in %.0f ms; "
           "2 keys, %d compiles (1 per key), %ld requests joined an in-flight compile, %ld connections\n",
           ok, NCLIENTS, NCLIENTS, took, atomic_load(&compiles), coalesced, conns);
    svc_stop(&s);
}
END_TEST

/* ---------------------------------------------- the library as client */

typedef struct lib_arg {
    kdart_rt *rt;
    int index;
    int rc;
    kdart_prepared p;
} lib_arg;

static void *lib_main(void *p) {
    lib_arg *a = p;
    a->rc = kdart_prepare(a->rt, KERNEL, a->index % 2 ? "K=64" : "K=128", ARCH, KDART_PREPARE_NO_LOAD, &a->p);
    return NULL;
}

/* Opens a runtime that reads the environment (KDART_SERVICE included). */
static kdart_rt *open_env_rt(test_log *log) {
    char kdir[512];
    snprintf(kdir, sizeof kdir, "%s/kernel_src", KDART_TEST_SOURCE_DIR);
    setenv("KDART_CACHE_DIR", dir, 1);
    setenv("KDART_KERNEL_DIR", kdir, 1);
    kdart_options o;
    kdart_options_init(&o);
    memset(log, 0, sizeof *log);
    o.log = test_log_fn;
    o.log_user = log;
    o.log_level = KDART_LOG_WARN;
    kdart_rt *rt = NULL;
    ck_assert_int_eq(kdart_open(&rt, &o), KDART_OK);
    rt->compile = local_counting_compile;
    return rt;
}

START_TEST(test_library_client) {
    svc_thread s;
    svc_start(&s, 2);
    setenv("KDART_SERVICE", sock_path, 1);
    test_log log;
    kdart_rt *rt = open_env_rt(&log);
    enum { N = 8 };
    lib_arg a[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        memset(&a[i], 0, sizeof a[i]);
        a[i].rt = rt;
        a[i].index = i;
        ck_assert_int_eq(pthread_create(&th[i], NULL, lib_main, &a[i]), 0);
    }
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < N; i++) ck_assert_msg(a[i].rc == KDART_OK, "prepare %d: %s", i, kdart_errname(a[i].rc));
    ck_assert_int_eq(atomic_load(&local_compiles), 0);
    ck_assert_int_eq(atomic_load(&compiles), 2);
    ck_assert_int_eq(log.count[KDART_LOG_WARN], 0);
    kdart_close(rt);
    printf("test_service: library client with KDART_SERVICE: %d prepares on %d threads, %d compiles in the "
           "service, %d in the client, 0 warnings\n",
           N, N, atomic_load(&compiles), atomic_load(&local_compiles));
    unsetenv("KDART_SERVICE");
    svc_stop(&s);
}
END_TEST

/* Binds a Unix socket at path and closes it without listening: a stale
 * socket file, on which connect fails with ECONNREFUSED. */
static void make_stale_socket(const char *path) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    ck_assert_uint_lt(strlen(path), sizeof sa.sun_path);
    memcpy(sa.sun_path, path, strlen(path));
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    close(fd);
}

START_TEST(test_dead_service_fallback) {
    char dead[600];
    snprintf(dead, sizeof dead, "%s/dead.sock", dir);
    make_stale_socket(dead);
    setenv("KDART_SERVICE", dead, 1);
    test_log log;
    kdart_rt *rt = open_env_rt(&log);
    kdart_prepared p;
    ck_assert_int_eq(kdart_prepare(rt, KERNEL, "K=64", ARCH, KDART_PREPARE_NO_LOAD, &p), KDART_OK);
    ck_assert_int_eq(kdart_prepare(rt, KERNEL, "K=128", ARCH, KDART_PREPARE_NO_LOAD, &p), KDART_OK);
    ck_assert_int_eq(atomic_load(&local_compiles), 2);
    ck_assert_msg(log.count[KDART_LOG_WARN] == 1, "%d warnings, last: %s", log.count[KDART_LOG_WARN],
                  log.last[KDART_LOG_WARN]);
    ck_assert_msg(strstr(log.last[KDART_LOG_WARN], "compile service") != NULL, "warning: %s",
                  log.last[KDART_LOG_WARN]);
    kdart_close(rt);

    /* No socket at all: the same, and a handle opened with NO_ENV never asks. */
    char none[600];
    snprintf(none, sizeof none, "%s/none/missing.sock", dir);
    setenv("KDART_SERVICE", none, 1);
    ck_assert_int_eq(kdart_service_ping(none, 1000), KDART_ENOENT);
    ck_assert_int_eq(kdart_service_ping(dead, 1000), KDART_EAGAIN);
    printf("test_service: dead service (stale socket): 2 prepares compiled in the client, %d warning (\"%.60s...\")\n",
           1, log.last[KDART_LOG_WARN]);
    unsetenv("KDART_SERVICE");
}
END_TEST

/* ------------------------------------------------------- decoder fuzz */

static uint64_t rng_state;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

static const char *const tokens[] = {
    "kdart-proto=1\n", "kdart-proto=2\n", "kdart-proto=\n", "kdart-proto=99999999999\n", "op=prepare\n",
    "op=ping\n", "op=stop\n", "op=stats\n", "op=prewarm\n", "op=bogus\n", "kernel=chunk_rcumsum\n", "kernel=",
    "spec=K=64\n", "spec=", "arch=sm_90a\n", "arch=", "flags=force\n", "flags=nope\n", "id=x\n", "=", "\n", "\\",
    "\\n", "\\t", "\\x", "\\\\", "==", "K=128,io=bf16", "\xff\xfe", "\t", "\r\n", "A=b\n", "unknown.key=1\n", " ",
};

START_TEST(test_decoder_fuzz) {
    rng_state = 0x9e3779b97f4a7c15ull; /* seeded: the same 20,000 inputs every run */
    const char *valid = "kdart-proto=1\nop=prepare\nid=abc\nkernel=chunk_rcumsum\nspec=K=64\narch=sm_90a\nflags=force\n";
    kdart__proto_req req;
    char err[512];
    /* The valid request and escapes decode as meant. */
    ck_assert_int_eq(kdart__proto_decode_request(valid, strlen(valid), &req, err, sizeof err), KDART_OK);
    ck_assert_int_eq(req.op, KDART__OP_PREPARE);
    ck_assert_str_eq(req.kernel, KERNEL);
    ck_assert_str_eq(req.spec, "K=64");
    ck_assert_str_eq(req.arch, ARCH);
    ck_assert_str_eq(req.id, "abc");
    ck_assert_uint_eq(req.flags, KDART_PREPARE_FORCE);
    const char *esc = "kdart-proto=1\nop=ping\nid=a\\\\b\n";
    ck_assert_int_eq(kdart__proto_decode_request(esc, strlen(esc), &req, err, sizeof err), KDART_OK);
    ck_assert_str_eq(req.id, "a\\b");
    const char *v2 = "kdart-proto=2\nop=ping\n";
    ck_assert_int_eq(kdart__proto_decode_request(v2, strlen(v2), &req, err, sizeof err), KDART_EUNSUPPORTED);

    enum { N = 20000, MAXLEN = 2048 };
    unsigned char *buf = malloc(KDART__PROTO_MAX_FRAME + 16);
    ck_assert_ptr_nonnull(buf);
    int parsed = 0, rejected = 0, by_kind[3] = {0, 0, 0};
    for (int i = 0; i < N; i++) {
        size_t len = 0;
        int kind = i % 3;
        if (kind == 0) { /* random bytes */
            len = rnd() % MAXLEN;
            if (rnd() % 50 == 0) len = KDART__PROTO_MAX_FRAME - rnd() % 16; /* some near the limit */
            for (size_t j = 0; j < len; j++) buf[j] = (unsigned char)rnd();
        } else if (kind == 1) { /* the valid request, mutated */
            len = strlen(valid);
            memcpy(buf, valid, len);
            int muts = 1 + (int)(rnd() % 6);
            for (int m = 0; m < muts; m++) {
                switch (rnd() % 5) {
                case 0: if (len) buf[rnd() % len] = (unsigned char)rnd(); break; /* replace */
                case 1: if (len) buf[rnd() % len] ^= (unsigned char)(1u << (rnd() % 8)); break; /* bit flip */
                case 2: if (len) len = rnd() % len; break; /* truncate */
                case 3: if (len + 1 < MAXLEN) { /* insert */
                        size_t at = len ? rnd() % len : 0;
                        memmove(buf + at + 1, buf + at, len - at);
                        buf[at] = (unsigned char)rnd();
                        len++;
                    }
                    break;
                default: { /* duplicate a slice */
                    if (!len) break;
                    size_t from = rnd() % len, n = rnd() % (len - from) + 1;
                    if (len + n < MAXLEN) {
                        memcpy(buf + len, buf + from, n);
                        len += n;
                    }
                }
                }
            }
        } else { /* token soup, usually with a valid first line */
            if (rnd() % 4) {
                memcpy(buf, "kdart-proto=1\n", 14);
                len = 14;
            }
            int ntok = (int)(rnd() % 12);
            for (int t = 0; t < ntok; t++) {
                const char *tok = tokens[rnd() % (sizeof tokens / sizeof tokens[0])];
                size_t tl = strlen(tok);
                if (len + tl < MAXLEN) memcpy(buf + len, tok, tl), len += tl;
            }
            if (rnd() % 20 == 0) { /* an overlong value */
                memcpy(buf + len, "spec=", 5);
                len += 5;
                size_t n = 200 + rnd() % 5000;
                if (len + n + 1 > KDART__PROTO_MAX_FRAME) n = 100;
                memset(buf + len, 'x', n);
                len += n;
                buf[len++] = '\n';
            }
        }
        /* Decode from an exact-size heap copy, so ASan sees any overread. */
        unsigned char *exact = malloc(len ? len : 1);
        ck_assert_ptr_nonnull(exact);
        memcpy(exact, buf, len);
        memset(&req, 0x5a, sizeof req);
        err[0] = 0;
        int rc = kdart__proto_decode_request(exact, len, &req, err, sizeof err);
        free(exact);
        ck_assert_msg(rc == KDART_OK || rc == KDART_EINVAL || rc == KDART_EUNSUPPORTED, "input %d: status %d", i, rc);
        if (rc == KDART_OK) {
            parsed++;
            ck_assert(req.op >= KDART__OP_PING && req.op <= KDART__OP_STOP);
            ck_assert(memchr(req.id, 0, sizeof req.id) && memchr(req.kernel, 0, sizeof req.kernel));
            ck_assert(memchr(req.spec, 0, sizeof req.spec) && memchr(req.arch, 0, sizeof req.arch));
            ck_assert(req.op != KDART__OP_PREPARE || req.kernel[0]);
            by_kind[kind]++;
        } else {
            rejected++;
            ck_assert_msg(err[0] != 0, "input %d: rejected without a message", i);
            ck_assert(memchr(err, 0, sizeof err));
        }
    }
    free(buf);
    ck_assert_int_eq(parsed + rejected, N);
    ck_assert_int_gt(parsed, 0);   /* the fuzz reaches the valid paths */
    ck_assert_int_gt(rejected, 0);
    printf("test_service: request decoder fuzzed with %d seeded inputs (random, mutated, token soup): "
           "%d parsed as valid requests (%d/%d/%d by kind), %d rejected with a message, 0 crashes\n",
           N, parsed, by_kind[0], by_kind[1], by_kind[2], rejected);
}
END_TEST

/* ------------------------------------------------ garbage on the wire */

static int raw_connect(void) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    ck_assert_uint_lt(strlen(sock_path), sizeof sa.sun_path);
    memcpy(sa.sun_path, sock_path, strlen(sock_path));
    ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0, "connect: %s", strerror(errno));
    return fd;
}

static void raw_send(int fd, const void *data, size_t n) {
    const char *p = data;
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return; /* the service may close on us mid-garbage: fine */
        p += w;
        n -= (size_t)w;
    }
}

static void raw_frame(int fd, const char *payload, size_t n) {
    unsigned char h[4] = {(unsigned char)(n >> 24), (unsigned char)(n >> 16), (unsigned char)(n >> 8),
                          (unsigned char)n};
    raw_send(fd, h, 4);
    raw_send(fd, payload, n);
}

/* Reads one reply frame within timeout_ms: 1 and *reply (malloc), 0 on
 * EOF, -1 on timeout. */
static int raw_reply(int fd, char **reply, int timeout_ms) {
    unsigned char h[4];
    size_t got = 0, need = 4;
    char *body = NULL;
    double deadline = now_ms() + timeout_ms;
    uint32_t n = 0;
    int phase = 0;
    for (;;) {
        int left = (int)(deadline - now_ms());
        if (left <= 0) {
            free(body);
            return -1;
        }
        struct pollfd pfd = {fd, POLLIN, 0};
        if (poll(&pfd, 1, left) <= 0) continue;
        ssize_t r = recv(fd, phase ? body + got : (char *)h + got, need - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            free(body);
            return 0;
        }
        got += (size_t)r;
        if (got < need) continue;
        if (phase == 1) {
            body[n] = 0;
            *reply = body;
            return 1;
        }
        n = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
        ck_assert_uint_le(n, KDART__PROTO_MAX_FRAME);
        body = malloc(n + 1);
        ck_assert_ptr_nonnull(body);
        phase = 1;
        got = 0;
        need = n;
        if (n == 0) {
            body[0] = 0;
            *reply = body;
            return 1;
        }
    }
}

/* Expects an error reply with the given status (0: any error). */
static void expect_error(int fd, int status, const char *what) {
    char *reply = NULL;
    int r = raw_reply(fd, &reply, 10000);
    ck_assert_msg(r == 1, "%s: no reply (%s)", what, r == 0 ? "EOF" : "timeout");
    int st = atoi(field(reply, "status"));
    ck_assert_msg(st < 0, "%s: status %d:\n%s", what, st, reply);
    if (status) ck_assert_msg(st == status, "%s: status %s, wanted %s", what, kdart_errname(st), kdart_errname(status));
    ck_assert_msg(field(reply, "message")[0], "%s: no message", what);
    free(reply);
}

static void expect_eof(int fd, const char *what) {
    char *reply = NULL;
    int r;
    while ((r = raw_reply(fd, &reply, 10000)) == 1) free(reply), reply = NULL; /* drain */
    ck_assert_msg(r == 0, "%s: the service did not close the connection", what);
}

static void expect_ping(int fd, const char *what) {
    const char *ping = "kdart-proto=1\nop=ping\n";
    raw_frame(fd, ping, strlen(ping));
    char *reply = NULL;
    ck_assert_msg(raw_reply(fd, &reply, 10000) == 1, "%s: no pong", what);
    ck_assert_msg(atoi(field(reply, "status")) == 0, "%s: %s", what, reply);
    free(reply);
}

START_TEST(test_live_garbage) {
    svc_thread s;
    svc_start(&s, 2);
    rng_state = 0x2545f4914f6cdd1dull;
    int conns = 0, errors = 0;

    /* A slow client holding half a frame for the whole test must not
     * block anybody. */
    int slow = raw_connect();
    raw_send(slow, "\0\0\0\x40kdart-proto=1\n", 18);

    /* Well-framed but wrong payloads, each on one connection that must
     * stay usable afterwards. */
    struct {
        const char *payload;
        int status;
    } bad[] = {
        {"kdart-proto=1\nop=frobnicate\n", KDART_EINVAL},
        {"kdart-proto=2\nop=ping\n", KDART_EUNSUPPORTED},
        {"kdart-proto=1\n", KDART_EINVAL},
        {"op=ping\nkdart-proto=1\n", KDART_EINVAL},
        {"", KDART_EINVAL},
        {"kdart-proto=1\nop=prepare\n", KDART_EINVAL},
        {"kdart-proto=1\nop=prepare\nkernel=nosuch\n", KDART_EKERNEL},
        {"kdart-proto=1\nop=prepare\nkernel=chunk_rcumsum\nspec=K=96\narch=sm_90a\n", KDART_ESPEC},
        {"kdart-proto=1\nop=prepare\nkernel=chunk_rcumsum\narch=vax\n", KDART_EARCH},
        {"kdart-proto=1\nop=prepare\nkernel=chunk_rcumsum\nflags=sideways\n", KDART_EINVAL},
        {"kdart-proto=1\nop=ping\nop=ping\n", KDART_EINVAL},
        {"kdart-proto=1\nop=ping\nbad\\q=1\n", KDART_EINVAL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int fd = raw_connect();
        conns++;
        raw_frame(fd, bad[i].payload, strlen(bad[i].payload));
        expect_error(fd, bad[i].status, bad[i].payload);
        errors++;
        expect_ping(fd, bad[i].payload);
        close(fd);
    }

    /* A payload of exactly 64 KiB of garbage: an error, connection kept. */
    {
        char *big = malloc(KDART__PROTO_MAX_FRAME);
        ck_assert_ptr_nonnull(big);
        memset(big, 'z', KDART__PROTO_MAX_FRAME);
        int fd = raw_connect();
        conns++;
        raw_frame(fd, big, KDART__PROTO_MAX_FRAME);
        expect_error(fd, KDART_EINVAL, "64 KiB of garbage");
        errors++;
        expect_ping(fd, "after 64 KiB");
        close(fd);
        free(big);
    }

    /* Framing errors: an error reply, then the service closes. */
    static const unsigned char oversized[][4] = {{0xff, 0xff, 0xff, 0xff}, {0x00, 0x01, 0x00, 0x01}, {0x80, 0, 0, 0}};
    for (size_t i = 0; i < 3; i++) {
        int fd = raw_connect();
        conns++;
        raw_send(fd, oversized[i], 4);
        expect_error(fd, KDART_EINVAL, "oversized length");
        errors++;
        expect_eof(fd, "oversized length");
        close(fd);
    }
    { /* a truncated frame: 10 of 100 bytes, then EOF */
        int fd = raw_connect();
        conns++;
        raw_send(fd, "\0\0\0\x64kdart-prot", 14);
        shutdown(fd, SHUT_WR);
        expect_error(fd, KDART_EINVAL, "truncated frame");
        errors++;
        expect_eof(fd, "truncated frame");
        close(fd);
    }

    /* Random bytes: whatever they say, the service answers with errors (or
     * waits for a frame it never gets), and closes once we stop sending. */
    enum { NRANDOM = 300 };
    int random_replies = 0;
    for (int i = 0; i < NRANDOM; i++) {
        int fd = raw_connect();
        conns++;
        unsigned char junk[600];
        size_t n = 1 + rnd() % sizeof junk;
        for (size_t j = 0; j < n; j++) junk[j] = (unsigned char)rnd();
        if (i % 3 == 0) { /* a plausible length, random payload */
            uint32_t l = rnd() % 500;
            junk[0] = 0, junk[1] = 0, junk[2] = (unsigned char)(l >> 8), junk[3] = (unsigned char)l;
        }
        raw_send(fd, junk, n);
        shutdown(fd, SHUT_WR);
        char *reply = NULL;
        int r;
        while ((r = raw_reply(fd, &reply, 10000)) == 1) {
            ck_assert_msg(atoi(field(reply, "status")) < 0, "random input %d got a success:\n%s", i, reply);
            random_replies++;
            free(reply);
            reply = NULL;
        }
        ck_assert_msg(r == 0, "random input %d: connection not closed", i);
        close(fd);
        if (i % 50 == 49) ck_assert_int_eq(kdart_service_ping(sock_path, 10000), KDART_OK);
    }
    errors += random_replies;

    /* Still alive, still serving, the slow client still connected. */
    ck_assert_int_eq(kdart_service_ping(sock_path, 10000), KDART_OK);
    kdart_service_result r;
    ck_assert_int_eq(kdart_service_prepare(sock_path, KERNEL, "K=64", ARCH, 0, 60000, &r), KDART_OK);
    ck_assert_int_eq(r.status, KDART_OK);
    long server_errors = stat_field("errors");
    close(slow);
    printf("test_service: live garbage: %d connections (%d well-framed bad requests, 1 x 64 KiB garbage, 3 oversized "
           "lengths, 1 truncated frame, %d random byte streams), %d error replies (service counted %ld); "
           "ping and prepare still answered; a half-sent frame held open throughout\n",
           conns, (int)(sizeof bad / sizeof bad[0]), NRANDOM, errors, server_errors);
    svc_stop(&s);
}
END_TEST

START_TEST(test_max_clients) {
    svc_thread s;
    svc_start_max(&s, 1, 2);
    int a = raw_connect(), b = raw_connect();
    expect_ping(a, "first client");
    expect_ping(b, "second client");
    int c = raw_connect(); /* one too many */
    expect_error(c, KDART_EAGAIN, "third client");
    expect_eof(c, "third client");
    close(c);
    close(a);
    double t0 = now_ms();
    int rc;
    while ((rc = kdart_service_ping(sock_path, 5000)) != KDART_OK && now_ms() - t0 < 5000) sleep_ms(10);
    ck_assert_int_eq(rc, KDART_OK); /* a slot is free again */
    close(b);
    long rejected = stat_field("rejected");
    ck_assert_int_ge(rejected, 1);
    printf("test_service: max_clients=2: a third connection got EAGAIN and was closed (%ld rejected); after one "
           "left, a new client was served\n",
           rejected);
    svc_stop(&s);
}
END_TEST

/* Stop with work queued and running: the running compile finishes and is
 * answered, the queued one is canceled, the stop waits for both. */
typedef struct slow_arg {
    const char *spec;
    int rc;
    kdart_service_result r;
} slow_arg;

static void *slow_main(void *p) {
    slow_arg *a = p;
    a->rc = kdart_service_prepare(sock_path, KERNEL, a->spec, ARCH, 0, 60000, &a->r);
    return NULL;
}

START_TEST(test_stop_in_flight) {
    svc_thread s;
    atomic_store(&slow_compile_ms, 1500);
    svc_start(&s, 1);
    slow_arg a = {"K=64", 0, {0}}, b = {"K=128", 0, {0}};
    pthread_t ta, tb;
    ck_assert_int_eq(pthread_create(&ta, NULL, slow_main, &a), 0);
    double t0 = now_ms();
    while (stat_field("running") < 1 && now_ms() - t0 < 10000) sleep_ms(5);
    ck_assert_int_eq(pthread_create(&tb, NULL, slow_main, &b), 0);
    while (stat_field("queued") < 1 && now_ms() - t0 < 10000) sleep_ms(5);
    ck_assert_int_eq(stat_field("queued"), 1);
    double t1 = now_ms();
    svc_stop(&s); /* returns when the service has finished */
    double stop_ms = now_ms() - t1;
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    ck_assert_int_eq(a.rc, KDART_OK);
    ck_assert_int_eq(a.r.status, KDART_OK);
    ck_assert_int_eq(b.rc, KDART_OK);
    ck_assert_int_eq(b.r.status, KDART_ECANCELED);
    ck_assert_int_eq(atomic_load(&compiles), 1);
    printf("test_service: stop with 1 compile running and 1 queued: the running one finished and was answered "
           "(OK), the queued one answered ECANCELED, stop returned after %.0f ms, socket removed\n",
           stop_ms);
}
END_TEST

/* ------------------------------------------------------- the CLI service */

/* Starts `kdart ARGS...` with the cache in dir; stdout/stderr to dir/NAME.out/.err. */
static pid_t spawn_cli(const char *name, const char *const *args) {
    const char *argv[32];
    int n = 0;
    argv[n++] = KDART_TEST_CLI;
    for (; *args && n < 31; args++) argv[n++] = *args;
    argv[n] = NULL;
    char kdir[512];
    snprintf(kdir, sizeof kdir, "%s/kernel_src", KDART_TEST_SOURCE_DIR);
    setenv("KDART_CACHE_DIR", dir, 1);
    setenv("KDART_KERNEL_DIR", kdir, 1);
    char out[600], err[600];
    snprintf(out, sizeof out, "%s/%s.out", dir, name);
    snprintf(err, sizeof err, "%s/%s.err", dir, name);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int e = posix_spawn(&pid, KDART_TEST_CLI, &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    ck_assert_msg(e == 0, "spawn %s: %s", KDART_TEST_CLI, strerror(e));
    return pid;
}

static char *slurp(const char *name, const char *ext) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext);
    FILE *f = fopen(path, "rb");
    if (!f) return strdup("");
    char *buf = calloc(1, 65536);
    size_t n = fread(buf, 1, 65535, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

/* Waits for pid to exit within timeout_ms; its exit code, 128+signal, or -1. */
static int wait_exit(pid_t pid, int timeout_ms) {
    double t0 = now_ms();
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (now_ms() - t0 > timeout_ms) return -1;
        sleep_ms(10);
    }
}

static int run_cli(const char *name, const char *const *args) { return wait_exit(spawn_cli(name, args), 120000); }

static void wait_ready(pid_t pid) {
    double t0 = now_ms();
    while (kdart_service_ping(sock_path, 2000) != KDART_OK) {
        ck_assert_msg(waitpid(pid, NULL, WNOHANG) == 0, "kdart serve exited early:\n%s", slurp("serve", "err"));
        ck_assert_msg(now_ms() - t0 < 30000, "kdart serve did not come up");
        sleep_ms(20);
    }
}

START_TEST(test_cli_serve_sigterm) {
    const char *args[] = {"serve", "--socket", sock_path, "--jobs", "2", NULL};
    /* A service whose environment names itself as the service must not ask
     * itself (its workers compile). */
    setenv("KDART_SERVICE", sock_path, 1);
    pid_t pid = spawn_cli("serve", args);
    wait_ready(pid);
    struct stat st;
    ck_assert_int_eq(lstat(sock_path, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    unsetenv("KDART_SERVICE");

    /* prewarm through the service, twice: compiles, then hits. */
    const char *pw[] = {"prewarm", "--service", sock_path, "--kernel", KERNEL, "--arch", ARCH, "-j2", NULL};
    ck_assert_int_eq(run_cli("prewarm1", pw), 0);
    char *o1 = slurp("prewarm1", "out");
    ck_assert_msg(strstr(o1, "3 compiled, 0 hits, 0 failed"), "%s", o1);
    ck_assert_int_eq(run_cli("prewarm2", pw), 0);
    char *o2 = slurp("prewarm2", "out");
    ck_assert_msg(strstr(o2, "0 compiled, 3 hits, 0 failed"), "%s", o2);

    /* A second service on the live socket is refused; the first is unharmed. */
    const char *again[] = {"serve", "--socket", sock_path, NULL};
    ck_assert_int_eq(run_cli("serve2", again), 1);
    char *e2 = slurp("serve2", "err");
    ck_assert_msg(strstr(e2, "another compile service"), "%s", e2);
    ck_assert_int_eq(kdart_service_ping(sock_path, 5000), KDART_OK);

    double t0 = now_ms();
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    int code = wait_exit(pid, 30000);
    double took = now_ms() - t0;
    char *err = slurp("serve", "err");
    ck_assert_msg(code == 0, "kdart serve exited %d after SIGTERM:\n%s", code, err);
    ck_assert_msg(lstat(sock_path, &st) != 0 && errno == ENOENT, "socket left behind after SIGTERM");
    ck_assert_msg(strstr(err, "stopped"), "%s", err);
    printf("test_service: kdart serve: prewarm --service compiled 2 then hit 2 (the service had KDART_SERVICE set to itself); a second serve on the live socket "
           "exited 1; SIGTERM -> exit 0 in %.0f ms, socket removed\n",
           took);
    free(o1);
    free(o2);
    free(e2);
    free(err);
}
END_TEST

START_TEST(test_cli_serve_stop) {
    /* A path that is a regular file is never touched (a bad --socket: exit 2). */
    char file[600];
    snprintf(file, sizeof file, "%s/not-a-socket", dir);
    ck_assert_int_eq(test_write_file(file, "keep me\n"), 0);
    const char *onfile[] = {"serve", "--socket", file, NULL};
    ck_assert_int_eq(run_cli("onfile", onfile), 2);
    char *eo = slurp("onfile", "err");
    ck_assert_msg(strstr(eo, "not a socket"), "%s", eo);
    free(eo);
    struct stat st;
    ck_assert_int_eq(lstat(file, &st), 0);
    ck_assert(S_ISREG(st.st_mode));

    /* Nothing to stop: exit 4. */
    const char *stop[] = {"serve", "--stop", "--socket", sock_path, NULL};
    ck_assert_int_eq(run_cli("stop0", stop), 4);
    /* Usage errors: exit 2. */
    const char *nosock[] = {"serve", NULL};
    ck_assert_int_eq(run_cli("usage", nosock), 2);
    const char *help[] = {"serve", "--help", NULL};
    ck_assert_int_eq(run_cli("help", help), 0);
    char *h = slurp("help", "out");
    ck_assert_msg(strstr(h, "--socket PATH") && strstr(h, "--stop"), "%s", h);

    /* A stale socket file is replaced. */
    make_stale_socket(sock_path);
    const char *args[] = {"serve", "--socket", sock_path, "-j1", NULL};
    pid_t pid = spawn_cli("serve", args);
    wait_ready(pid);
    ck_assert_int_eq(lstat(sock_path, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    const char *status[] = {"serve", "--status", "--socket", sock_path, NULL};
    ck_assert_int_eq(run_cli("status", status), 0);
    char *so = slurp("status", "out");
    ck_assert_msg(strstr(so, "status=0") && strstr(so, "connections="), "%s", so);

    double t0 = now_ms();
    ck_assert_int_eq(run_cli("stop", stop), 0);
    int code = wait_exit(pid, 30000);
    double took = now_ms() - t0;
    ck_assert_msg(code == 0, "kdart serve exited %d after --stop:\n%s", code, slurp("serve", "err"));
    ck_assert_msg(lstat(sock_path, &st) != 0 && errno == ENOENT, "socket left behind after --stop");
    printf("test_service: kdart serve --stop -> service exit 0 in %.0f ms, socket removed; stale socket replaced; "
           "regular file refused (exit 2, untouched); --stop with no service exit 4; usage exit 2\n",
           took);
    free(h);
    free(so);
}
END_TEST

/* ------------------------------------------------ hard to break (#16) */

/* Under AddressSanitizer a freed block waits in its quarantine (256 MiB by
 * default) instead of being reused, so a service that allocates for each
 * connection it serves grows however promptly it frees: the memory bounds
 * below are then reported, not checked. */
#if defined(__SANITIZE_ADDRESS__)
#define CHECK_MEMORY 0
#else
#define CHECK_MEMORY 1
#endif

/* VmHWM (peak resident set) of pid, in KiB; -1 if unreadable. */
static long vm_hwm_kb(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) kb = atol(line + 6);
    fclose(f);
    return kb;
}

typedef struct burst_arg {
    int n, connected;
    atomic_int *stop; /* NULL, or ends the burst early once set */
} burst_arg;

/* Connects and closes at once, n times (or until *stop), as fast as the
 * service accepts. */
static void *burst_main(void *p) {
    burst_arg *a = p;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, sock_path, strlen(sock_path));
    for (int i = 0; i < a->n && !(a->stop && atomic_load_explicit(a->stop, memory_order_relaxed)); i++) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) a->connected++;
        close(fd);
    }
    return NULL;
}

/* Waits until the service answers a ping with OK (not EAGAIN: full). */
static double wait_served(int timeout_ms) {
    double t0 = now_ms();
    int rc;
    while ((rc = kdart_service_ping(sock_path, timeout_ms)) != KDART_OK && now_ms() - t0 < timeout_ms) sleep_ms(5);
    ck_assert_msg(rc == KDART_OK, "no client served within %d ms: %s", timeout_ms, kdart_errname(rc));
    return now_ms() - t0;
}

/* 10,000 connect/close from 4 threads against --max-clients 32: the
 * service's peak memory stays within the slots' worth plus a constant,
 * however fast connections arrive (each used to get its 64 KiB buffer
 * before the limit check). */
START_TEST(test_burst_memory) {
    const char *args[] = {"serve", "--socket", sock_path, "-j1", "--max-clients", "32", NULL};
    pid_t pid = spawn_cli("serve", args);
    wait_ready(pid);
    long base = vm_hwm_kb(pid);
    ck_assert_int_gt(base, 0);
    enum { THREADS = 4, PER = 2500 };
    burst_arg a[THREADS];
    pthread_t th[THREADS];
    double t0 = now_ms();
    for (int i = 0; i < THREADS; i++) {
        a[i] = (burst_arg){PER, 0, NULL};
        ck_assert_int_eq(pthread_create(&th[i], NULL, burst_main, &a[i]), 0);
    }
    int connected = 0;
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL), connected += a[i].connected;
    double took = now_ms() - t0;
    double served_ms = wait_served(10000);
    long peak = vm_hwm_kb(pid);
    /* 32 slots of a full frame buffer each, plus 8 MiB for the allocator's
     * arenas and what one loop iteration's refusals hold. */
    long bound = base + 32 * (4 + KDART__PROTO_MAX_FRAME + 4096) / 1024 + 8192;
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    ck_assert_int_eq(wait_exit(pid, 30000), 0);
    printf("test_service: burst of %d connect/close (%d connected) from %d threads in %.0f ms against "
           "--max-clients 32: service VmHWM %ld -> %ld KiB (+%ld, bound +%ld); next client served %.0f ms later\n",
           THREADS * PER, connected, THREADS, took, base, peak, peak - base, bound - base, served_ms);
    ck_assert_msg(!CHECK_MEMORY || peak <= bound, "service VmHWM rose from %ld to %ld KiB (bound %ld)", base, peak,
                  bound);
}
END_TEST


/* Every slot held by an idle connection (idle_timeout_ms 300): the idle
 * ones get ETIMEDOUT and are closed, and a new client is served within the
 * timeout plus a sweep, while a connection waiting 1 s for its compile is
 * not idle and gets its reply. */
START_TEST(test_idle_slots_reclaimed) {
    enum { SLOTS = 4, IDLE_MS = 300 };
    svc_thread s;
    atomic_store(&slow_compile_ms, 1000);
    svc_start_idle(&s, 1, SLOTS, IDLE_MS);
    int fds[SLOTS];
    for (int i = 0; i < SLOTS - 1; i++) {
        fds[i] = raw_connect();
        expect_ping(fds[i], "idle client"); /* served, then idle */
    }
    fds[SLOTS - 1] = raw_connect(); /* never sends anything */
    double t0 = now_ms();
    int extra = raw_connect();
    expect_error(extra, KDART_EAGAIN, "a client of a full service");
    expect_eof(extra, "a client of a full service");
    close(extra);
    double served_ms = wait_served(5000);
    double t_served = now_ms() - t0;
    for (int i = 0; i < SLOTS; i++) {
        expect_error(fds[i], KDART_ETIMEDOUT, "an idle client");
        expect_eof(fds[i], "an idle client");
        close(fds[i]);
    }
    ck_assert_msg(t_served < IDLE_MS + IDLE_MS / 4 + 1000, "served after %.0f ms", t_served);

    /* Waiting for a compile three times as long as the timeout is not idle. */
    kdart_service_result r;
    double t1 = now_ms();
    ck_assert_int_eq(kdart_service_prepare(sock_path, KERNEL, "K=64", ARCH, 0, 30000, &r), KDART_OK);
    ck_assert_int_eq(r.status, KDART_OK);
    double compile_ms = now_ms() - t1;
    printf("test_service: %d slots held by idle clients (idle timeout %d ms): a new client was refused EAGAIN, then "
           "served %.0f ms after the slots filled (%.0f ms of retrying); the idle ones got ETIMEDOUT and EOF; a "
           "prepare waiting %.0f ms for its compile was answered OK\n",
           SLOTS, IDLE_MS, t_served, served_ms, compile_ms);
    svc_stop(&s);
}
END_TEST

/* A frame trickled a byte every 40 ms (1 s in all) is closed once the timeout passes
 * since the connection came (a byte now and then does not reset it). */
START_TEST(test_slowloris) {
    enum { IDLE_MS = 300 };
    svc_thread s;
    svc_start_idle(&s, 1, 0, IDLE_MS);
    int fd = raw_connect();
    const char *req = "\0\0\0\x16kdart-proto=1\nop=ping\n";
    size_t n = 26, sent = 0;
    double t0 = now_ms(), closed_ms = -1;
    int replied = 0;
    for (; sent < n - 1 && now_ms() - t0 < 5000; sent++) {
        if (send(fd, req + sent, 1, MSG_NOSIGNAL) != 1) break;
        struct pollfd pfd = {fd, POLLIN, 0};
        if (poll(&pfd, 1, 40) > 0) break; /* the service spoke: its ETIMEDOUT */
    }
    char *reply = NULL;
    int rr = raw_reply(fd, &reply, 5000);
    closed_ms = now_ms() - t0;
    ck_assert_msg(rr == 1, "no reply to the slow client (%s)", rr == 0 ? "EOF" : "timeout");
    ck_assert_int_eq(atoi(field(reply, "status")), KDART_ETIMEDOUT);
    replied = 1;
    free(reply);
    expect_eof(fd, "slowloris");
    close(fd);
    ck_assert_msg(sent < n - 1, "the whole frame but one byte went through (%zu bytes)", sent);
    ck_assert_msg(closed_ms < IDLE_MS + IDLE_MS / 4 + 500, "closed after %.0f ms", closed_ms);
    ck_assert_int_eq(kdart_service_ping(sock_path, 5000), KDART_OK);
    printf("test_service: slowloris (a byte every 40 ms, idle timeout %d ms): %zu of %zu bytes sent, %s and closed "
           "after %.0f ms; the service still answers\n",
           IDLE_MS, sent, n, replied ? "ETIMEDOUT" : "no reply", closed_ms);
    svc_stop(&s);
}
END_TEST

/* Takes the only slot of a `--max-clients 1` service: a connection whose
 * ping was answered OK, left open (the slot may still be held by an
 * earlier client for a moment). */
static int hold_slot(void) {
    int holder = -1;
    for (double t0 = now_ms(); holder < 0 && now_ms() - t0 < 5000;) {
        holder = raw_connect();
        const char *ping = "kdart-proto=1\nop=ping\n";
        raw_frame(holder, ping, strlen(ping));
        char *reply = NULL;
        ck_assert_int_eq(raw_reply(holder, &reply, 10000), 1);
        if (atoi(field(reply, "status")) != KDART_OK) close(holder), holder = -1, sleep_ms(10);
        free(reply);
    }
    ck_assert_int_ge(holder, 0);
    return holder;
}

/* `serve --status` and `prewarm --service` against a full service: exit 1
 * and "the service is full (1 clients)", not "nobody listens"; a stale
 * socket says "nobody listens" and exits 4. */
START_TEST(test_cli_full_or_absent) {
    const char *args[] = {"serve", "--socket", sock_path, "-j1", "--max-clients", "1", "--idle-timeout", "60", NULL};
    pid_t pid = spawn_cli("serve", args);
    wait_ready(pid);
    int holder = hold_slot();
    const char *status[] = {"serve", "--status", "--socket", sock_path, NULL};
    int code = run_cli("status_full", status);
    char *e1 = slurp("status_full", "err");
    ck_assert_msg(code == 1, "serve --status on a full service exited %d:\n%s", code, e1);
    ck_assert_msg(strstr(e1, "the service is full (1 clients)"), "%s", e1);
    const char *pw[] = {"prewarm", "--service", sock_path, "--kernel", KERNEL, "--arch", ARCH, NULL};
    code = run_cli("prewarm_full", pw);
    char *e2 = slurp("prewarm_full", "err");
    ck_assert_msg(code == 1, "prewarm --service on a full service exited %d:\n%s", code, e2);
    ck_assert_msg(strstr(e2, "the service is full (1 clients)") && !strstr(e2, "nobody listens"), "%s", e2);
    close(holder);
    double t0 = now_ms();
    while ((code = run_cli("status_ok", status)) != 0 && now_ms() - t0 < 5000) sleep_ms(20);
    ck_assert_int_eq(code, 0);
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    ck_assert_int_eq(wait_exit(pid, 30000), 0);

    make_stale_socket(sock_path);
    code = run_cli("prewarm_stale", pw);
    char *e3 = slurp("prewarm_stale", "err");
    ck_assert_msg(code == 4 && strstr(e3, "nobody listens"), "exit %d:\n%s", code, e3);
    code = run_cli("status_stale", status);
    char *e4 = slurp("status_stale", "err");
    ck_assert_msg(code == 4 && strstr(e4, "nobody listens"), "exit %d:\n%s", code, e4);
    printf("test_service: full service (--max-clients 1, held): serve --status exit 1 and prewarm --service exit 1, "
           "both \"the service is full (1 clients)\"; stale socket: both exit 4 \"nobody listens\"\n");
    free(e1);
    free(e2);
    free(e3);
    free(e4);
}
END_TEST

/* `serve --stop` against a full service (its one slot held): the stop is
 * answered EAGAIN while a ping would get a reply, which is not "nobody
 * listens".  With --timeout 1 and the slot held throughout: exit 1, "full",
 * the service still running; then, the slot freed 300 ms into a second
 * --stop: that one retries, gets through, the service exits 0. */
START_TEST(test_cli_stop_full) {
    const char *args[] = {"serve", "--socket", sock_path, "-j1", "--max-clients", "1", "--idle-timeout", "60", NULL};
    pid_t pid = spawn_cli("serve", args);
    wait_ready(pid);
    int holder = hold_slot();
    const char *stop1[] = {"serve", "--stop", "--socket", sock_path, "--timeout", "1", NULL};
    double t0 = now_ms();
    int code = wait_exit(spawn_cli("stop_full", stop1), 30000);
    double full_ms = now_ms() - t0;
    char *e1 = slurp("stop_full", "err");
    ck_assert_msg(code == 1 && strstr(e1, "full") && !strstr(e1, "nobody listens"),
                  "serve --stop on a full service exited %d:\n%s", code, e1);
    ck_assert_msg(full_ms < 5000, "serve --stop --timeout 1 took %.0f ms", full_ms);
    ck_assert_msg(waitpid(pid, NULL, WNOHANG) == 0, "the service exited after a stop it refused");

    const char *stop2[] = {"serve", "--stop", "--socket", sock_path, "--timeout", "20", NULL};
    t0 = now_ms();
    pid_t stopper = spawn_cli("stop_later", stop2);
    sleep_ms(300);
    close(holder);
    code = wait_exit(stopper, 30000);
    double stop_ms = now_ms() - t0;
    char *e2 = slurp("stop_later", "err");
    ck_assert_msg(code == 0 && strstr(e2, "has stopped"), "serve --stop once the slot was freed exited %d:\n%s", code,
                  e2);
    ck_assert_int_eq(wait_exit(pid, 30000), 0);
    struct stat st;
    ck_assert_msg(lstat(sock_path, &st) != 0 && errno == ENOENT, "socket left behind after --stop");
    printf("test_service: full service (--max-clients 1, held): serve --stop --timeout 1 exit 1 after %.0f ms "
           "(\"%.*s\"), the service still running; a --stop retrying while the slot was freed 300 ms in: exit 0 "
           "after %.0f ms, the service exited 0\n",
           full_ms, (int)strcspn(e1, "\n"), e1, stop_ms);
    free(e1);
    free(e2);
}
END_TEST

/* A connection storm: STORM_LOOPS threads connect and close as fast as
 * they can for STORM_MS against --max-clients 4 (once, the service
 * accepted until the backlog was empty, which a storm never lets happen:
 * no EOF of a held slot was read, so every ping was refused "full", and
 * every refused handle waited for a close phase that never came, so its
 * memory grew by megabytes a second).  Pings every 200 ms, each retried
 * on "full" for up to 2 s, are all answered OK; the service's VmHWM stays
 * within its slots' worth plus 8 MiB of its idle value (well within 2x);
 * and after the storm a stats request is answered, counting every
 * connection the storm made. */
START_TEST(test_storm) {
    enum { STORM_LOOPS = 4, STORM_MS = 5000, SLOTS = 4, PING_EVERY_MS = 200, PING_BUDGET_MS = 2000 };
    const char *args[] = {"serve", "--socket", sock_path, "-j1", "--max-clients", "4", NULL};
    pid_t pid = spawn_cli("serve", args);
    wait_ready(pid);
    long base = vm_hwm_kb(pid);
    ck_assert_int_gt(base, 0);
    atomic_int stop = 0;
    burst_arg a[STORM_LOOPS];
    pthread_t th[STORM_LOOPS];
    for (int i = 0; i < STORM_LOOPS; i++) {
        a[i] = (burst_arg){1 << 30, 0, &stop};
        ck_assert_int_eq(pthread_create(&th[i], NULL, burst_main, &a[i]), 0);
    }
    int pings = 0, answered = 0, first_try = 0;
    double worst_ms = 0, t0 = now_ms();
    long peak = base;
    while (now_ms() - t0 < STORM_MS) {
        double p0 = now_ms();
        int rc, tries = 0;
        for (;;) { /* EAGAIN: the service is full (it does not go away) */
            rc = kdart_service_ping(sock_path, PING_BUDGET_MS);
            tries++;
            if (rc != KDART_EAGAIN || now_ms() - p0 > PING_BUDGET_MS) break;
            sleep_ms(5);
        }
        double ms = now_ms() - p0;
        pings++;
        if (rc == KDART_OK) answered++, first_try += tries == 1, worst_ms = ms > worst_ms ? ms : worst_ms;
        long hwm = vm_hwm_kb(pid);
        if (hwm > peak) peak = hwm;
        if (ms < PING_EVERY_MS) sleep_ms(PING_EVERY_MS - (int)ms);
    }
    atomic_store(&stop, 1);
    int connected = 0;
    for (int i = 0; i < STORM_LOOPS; i++) pthread_join(th[i], NULL), connected += a[i].connected;
    double storm_s = (now_ms() - t0) / 1000;
    long connections = stat_field("connections"), rejected = stat_field("rejected");
    long hwm = vm_hwm_kb(pid);
    if (hwm > peak) peak = hwm;
    long bound = base + SLOTS * (4 + KDART__PROTO_MAX_FRAME + 4096) / 1024 + 8192;
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    ck_assert_int_eq(wait_exit(pid, 30000), 0);
    printf("test_service: storm: %d loops of connect/close for %.1f s against --max-clients %d: %d connects "
           "(%.0f/s), %ld accepted by the service, %ld refused; pings: %d of %d answered OK (%d at the first try, "
           "slowest %.0f ms); service VmHWM %ld -> %ld KiB (%.2fx, bound +%ld KiB); stats answered after\n",
           STORM_LOOPS, storm_s, SLOTS, connected, connected / storm_s, connections, rejected, answered, pings,
           first_try, worst_ms, base, peak, (double)peak / base, bound - base);
    ck_assert_msg(answered == pings, "%d of %d pings answered OK within %d ms during the storm", answered, pings,
                  PING_BUDGET_MS);
    ck_assert_msg(!CHECK_MEMORY || peak <= bound, "service VmHWM rose from %ld to %ld KiB during the storm (bound %ld)",
                  base, peak, bound);
    ck_assert_msg(connections >= connected, "the service counted %ld connections, the storm made %d", connections,
                  connected);
}
END_TEST


/* A socket the CLI cannot use says why: a datagram socket at the path
 * (connect: EPROTOTYPE, reproducible as any user) and, as root, a listener
 * of uid 65534 (the peer-credential check), each once printed as just
 * "(EIO: file system error)". */
START_TEST(test_cli_transport_reason) {
    char dgram[600];
    snprintf(dgram, sizeof dgram, "%s/dgram.sock", dir);
    int d = socket(AF_UNIX, SOCK_DGRAM, 0);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, dgram, strlen(dgram));
    ck_assert_int_eq(bind(d, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(kdart_service_ping(dgram, 2000), KDART_EIO);
    ck_assert_msg(strstr(kdart_service_error(), "Protocol wrong type"), "%s", kdart_service_error());
    const char *st1[] = {"serve", "--status", "--socket", dgram, NULL};
    int code = run_cli("status_dgram", st1);
    char *e1 = slurp("status_dgram", "err");
    ck_assert_msg(code == 1 && strstr(e1, "Protocol wrong type") && !strstr(e1, "file system error"), "exit %d:\n%s",
                  code, e1);
    close(d);

    int foreign = 0;
    char *e2 = strdup(""), *e3 = strdup("");
    if (getuid() == 0) {
        /* SO_PEERCRED names whoever called listen(): bind as root, then
         * become uid 65534 and listen. */
        int ready[2];
        ck_assert_int_eq(pipe(ready), 0);
        pid_t child = fork();
        ck_assert_int_ge(child, 0);
        if (child == 0) {
            int l = socket(AF_UNIX, SOCK_STREAM, 0);
            memset(&sa, 0, sizeof sa);
            sa.sun_family = AF_UNIX;
            memcpy(sa.sun_path, sock_path, strlen(sock_path));
            if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof sa) != 0 || setuid(65534) != 0 || listen(l, 8) != 0)
                _exit(1);
            (void)!write(ready[1], "x", 1);
            pause();
            _exit(0);
        }
        close(ready[1]);
        char x;
        ck_assert_int_eq(read(ready[0], &x, 1), 1);
        close(ready[0]);
        const char *st2[] = {"serve", "--status", "--socket", sock_path, NULL};
        int c2 = run_cli("status_uid", st2);
        free(e2);
        e2 = slurp("status_uid", "err");
        const char *pw[] = {"prewarm", "--service", sock_path, "--kernel", KERNEL, "--arch", ARCH, NULL};
        int c3 = run_cli("prewarm_uid", pw);
        free(e3);
        e3 = slurp("prewarm_uid", "err");
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        ck_assert_msg(c2 == 1 && strstr(e2, "runs as uid 65534"), "serve --status exit %d:\n%s", c2, e2);
        ck_assert_msg(c3 == 1 && strstr(e3, "runs as uid 65534"), "prewarm --service exit %d:\n%s", c3, e3);
        foreign = 1;
    }
    printf("test_service: the CLI says why it cannot use a socket: \"%.*s\"%s%.*s\n", (int)strcspn(e1, "\n"), e1,
           foreign ? "; " : " (not root: the foreign-uid case skipped)", (int)strcspn(e2, "\n"), e2);
    free(e1);
    free(e2);
    free(e3);
}
END_TEST


static int count_entry(void *user, const kdart_entry *e) {
    (void)e;
    ++*(int *)user;
    return 0;
}

static int cache_rows(kdart_rt *rt) {
    int n = 0;
    ck_assert_int_eq(kdart_cache_list(rt, count_entry, &n), KDART_OK);
    return n;
}

/* Targets NVRTC does not know (sm_97a, sm_98a, sm_999) and ones older than
 * the kernels' sm_90 are refused with EARCH before any compile, by
 * kdart_prepare, kdart_prepare_async's check and the service: no compile,
 * no row in the cache (sm_97a and sm_98a used to be compiled and recorded
 * as failed entries). */
START_TEST(test_junk_arch) {
    static const char *const junk[] = {"sm_97a", "sm_98a", "sm_999", "sm_75", "sm_89"};
    enum { NJUNK = sizeof junk / sizeof junk[0] };
    char db[512];
    snprintf(db, sizeof db, "%s/kdart.db", dir);
    kdart_rt *rt = test_open(db, NULL, NULL);
    ck_assert_ptr_nonnull(rt);
    rt->compile = local_counting_compile;
    for (int i = 0; i < NJUNK; i++) {
        kdart_prepared p;
        int rc = kdart_prepare(rt, KERNEL, "K=64", junk[i], KDART_PREPARE_NO_LOAD, &p);
        ck_assert_msg(rc == KDART_EARCH, "kdart_prepare %s: %s", junk[i], kdart_errname(rc));
        const char *msg = kdart_last_error(rt);
        ck_assert_msg(strstr(msg, junk[i]), "%s: %s", junk[i], msg);
        if (i >= 3) ck_assert_msg(strstr(msg, "needs sm_90 or newer"), "%s: %s", junk[i], msg);
        char why[512];
        ck_assert_int_eq(kdart_arch_supported(junk[i], why, sizeof why), KDART_EARCH);
        char *text = NULL;
        ck_assert_int_eq(kdart_why(rt, KERNEL, "K=64", junk[i], &text), KDART_EARCH);
        free(text);
    }
    ck_assert_int_eq(kdart_arch_supported(ARCH, NULL, 0), KDART_OK);
    ck_assert_int_eq(kdart_arch_supported("sm_100a", NULL, 0), KDART_OK);
    ck_assert_int_eq(atomic_load(&local_compiles), 0);
    ck_assert_int_eq(cache_rows(rt), 0);
    kdart_close(rt);

    svc_thread s;
    svc_start(&s, 1);
    char first[sizeof(kdart_service_result){0}.message] = "";
    for (int i = 0; i < NJUNK; i++) {
        kdart_service_result r;
        ck_assert_int_eq(kdart_service_prepare(sock_path, KERNEL, "K=64", junk[i], 0, 30000, &r), KDART_OK);
        ck_assert_msg(r.status == KDART_EARCH, "service %s: %s %s", junk[i], kdart_errname(r.status), r.message);
        if (i >= 3) ck_assert_msg(strstr(r.message, "needs sm_90 or newer"), "%s", r.message);
        if (!first[0]) snprintf(first, sizeof first, "%s", r.message);
        ck_assert_int_eq(kdart_service_prewarm(sock_path, KERNEL, junk[i], 0, 30000, &r), KDART_OK);
        ck_assert_int_eq(r.status, KDART_EARCH);
    }
    kdart_service_result r;
    ck_assert_int_eq(kdart_service_prewarm(sock_path, KERNEL, "sm_90a,sm_98a", 0, 30000, &r), KDART_OK);
    ck_assert_int_eq(r.status, KDART_EARCH);
    ck_assert_int_eq(atomic_load(&compiles), 0);
    ck_assert_int_eq(cache_rows(s.rt), 0);
    svc_stop(&s);
    printf("test_service: %d junk targets refused with EARCH by kdart_prepare, kdart_why and the service (prepare "
           "and prewarm, also in a list with sm_90a): 0 compiles, 0 cache rows (\"%.120s\")\n",
           NJUNK, first);
}
END_TEST

/* ------------------------------------------- two ranks of one node (#17)
 *
 * Two processes, as two ranks of a training job, share one cache
 * directory and prepare the same specializations for sm_100a at the same
 * moment: first each compiling in-process (the compile leases of
 * runtime/prepare.c), then both as clients of one `kdart serve`.  Every
 * key must be compiled once on the node, and both ranks must end with
 * every cubin: the same key, an entry whose cubin kdart_cache_get reads
 * back (checksummed) as an ELF, and `kdart verify` clean.  The ranks are
 * forked children using the public API only, started together on a pipe
 * (no sleeps), one walking the list forwards and one backwards, so that
 * they compile different keys at first and then meet on keys the other
 * is compiling or has published.  Three kernels, small specializations:
 * about 2 s of compiling per test. */

#define NODE_ARCH "sm_100a"
#define NODE_KEYS 5

static const struct {
    const char *kernel, *spec;
} node_specs[NODE_KEYS] = {
    {"chunk_rcumsum", "K=64"},
    {"chunk_rcumsum", "K=128"},
    {"bwd_dhu", "io=bf16,K=64,BV=16,varlen=0"},
    {"bwd_dhu", "io=bf16,K=64,BV=32,varlen=1"},
    {"bwd_intra", "io=bf16,fold_dg=1,emit_bf16=0,K=64,varlen=0"},
};

/* What a rank sends back: one write, under PIPE_BUF, so it is atomic. */
typedef struct rank_result {
    int open_rc;
    int rc[NODE_KEYS], source[NODE_KEYS], cubin_ok[NODE_KEYS];
    char key[NODE_KEYS][65];
    int warnings, waits;
    char err[512], last_warn[512];
} rank_result;
_Static_assert(sizeof(rank_result) <= 4096, "a rank's result is one atomic pipe write");

typedef struct rank_log {
    atomic_int warnings, waits;
    pthread_mutex_t mu;
    char last_warn[512];
} rank_log;

/* Counts warnings (a fallback from the service is one) and lease waits;
 * called from the rank's threads and its lease heartbeat. */
static void rank_log_fn(void *user, int level, const char *msg) {
    rank_log *l = user;
    if (level <= KDART_LOG_WARN) {
        atomic_fetch_add(&l->warnings, 1);
        pthread_mutex_lock(&l->mu);
        snprintf(l->last_warn, sizeof l->last_warn, "%s", msg);
        pthread_mutex_unlock(&l->mu);
    }
    if (strstr(msg, "waiting for process")) atomic_fetch_add(&l->waits, 1);
}

/* The rank itself (a forked child: no Check calls, it reports and exits).
 * The cache and kernels come from KDART_CACHE_DIR and KDART_KERNEL_DIR,
 * as for a real rank; KDART_OPEN_NO_CUDA because sm_100a is never loaded
 * here, so the ranks behave the same with or without a GPU. */
static void rank_main(int rank, const char *service, int ready_fd, int gate_fd, int out_fd) {
    if (service) setenv("KDART_SERVICE", service, 1);
    static rank_result r;
    static rank_log lg;
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&lg.mu, NULL);
    kdart_options o;
    kdart_options_init(&o);
    o.flags = KDART_OPEN_NO_CUDA;
    o.log = rank_log_fn;
    o.log_user = &lg;
    o.log_level = KDART_LOG_INFO;
    kdart_rt *rt = NULL;
    r.open_rc = kdart_open(&rt, &o);
    (void)!write(ready_fd, "r", 1);
    char c;
    while (read(gate_fd, &c, 1) < 0 && errno == EINTR) { /* EOF: the parent closed the gate */
    }
    for (int i = 0; rt && i < NODE_KEYS; i++) {
        int j = rank ? NODE_KEYS - 1 - i : i;
        kdart_prepared p;
        r.rc[j] = kdart_prepare(rt, node_specs[j].kernel, node_specs[j].spec, NODE_ARCH, 0, &p);
        r.source[j] = p.source;
        memcpy(r.key[j], p.key, sizeof r.key[j]);
        if (r.rc[j] && !r.err[0])
            snprintf(r.err, sizeof r.err, "%s %s: %s", node_specs[j].kernel, node_specs[j].spec, kdart_last_error(rt));
    }
    for (int j = 0; rt && j < NODE_KEYS; j++) {
        kdart_entry *e = NULL;
        if (r.rc[j] || kdart_cache_get(rt, r.key[j], &e) != KDART_OK) continue;
        r.cubin_ok[j] = !e->failed && strcmp(e->key, r.key[j]) == 0 && e->cubin_size > 4 &&
                        memcmp(e->cubin, "\x7f" "ELF", 4) == 0;
        kdart_entry_free(e);
    }
    kdart_close(rt);
    r.warnings = atomic_load(&lg.warnings);
    r.waits = atomic_load(&lg.waits);
    snprintf(r.last_warn, sizeof r.last_warn, "%s", lg.last_warn);
    ssize_t n = write(out_fd, &r, sizeof r);
    _exit(n == (ssize_t)sizeof r ? 0 : 3);
}

/* Reads n bytes from fd within timeout_ms; the number read. */
static size_t read_within(int fd, void *buf, size_t n, int timeout_ms) {
    size_t got = 0;
    double t0 = now_ms();
    while (got < n) {
        int left = timeout_ms - (int)(now_ms() - t0);
        struct pollfd p = {fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, left) <= 0) {
            if (errno == EINTR) continue;
            break;
        }
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    return got;
}

/* Runs two ranks on the test's cache directory (as clients of service
 * when it is not NULL), released together once both have opened the
 * runtime, and checks what each reports: every prepare succeeded without
 * a warning, both ranks got the same key per specialization, and both
 * read every cubin back.  Returns the wall time of the race. */
static double run_two_ranks(const char *service, rank_result res[2]) {
    char kdir[512];
    snprintf(kdir, sizeof kdir, "%s/kernel_src", KDART_TEST_SOURCE_DIR);
    setenv("KDART_CACHE_DIR", dir, 1);
    setenv("KDART_KERNEL_DIR", kdir, 1);
    int ready[2], gate[2], out[2][2];
    ck_assert_int_eq(pipe(ready), 0);
    ck_assert_int_eq(pipe(gate), 0);
    pid_t pid[2];
    for (int r = 0; r < 2; r++) {
        ck_assert_int_eq(pipe(out[r]), 0);
        pid[r] = fork();
        ck_assert_int_ge(pid[r], 0);
        if (pid[r] == 0) {
            close(ready[0]);
            close(gate[1]);
            close(out[r][0]);
            rank_main(r, service, ready[1], gate[0], out[r][1]);
        }
        close(out[r][1]);
    }
    close(ready[1]);
    close(gate[0]);
    char rr[2];
    ck_assert_msg(read_within(ready[0], rr, 2, 60000) == 2, "a rank did not open the runtime");
    close(ready[0]);
    double t0 = now_ms();
    close(gate[1]); /* both start now */
    size_t got[2];
    for (int r = 0; r < 2; r++) {
        memset(&res[r], 0, sizeof res[r]);
        got[r] = read_within(out[r][0], &res[r], sizeof res[r], 300000);
        close(out[r][0]);
    }
    double wall = now_ms() - t0;
    for (int r = 0; r < 2; r++) {
        int code = wait_exit(pid[r], 60000);
        if (code < 0) {
            kill(pid[r], SIGKILL);
            waitpid(pid[r], NULL, 0);
        }
        ck_assert_msg(code == 0 && got[r] == sizeof res[r], "rank %d exited %d, sent %zu bytes", r, code, got[r]);
    }
    for (int r = 0; r < 2; r++) {
        ck_assert_msg(res[r].open_rc == KDART_OK, "rank %d: kdart_open %s", r, kdart_errname(res[r].open_rc));
        ck_assert_msg(res[r].warnings == 0, "rank %d: %d warnings, last: %s", r, res[r].warnings, res[r].last_warn);
        for (int j = 0; j < NODE_KEYS; j++) {
            ck_assert_msg(res[r].rc[j] == KDART_OK, "rank %d: %s", r, res[r].err);
            ck_assert_msg(res[r].cubin_ok[j], "rank %d: no cubin for %s %s", r, node_specs[j].kernel, node_specs[j].spec);
        }
    }
    for (int j = 0; j < NODE_KEYS; j++) ck_assert_str_eq(res[0].key[j], res[1].key[j]);
    return wall;
}

typedef struct node_entries {
    const rank_result *res;
    int entries, bad_hits, foreign;
    int64_t want_hits;
} node_entries;

static int node_entry(void *user, const kdart_entry *e) {
    node_entries *n = user;
    int mine = 0;
    for (int j = 0; j < NODE_KEYS; j++) mine |= strcmp(e->key, n->res[0].key[j]) == 0;
    n->entries++;
    n->foreign += !mine || e->failed || strcmp(e->arch, NODE_ARCH) != 0;
    n->bad_hits += e->hits != n->want_hits;
    return 0;
}

/* What the shared cache says afterwards: exactly the NODE_KEYS entries,
 * each hit want_hits times (a prepare that did not compile a key read it
 * from the cache: one hit; the compiler publishes without a hit), misses
 * within [lo, hi]; then `kdart verify` on it is clean.  *misses: the
 * count, for the report. */
static void check_node_cache(const rank_result res[2], int64_t want_hits, int64_t lo, int64_t hi, int64_t *misses) {
    char db[512];
    snprintf(db, sizeof db, "%s/kdart.db", dir);
    kdart_rt *rt = test_open(db, NULL, NULL);
    ck_assert_ptr_nonnull(rt);
    kdart_cache_stats s;
    ck_assert_int_eq(kdart_cache_stats_get(rt, &s), KDART_OK);
    node_entries n = {res, 0, 0, 0, want_hits};
    ck_assert_int_eq(kdart_cache_list(rt, node_entry, &n), KDART_OK);
    kdart_close(rt);
    ck_assert_int_eq(n.entries, NODE_KEYS);
    ck_assert_int_eq(n.foreign, 0);
    ck_assert_msg(n.bad_hits == 0, "%d entries not hit %lld times", n.bad_hits, (long long)want_hits);
    ck_assert_int_eq(s.entries, NODE_KEYS);
    ck_assert_int_eq(s.failed_entries, 0);
    ck_assert_int_eq(s.hits, want_hits * NODE_KEYS);
    ck_assert_msg(s.misses >= lo && s.misses <= hi, "misses %lld outside [%lld, %lld]", (long long)s.misses,
                  (long long)lo, (long long)hi);
    *misses = s.misses;
    const char *verify[] = {"verify", NULL};
    int code = run_cli("verify", verify);
    char *vo = slurp("verify", "out");
    char want[64];
    snprintf(want, sizeof want, "checked %d entries, 0 damaged", NODE_KEYS);
    ck_assert_msg(code == 0 && strstr(vo, want), "kdart verify exited %d:\n%s", code, vo);
    free(vo);
}

/* In-process: each rank compiles what it misses, under the key's lease.
 * Each key: one rank reports KDART_FROM_COMPILE, the other
 * KDART_FROM_CACHE (after waiting on the lease, or finding the entry). */
START_TEST(test_two_ranks_shared_cache) {
    rank_result res[2];
    double wall = run_two_ranks(NULL, res);
    int compiled[2] = {0, 0};
    for (int j = 0; j < NODE_KEYS; j++) {
        int c = 0;
        for (int r = 0; r < 2; r++) {
            if (res[r].source[j] == KDART_FROM_COMPILE) c++, compiled[r]++;
            else ck_assert_int_eq(res[r].source[j], KDART_FROM_CACHE);
        }
        ck_assert_msg(c == 1, "%s %s compiled by %d ranks", node_specs[j].kernel, node_specs[j].spec, c);
    }
    int64_t misses;
    check_node_cache(res, 1, NODE_KEYS, 2 * NODE_KEYS, &misses);
    printf("test_service: 2 ranks, one cache, no service: %d keys for %s, compiled %d + %d (1 per key), "
           "%d + %d lease waits, cache: %d entries hit once each, %lld misses; both ranks read every cubin, "
           "kdart verify clean; %.0f ms\n",
           NODE_KEYS, NODE_ARCH, compiled[0], compiled[1], res[0].waits, res[1].waits, NODE_KEYS, (long long)misses,
           wall);
}
END_TEST

/* Through `kdart serve` (the CLI, a third process): the ranks compile
 * nothing themselves (every source KDART_FROM_CACHE, no fallback
 * warning), the service compiled each key once, and each entry has one
 * hit per rank. */
START_TEST(test_two_ranks_one_service) {
    const char *args[] = {"serve", "--socket", sock_path, "--jobs", "2", NULL};
    pid_t svc = spawn_cli("serve", args);
    wait_ready(svc);
    rank_result res[2];
    double wall = run_two_ranks(sock_path, res);
    for (int j = 0; j < NODE_KEYS; j++)
        for (int r = 0; r < 2; r++) ck_assert_int_eq(res[r].source[j], KDART_FROM_CACHE);
    long compiled = stat_field("compiled"), failed = stat_field("failed"), coalesced = stat_field("coalesced"),
         prepares = stat_field("prepares");
    ck_assert_int_eq(compiled, NODE_KEYS);
    ck_assert_int_eq(failed, 0);
    int64_t misses;
    /* The service misses each key once, and at least one rank did before asking it. */
    check_node_cache(res, 2, 2 * NODE_KEYS, 3 * NODE_KEYS, &misses);
    ck_assert_int_eq(kdart_serve_stop_request(sock_path, 60000), KDART_OK);
    int code = wait_exit(svc, 30000);
    ck_assert_msg(code == 0, "kdart serve exited %d:\n%s", code, slurp("serve", "err"));
    printf("test_service: 2 ranks, one cache, one kdart serve: %d keys for %s, %ld compiled by the service, 0 by "
           "the ranks (0 warnings), %ld prepare requests (%ld joined a compile in flight); cache: %d entries hit "
           "twice each, %lld misses; kdart verify clean; %.0f ms\n",
           NODE_KEYS, NODE_ARCH, compiled, prepares, coalesced, NODE_KEYS, (long long)misses, wall);
}
END_TEST

int main(void) {
    Suite *s = suite_create("service");
    TCase *t = tcase_create("service");
    tcase_set_timeout(t, 180);
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, test_decoder_fuzz);
    tcase_add_test(t, test_concurrent_clients);
    tcase_add_test(t, test_library_client);
    tcase_add_test(t, test_dead_service_fallback);
    tcase_add_test(t, test_live_garbage);
    tcase_add_test(t, test_max_clients);
    tcase_add_test(t, test_stop_in_flight);
    tcase_add_test(t, test_cli_serve_sigterm);
    tcase_add_test(t, test_cli_serve_stop);
    tcase_add_test(t, test_burst_memory);
    tcase_add_test(t, test_idle_slots_reclaimed);
    tcase_add_test(t, test_slowloris);
    tcase_add_test(t, test_cli_full_or_absent);
    tcase_add_test(t, test_cli_stop_full);
    tcase_add_test(t, test_storm);
    tcase_add_test(t, test_cli_transport_reason);
    tcase_add_test(t, test_junk_arch);
    tcase_add_test(t, test_two_ranks_shared_cache);
    tcase_add_test(t, test_two_ranks_one_service);
    suite_add_tcase(s, t);
    return test_run(s);
}
