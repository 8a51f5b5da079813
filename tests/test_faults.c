/*
 * test_faults.c: crashes and full disks, on the CPU.
 *
 * kill_points: a writer process compiles and publishes entries in a loop
 * (with KDART_PREPARE_FORCE, so every prepare is a compile, a lease and a
 * publishing transaction) and reports each key it has published through a
 * pipe.  The parent kills it with SIGKILL after a different delay each
 * round, so the kills land all over compile-and-publish: inside NVRTC,
 * between the lease and the insert, inside SQLite's commit.  After each
 * kill: `verify` finds no damage, every key reported as published is still
 * in the cache, and no lease of the dead writer blocks anyone (its owner
 * is a dead process of this host, so the lease is void at once; the
 * expiry bounds it everywhere else).
 *
 * readonly_cache: a valid cache that cannot be written (a full disk, as
 * RLIMIT_FSIZE = 0 makes it; an immutable directory, chattr +i; a
 * read-only bind mount in a private mount namespace) is still read: its
 * entries hit, a miss compiles in memory, one warning.  Tests run as root,
 * whom permission bits do not stop; the rlimit runs everywhere, the other
 * two where the system permits them.
 *
 * full_filesystem: RLIMIT_FSIZE makes every write past a few kilobytes
 * fail with EFBIG, as a full disk does (SQLite sees SQLITE_FULL or
 * SQLITE_IOERR).  Kernels must still prepare, in memory, with one warning.
 *
 * full_disk_cleaning: a real full disk (a 24 MiB tmpfs in a private mount
 * namespace), filled while a reader keeps the WAL from being checkpointed,
 * so that the WAL holds everything: rm, gc and clear must work and give
 * the space back.  lock_failure: fcntl locks that fail with ENOLCK (a
 * seccomp filter, as NFS without lockd does): the cache is read, without
 * stalls.  readonly_wal_without_shm: a cache on a read-only mount with its
 * -wal and no -shm: the entries only in the WAL are found.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "rt.h"
#include "testlib.h"

static char dir[256];
static char db[512];

static void setup(void) {
    test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/kdart.db", dir);
}

static void teardown(void) { test_rmtree(dir); }

static const char *const specs[] = {"K=64", "K=128"};
static const char *const archs[] = {"sm_90a", "sm_100a"};

/* The writer: publishes forever, reporting "key\n" after each publish. */
static void writer(int fd) {
    kdart_rt *rt = test_open(db, NULL, NULL);
    if (!rt) _exit(2);
    for (unsigned i = 0;; i++) {
        kdart_prepared p;
        int rc = kdart_prepare(rt, "chunk_rcumsum", specs[i % 2], archs[(i / 2) % 2],
                               KDART_PREPARE_NO_LOAD | KDART_PREPARE_FORCE, &p);
        if (rc != KDART_OK) _exit(3);
        char line[80];
        int n = snprintf(line, sizeof line, "%s\n", p.key);
        if (write(fd, line, (size_t)n) != n) _exit(4);
    }
}

static int list_count(void *user, const kdart_entry *e) {
    (*(int *)user)++;
    return e->kernel == NULL; /* touch the entry */
}

static int cache_has(kdart_rt *rt, const char *key) {
    kdart_entry *e = NULL;
    int rc = kdart_cache_get(rt, key, &e);
    kdart_entry_free(e);
    return rc == KDART_OK;
}

