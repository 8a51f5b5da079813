/*
 * test_concurrency.c: many threads, many processes, one cache.
 *
 *   - single flight in one process: 8 threads preparing one uncompiled
 *     specialization cause one compile (a compile failure too);
 *   - KDART_PREPARE_NO_WAIT returns KDART_EAGAIN while another thread, or
 *     another process, compiles the key;
 *   - 16 processes on one empty cache: each key compiled exactly once
 *     (counted by the compiler seam in a shared page, and from the cache's
 *     hit counts: compiles + hits = 16 for every key);
 *   - compile leases: the store API, a holder killed with SIGKILL (same
 *     host: freed at once; posing as another host: freed at its expiry);
 *   - kdart_prepare_async: the callback runs on the loop's thread with the
 *     right status, error returns never call it, queued jobs cancel with
 *     KDART_ECANCELED, kdart_close with jobs queued, running or waiting on
 *     a lease neither hangs nor leaks.
 *
 * The compiler seam (rt->compile) is wrapped to count compiles, to hold a
 * compile on a semaphore, or to fail; the real compiles are of
 * chunk_rcumsum, the cheap kernel.  Every test prints a numeric result line.
 * Nothing here needs a GPU: every prepare passes KDART_PREPARE_NO_LOAD.
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>
#include <uv.h>

#include "rt.h"
#include "testlib.h"

#define NOLOAD KDART_PREPARE_NO_LOAD
#define KERNEL "chunk_rcumsum"
#define ARCH "sm_90a"

static char dir[256];
static char db[512];

static void setup(void) {
    test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/cache/kdart.db", dir);
}

static void teardown(void) { test_rmtree(dir); }

static double now_ms(void) { return kdart__now_ms(); }

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ------------------------------------------------------- compiler wrapper */

typedef struct wrap {
    atomic_int calls;
    int delay_ms;          /* before compiling: lets racing threads pile up */
    int fail;              /* answer ECOMPILE instead of compiling */
    sem_t *entered;        /* posted when a compile starts */
    sem_t *release;        /* waited for before compiling */
    int *shared;           /* per-K counters in a MAP_SHARED page: [0] K=64, [1] K=128 */
    _Atomic double first_ms; /* when the first compile started (now_ms) */
} wrap;

static int wrap_compile(void *user, const kdart__compile_in *in, kdart__compile_out *out) {
    wrap *w = user;
    double zero = 0;
    atomic_compare_exchange_strong(&w->first_ms, &zero, now_ms());
    atomic_fetch_add(&w->calls, 1);
    if (w->shared) __atomic_fetch_add(&w->shared[strstr(in->entry, "<64>") ? 0 : 1], 1, __ATOMIC_SEQ_CST);
    if (w->entered) sem_post(w->entered);
    if (w->release) {
        while (sem_wait(w->release) != 0 && errno == EINTR) {
        }
    }
    if (w->delay_ms) sleep_ms(w->delay_ms);
    if (w->fail) {
        memset(out, 0, sizeof *out);
        out->log = kdart__strdup("kdart_unit.cu(1): error: injected failure");
        out->ms = 1;
        return KDART_ECOMPILE;
    }
    return kdart__compile_nvrtc(NULL, in, out);
}

static void wrap_install(kdart_rt *rt, wrap *w) {
    rt->compile = wrap_compile;
    rt->compile_user = w;
}

static kdart_rt *open_threads(const char *path, int threads) {
    kdart_options o;
    kdart_options_init(&o);
    o.cache_path = path;
    o.kernel_dir = TEST_KERNEL_DIR;
    o.flags = KDART_OPEN_NO_ENV | KDART_OPEN_NO_CUDA;
    o.compile_threads = threads;
    kdart_rt *rt = NULL;
    ck_assert_int_eq(kdart_open(&rt, &o), KDART_OK);
    return rt;
}

/* The key a request would have, from kdart_why. */
static void key_of(kdart_rt *rt, const char *spec, char key[65]) {
    char *text = NULL;
    ck_assert_int_eq(kdart_why(rt, KERNEL, spec, ARCH, &text), KDART_OK);
    const char *k = strstr(text, "key:");
    ck_assert_ptr_nonnull(k);
    ck_assert_int_eq(sscanf(k, "key: %64s", key), 1);
    free(text);
}

static int64_t raw_int(const char *path, const char *sql) {
    sqlite3 *h;
    sqlite3_stmt *st;
    int64_t v = -1;
    ck_assert_int_eq(sqlite3_open(path, &h), SQLITE_OK);
    sqlite3_busy_timeout(h, 10000);
    ck_assert_int_eq(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK);
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    return v;
}

/* ------------------------------------------------------ threads, one key */

typedef struct racer {
    kdart_rt *rt;
    pthread_barrier_t *go;
    uint32_t flags;
    int rc;
    kdart_prepared info;
    char err[512];
} racer;

static void *race(void *p) {
    racer *r = p;
    pthread_barrier_wait(r->go);
    r->rc = kdart_prepare(r->rt, KERNEL, "K=64", ARCH, r->flags, &r->info);
    snprintf(r->err, sizeof r->err, "%s", kdart_last_error(r->rt));
    return NULL;
}

/* 8 threads, 1 key: 1 compile.  Then the same with a failing compiler
 * and no disk cache (so no negative caching helps): 1 compile, and all 8
 * see the compiler's message. */