START_TEST(kill_points) {
    int rounds = 40, lost = 0, checked_keys = 0;
    long total_published = 0;
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    for (int round = 0; round < rounds; round++) {
        int fds[2];
        ck_assert_int_eq(pipe(fds), 0);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            close(fds[0]);
            writer(fds[1]);
        }
        close(fds[1]);
        /* Kill points spread from the very start to well into the loop,
         * with a random offset so no two runs kill at the same places. */
        useconds_t delay = (useconds_t)(round * 15000 + rand() % 15000);
        usleep(delay);
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        ck_assert_msg(WIFSIGNALED(status), "writer exited by itself (status %d)", status);
        /* Every key the writer reported was committed before it said so. */
        char buf[8192];
        size_t have = 0;
        ssize_t n;
        while ((n = read(fds[0], buf + have, sizeof buf - 1 - have)) > 0) have += (size_t)n;
        close(fds[0]);
        buf[have] = 0;
        kdart_rt *rt = test_open(db, NULL, NULL);
        ck_assert_ptr_nonnull(rt);
        int64_t checked = 0, damaged = 0;
        if (access(db, F_OK) == 0) {
            int vrc = kdart_cache_verify(rt, &checked, &damaged);
            ck_assert_msg(vrc == KDART_OK && damaged == 0, "round %d: verify %s, %lld damaged: %s", round,
                          kdart_errname(vrc), (long long)damaged, kdart_last_error(rt));
        }
        for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
            if (strlen(line) != 64) continue; /* a line cut by the kill */
            total_published++;
            checked_keys++;
            if (!cache_has(rt, line)) lost++;
        }
        /* No lease of the dead writer may block: a prepare of every key
         * finishes at once (the keys are in the cache or compile now). */
        for (int i = 0; i < 4; i++) {
            kdart_prepared p;
            double t0 = kdart__now_ms();
            ck_assert_int_eq(kdart_prepare(rt, "chunk_rcumsum", specs[i % 2], archs[i / 2], KDART_PREPARE_NO_LOAD, &p),
                             KDART_OK);
            ck_assert_msg(kdart__now_ms() - t0 < 5000, "prepare waited %.0f ms after the kill",
                          kdart__now_ms() - t0);
            kdart__lease holder;
            int live = rt->rw ? kdart__store_lease_live(rt->rw, p.key, &holder) : KDART_ENOENT;
            ck_assert_msg(live == KDART_ENOENT || holder.owner_pid != pid,
                          "round %d: the dead writer's lease on %.12s is still live", round, p.key);
        }
        kdart_close(rt);
    }
    printf("kill_points: %d kills, %ld entries reported published before the kill, %d checked, %d lost\n", rounds,
           total_published, checked_keys, lost);
    ck_assert_int_eq(lost, 0);
}
END_TEST

START_TEST(full_filesystem) {
    /* Fill the cache first while there is room, then shrink the room. */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN); /* write() then fails with EFBIG */
        test_log log;
        kdart_rt *rt = test_open(db, NULL, &log);
        if (!rt) _exit(10);
        if (kdart_prepare(rt, "chunk_rcumsum", "K=64", "sm_90a", KDART_PREPARE_NO_LOAD, NULL)) _exit(11);
        struct rlimit rl = {16384, 16384};
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(12);
        int before = log.count[KDART_LOG_WARN];
        int bad = 0;
        for (int i = 0; i < 3; i++) {
            kdart_prepared p;
            bad |= kdart_prepare(rt, "chunk_rcumsum", specs[i % 2], archs[1], KDART_PREPARE_NO_LOAD | KDART_PREPARE_FORCE,
                                 &p) != KDART_OK;
            bad |= kdart_prepare(rt, "chunk_rcumsum", specs[i % 2], archs[0], KDART_PREPARE_NO_LOAD, &p) != KDART_OK;
        }
        int warned = log.count[KDART_LOG_WARN] - before;
        printf("full_filesystem: 6 prepares on a full disk, %d failed, %d warning(s): %s\n", bad, warned,
               log.last[KDART_LOG_WARN]);
        fflush(stdout);
        kdart_close(rt);
        _exit(bad ? 13 : warned == 1 ? 0 : 14);
    }
    int status;
    waitpid(pid, &status, 0);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d (13: a prepare failed, 14: not "
                  "exactly one warning)", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    /* The cache is still sound afterwards. */
    kdart_rt *rt = test_open(db, NULL, NULL);
    int64_t checked, damaged;
    ck_assert_int_eq(kdart_cache_verify(rt, &checked, &damaged), KDART_OK);
    ck_assert_int_ge(checked, 1);
    kdart_close(rt);
}
END_TEST

/* The child of readonly_cache: every seeded key must hit the cache that
 * cannot be written, a forced prepare compiles in memory, and the handle
 * warns once.  Exit 0, or which check failed. */
static int readonly_child(const char (*keys)[65], int nkeys) {
    test_log log;
    kdart_rt *rt = test_open(db, NULL, &log);
    if (!rt) return 20;
    kdart_rt_info info;
    if (kdart_info(rt, &info) || info.cache_writable || !info.cache_path[0]) return 21;
    for (int i = 0; i < nkeys; i++) {
        kdart_prepared p;
        if (kdart_prepare(rt, "chunk_rcumsum", specs[i % 2], archs[i / 2], KDART_PREPARE_NO_LOAD, &p)) return 22;
        if (p.source != KDART_FROM_CACHE || strcmp(p.key, keys[i])) return 23;
    }
    if (atomic_load(&rt->compiles) != 0) return 24;
    kdart_prepared p;
    if (kdart_prepare(rt, "chunk_rcumsum", "K=64", "sm_90a", KDART_PREPARE_NO_LOAD | KDART_PREPARE_FORCE, &p) ||
        p.source != KDART_FROM_COMPILE)
        return 25;
    int n = 0;
    if (kdart_cache_list(rt, list_count, &n) || n != nkeys) return 26;
    int warned = log.count[KDART_LOG_WARN];
    printf("readonly_cache: %d hits, 1 compile in memory, %d warning(s): %s\n", nkeys, warned,
           log.last[KDART_LOG_WARN]);
    fflush(stdout);
    kdart_close(rt);
    return warned == 1 ? 0 : 27;
}

/* Waits for a test's child: its exit status, or 128 + the signal that
 * killed it.  77 means that what the test needs (a mount namespace,
 * seccomp) is not available here: said, with the test's name. */
static int child_status(pid_t pid, const char *test) {
    int status;
    waitpid(pid, &status, 0);
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (rc == 77) printf("%s: not permitted here; skipped\n", test);
    return rc;
}

/* Runs readonly_child in a forked child after how(): 0 ran and passed,
 * 77 the mechanism is unavailable here; else a failure. */
static int readonly_run(int (*how)(void), const char (*keys)[65], int nkeys) {
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int rc = how();
        _exit(rc ? rc : readonly_child(keys, nkeys));
    }
    return child_status(pid, "readonly_cache");
}

static int full_disk(void) {
    signal(SIGXFSZ, SIG_IGN); /* write() then fails with EFBIG */
    struct rlimit rl = {0, 0};
    return setrlimit(RLIMIT_FSIZE, &rl) == 0 ? 0 : 77;
}

/* The cache's directory read-only in a mount namespace of this child. */
static int ro_bind_mount(void) {
    if (unshare(CLONE_NEWNS) != 0) return 77;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return 77;
    if (mount(dir, dir, NULL, MS_BIND, NULL) != 0) return 77;
    if (mount(NULL, dir, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) != 0) return 77;
    char probe[600];
    snprintf(probe, sizeof probe, "%s/probe", dir);
    return open(probe, O_CREAT | O_WRONLY, 0644) < 0 && errno == EROFS ? 0 : 30;
}

static int chattr(const char *flag) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "chattr %s '%s' 2>/dev/null", flag, dir);
    return system(cmd);
}

static int immutable_dir(void) { return 0; } /* the parent set chattr +i */

START_TEST(readonly_cache) {
    /* Seed: both specs for both archs, compiled while it can be written. */
    char keys[4][65];
    kdart_rt *rt = test_open(db, NULL, NULL);
    for (int i = 0; i < 4; i++) {
        kdart_prepared p;
        ck_assert_int_eq(kdart_prepare(rt, "chunk_rcumsum", specs[i % 2], archs[i / 2], KDART_PREPARE_NO_LOAD, &p),
                         KDART_OK);
        memcpy(keys[i], p.key, sizeof keys[i]);
    }
    kdart_close(rt);

    int rc = readonly_run(full_disk, (const char (*)[65])keys, 4);
    ck_assert_msg(rc == 0, "full disk: child status %d", rc);
    rc = readonly_run(ro_bind_mount, (const char (*)[65])keys, 4);
    ck_assert_msg(rc == 0 || rc == 77, "read-only bind mount: child status %d", rc);
    char probe[600];
    snprintf(probe, sizeof probe, "%s/probe", dir);
    if (chattr("+i") == 0 && (open(probe, O_CREAT | O_WRONLY, 0644) < 0 || (unlink(probe), chattr("-i"), 0))) {
        rc = readonly_run(immutable_dir, (const char (*)[65])keys, 4);
        chattr("-i");
        ck_assert_msg(rc == 0, "immutable directory: child status %d", rc);
    } else {
        printf("readonly_cache: chattr +i not available here; skipped\n");
    }
    /* Nothing was written meanwhile: the cache holds the four entries. */
    rt = test_open(db, NULL, NULL);
    int64_t checked, damaged;
    ck_assert_int_eq(kdart_cache_verify(rt, &checked, &damaged), KDART_OK);
    ck_assert_int_eq(checked, 4);
    kdart_close(rt);
}
END_TEST