START_TEST(threads_one_compile) {
    enum { N = 8 };
    for (int round = 0; round < 2; round++) {
        wrap w = {.delay_ms = 300, .fail = round == 1};
        kdart_rt *rt = test_open(round == 0 ? db : "", NULL, NULL);
        ck_assert_ptr_nonnull(rt);
        wrap_install(rt, &w);
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, N);
        racer r[N];
        pthread_t th[N];
        for (int i = 0; i < N; i++) {
            r[i] = (racer){.rt = rt, .go = &go, .flags = NOLOAD};
            pthread_create(&th[i], NULL, race, &r[i]);
        }
        for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
        pthread_barrier_destroy(&go);
        int from_compile = 0;
        for (int i = 0; i < N; i++) {
            if (round == 0) {
                ck_assert_msg(r[i].rc == KDART_OK, "thread %d: %s", i, r[i].err);
                ck_assert_str_eq(r[i].info.key, r[0].info.key);
            } else {
                ck_assert_int_eq(r[i].rc, KDART_ECOMPILE);
                ck_assert_msg(strstr(r[i].err, "injected failure") != NULL, "thread %d: %s", i, r[i].err);
            }
            from_compile += r[i].info.source == KDART_FROM_COMPILE;
        }
        int calls = atomic_load(&w.calls);
        printf("single flight (%s): threads=%d compiles=%d compile_results=%d\n",
               round == 0 ? "success" : "failure", N, calls, from_compile);
        ck_assert_int_eq(calls, 1);
        ck_assert_int_eq(atomic_load(&rt->compiles), 1);
        if (round == 0) ck_assert_int_eq(from_compile, 1);
        kdart_close(rt);
    }
}
END_TEST

typedef struct mixer {
    kdart_rt *rt;
    pthread_barrier_t *go;
    int seed;
    int bad;
} mixer;

static const char *const mix_spec[4] = {"K=64", "K=128", "K=64", "K=128"};
static const char *const mix_arch[4] = {"sm_90a", "sm_90a", "sm_100a", "sm_100a"};

static void *mix(void *p) {
    mixer *m = p;
    unsigned r = (unsigned)m->seed * 2654435761u + 1;
    pthread_barrier_wait(m->go);
    for (int i = 0; i < 24; i++) {
        r = r * 1103515245u + 12345u;
        int k = (int)((r >> 16) % 4);
        int rc = kdart_prepare(m->rt, KERNEL, mix_spec[k], mix_arch[k], NOLOAD, NULL);
        m->bad += rc != KDART_OK;
    }
    return NULL;
}

typedef struct counter {
    atomic_int ok, failed;
    sem_t done;
} counter;

static void count_cb(void *user, int status, const kdart_prepared *info) {
    (void)info;
    counter *c = user;
    atomic_fetch_add(status == KDART_OK ? &c->ok : &c->failed, 1);
    sem_post(&c->done);
}

/* 8 threads in random order over 4 keys, plus 8 background jobs on the
 * same keys: 4 compiles in all. */
START_TEST(threads_many_keys) {
    enum { N = 8 };
    kdart_rt *rt = open_threads(db, 3);
    wrap w = {.delay_ms = 200};
    wrap_install(rt, &w);
    counter c = {0};
    sem_init(&c.done, 0, 0);
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, N + 1);
    mixer m[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        m[i] = (mixer){rt, &go, i, 0};
        pthread_create(&th[i], NULL, mix, &m[i]);
    }
    pthread_barrier_wait(&go);
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(kdart_prepare_async(rt, KERNEL, mix_spec[i % 4], mix_arch[i % 4], NOLOAD, NULL, count_cb,
                                             &c, NULL),
                         KDART_OK);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        bad += m[i].bad;
    }
    for (int i = 0; i < 8; i++) sem_wait(&c.done);
    kdart_close(rt);
    int calls = atomic_load(&w.calls);
    printf("mixed: %d threads x 24 prepares + 8 async jobs over 4 keys: compiles=%d failures=%d async ok=%d "
           "failed=%d\n",
           N, calls, bad, atomic_load(&c.ok), atomic_load(&c.failed));
    ck_assert_int_eq(bad, 0);
    ck_assert_int_eq(calls, 4);
    ck_assert_int_eq(atomic_load(&c.ok), 8);
    pthread_barrier_destroy(&go);
    sem_destroy(&c.done);
}
END_TEST

typedef struct waiter {
    kdart_rt *rt;
    const char *spec;
    uint32_t flags;
    int rc;
    kdart_prepared info;
} waiter;

static void *prepare_thread(void *p) {
    waiter *w = p;
    w->rc = kdart_prepare(w->rt, KERNEL, w->spec, ARCH, w->flags, &w->info);
    return NULL;
}

/* NO_WAIT while another thread compiles the key: EAGAIN at once; a plain
 * call waits; a different key is not held up. */
START_TEST(no_wait_in_process) {
    sem_t entered, release;
    sem_init(&entered, 0, 0);
    sem_init(&release, 0, 0);
    wrap w = {.entered = &entered, .release = &release};
    kdart_rt *rt = test_open(db, NULL, NULL);
    wrap_install(rt, &w);
    waiter a = {.rt = rt, .spec = "K=64", .flags = NOLOAD, .rc = -99}, b = a;
    pthread_t ta, tb;
    pthread_create(&ta, NULL, prepare_thread, &a);
    sem_wait(&entered); /* a is compiling */
    pthread_create(&tb, NULL, prepare_thread, &b);
    double t0 = now_ms();
    kdart_prepared info;
    int rc = kdart_prepare(rt, KERNEL, "K=64", ARCH, NOLOAD | KDART_PREPARE_NO_WAIT, &info);
    double t_eagain = now_ms() - t0;
    ck_assert_int_eq(rc, KDART_EAGAIN);
    ck_assert_ptr_nonnull(strstr(kdart_last_error(rt), "being compiled"));
    sem_post(&release);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    ck_assert_int_eq(a.rc, KDART_OK);
    ck_assert_int_eq(b.rc, KDART_OK);
    ck_assert_int_eq(a.info.source, KDART_FROM_COMPILE);
    ck_assert_int_eq(b.info.source, KDART_FROM_MEMORY);
    /* Once published, NO_WAIT is a plain hit. */
    ck_assert_int_eq(kdart_prepare(rt, KERNEL, "K=64", ARCH, NOLOAD | KDART_PREPARE_NO_WAIT, &info), KDART_OK);
    ck_assert_int_eq(atomic_load(&w.calls), 1);
    printf("no_wait: status=%d (%s) after %.2f ms; compiles=%d\n", rc, kdart_errname(rc), t_eagain,
           atomic_load(&w.calls));
    kdart_close(rt);
    sem_destroy(&entered);
    sem_destroy(&release);
}
END_TEST