/* Seeded fuzz of what the runtime decodes from cache rows: random bytes
 * (NULs, huge and empty values included) in the text columns and the blob
 * of random rows, then every reader runs: list, get, why, verify and
 * prepare.  Each must return a status, never crash, and prepare must still
 * produce the kernel (a damaged row is quarantined and recompiled). */
static void random_bytes(unsigned *seed, unsigned char *b, size_t n) {
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(rand_r(seed) >> 7);
}

START_TEST(entry_fuzz) {
    kdart_rt *rt = test_open(db, NULL, NULL);
    kdart_prepared a;
    ck_assert_int_eq(kdart_prepare(rt, "chunk_rcumsum", "K=64", "sm_90a", KDART_PREPARE_NO_LOAD, &a), KDART_OK);
    ck_assert_int_eq(kdart_prepare(rt, "chunk_rcumsum", "K=128", "sm_100a", KDART_PREPARE_NO_LOAD, NULL), KDART_OK);
    kdart_close(rt);
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    printf("entry_fuzz: seed %u\n", seed);
    static const char *const cols[] = {"kernel", "spec", "arch", "manifest", "report", "log", "lowered",
                                       "cubin", "cubin_sha256", "cubin_size", "failed", "key"};
    const int ncols = (int)(sizeof cols / sizeof cols[0]);
    int rounds = 200, statuses[64] = {0};
    for (int round = 0; round < rounds; round++) {
        sqlite3 *h;
        ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
        sqlite3_busy_timeout(h, 5000);
        int nmut = 1 + rand_r(&seed) % 3;
        for (int m = 0; m < nmut; m++) {
            const char *col = cols[rand_r(&seed) % ncols];
            size_t len = (size_t)(rand_r(&seed) % 4 == 0 ? 0 : rand_r(&seed) % 3000);
            unsigned char *val = malloc(len + 1);
            random_bytes(&seed, val, len);
            char sql[256];
            snprintf(sql, sizeof sql, "UPDATE entries SET %s = ? WHERE rowid IN (SELECT rowid FROM entries ORDER BY "
                     "random() LIMIT 1)", col);
            sqlite3_stmt *st;
            if (sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK) {
                int kind = rand_r(&seed) % 3;
                if (kind == 0) sqlite3_bind_blob(st, 1, val, (int)len, SQLITE_TRANSIENT);
                else if (kind == 1) sqlite3_bind_text(st, 1, (const char *)val, (int)len, SQLITE_TRANSIENT);
                else sqlite3_bind_int64(st, 1, (sqlite3_int64)rand_r(&seed) - RAND_MAX / 2);
                sqlite3_step(st); /* a unique-key clash is fine: nothing changes */
                sqlite3_finalize(st);
            }
            free(val);
        }
        sqlite3_close(h);
        rt = test_open(db, NULL, NULL);
        ck_assert_ptr_nonnull(rt);
        int n = 0;
        statuses[-kdart_cache_list(rt, list_count, &n) % 64]++;
        kdart_entry *e = NULL;
        statuses[-kdart_cache_get(rt, a.key, &e) % 64]++;
        kdart_entry_free(e);
        char *why = NULL;
        statuses[-kdart_why(rt, "chunk_rcumsum", "K=64", "sm_90a", &why) % 64]++;
        free(why);
        int64_t checked, damaged;
        statuses[-kdart_cache_verify(rt, &checked, &damaged) % 64]++;
        kdart_prepared p;
        int rc = kdart_prepare(rt, "chunk_rcumsum", "K=64", "sm_90a", KDART_PREPARE_NO_LOAD, &p);
        ck_assert_msg(rc == KDART_OK, "round %d: prepare %s: %s", round, kdart_errname(rc), kdart_last_error(rt));
        kdart_close(rt);
    }
    printf("entry_fuzz: %d rounds of damaged rows, statuses:", rounds);
    for (int i = 0; i < 64; i++)
        if (statuses[i]) printf(" %s=%d", kdart_errname(-i), statuses[i]);
    printf("; prepare succeeded every round\n");
}
END_TEST

/* ------------------------------------------------- full disk, locking */

/* Fresh random rows for the store-level tests below. */
static void fault_row(kdart__row *r, unsigned char *blob, size_t n, unsigned seed) {
    memset(r, 0, sizeof *r);
    for (size_t i = 0; i < n; i++) blob[i] = (unsigned char)rand_r(&seed);
    kdart__sha256_hex(blob, n, r->key); /* any 64 hex digits do */
    r->kernel = "k";
    r->spec = "s";
    r->arch = "sm_90a";
    r->manifest = "m=1\n";
    r->cubin = blob;
    r->cubin_size = n;
}

/* A small file system of its own in a private mount namespace of this
 * child, mounted over dir/small: 0, or 77 when not permitted here. */
static int small_fs(const char *opts) {
    char small[600];
    snprintf(small, sizeof small, "%s/small", dir);
    if (mkdir(small, 0755) != 0) return 30;
    if (unshare(CLONE_NEWNS) != 0) return 77;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return 77;
    return mount("tmpfs", small, "tmpfs", 0, opts) == 0 ? 0 : 77;
}

static int64_t fs_free(const char *path) {
    struct statvfs sv;
    return statvfs(path, &sv) == 0 ? (int64_t)sv.f_bavail * (int64_t)sv.f_frsize : -1;
}

/* Fills the small file system with 256 KiB entries while a reader keeps
 * the WAL from being checkpointed, so that the WAL holds everything when
 * the disk is full; returns how many went in (keys[] has them), or -1. */
enum { FILL_BLOB = 256 * 1024, FILL_MAX = 200 };
static int fill_disk(const char *path, char (*keys)[65], unsigned seed) {
    static unsigned char blob[FILL_BLOB];
    char err[512];
    kdart__store *st = NULL;
    sqlite3 *reader;
    if (kdart__store_open(&st, path, 0, 0, err, sizeof err) != KDART_OK) return -1;
    if (sqlite3_open(path, &reader) != SQLITE_OK ||
        sqlite3_exec(reader, "BEGIN; SELECT count(*) FROM entries;", NULL, NULL, NULL) != SQLITE_OK)
        return -1;
    int n = 0, put = KDART_OK;
    while (n < FILL_MAX) {
        kdart__row r;
        fault_row(&r, blob, FILL_BLOB, seed + (unsigned)n * 7919u);
        if ((put = kdart__store_put(st, &r, 0)) != KDART_OK) break;
        memcpy(keys[n++], r.key, 65);
    }
    sqlite3_close(reader);
    kdart__store_close(st);
    return put == KDART_OK ? -1 : n;
}

static void fs_report(const char *when, const char *path) {
    char wal[620];
    struct stat sb;
    snprintf(wal, sizeof wal, "%s-wal", path);
    printf("full_disk_cleaning: %s: WAL %lld bytes, %lld bytes free\n", when,
           (long long)(stat(wal, &sb) ? 0 : sb.st_size), (long long)fs_free(path));
    fflush(stdout);
}

/* One cleaning command as the CLI runs it, from a fresh open: the store
 * call (rm, gc or clear: `what`), which must succeed and count something
 * (*count), then the file system's state.  0, or fail (said why). */
typedef struct clean_cmd {
    const char *what;
    const char *key;  /* rm */
    int64_t budget;   /* gc */
    int64_t count;    /* removed or evicted */
} clean_cmd;