/* --------------------------------------------------- 16 processes, 2 keys */

typedef struct hits_ctx {
    int64_t hits[2];
    int entries;
} hits_ctx;

static int count_hits(void *user, const kdart_entry *e) {
    hits_ctx *h = user;
    h->entries++;
    h->hits[strcmp(e->spec, "K=64") == 0 ? 0 : 1] = e->hits;
    return 0;
}

/* Counts "waiting for process ..." (a wait on another process's lease). */
static void count_waits(void *user, int level, const char *msg) {
    if (strstr(msg, "waiting for process")) __atomic_fetch_add((int *)user, 1, __ATOMIC_SEQ_CST);
}

typedef struct proc_thread {
    kdart_rt *rt;
    int order;
    int bad;
} proc_thread;

static void *proc_prepare(void *arg) {
    proc_thread *t = arg;
    for (int k = 0; k < 2; k++) {
        const char *spec = (k ^ t->order) ? "K=128" : "K=64";
        int rc = kdart_prepare(t->rt, KERNEL, spec, ARCH, NOLOAD, NULL);
        if (rc) {
            fprintf(stderr, "%s: %s\n", spec, kdart_last_error(t->rt));
            t->bad = 1;
        }
    }
    return NULL;
}

START_TEST(processes_one_compile_per_key) {
    enum { P = 16 };
    int *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(shared, MAP_FAILED);
    memset(shared, 0, 4096);
    int gate[2];
    ck_assert_int_eq(pipe(gate), 0);
    pid_t pids[P];
    double t0 = now_ms();
    for (int p = 0; p < P; p++) {
        pids[p] = fork();
        ck_assert_int_ge(pids[p], 0);
        if (pids[p] == 0) {
            close(gate[1]);
            /* A 1 s compile: everyone else arrives while it runs. */
            wrap w = {.shared = shared, .delay_ms = 1000};
            kdart_options o;
            kdart_options_init(&o);
            o.cache_path = db;
            o.kernel_dir = TEST_KERNEL_DIR;
            o.flags = KDART_OPEN_NO_ENV | KDART_OPEN_NO_CUDA;
            o.log = count_waits;
            o.log_user = &shared[2];
            o.log_level = KDART_LOG_INFO;
            kdart_rt *rt = NULL;
            if (kdart_open(&rt, &o) != KDART_OK) _exit(2);
            wrap_install(rt, &w);
            char c;
            (void)!read(gate[0], &c, 1); /* everyone starts together */
            /* 3 threads per process, half of them in the other order. */
            proc_thread t[3];
            pthread_t th[3];
            for (int i = 0; i < 3; i++) {
                t[i] = (proc_thread){rt, (p + i) & 1, 0};
                pthread_create(&th[i], NULL, proc_prepare, &t[i]);
            }
            int bad = 0;
            for (int i = 0; i < 3; i++) {
                pthread_join(th[i], NULL);
                bad |= t[i].bad;
            }
            kdart_close(rt);
            _exit(bad);
        }
    }
    close(gate[0]);
    sleep_ms(300); /* let them all open the cache */
    close(gate[1]);
    int failed = 0;
    for (int p = 0; p < P; p++) {
        int status;
        waitpid(pids[p], &status, 0);
        failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    double wall = now_ms() - t0;
    kdart_rt *rt = test_open(db, NULL, NULL);
    hits_ctx h = {{0, 0}, 0};
    ck_assert_int_eq(kdart_cache_list(rt, count_hits, &h), KDART_OK);
    kdart_close(rt);
    int64_t leases = raw_int(db, "SELECT count(*) FROM leases");
    printf("processes=%d (3 threads each) keys=2 compiles_per_key=%d,%d cache_hits_per_key=%lld,%lld entries=%d failed=%d "
           "lease_waits=%d leases_left=%lld wall=%.0f ms\n",
           P, shared[0], shared[1], (long long)h.hits[0], (long long)h.hits[1], h.entries, failed, shared[2],
           (long long)leases, wall);
    ck_assert_int_eq(failed, 0);
    ck_assert_int_eq(shared[0], 1);
    ck_assert_int_eq(shared[1], 1);
    ck_assert_int_eq(h.entries, 2);
    /* From the cache's records: every process but the compiler hit it. */
    ck_assert_int_eq(h.hits[0], P - 1);
    ck_assert_int_eq(h.hits[1], P - 1);
    ck_assert_int_eq(leases, 0);
    ck_assert_int_ge(shared[2], 1); /* the lease was what made them wait */
    munmap(shared, 4096);
}
END_TEST

/* ----------------------------------------------------------------- leases */

START_TEST(lease_store_api) {
    char err[256];
    kdart__store *a, *b;
    ck_assert_int_eq(kdart__store_open(&a, db, 0, 0, err, sizeof err), KDART_OK);
    ck_assert_int_eq(kdart__store_open(&b, db, 0, 0, err, sizeof err), KDART_OK);
    ck_assert_int_eq(raw_int(db, "PRAGMA user_version"), 2);
    const char *key = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    kdart__lease la, lb, holder;
    ck_assert_int_eq(kdart__store_lease_live(a, key, NULL), KDART_ENOENT);
    ck_assert_int_eq(kdart__store_lease_take(a, key, 60000, &la, NULL), KDART_OK);
    ck_assert_int_eq(la.owner_pid, getpid());
    /* Another handle of this process: a live owner, so held. */
    ck_assert_int_eq(kdart__store_lease_take(b, key, 60000, &lb, &holder), KDART_EAGAIN);
    ck_assert_int_eq(holder.started, la.started);
    ck_assert_int_eq(kdart__store_lease_live(b, key, &holder), KDART_OK);
    int64_t exp0 = la.expiry;
    sleep_ms(20);
    ck_assert_int_eq(kdart__store_lease_renew(a, &la, 60000), KDART_OK);
    ck_assert_int_gt(la.expiry, exp0);
    ck_assert_int_eq(kdart__store_lease_release(a, &la), KDART_OK);
    ck_assert_int_eq(kdart__store_lease_live(b, key, NULL), KDART_ENOENT);
    /* A lost lease cannot be renewed; releasing it is harmless. */
    ck_assert_int_eq(kdart__store_lease_renew(a, &la, 60000), KDART_ENOENT);
    ck_assert_int_eq(kdart__store_lease_release(a, &la), KDART_OK);
    /* Expiry frees it. */
    ck_assert_int_eq(kdart__store_lease_take(a, key, 150, &la, NULL), KDART_OK);
    ck_assert_int_eq(kdart__store_lease_take(b, key, 60000, &lb, NULL), KDART_EAGAIN);
    double t0 = now_ms();
    while (kdart__store_lease_take(b, key, 60000, &lb, NULL) == KDART_EAGAIN) sleep_ms(10);
    double freed = now_ms() - t0;
    ck_assert_double_lt(freed, 1000);
    ck_assert_int_eq(kdart__store_lease_renew(a, &la, 60000), KDART_ENOENT); /* b has it now */
    ck_assert_int_eq(kdart__store_lease_release(b, &lb), KDART_OK);
    ck_assert_int_eq(kdart__store_lease_take(a, "xyz", 1000, &la, NULL), KDART_EINVAL);
    printf("lease store api: expiry of a 150 ms lease freed it after %.0f ms (polled from 0)\n", freed);
    kdart__store_close(a);
    kdart__store_close(b);
}
END_TEST

static void raw_exec(const char *path, const char *sql) {
    sqlite3 *h;
    ck_assert_int_eq(sqlite3_open(path, &h), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(h, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);
}

/* A schema-1 cache (no leases table) is migrated to 2, keeping its entries. */
START_TEST(schema_1_migrates) {
    kdart_rt *rt = test_open(db, NULL, NULL);
    ck_assert_int_eq(kdart_prepare(rt, KERNEL, "K=64", ARCH, NOLOAD, NULL), KDART_OK);
    kdart_close(rt);
    raw_exec(db, "DROP TABLE leases; PRAGMA user_version = 1;");
    ck_assert_int_eq(raw_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'leases'"), 0);
    rt = test_open(db, NULL, NULL);
    wrap w = {0};
    wrap_install(rt, &w);
    kdart_prepared info;
    ck_assert_int_eq(kdart_prepare(rt, KERNEL, "K=64", ARCH, NOLOAD, &info), KDART_OK);
    ck_assert_int_eq(info.source, KDART_FROM_CACHE);
    ck_assert_int_eq(kdart_prepare(rt, KERNEL, "K=128", ARCH, NOLOAD, &info), KDART_OK); /* takes a lease */
    kdart_close(rt);
    int64_t version = raw_int(db, "PRAGMA user_version");
    int64_t tables = raw_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'leases'");
    printf("schema 1 -> %lld: leases table %lld, entries %lld (the schema-1 one hit), compiles %d\n", (long long)version,
           (long long)tables, (long long)raw_int(db, "SELECT count(*) FROM entries"), atomic_load(&w.calls));
    ck_assert_int_eq(version, 2);
    ck_assert_int_eq(tables, 1);
    ck_assert_int_eq(atomic_load(&w.calls), 1);
}
END_TEST

/* A child takes the lease through the store API, then is killed with
 * SIGKILL; returns the time the parent's prepare waited before its compile
 * started. */
static double killed_holder(const char *spec, const char *pose_host, int64_t ttl_ms, int *eagain) {
    kdart_rt *rt = test_open(db, NULL, NULL);
    char key[65];
    key_of(rt, spec, key);
    int ready[2];
    ck_assert_int_eq(pipe(ready), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char err[256];
        kdart__store *st;
        kdart__lease mine;
        if (pose_host) kdart__store_lease_identity(0, pose_host, NULL);
        if (kdart__store_open(&st, db, 0, 0, err, sizeof err) != KDART_OK) _exit(2);
        if (kdart__store_lease_take(st, key, ttl_ms, &mine, NULL) != KDART_OK) _exit(3);
        (void)!write(ready[1], "x", 1);
        for (;;) pause();
    }
    char c;
    ck_assert_int_eq(read(ready[0], &c, 1), 1);
    double taken = now_ms();
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    close(ready[0]);
    close(ready[1]);
    wrap w = {0};
    wrap_install(rt, &w);
    /* (NO_WAIT would take a dead owner's lease and compile: only asked
     * when the holder is foreign, so alive as far as we can tell.) */
    *eagain = pose_host ? kdart_prepare(rt, KERNEL, spec, ARCH, NOLOAD | KDART_PREPARE_NO_WAIT, NULL) : 0;
    ck_assert_int_eq(atomic_load(&w.calls), 0);
    kdart_prepared info;
    ck_assert_msg(kdart_prepare(rt, KERNEL, spec, ARCH, NOLOAD, &info) == KDART_OK, "%s", kdart_last_error(rt));
    ck_assert_int_eq(info.source, KDART_FROM_COMPILE);
    ck_assert_int_eq(atomic_load(&w.calls), 1);
    double waited = atomic_load(&w.first_ms) - taken;
    kdart_close(rt);
    ck_assert_int_eq(raw_int(db, "SELECT count(*) FROM leases"), 0);
    return waited;
}

/* A compile that tells the parent it started, then never ends. */
static int ready_fd = -1;
static int hang_compile(void *user, const kdart__compile_in *in, kdart__compile_out *out) {
    (void)user;
    (void)in;
    memset(out, 0, sizeof *out);
    (void)!write(ready_fd, "x", 1);
    for (;;) pause();
    return KDART_ECOMPILE;
}

/* A kdart process killed with SIGKILL in the middle of its compile. */
static double killed_mid_compile(const char *arch, int64_t *leases_while) {
    int ready[2];
    ck_assert_int_eq(pipe(ready), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        kdart_rt *rt = test_open(db, NULL, NULL);
        if (!rt) _exit(2);
        ready_fd = ready[1];
        rt->compile = hang_compile;
        kdart_prepare(rt, KERNEL, "K=64", arch, NOLOAD, NULL);
        _exit(3);
    }
    char c;
    ck_assert_int_eq(read(ready[0], &c, 1), 1);
    *leases_while = raw_int(db, "SELECT count(*) FROM leases");
    kill(pid, SIGKILL);
    double killed = now_ms();
    int status;
    waitpid(pid, &status, 0);
    close(ready[0]);
    close(ready[1]);
    kdart_rt *rt = test_open(db, NULL, NULL);
    wrap w = {0};
    wrap_install(rt, &w);
    kdart_prepared info;
    ck_assert_msg(kdart_prepare(rt, KERNEL, "K=64", arch, NOLOAD, &info) == KDART_OK, "%s", kdart_last_error(rt));
    ck_assert_int_eq(info.source, KDART_FROM_COMPILE);
    double waited = atomic_load(&w.first_ms) - killed;
    kdart_close(rt);
    ck_assert_int_eq(raw_int(db, "SELECT count(*) FROM leases"), 0);
    return waited;
}

START_TEST(killed_lease_holder) {
    int64_t leases_while = -1;
    double mid = killed_mid_compile("sm_100a", &leases_while);
    printf("kdart process killed mid-compile (its lease row present: %lld): next prepare compiled after %.0f ms\n",
           (long long)leases_while, mid);
    ck_assert_int_eq(leases_while, 1);
    ck_assert_double_lt(mid, 1000);
    int eagain_same, eagain_other;
    /* Same host, same boot: the dead pid frees a 60 s lease at once. */
    double same = killed_holder("K=64", NULL, 60000, &eagain_same);
    /* Posing as another host: only the expiry (1.5 s) frees it. */
    double other = killed_holder("K=128", "some-other-host", 1500, &eagain_other);
    printf("killed lease holder: same host (ttl 60000 ms) blocked %.0f ms; other host (ttl 1500 ms) "
           "blocked %.0f ms; NO_WAIT before its expiry: %s\n",
           same, other, kdart_errname(eagain_other));
    (void)eagain_same;
    ck_assert_double_lt(same, 1000);
    ck_assert_double_ge(other, 1200);
    ck_assert_double_lt(other, 1500 + 2000);
    ck_assert_int_eq(eagain_other, KDART_EAGAIN);
}
END_TEST

/* A foreign live lease, and a waiter that gives up after
 * KDART_LEASE_WAIT_MS and compiles itself. */
START_TEST(lease_wait_timeout) {
    kdart_rt *rt = test_open(db, NULL, NULL);
    char key[65];
    key_of(rt, "K=64", key);
    char err[256];
    kdart__store *st;
    kdart__lease mine;
    ck_assert_int_eq(kdart__store_open(&st, db, 0, 0, err, sizeof err), KDART_OK);
    kdart__store_lease_identity(0, "a-host-that-compiles-forever", NULL);
    ck_assert_int_eq(kdart__store_lease_take(st, key, 600000, &mine, NULL), KDART_OK);
    kdart__store_lease_identity(0, NULL, NULL);
    setenv("KDART_LEASE_WAIT_MS", "700", 1);
    kdart_options o;
    kdart_options_init(&o);
    o.cache_path = db;
    o.kernel_dir = TEST_KERNEL_DIR;
    kdart_rt *rt2;
    ck_assert_int_eq(kdart_open(&rt2, &o), KDART_OK); /* reads the environment */
    wrap w = {0};
    wrap_install(rt2, &w);
    double t0 = now_ms();
    ck_assert_int_eq(kdart_prepare(rt2, KERNEL, "K=64", ARCH, NOLOAD, NULL), KDART_OK);
    double waited = atomic_load(&w.first_ms) - t0;
    printf("lease wait timeout: KDART_LEASE_WAIT_MS=700, compiled itself after %.0f ms; compiles=%d\n", waited,
           atomic_load(&w.calls));
    ck_assert_double_ge(waited, 650);
    ck_assert_double_lt(waited, 3000);
    ck_assert_int_eq(atomic_load(&w.calls), 1);
    unsetenv("KDART_LEASE_WAIT_MS");
    kdart_close(rt2);
    kdart_close(rt);
    kdart__store_close(st);
}
END_TEST

/* The heartbeat keeps a long compile's lease alive past its ttl. */
START_TEST(heartbeat_renews) {
    kdart_rt *rt = test_open(db, NULL, NULL);
    rt->lease_ttl_ms = 1000;
    rt->lease_renew_ms = 100;
    wrap w = {.delay_ms = 3000};
    wrap_install(rt, &w);
    char key[65];
    key_of(rt, "K=64", key);
    waiter a = {.rt = rt, .spec = "K=64", .flags = NOLOAD, .rc = -99};
    pthread_t ta;
    pthread_create(&ta, NULL, prepare_thread, &a);
    char err[256];
    kdart__store *st;
    ck_assert_int_eq(kdart__store_open(&st, db, 0, 0, err, sizeof err), KDART_OK);
    sleep_ms(200);
    int live = 0, checks = 0;
    kdart__lease holder;
    int64_t first_hb = -1, last_hb = -1;
    for (; checks < 20; checks++) { /* 0.2 .. 2.2 s: well past the 1000 ms ttl */
        if (kdart__store_lease_live(st, key, &holder) == KDART_OK) {
            live++;
            if (first_hb < 0) first_hb = holder.heartbeat;
            last_hb = holder.heartbeat;
        }
        sleep_ms(100);
    }
    pthread_join(ta, NULL);
    ck_assert_int_eq(a.rc, KDART_OK);
    printf("heartbeat: ttl 1000 ms, renew 100 ms, compile 3000 ms: lease live in %d of %d checks, heartbeat advanced %lld ms\n",
           live, checks, (long long)(last_hb - first_hb));
    ck_assert_int_eq(live, checks);
    ck_assert_int_ge(last_hb - first_hb, 1200);
    ck_assert_int_eq(kdart__store_lease_live(st, key, NULL), KDART_ENOENT);
    kdart__store_close(st);
    kdart_close(rt);
}
END_TEST

/* NO_WAIT against another process's live lease. */
START_TEST(no_wait_across_processes) {
    kdart_rt *rt = test_open(db, NULL, NULL);
    char key[65];
    key_of(rt, "K=64", key);
    char err[256];
    kdart__store *st;
    kdart__lease mine;
    ck_assert_int_eq(kdart__store_open(&st, db, 0, 0, err, sizeof err), KDART_OK);
    kdart__store_lease_identity(0, "compiler-host", NULL);
    ck_assert_int_eq(kdart__store_lease_take(st, key, 60000, &mine, NULL), KDART_OK);
    kdart__store_lease_identity(0, NULL, NULL);
    wrap w = {0};
    wrap_install(rt, &w);
    int rc = kdart_prepare(rt, KERNEL, "K=64", ARCH, NOLOAD | KDART_PREPARE_NO_WAIT, NULL);
    printf("no_wait across processes: status=%d (%s): %s\n", rc, kdart_errname(rc), kdart_last_error(rt));
    ck_assert_int_eq(rc, KDART_EAGAIN);
    ck_assert_ptr_nonnull(strstr(kdart_last_error(rt), "compiler-host"));
    ck_assert_int_eq(atomic_load(&w.calls), 0);
    ck_assert_int_eq(kdart__store_lease_release(st, &mine), KDART_OK);
    ck_assert_int_eq(kdart_prepare(rt, KERNEL, "K=64", ARCH, NOLOAD | KDART_PREPARE_NO_WAIT, NULL), KDART_OK);
    ck_assert_int_eq(atomic_load(&w.calls), 1);
    kdart__store_close(st);
    kdart_close(rt);
}
END_TEST

/* ------------------------------------------------------------ async jobs */

typedef struct cb_log {
    pthread_mutex_t lock;
    int n;
    int status[32];
    int source[32];
    pthread_t thread[32];
    char key[32][65];
    char err[32][256];
    int tag[32];
    kdart_job *job[32];
    sem_t done;
} cb_log;

typedef struct cb_arg {
    cb_log *log;
    int tag;
    kdart_job *self;
    int cancel_self; /* kdart_job_cancel inside the callback */
} cb_arg;

static void on_done(void *user, int status, const kdart_prepared *info) {
    cb_arg *a = user;
    cb_log *l = a->log;
    pthread_mutex_lock(&l->lock);
    int i = l->n++;
    l->status[i] = status;
    l->source[i] = info ? info->source : -1;
    l->thread[i] = pthread_self();
    l->tag[i] = a->tag;
    snprintf(l->key[i], sizeof l->key[i], "%s", info ? info->key : "(null)");
    snprintf(l->err[i], sizeof l->err[i], "%s", a->self ? kdart_job_error(a->self) : "");
    if (a->cancel_self) l->tag[i] += 1000 * (kdart_job_cancel(a->self) == KDART_EAGAIN);
    pthread_mutex_unlock(&l->lock);
    sem_post(&l->done);
}

static void log_init(cb_log *l) {
    memset(l, 0, sizeof *l);
    pthread_mutex_init(&l->lock, NULL);
    sem_init(&l->done, 0, 0);
}

static int find_tag(cb_log *l, int tag) {
    for (int i = 0; i < l->n; i++)
        if (l->tag[i] % 1000 == tag) return i;
    return -1;
}

START_TEST(async_on_loop) {
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    cb_log l;
    log_init(&l);
    kdart_rt *rt = open_threads(db, 2);
    wrap w = {.fail = 0};
    wrap_install(rt, &w);
    cb_arg args[8];
    for (int i = 0; i < 8; i++) args[i] = (cb_arg){&l, i, NULL, 0};
    /* Errors return at once and never call back. */
    kdart_job *job = (kdart_job *)&l; /* must be reset to NULL */
    ck_assert_int_eq(kdart_prepare_async(rt, "nope", "K=64", ARCH, NOLOAD, &loop, on_done, &args[7], &job),
                     KDART_EKERNEL);
    ck_assert_ptr_null(job);
    ck_assert_int_eq(kdart_prepare_async(rt, KERNEL, "K=96", ARCH, NOLOAD, &loop, on_done, &args[7], NULL),
                     KDART_ESPEC);
    ck_assert_int_eq(kdart_prepare_async(rt, KERNEL, "K=64", "sm_9x", NOLOAD, &loop, on_done, &args[7], NULL),
                     KDART_EARCH);
    ck_assert_int_eq(kdart_prepare_async(rt, KERNEL, "K=64", ARCH, NOLOAD, &loop, NULL, &args[7], NULL),
                     KDART_ENULL);
    ck_assert_int_eq(kdart_prepare_async(NULL, KERNEL, "K=64", ARCH, NOLOAD, &loop, on_done, &args[7], NULL),
                     KDART_EMISUSE);
    int errors_called = l.n;
    /* Two jobs of one key (one compile between them), one of another;
     * the first job cancels itself from inside its callback (too late). */
    args[0].cancel_self = 1;
    ck_assert_int_eq(kdart_prepare_async(rt, KERNEL, "K=64", ARCH, NOLOAD, &loop, on_done, &args[0], &args[0].self),
                     KDART_OK);
    ck_assert_int_eq(kdart_prepare_async(rt, KERNEL, "K=64", ARCH, NOLOAD, &loop, on_done, &args[1], &args[1].self),
                     KDART_OK);
    ck_assert_int_eq(kdart_prepare_async(rt, KERNEL, "K=128", ARCH, NOLOAD, &loop, on_done, &args[2], &args[2].self),
                     KDART_OK);
    ck_assert_int_eq(l.n, 0); /* nothing runs before the loop does */
    ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0); /* returns when the jobs are done */
    ck_assert_int_eq(l.n, 3);
    pthread_t me = pthread_self();
    int on_loop = 0;
    for (int i = 0; i < l.n; i++) {
        ck_assert_msg(l.status[i] == KDART_OK, "job %d: %s", l.tag[i], l.err[i]);
        on_loop += pthread_equal(l.thread[i], me) != 0;
        ck_assert_int_eq(strlen(l.key[i]), 64);
    }
    ck_assert_int_eq(on_loop, 3);
    ck_assert_int_eq(l.tag[find_tag(&l, 0)], 1000); /* cancel in the callback: EAGAIN */
    ck_assert_int_eq(atomic_load(&w.calls), 2);
    ck_assert_str_eq(l.key[find_tag(&l, 0)], l.key[find_tag(&l, 1)]);

    /* A failing compile: status and message reach the callback. */
    w.fail = 1;
    ck_assert_int_eq(kdart_prepare_async(rt, KERNEL, "K=64", "sm_100a", NOLOAD, &loop, on_done, &args[3],
                                         &args[3].self),
                     KDART_OK);
    uv_run(&loop, UV_RUN_DEFAULT);
    int f = find_tag(&l, 3);
    ck_assert_int_ge(f, 0);
    ck_assert_int_eq(l.status[f], KDART_ECOMPILE);
    ck_assert_ptr_nonnull(strstr(l.err[f], "injected failure"));
    w.fail = 0;

    /* No loop: kdart's own loop thread calls back. */
    ck_assert_int_eq(kdart_prepare_async(rt, KERNEL, "K=128", "sm_100a", NOLOAD, NULL, on_done, &args[4], NULL),
                     KDART_OK);
    sem_wait(&l.done);
    sem_wait(&l.done);
    sem_wait(&l.done);
    sem_wait(&l.done);
    sem_wait(&l.done);
    int o = find_tag(&l, 4);
    ck_assert_int_ge(o, 0);
    ck_assert_int_eq(l.status[o], KDART_OK);
    ck_assert(!pthread_equal(l.thread[o], me));
    printf("async: %d callbacks on the loop thread (of 3), statuses %d %d %d; failing compile -> %s; "
           "own loop -> %s on another thread; error returns that called back: %d\n",
           on_loop, l.status[0], l.status[1], l.status[2], kdart_errname(l.status[f]), kdart_errname(l.status[o]),
           errors_called);
    ck_assert_int_eq(errors_called, 0);
    kdart_close(rt);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

/* Allocation failures inside kdart_prepare_async: ENOMEM, no callback,
 * no leak; the first success calls back once. */
START_TEST(async_alloc_failures) {
    long base = kdart__alloc_live();
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    cb_log l;
    log_init(&l);
    kdart_rt *rt = open_threads(db, 1);
    cb_arg a = {&l, 0, NULL, 0};
    int nomem = 0, rc = KDART_ENOMEM;
    for (long n = 1; n < 20 && rc != KDART_OK; n++) {
        kdart__alloc_fail_at(n);
        rc = kdart_prepare_async(rt, KERNEL, "K=64", ARCH, NOLOAD, &loop, on_done, &a, NULL);
        kdart__alloc_fail_at(0);
        if (rc == KDART_ENOMEM) nomem++;
        else ck_assert_int_eq(rc, KDART_OK);
        uv_run(&loop, UV_RUN_NOWAIT);
        ck_assert_int_eq(l.n, 0);
    }
    ck_assert_int_eq(rc, KDART_OK);
    uv_run(&loop, UV_RUN_DEFAULT);
    kdart_close(rt);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    printf("async allocation failures: %d ENOMEM returns without a callback, then 1 job -> %d callback(s) (%s); "
           "leaked=%ld\n",
           nomem, l.n, kdart_errname(l.status[0]), kdart__alloc_live() - base);
    ck_assert_int_ge(nomem, 1);
    ck_assert_int_eq(l.n, 1);
    ck_assert_int_eq(l.status[0], KDART_OK);
    ck_assert_int_eq(kdart__alloc_live(), base);
}
END_TEST

/* One worker, held in a compile; cancel what is queued behind it. */
START_TEST(async_cancel_queued) {
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    cb_log l;
    log_init(&l);
    sem_t entered, release;
    sem_init(&entered, 0, 0);
    sem_init(&release, 0, 0);
    kdart_rt *rt = open_threads(db, 1);
    wrap w = {.entered = &entered, .release = &release};
    wrap_install(rt, &w);
    cb_arg a[4];
    kdart_job *jobs[4];
    const char *specs[4] = {"K=64", "K=128", "K=64", "K=128"};
    const char *archs[4] = {"sm_90a", "sm_90a", "sm_100a", "sm_100a"};
    for (int i = 0; i < 4; i++) {
        a[i] = (cb_arg){&l, i, NULL, 0};
        ck_assert_int_eq(kdart_prepare_async(rt, KERNEL, specs[i], archs[i], NOLOAD, &loop, on_done, &a[i], &jobs[i]),
                         KDART_OK);
        a[i].self = jobs[i];
        if (i == 0) sem_wait(&entered); /* job 0 is running */
    }
    int c0 = kdart_job_cancel(jobs[0]);
    int c1 = kdart_job_cancel(jobs[1]);
    int c2 = kdart_job_cancel(jobs[2]);
    int c2again = kdart_job_cancel(jobs[2]);
    ck_assert_int_eq(kdart_job_cancel(NULL), KDART_ENULL);
    sem_post(&release);
    sem_post(&release); /* for job 3 */
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(l.n, 4);
    int s[4];
    for (int i = 0; i < 4; i++) s[i] = l.status[find_tag(&l, i)];
    printf("async cancel (1 worker busy): cancel running=%s queued=%s,%s again=%s; callbacks: %s %s %s %s; "
           "compiles=%d\n",
           kdart_errname(c0), kdart_errname(c1), kdart_errname(c2), kdart_errname(c2again), kdart_errname(s[0]),
           kdart_errname(s[1]), kdart_errname(s[2]), kdart_errname(s[3]), atomic_load(&w.calls));
    ck_assert_int_eq(c0, KDART_EAGAIN);
    ck_assert_int_eq(c1, KDART_OK);
    ck_assert_int_eq(c2, KDART_OK);
    ck_assert_int_eq(c2again, KDART_EAGAIN);
    ck_assert_int_eq(s[0], KDART_OK);
    ck_assert_int_eq(s[1], KDART_ECANCELED);
    ck_assert_int_eq(s[2], KDART_ECANCELED);
    ck_assert_int_eq(s[3], KDART_OK);
    ck_assert_int_eq(atomic_load(&w.calls), 2);
    kdart_close(rt);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    sem_destroy(&entered);
    sem_destroy(&release);
}
END_TEST

typedef struct poster {
    sem_t *sem;
    int ms;
} poster;

static void *post_later(void *p) {
    poster *x = p;
    sleep_ms(x->ms);
    sem_post(x->sem);
    return NULL;
}

/* kdart_close with a running job, queued jobs on the caller's loop and on
 * kdart's own loop: returns once the running compile ends, cancels the
 * rest, and nothing leaks once the caller's loop has run. */
START_TEST(close_with_jobs_in_flight) {
    long base = kdart__alloc_live();
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    cb_log l;
    log_init(&l);
    sem_t entered, release;
    sem_init(&entered, 0, 0);
    sem_init(&release, 0, 0);
    kdart_rt *rt = open_threads(db, 1);
    wrap w = {.entered = &entered, .release = &release};
    wrap_install(rt, &w);
    cb_arg a[6];
    for (int i = 0; i < 6; i++) {
        a[i] = (cb_arg){&l, i, NULL, 0};
        const char *spec = i % 2 ? "K=128" : "K=64";
        const char *arch = i < 3 ? "sm_90a" : "sm_100a";
        ck_assert_int_eq(kdart_prepare_async(rt, KERNEL, spec, arch, NOLOAD, i < 4 ? &loop : NULL, on_done, &a[i], NULL),
                         KDART_OK);
        if (i == 0) sem_wait(&entered);
    }
    poster p = {&release, 300};
    pthread_t th;
    pthread_create(&th, NULL, post_later, &p);
    double t0 = now_ms();
    kdart_close(rt);
    double closed = now_ms() - t0;
    pthread_join(th, NULL);
    int own_before_run = l.n; /* the two own-loop jobs: called back before close returned */
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(l.n, 6);
    int ok = 0, cancelled = 0;
    for (int i = 0; i < 6; i++) {
        ok += l.status[i] == KDART_OK;
        cancelled += l.status[i] == KDART_ECANCELED;
    }
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    long leaked = kdart__alloc_live() - base;
    printf("close with jobs in flight: close took %.0f ms (running compile released after 300 ms); "
           "own-loop callbacks before close returned=%d; callbacks ok=%d cancelled=%d; leaked allocations=%ld\n",
           closed, own_before_run, ok, cancelled, leaked);
    ck_assert_int_eq(own_before_run, 2);
    ck_assert_int_eq(ok, 1);
    ck_assert_int_eq(cancelled, 5);
    ck_assert_int_eq(l.status[find_tag(&l, 0)], KDART_OK);
    ck_assert_double_lt(closed, 10000);
    ck_assert_int_eq(leaked, 0);
    sem_destroy(&entered);
    sem_destroy(&release);
}
END_TEST

/* kdart_close while a worker waits for another process's lease: the wait
 * ends with KDART_ECANCELED, promptly. */
START_TEST(close_while_waiting_for_lease) {
    long base = kdart__alloc_live();
    kdart_rt *rt = open_threads(db, 2);
    char key[65];
    key_of(rt, "K=64", key);
    char err[256];
    kdart__store *st;
    kdart__lease mine;
    ck_assert_int_eq(kdart__store_open(&st, db, 0, 0, err, sizeof err), KDART_OK);
    kdart__store_lease_identity(0, "busy-host", NULL);
    ck_assert_int_eq(kdart__store_lease_take(st, key, 600000, &mine, NULL), KDART_OK);
    kdart__store_lease_identity(0, NULL, NULL);
    cb_log l;
    log_init(&l);
    cb_arg a = {&l, 0, NULL, 0};
    ck_assert_int_eq(kdart_prepare_async(rt, KERNEL, "K=64", ARCH, NOLOAD, NULL, on_done, &a, NULL), KDART_OK);
    sleep_ms(500); /* the worker is polling the lease */
    ck_assert_int_eq(l.n, 0);
    double t0 = now_ms();
    kdart_close(rt);
    double closed = now_ms() - t0;
    kdart__store_close(st);
    printf("close while a worker waits on a foreign lease: close took %.0f ms, job status %s, leaked=%ld\n", closed,
           kdart_errname(l.status[0]), kdart__alloc_live() - base);
    ck_assert_int_eq(l.n, 1);
    ck_assert_int_eq(l.status[0], KDART_ECANCELED);
    ck_assert_double_lt(closed, 2000);
    ck_assert_int_eq(kdart__alloc_live(), base);
}
END_TEST

int main(void) {
    Suite *s = suite_create("concurrency");
    TCase *tc = tcase_create("threads");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, threads_one_compile);
    tcase_add_test(tc, no_wait_in_process);
    tcase_add_test(tc, threads_many_keys);
    suite_add_tcase(s, tc);
    TCase *pr = tcase_create("processes");
    tcase_add_checked_fixture(pr, setup, teardown);
    tcase_set_timeout(pr, 600);
    tcase_add_test(pr, processes_one_compile_per_key);
    tcase_add_test(pr, lease_store_api);
    tcase_add_test(pr, schema_1_migrates);
    tcase_add_test(pr, killed_lease_holder);
    tcase_add_test(pr, lease_wait_timeout);
    tcase_add_test(pr, heartbeat_renews);
    tcase_add_test(pr, no_wait_across_processes);
    suite_add_tcase(s, pr);
    TCase *as = tcase_create("async");
    tcase_add_checked_fixture(as, setup, teardown);
    tcase_set_timeout(as, 300);
    tcase_add_test(as, async_on_loop);
    tcase_add_test(as, async_alloc_failures);
    tcase_add_test(as, async_cancel_queued);
    tcase_add_test(as, close_with_jobs_in_flight);
    tcase_add_test(as, close_while_waiting_for_lease);
    suite_add_tcase(s, as);
    return test_run(s);
}