static int run_clean(const char *path, clean_cmd *c, int fail) {
    char err[512];
    kdart__store *st = NULL;
    int64_t f, rc = KDART_EIO;
    if (kdart__store_open(&st, path, 0, 0, err, sizeof err) != KDART_OK || kdart__store_readonly(st)) return 34;
    if (!strcmp(c->what, "rm")) rc = kdart__store_remove(st, c->key), c->count = 1;
    else if (!strcmp(c->what, "gc")) rc = kdart__store_gc(st, c->budget, &c->count, &f);
    else rc = kdart__store_clear(st, &c->count);
    if (rc != KDART_OK || c->count == 0) {
        printf("full_disk_cleaning: %s: %s\n", c->what, kdart__store_errmsg(st));
        fflush(stdout);
        kdart__store_close(st);
        return fail;
    }
    kdart__store_close(st);
    char when[64];
    snprintf(when, sizeof when, "after %s (%lld)", c->what, (long long)c->count);
    fs_report(when, path);
    return 0;
}

/* The full-disk child, on a 24 MiB file system filled as fill_disk does:
 * rm, gc and clear (each from a fresh open, as the CLI runs them) must
 * each succeed, and clear must give the space back; then, filled again,
 * a gc to nothing alone must give it back.  Exit 0, or which step failed. */
static int full_disk_child(void) {
    int rc = small_fs("size=24m");
    if (rc) return rc;
    char path[600], err[512];
    static char keys[FILL_MAX][65];
    snprintf(path, sizeof path, "%s/small/kdart.db", dir);
    int n = fill_disk(path, keys, 1);
    if (n < 10) return 33;
    printf("full_disk_cleaning: %d entries of 256 KiB filled the disk\n", n);
    fs_report("full", path);
    clean_cmd rm = {"rm", keys[0], 0, 0}, gc = {"gc", NULL, (int64_t)FILL_BLOB * n / 2, 0};
    clean_cmd clear = {"clear", NULL, 0, 0};
    if ((rc = run_clean(path, &rm, 35)) || (rc = run_clean(path, &gc, 36)) || (rc = run_clean(path, &clear, 37)))
        return rc;
    if (fs_free(path) < 12 * 1024 * 1024) return 38;
    /* Full again; this time gc to nothing is all that runs. */
    if ((n = fill_disk(path, keys, 2)) < 10) return 39;
    fs_report("full again", path);
    clean_cmd gc0 = {"gc", NULL, 0, 0};
    if ((rc = run_clean(path, &gc0, 40))) return rc;
    if (gc0.count != n || fs_free(path) < 12 * 1024 * 1024) return 41;
    /* ...and the cache takes entries again. */
    static unsigned char blob[FILL_BLOB];
    kdart__row r;
    kdart__store *st = NULL;
    fault_row(&r, blob, FILL_BLOB, 12345);
    if (kdart__store_open(&st, path, 0, 0, err, sizeof err) != KDART_OK || kdart__store_put(st, &r, 0) != KDART_OK)
        return 42;
    kdart__store_close(st);
    return 0;
}

START_TEST(full_disk_cleaning) {
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) _exit(full_disk_child());
    int rc = child_status(pid, "full_disk_cleaning (a tmpfs mount)");
    ck_assert_msg(rc == 0 || rc == 77,
                  "child status %d (35 rm, 36 gc, 37 clear, 40 gc to nothing failed; 38, 41 no space given back)", rc);
}
END_TEST

/* Where fcntl locks fail with ENOLCK (NFS without lockd), a valid cache
 * is read read-only, without locks and without stalls, with one warning:
 * its entries hit and nothing is compiled. */
START_TEST(lock_failure) {
    char keys[2][65];
    kdart_rt *rt = test_open(db, NULL, NULL);
    for (int i = 0; i < 2; i++) {
        kdart_prepared p;
        ck_assert_int_eq(kdart_prepare(rt, "chunk_rcumsum", specs[i], archs[0], KDART_PREPARE_NO_LOAD, &p), KDART_OK);
        memcpy(keys[i], p.key, 65);
    }
    kdart_close(rt);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int rc = test_deny_locks();
        if (rc) _exit(rc);
        test_log log;
        double t0 = kdart__now_ms();
        rt = test_open(db, NULL, &log);
        if (!rt) _exit(20);
        kdart_rt_info info;
        if (kdart_info(rt, &info) || info.cache_writable) _exit(21);
        for (int i = 0; i < 2; i++) {
            kdart_prepared p;
            if (kdart_prepare(rt, "chunk_rcumsum", specs[i], archs[0], KDART_PREPARE_NO_LOAD, &p)) _exit(22);
            if (p.source != KDART_FROM_CACHE || strcmp(p.key, keys[i])) _exit(23);
        }
        double ms = kdart__now_ms() - t0;
        int warned = log.count[KDART_LOG_WARN];
        printf("lock_failure: 2 hits in %.0f ms, %d warning(s): %s\n", ms, warned, log.last[KDART_LOG_WARN]);
        fflush(stdout);
        kdart_close(rt);
        _exit(ms > 3000 ? 24 : warned != 1 ? 25 : !strstr(log.last[KDART_LOG_WARN], "lock") ? 26 : 0);
    }
    int rc = child_status(pid, "lock_failure (seccomp)");
    ck_assert_msg(rc == 0 || rc == 77,
                  "child status %d (20 no handle, 21 writable, 22/23 not a hit, 24 stalled, 25/26 warnings)", rc);
}
END_TEST

/* A cache shipped read-only with its -wal but without its -shm: the
 * entries that are only in the WAL are found too. */
START_TEST(readonly_wal_without_shm) {
    char err[512], side[600];
    kdart__store *st = NULL;
    ck_assert_int_eq(kdart__store_open(&st, db, 0, 0, err, sizeof err), KDART_OK);
    /* A second connection keeps the store's close from checkpointing;
     * closing it without a checkpoint leaves the WAL behind. */
    sqlite3 *holder;
    ck_assert_int_eq(sqlite3_open(db, &holder), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(holder, "SELECT count(*) FROM entries", NULL, NULL, NULL), SQLITE_OK);
    static unsigned char blob[3][5000];
    char keys[3][65];
    for (int i = 0; i < 3; i++) {
        kdart__row r;
        fault_row(&r, blob[i], sizeof blob[i], (unsigned)i + 99);
        ck_assert_int_eq(kdart__store_put(st, &r, 0), KDART_OK);
        memcpy(keys[i], r.key, 65);
    }
    kdart__store_close(st);
    sqlite3_db_config(holder, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
    sqlite3_close(holder);
    snprintf(side, sizeof side, "%s-shm", db);
    unlink(side);
    snprintf(side, sizeof side, "%s-wal", db);
    struct stat sb;
    ck_assert_int_eq(stat(side, &sb), 0);
    ck_assert_int_gt(sb.st_size, 15000);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int rc = ro_bind_mount();
        if (rc) _exit(rc);
        for (int ro = 1; ro >= 0; ro--) {
            if (kdart__store_open(&st, db, ro, 0, err, sizeof err) != KDART_OK) _exit(40 + ro);
            for (int i = 0; i < 3; i++) {
                kdart__row r;
                int got = kdart__store_get(st, keys[i], &r);
                kdart__row_release(&r);
                if (got != KDART_OK) {
                    printf("readonly_wal_without_shm: entry %d: %s (%s)\n", i, kdart_errname(got), err);
                    _exit(42 + ro);
                }
            }
            kdart__store_close(st);
        }
        _exit(0);
    }
    int rc = child_status(pid, "readonly_wal_without_shm (a read-only bind mount)");
    ck_assert_msg(rc == 0 || rc == 77, "child status %d (43: read-only open missed WAL entries, 42: writable)", rc);
}
END_TEST

int main(void) {
    Suite *s = suite_create("faults");
    TCase *tc = tcase_create("faults");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, kill_points);
    tcase_add_test(tc, full_filesystem);
    tcase_add_test(tc, readonly_cache);
    tcase_add_test(tc, entry_fuzz);
    tcase_add_test(tc, full_disk_cleaning);
    tcase_add_test(tc, lock_failure);
    tcase_add_test(tc, readonly_wal_without_shm);
    suite_add_tcase(s, tc);
    return test_run(s);
}
