/*
 * test_store.c: Check suite for cache/store.c, the SQLite compile cache.
 *
 * Every test works in its own mkdtemp directory under /tmp and uses fresh
 * random blobs, so runs never share state.  Damage is made the way it
 * happens in the field: bytes changed behind the store's back through the
 * sqlite3 API, garbage or half files at the cache path, directories that
 * cannot be written.  Tests may run as root, where permission bits do not
 * stop writes; those assertions are skipped when a probe shows root can
 * write anyway, and a path under a regular file covers EIO for everyone.
 *
 * Built on its own (no kdart_testlib needed):
 *   gcc -std=c11 -D_GNU_SOURCE -Iruntime/include -Iruntime/base -Icache \
 *       cache/store.c cache/pages.c runtime/base/sha256.c runtime/base/alloc.c runtime/base/clock.c \
 *       tests/test_store.c -lsqlite3 -lcheck_pic -lsubunit -lm -lrt -lpthread
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "base.h"
#include "pages.h"
#include "store.h"

/* ------------------------------------------------------------- helpers */

static char tdir[256]; /* this test's directory */

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)ftw;
    if (flag == FTW_DP || flag == FTW_D) chmod(path, 0755);
    return remove(path) == 0 ? 0 : 0;
}

static void setup_dir(void) {
    snprintf(tdir, sizeof tdir, "/tmp/kdart_store_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tdir));
}

static void teardown_dir(void) {
    /* Directories made read-only by a test must be opened again first. */
    chmod(tdir, 0755);
    nftw(tdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void path_in(char *buf, size_t n, const char *rel) { snprintf(buf, n, "%s/%s", tdir, rel); }

static void random_bytes(void *p, size_t n) {
    int fd = open("/dev/urandom", O_RDONLY);
    ck_assert_int_ge(fd, 0);
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)p + got, n - got);
        ck_assert_int_gt(r, 0);
        got += (size_t)r;
    }
    close(fd);
}

/* A row owned by the test (plain malloc), with a random key and blob. */
typedef struct trow {
    kdart__row r;
    unsigned char *blob;
} trow;

static void make_row(trow *t, const char *kernel, const char *spec, size_t size) {
    unsigned char seed[32];
    memset(t, 0, sizeof *t);
    random_bytes(seed, sizeof seed);
    kdart__sha256_hex(seed, sizeof seed, t->r.key);
    t->r.kernel = (char *)kernel;
    t->r.spec = (char *)spec;
    t->r.arch = "sm_90a";
    t->r.manifest = "arch=sm_90a\nkernel=x\n";
    t->r.report = "registers=128\nspill_store_bytes=0\n";
    t->r.log = "ptxas info: ok\n";
    t->r.lowered = "_Z3foov\n";
    t->r.compile_ms = 123.5;
    if (size) {
        t->blob = malloc(size);
        ck_assert_ptr_nonnull(t->blob);
        random_bytes(t->blob, size);
        t->r.cubin = t->blob;
        t->r.cubin_size = size;
    }
}

static void free_row(trow *t) { free(t->blob); }

static kdart__store *open_ok(const char *path, int readonly, int64_t max_bytes) {
    kdart__store *st = NULL;
    char err[512];
    int rc = kdart__store_open(&st, path, readonly, max_bytes, err, sizeof err);
    ck_assert_msg(rc == KDART_OK, "open %s: %d %s", path, rc, err);
    ck_assert_ptr_nonnull(st);
    return st;
}

/* Runs one SQL statement on the file behind the store's back. */
static void raw_exec(const char *path, const char *sql) {
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    char *msg = NULL;
    int src = sqlite3_exec(db, sql, NULL, NULL, &msg);
    ck_assert_msg(src == SQLITE_OK, "%s: %s", sql, msg ? msg : "?");
    sqlite3_close(db);
}

static int64_t raw_int(const char *path, const char *sql) {
    sqlite3 *db;
    sqlite3_stmt *s;
    int64_t v = -1;
    ck_assert_int_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
    if (sqlite3_step(s) == SQLITE_ROW) v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    sqlite3_close(db);
    return v;
}

/* Replaces key's blob with a copy that has one byte flipped. */
static void flip_byte(const char *path, const char *key, const unsigned char *blob, size_t n) {
    sqlite3 *db;
    sqlite3_stmt *s;
    unsigned char *bad = malloc(n);
    memcpy(bad, blob, n);
    bad[n / 2] ^= 0x5a;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, "UPDATE entries SET cubin = ?1 WHERE key = ?2", -1, &s, NULL),
                     SQLITE_OK);
    sqlite3_bind_blob(s, 1, bad, (int)n, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 2, key, -1, SQLITE_TRANSIENT);
    ck_assert_int_eq(sqlite3_step(s), SQLITE_DONE);
    ck_assert_int_eq(sqlite3_changes(db), 1);
    sqlite3_finalize(s);
    sqlite3_close(db);
    free(bad);
}

/* Name of the first file in tdir whose name contains part, or "". */
static int find_file(const char *part, char *out, size_t n) {
    DIR *d = opendir(tdir);
    struct dirent *e;
    int found = 0;
    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)))
        if (strstr(e->d_name, part) && !strstr(e->d_name, "-wal") && !strstr(e->d_name, "-shm")) {
            snprintf(out, n, "%s/%s", tdir, e->d_name);
            found = 1;
            break;
        }
    closedir(d);
    return found;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

static off_t file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? sb.st_size : -1;
}

/* Whether the permission bits of dir actually stop us (not as root). */
static int dir_blocks_writes(const char *dir) {
    char probe[600];
    snprintf(probe, sizeof probe, "%s/.probe", dir);
    int fd = open(probe, O_CREAT | O_WRONLY, 0644);
    if (fd < 0) return 1;
    close(fd);
    unlink(probe);
    return 0;
}

/* --------------------------------------------------------------- tests */

START_TEST(test_open_create) {
    char path[512], other[512];
    path_in(path, sizeof path, "a/b/c/kdart.db");
    kdart__store *st = open_ok(path, 0, 0);
    ck_assert_str_eq(kdart__store_errmsg(st), "");
    ck_assert_str_eq(kdart__store_path(st), path);
    ck_assert_int_eq(kdart__store_readonly(st), 0);
    kdart__store_stats s;
    ck_assert_int_eq(kdart__store_getstats(st, &s), KDART_OK);
    ck_assert_int_eq(s.entries, 0);
    ck_assert_int_eq(s.bytes, 0);
    kdart__store_close(st);
    struct stat sb;
    path_in(other, sizeof other, "a/b/c");
    ck_assert_int_eq(stat(other, &sb), 0);
    ck_assert_int_eq(sb.st_mode & 0777, 0755);
    ck_assert_int_eq(raw_int(path, "PRAGMA user_version"), KDART__STORE_SCHEMA);
    ck_assert_int_eq(raw_int(path, "SELECT count(*) FROM sqlite_master WHERE name IN "
                                   "('entries','quarantine','entries_last_used','entries_kernel')"),
                     4);
    /* The journal mode is persistent: check it from a second connection. */
    sqlite3 *db;
    sqlite3_stmt *q;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &q, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(q), SQLITE_ROW);
    ck_assert_str_eq((const char *)sqlite3_column_text(q, 0), "wal");
    sqlite3_finalize(q);
    sqlite3_close(db);
    /* Reopening an existing store changes nothing and warns of nothing. */
    st = open_ok(path, 0, 0);
    ck_assert_str_eq(kdart__store_errmsg(st), "");
    kdart__store_close(st);
    /* In memory. */
    st = open_ok(":memory:", 0, 0);
    trow t;
    make_row(&t, "k", "s", 100);
    ck_assert_int_eq(kdart__store_put(st, &t.r, 0), KDART_OK);
    kdart__row r;
    ck_assert_int_eq(kdart__store_get(st, t.r.key, &r), KDART_OK);
    kdart__row_release(&r);
    kdart__store_close(st);
    free_row(&t);
}
END_TEST

START_TEST(test_roundtrip) {
    char path[512];
    path_in(path, sizeof path, "kdart.db");
    kdart__store *st = open_ok(path, 0, 0);
    unsigned short sz;
    random_bytes(&sz, sizeof sz);
    trow t;
    make_row(&t, "bwd_intra", "io=bf16,K=128", 1000 + sz % 60000);
    int64_t before = kdart__unix_time();
    ck_assert_int_eq(kdart__store_put(st, &t.r, 0), KDART_OK);
    char sha[65];
    kdart__sha256_hex(t.blob, t.r.cubin_size, sha);
    ck_assert_str_eq(t.r.cubin_sha256, sha);

    kdart__row r;
    ck_assert_int_eq(kdart__store_get(st, t.r.key, &r), KDART_OK);
    ck_assert_str_eq(kdart__store_errmsg(st), "");
    ck_assert_str_eq(r.key, t.r.key);
    ck_assert_str_eq(r.kernel, "bwd_intra");
    ck_assert_str_eq(r.spec, "io=bf16,K=128");
    ck_assert_str_eq(r.arch, "sm_90a");
    ck_assert_str_eq(r.manifest, t.r.manifest);
    ck_assert_str_eq(r.report, t.r.report);
    ck_assert_str_eq(r.log, t.r.log);
    ck_assert_str_eq(r.lowered, t.r.lowered);
    ck_assert_int_eq(r.failed, 0);
    ck_assert_uint_eq(r.cubin_size, t.r.cubin_size);
    ck_assert_mem_eq(r.cubin, t.blob, t.r.cubin_size);
    ck_assert_str_eq(r.cubin_sha256, sha);
    ck_assert(r.compile_ms == 123.5);
    ck_assert_int_ge(r.created, before);
    ck_assert_int_eq(r.created, r.last_used);
    ck_assert_int_eq(r.hits, 0);
    kdart__row_release(&r);
    ck_assert_ptr_null(r.cubin);
    kdart__row_release(&r); /* twice is harmless */

    ck_assert_int_eq(kdart__store_touch(st, t.r.key), KDART_OK);
    ck_assert_int_eq(kdart__store_touch(st, t.r.key), KDART_OK);
    char missing[65];
    memset(missing, '0', 64);
    missing[64] = 0;
    ck_assert_int_eq(kdart__store_touch(st, missing), KDART_ENOENT);
    ck_assert_int_eq(kdart__store_get(st, missing, &r), KDART_ENOENT);
    ck_assert_str_eq(kdart__store_errmsg(st), ""); /* a plain miss is no warning */
    kdart__store_close(st);

    /* Another connection sees the same row, hits counted. */
    st = open_ok(path, 0, 0);
    ck_assert_int_eq(kdart__store_get(st, t.r.key, &r), KDART_OK);
    ck_assert_int_eq(r.hits, 2);
    ck_assert_mem_eq(r.cubin, t.blob, t.r.cubin_size);
    kdart__row_release(&r);
    kdart__store_close(st);
    free_row(&t);
}
END_TEST

START_TEST(test_conflict_and_replace) {
    char path[512];
    path_in(path, sizeof path, "kdart.db");
    kdart__store *st = open_ok(path, 0, 0);
    trow a, b;
    make_row(&a, "k", "s", 2048);
    make_row(&b, "k", "s", 4096);
    memcpy(b.r.key, a.r.key, sizeof a.r.key);
    ck_assert_int_eq(kdart__store_put(st, &a.r, 0), KDART_OK);
    ck_assert_int_eq(kdart__store_put(st, &b.r, 0), KDART_OK); /* another writer won: success */
    kdart__row r;
    ck_assert_int_eq(kdart__store_get(st, a.r.key, &r), KDART_OK);
    ck_assert_uint_eq(r.cubin_size, 2048);
    ck_assert_mem_eq(r.cubin, a.blob, 2048);
    kdart__row_release(&r);
    ck_assert_int_eq(kdart__store_put(st, &b.r, 1), KDART_OK);
    ck_assert_int_eq(kdart__store_get(st, a.r.key, &r), KDART_OK);
    ck_assert_uint_eq(r.cubin_size, 4096);
    ck_assert_mem_eq(r.cubin, b.blob, 4096);
    kdart__row_release(&r);
    kdart__store_stats s;
    ck_assert_int_eq(kdart__store_getstats(st, &s), KDART_OK);
    ck_assert_int_eq(s.entries, 1);
    ck_assert_int_eq(s.bytes, 4096);
    kdart__store_close(st);
    free_row(&a);
    free_row(&b);
}
END_TEST

START_TEST(test_failed_row) {
    kdart__store *st = open_ok(":memory:", 0, 0);
    trow t;
    make_row(&t, "bwd_dhu", "K=64", 0);
    t.r.failed = 1;
    t.r.log = "error: expression must have a constant value";
    ck_assert_int_eq(kdart__store_put(st, &t.r, 0), KDART_OK);
    kdart__row r;
    ck_assert_int_eq(kdart__store_get(st, t.r.key, &r), KDART_OK);
    ck_assert_int_eq(r.failed, 1);
    ck_assert_ptr_null(r.cubin);
    ck_assert_uint_eq(r.cubin_size, 0);
    ck_assert_str_eq(r.log, t.r.log);
    kdart__row_release(&r);
    /* A success needs a blob. */
    trow u;
    make_row(&u, "bwd_dhu", "K=128", 0);
    ck_assert_int_eq(kdart__store_put(st, &u.r, 0), KDART_EINVAL);
    ck_assert_str_ne(kdart__store_errmsg(st), "");
    kdart__store_stats s;
    ck_assert_int_eq(kdart__store_getstats(st, &s), KDART_OK);
    ck_assert_int_eq(s.entries, 1);
    ck_assert_int_eq(s.failed, 1);
    int64_t c, d;
    ck_assert_int_eq(kdart__store_verify(st, &c, &d), KDART_OK);
    ck_assert_int_eq(c, 1);
    ck_assert_int_eq(d, 0);
    kdart__store_close(st);
    free_row(&t);
    free_row(&u);
}
END_TEST

START_TEST(test_flipped_byte) {
    char path[512];
    path_in(path, sizeof path, "kdart.db");
    kdart__store *st = open_ok(path, 0, 0);
    trow t[4];
    for (int i = 0; i < 4; i++) {
        make_row(&t[i], "k", "s", 3000 + (size_t)i);
        ck_assert_int_eq(kdart__store_put(st, &t[i].r, 0), KDART_OK);
    }
    /* Damage row 0 while the store is open, from another connection. */
    flip_byte(path, t[0].r.key, t[0].blob, t[0].r.cubin_size);
    kdart__row r;
    ck_assert_int_eq(kdart__store_get(st, t[0].r.key, &r), KDART_ENOENT);
    ck_assert_ptr_null(r.cubin);
    ck_assert_ptr_nonnull(strstr(kdart__store_errmsg(st), "checksum mismatch, quarantined"));
    ck_assert_int_eq(raw_int(path, "SELECT count(*) FROM quarantine WHERE reason = 'checksum mismatch'"), 1);
    ck_assert_int_eq(raw_int(path, "SELECT count(*) FROM entries"), 3);
    /* The key is free again: a recompile publishes. */
    ck_assert_int_eq(kdart__store_get(st, t[0].r.key, &r), KDART_ENOENT);
    ck_assert_str_eq(kdart__store_errmsg(st), "");
    ck_assert_int_eq(kdart__store_put(st, &t[0].r, 0), KDART_OK);
    ck_assert_int_eq(kdart__store_get(st, t[0].r.key, &r), KDART_OK);
    kdart__row_release(&r);

    /* Two more damaged (one blob, one size column): verify finds both. */
    flip_byte(path, t[1].r.key, t[1].blob, t[1].r.cubin_size);
    raw_exec(path, "UPDATE entries SET cubin_size = cubin_size + 1 WHERE rowid = (SELECT rowid FROM entries "
                   "ORDER BY rowid DESC LIMIT 1)");
    int64_t c = -1, d = -1;
    ck_assert_int_eq(kdart__store_verify(st, &c, &d), KDART_ECORRUPT);
    ck_assert_int_eq(c, 4);
    ck_assert_int_eq(d, 2);
    ck_assert_ptr_nonnull(strstr(kdart__store_errmsg(st), "quarantined"));
    kdart__store_stats s;
    ck_assert_int_eq(kdart__store_getstats(st, &s), KDART_OK);
    ck_assert_int_eq(s.quarantined, 3);
    ck_assert_int_eq(s.entries, 2);
    ck_assert_int_eq(kdart__store_verify(st, &c, &d), KDART_OK);
    ck_assert_int_eq(c, 2);
    ck_assert_int_eq(d, 0);
    kdart__store_close(st);
    for (int i = 0; i < 4; i++) free_row(&t[i]);
}
END_TEST

START_TEST(test_garbage_file) {
    char path[512], aside[600];
    unsigned char junk[4096];
    random_bytes(junk, sizeof junk);
    junk[0] = 'X'; /* never the SQLite magic by chance */
    path_in(path, sizeof path, "kdart.db");
    write_file(path, junk, sizeof junk);
    kdart__store *st = open_ok(path, 0, 0);
    ck_assert_ptr_nonnull(strstr(kdart__store_errmsg(st), "moved aside"));
    ck_assert(find_file("kdart.db.corrupt-", aside, sizeof aside));
    ck_assert_int_eq(file_size(aside), (off_t)sizeof junk);
    trow t;
    make_row(&t, "k", "s", 500);
    ck_assert_int_eq(kdart__store_put(st, &t.r, 0), KDART_OK);
    kdart__row r;
    ck_assert_int_eq(kdart__store_get(st, t.r.key, &r), KDART_OK);
    kdart__row_release(&r);
    kdart__store_close(st);
    free_row(&t);

    /* A few bytes of garbage, which SQLite alone would take for empty. */
    path_in(path, sizeof path, "small.db");
    write_file(path, "hello", 5);
    st = open_ok(path, 0, 0);
    ck_assert_ptr_nonnull(strstr(kdart__store_errmsg(st), "moved aside"));
    ck_assert(find_file("small.db.corrupt-", aside, sizeof aside));
    ck_assert_int_eq(file_size(aside), 5);
    kdart__store_close(st);

    /* Read-only: reported, never moved. */
    path_in(path, sizeof path, "ro.db");
    write_file(path, junk, sizeof junk);
    char err[512];
    ck_assert_int_eq(kdart__store_open(&st, path, 1, 0, err, sizeof err), KDART_ECORRUPT);
    ck_assert_ptr_null(st);
    ck_assert_str_ne(err, "");
    ck_assert_int_eq(file_size(path), (off_t)sizeof junk);
    ck_assert(!find_file("ro.db.corrupt-", aside, sizeof aside));
}
END_TEST

/* Fills a store with n entries and closes it; returns the keys' blobs. */
static void fill(const char *path, trow *t, int n, size_t size) {
    kdart__store *st = open_ok(path, 0, 0);
    for (int i = 0; i < n; i++) {
        make_row(&t[i], "k", "s", size);
        ck_assert_int_eq(kdart__store_put(st, &t[i].r, 0), KDART_OK);
    }
    kdart__store_close(st);
}

START_TEST(test_truncated) {
    char path[512], aside[600];
    trow t[40];
    path_in(path, sizeof path, "kdart.db");
    fill(path, t, 40, 3000);
    off_t full = file_size(path);
    ck_assert_int_gt(full, 40 * 3000);
    ck_assert_int_eq(truncate(path, full / 2), 0);
    kdart__store *st = NULL;
    char err[512];
    int rc = kdart__store_open(&st, path, 0, 0, err, sizeof err);
    ck_assert_int_eq(rc, KDART_OK);
    if (find_file("kdart.db.corrupt-", aside, sizeof aside)) {
        ck_assert_ptr_nonnull(strstr(kdart__store_errmsg(st), "moved aside"));
        ck_assert_int_eq(file_size(aside), full / 2);
    } else {
        /* Opened in place: the damage must show, never a wrong blob. */
        int64_t c, d;
        ck_assert_int_ne(kdart__store_verify(st, &c, &d), KDART_OK);
    }
    for (int i = 0; i < 40; i++) {
        kdart__row r;
        rc = kdart__store_get(st, t[i].r.key, &r);
        ck_assert(rc == KDART_ENOENT || rc == KDART_ECORRUPT || rc == KDART_OK);
        if (rc == KDART_OK) ck_assert_mem_eq(r.cubin, t[i].blob, t[i].r.cubin_size);
        kdart__row_release(&r);
    }
    kdart__store_close(st);
    for (int i = 0; i < 40; i++) free_row(&t[i]);
}
END_TEST

START_TEST(test_damaged_pages) {
    /* Zeroed pages inside a database of the right size: the header is
     * fine, so the damage shows at read or verify time. */
    char path[512];
    trow t[40];
    path_in(path, sizeof path, "kdart.db");
    fill(path, t, 40, 3000);
    off_t full = file_size(path);
    int fd = open(path, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    static char zeros[16384];
    ck_assert_int_eq(pwrite(fd, zeros, sizeof zeros, full / 2), (ssize_t)sizeof zeros);
    close(fd);
    kdart__store *st = NULL;
    char err[512];
    int rc = kdart__store_open(&st, path, 0, 0, err, sizeof err);
    if (rc == KDART_OK) {
        int ok = 0;
        for (int i = 0; i < 40; i++) {
            kdart__row r;
            rc = kdart__store_get(st, t[i].r.key, &r);
            ck_assert(rc == KDART_ENOENT || rc == KDART_ECORRUPT || rc == KDART_OK);
            if (rc == KDART_OK) {
                ck_assert_mem_eq(r.cubin, t[i].blob, t[i].r.cubin_size);
                ok++;
            }
            kdart__row_release(&r);
        }
        ck_assert_int_lt(ok, 40);
        int64_t c, d;
        ck_assert_int_eq(kdart__store_verify(st, &c, &d), KDART_ECORRUPT);
        ck_assert_str_ne(kdart__store_errmsg(st), "");
        kdart__store_close(st);
    } else {
        ck_assert_str_ne(err, "");
    }
    for (int i = 0; i < 40; i++) free_row(&t[i]);
}
END_TEST

START_TEST(test_unwritable) {
    char path[512], dir[512], err[512];
    kdart__store *st = (kdart__store *)1;
    /* Under a regular file: fails even for root. */
    path_in(path, sizeof path, "file");
    write_file(path, "x", 1);
    path_in(path, sizeof path, "file/kdart.db");
    ck_assert_int_eq(kdart__store_open(&st, path, 0, 0, err, sizeof err), KDART_EIO);
    ck_assert_ptr_null(st);
    ck_assert_ptr_nonnull(strstr(err, "not a directory"));
    path_in(path, sizeof path, "file/deeper/kdart.db");
    ck_assert_int_eq(kdart__store_open(&st, path, 0, 0, err, sizeof err), KDART_EIO);
    /* The path itself a directory. */
    path_in(path, sizeof path, "adir");
    ck_assert_int_eq(mkdir(path, 0755), 0);
    ck_assert_int_eq(kdart__store_open(&st, path, 0, 0, err, sizeof err), KDART_EIO);

    /* A read-only directory: only meaningful when the bits stop us. */
    path_in(dir, sizeof dir, "ro");
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    ck_assert_int_eq(chmod(dir, 0555), 0);
    if (dir_blocks_writes(dir)) {
        path_in(path, sizeof path, "ro/kdart.db");
        ck_assert_int_eq(kdart__store_open(&st, path, 0, 0, err, sizeof err), KDART_EIO);
        ck_assert_str_ne(err, "");
        path_in(path, sizeof path, "ro/sub/kdart.db");
        ck_assert_int_eq(kdart__store_open(&st, path, 0, 0, err, sizeof err), KDART_EIO);
    }
    chmod(dir, 0755);

    /* A read-only file. */
    path_in(path, sizeof path, "rofile.db");
    trow t[1];
    fill(path, t, 1, 100);
    free_row(&t[0]);
    ck_assert_int_eq(chmod(path, 0444), 0);
    if (access(path, W_OK) != 0) {
        /* A writable open falls back to reading it, and says why. */
        ck_assert_int_eq(kdart__store_open(&st, path, 0, 0, err, sizeof err), KDART_OK);
        ck_assert_int_eq(kdart__store_readonly(st), 1);
        ck_assert_ptr_nonnull(strstr(err, "not writable"));
        kdart__store_close(st);
    }
    /* Read-only open of it works regardless. */
    st = open_ok(path, 1, 0);
    kdart__store_close(st);
}
END_TEST

START_TEST(test_readonly) {
    char path[512], err[512];
    kdart__store *st = (kdart__store *)1;
    path_in(path, sizeof path, "missing.db");
    ck_assert_int_eq(kdart__store_open(&st, path, 1, 0, err, sizeof err), KDART_ENOENT);
    ck_assert_ptr_null(st);
    ck_assert_int_eq(file_size(path), -1); /* nothing created */
    path_in(path, sizeof path, "nodir/missing.db");
    ck_assert_int_eq(kdart__store_open(&st, path, 1, 0, err, sizeof err), KDART_ENOENT);
    path_in(path, sizeof path, "nodir");
    ck_assert_int_eq(file_size(path), -1);
    ck_assert_int_eq(kdart__store_open(&st, ":memory:", 1, 0, err, sizeof err), KDART_EINVAL);

    trow t[3];
    path_in(path, sizeof path, "kdart.db");
    fill(path, t, 3, 1234);
    st = open_ok(path, 1, 0);
    ck_assert_int_eq(kdart__store_readonly(st), 1);
    kdart__row r;
    ck_assert_int_eq(kdart__store_get(st, t[0].r.key, &r), KDART_OK);
    ck_assert_mem_eq(r.cubin, t[0].blob, 1234);
    kdart__row_release(&r);
    ck_assert_int_eq(kdart__store_touch(st, t[0].r.key), KDART_OK); /* ignored */
    ck_assert_int_eq(kdart__store_get(st, t[0].r.key, &r), KDART_OK);
    ck_assert_int_eq(r.hits, 0);
    kdart__row_release(&r);
    trow u;
    make_row(&u, "k", "s", 10);
    ck_assert_int_eq(kdart__store_put(st, &u.r, 0), KDART_ECACHE);
    free_row(&u);
    int64_t e, f;
    ck_assert_int_eq(kdart__store_gc(st, 0, &e, &f), KDART_ECACHE);
    char key[65];
    ck_assert_int_eq(kdart__store_resolve(st, t[1].r.key, key), KDART_OK);
    ck_assert_str_eq(key, t[1].r.key);

    /* A damaged blob in a read-only store: a miss, left in place. */
    flip_byte(path, t[2].r.key, t[2].blob, 1234);
    ck_assert_int_eq(kdart__store_get(st, t[2].r.key, &r), KDART_ENOENT);
    ck_assert_ptr_nonnull(strstr(kdart__store_errmsg(st), "damaged"));
    int64_t c, d;
    ck_assert_int_eq(kdart__store_verify(st, &c, &d), KDART_ECORRUPT);
    ck_assert_int_eq(c, 3);
    ck_assert_int_eq(d, 1);
    kdart__store_close(st);
    ck_assert_int_eq(raw_int(path, "SELECT count(*) FROM entries"), 3);
    ck_assert_int_eq(raw_int(path, "SELECT count(*) FROM quarantine"), 0);
    ck_assert_int_eq(raw_int(path, "SELECT hits FROM entries ORDER BY hits DESC LIMIT 1"), 0);

    /* A database that is not a kdart cache. */
    path_in(path, sizeof path, "other.db");
    raw_exec(path, "CREATE TABLE t(x)");
    ck_assert_int_eq(kdart__store_open(&st, path, 1, 0, err, sizeof err), KDART_ECACHE);
    ck_assert_str_ne(err, "");
    /* Nor does a writable open make it one. */
    ck_assert_int_eq(kdart__store_open(&st, path, 0, 0, err, sizeof err), KDART_ECACHE);
    ck_assert_ptr_nonnull(strstr(err, "not a kdart cache"));
    ck_assert_int_eq(raw_int(path, "SELECT count(*) FROM sqlite_master"), 1);
    for (int i = 0; i < 3; i++) free_row(&t[i]);
}
END_TEST

START_TEST(test_newer_schema) {
    char path[512];
    trow t[1];
    path_in(path, sizeof path, "kdart.db");
    fill(path, t, 1, 800);
    raw_exec(path, "PRAGMA user_version = 7; ALTER TABLE entries ADD COLUMN future TEXT");
    kdart__store *st = open_ok(path, 0, 0);
    ck_assert_ptr_nonnull(strstr(kdart__store_errmsg(st), "newer"));
    ck_assert_int_eq(kdart__store_readonly(st), 1);
    kdart__row r;
    ck_assert_int_eq(kdart__store_get(st, t[0].r.key, &r), KDART_OK);
    ck_assert_mem_eq(r.cubin, t[0].blob, 800);
    kdart__row_release(&r);
    trow u;
    make_row(&u, "k", "s", 10);
    ck_assert_int_eq(kdart__store_put(st, &u.r, 0), KDART_ECACHE);
    free_row(&u);
    kdart__store_close(st);
    ck_assert_int_eq(raw_int(path, "PRAGMA user_version"), 7);
    /* Newer and incompatible: refused, not destroyed. */
    raw_exec(path, "ALTER TABLE entries RENAME COLUMN cubin TO payload");
    char err[512];
    ck_assert_int_eq(kdart__store_open(&st, path, 0, 0, err, sizeof err), KDART_ECACHE);
    ck_assert_ptr_nonnull(strstr(err, "compatible"));
    ck_assert_int_eq(raw_int(path, "SELECT count(*) FROM entries"), 1);
    free_row(&t[0]);
}
END_TEST

static void set_key(trow *t, const char *prefix) {
    memset(t->r.key, 'e', 64);
    memcpy(t->r.key, prefix, strlen(prefix));
    t->r.key[64] = 0;
}

START_TEST(test_resolve) {
    kdart__store *st = open_ok(":memory:", 0, 0);
    trow t[3];
    const char *prefixes[3] = {"abc1", "abc2", "ff"};
    for (int i = 0; i < 3; i++) {
        make_row(&t[i], "k", "s", 64);
        set_key(&t[i], prefixes[i]);
        ck_assert_int_eq(kdart__store_put(st, &t[i].r, 0), KDART_OK);
    }
    char key[65];
    ck_assert_int_eq(kdart__store_resolve(st, "abc1", key), KDART_OK);
    ck_assert_str_eq(key, t[0].r.key);
    ck_assert_int_eq(kdart__store_resolve(st, "ABC2e", key), KDART_OK);
    ck_assert_str_eq(key, t[1].r.key);
    ck_assert_int_eq(kdart__store_resolve(st, "f", key), KDART_OK);
    ck_assert_str_eq(key, t[2].r.key);
    ck_assert_int_eq(kdart__store_resolve(st, t[2].r.key, key), KDART_OK);
    ck_assert_int_eq(kdart__store_resolve(st, "abc", key), KDART_EAMBIGUOUS);
    ck_assert_str_eq(key, "");
    ck_assert_int_eq(kdart__store_resolve(st, "a", key), KDART_EAMBIGUOUS);
    ck_assert_int_eq(kdart__store_resolve(st, "0", key), KDART_ENOENT);
    ck_assert_int_eq(kdart__store_resolve(st, "abc3", key), KDART_ENOENT);
    ck_assert_int_eq(kdart__store_resolve(st, "abcg", key), KDART_EINVAL);
    ck_assert_int_eq(kdart__store_resolve(st, "xyz", key), KDART_EINVAL);
    ck_assert_int_eq(kdart__store_resolve(st, "", key), KDART_EINVAL);
    ck_assert_int_eq(kdart__store_resolve(st, "ab%", key), KDART_EINVAL);
    ck_assert_int_eq(kdart__store_resolve(st, NULL, key), KDART_EINVAL);
    char longp[70];
    memset(longp, 'a', 65);
    longp[65] = 0;
    ck_assert_int_eq(kdart__store_resolve(st, longp, key), KDART_EINVAL);
    kdart__store_close(st);
    for (int i = 0; i < 3; i++) free_row(&t[i]);
}
END_TEST

static int has_key(kdart__store *st, const trow *t) {
    char key[65];
    return kdart__store_resolve(st, t->r.key, key) == KDART_OK;
}

START_TEST(test_budget_and_gc) {
    char path[512];
    path_in(path, sizeof path, "kdart.db");
    kdart__store *st = open_ok(path, 0, 10000);
    trow t[4];
    for (int i = 0; i < 4; i++) {
        make_row(&t[i], "k", "s", 3000);
        t[i].r.last_used = 100 * (i + 1); /* explicit LRU order */
        ck_assert_int_eq(kdart__store_put(st, &t[i].r, 0), KDART_OK);
    }
    /* 12000 > 10000: the least recently used (last_used 100) went. */
    ck_assert(!has_key(st, &t[0]));
    for (int i = 1; i < 4; i++) ck_assert(has_key(st, &t[i]));
    kdart__store_stats s;
    ck_assert_int_eq(kdart__store_getstats(st, &s), KDART_OK);
    ck_assert_int_eq(s.bytes, 9000);

    /* Failed rows go by age too. */
    trow f, n;
    make_row(&f, "k", "s", 0);
    f.r.failed = 1;
    f.r.last_used = 50;
    ck_assert_int_eq(kdart__store_put(st, &f.r, 0), KDART_OK);
    make_row(&n, "k", "s", 3000);
    n.r.last_used = 500;
    ck_assert_int_eq(kdart__store_put(st, &n.r, 0), KDART_OK);
    ck_assert(!has_key(st, &f));
    ck_assert(!has_key(st, &t[1]));
    ck_assert(has_key(st, &t[2]) && has_key(st, &t[3]) && has_key(st, &n));

    /* A touch makes a row young again. */
    ck_assert_int_eq(kdart__store_touch(st, t[2].r.key), KDART_OK);

    /* The row just written is never evicted, even over budget alone. */
    trow big;
    make_row(&big, "k", "s", 20000);
    big.r.last_used = 1;
    ck_assert_int_eq(kdart__store_put(st, &big.r, 0), KDART_OK);
    ck_assert(has_key(st, &big));
    ck_assert_int_eq(kdart__store_getstats(st, &s), KDART_OK);
    ck_assert_int_eq(s.entries, 1);
    ck_assert_int_eq(s.bytes, 20000);
    kdart__store_close(st);

    /* gc on an unbudgeted store. */
    st = open_ok(path, 0, 0);
    trow g[5];
    for (int i = 0; i < 5; i++) {
        make_row(&g[i], "k", "s", 1000);
        g[i].r.last_used = 1000 + i;
        ck_assert_int_eq(kdart__store_put(st, &g[i].r, 0), KDART_OK);
    }
    ck_assert_int_eq(kdart__store_touch(st, g[0].r.key), KDART_OK); /* now the newest */
    int64_t e = -1, fr = -1;
    ck_assert_int_eq(kdart__store_gc(st, -1, &e, &fr), KDART_EINVAL);
    ck_assert_int_eq(kdart__store_gc(st, 1000000, &e, &fr), KDART_OK);
    ck_assert_int_eq(e, 0);
    ck_assert_int_eq(fr, 0);
    /* 25000 bytes in all (big + 5 x 1000); keep 2500: g[4] and g[0]. */
    ck_assert_int_eq(kdart__store_gc(st, 2500, &e, &fr), KDART_OK);
    ck_assert_int_eq(e, 4);
    ck_assert_int_eq(fr, 23000);
    ck_assert(has_key(st, &g[0]) && has_key(st, &g[4]));
    ck_assert(!has_key(st, &g[1]) && !has_key(st, &big));
    ck_assert_int_eq(kdart__store_gc(st, 0, &e, &fr), KDART_OK);
    ck_assert_int_eq(e, 2);
    ck_assert_int_eq(fr, 2000);
    ck_assert_int_eq(kdart__store_getstats(st, &s), KDART_OK);
    ck_assert_int_eq(s.entries, 0);
    kdart__store_close(st);
    for (int i = 0; i < 4; i++) free_row(&t[i]);
    for (int i = 0; i < 5; i++) free_row(&g[i]);
    free_row(&f);
    free_row(&n);
    free_row(&big);
}
END_TEST

START_TEST(test_stats) {
    kdart__store *st = open_ok(":memory:", 0, 0);
    trow t[3];
    for (int i = 0; i < 3; i++) {
        make_row(&t[i], "k", "s", i == 2 ? 0 : 700);
        t[i].r.failed = i == 2;
        t[i].r.compile_ms = 10.0 * (i + 1);
        ck_assert_int_eq(kdart__store_put(st, &t[i].r, 0), KDART_OK);
    }
    for (int i = 0; i < 5; i++) ck_assert_int_eq(kdart__store_touch(st, t[i % 2].r.key), KDART_OK);
    kdart__store_stats s;
    ck_assert_int_eq(kdart__store_getstats(st, &s), KDART_OK);
    ck_assert_int_eq(s.entries, 3);
    ck_assert_int_eq(s.failed, 1);
    ck_assert_int_eq(s.bytes, 1400);
    ck_assert_int_eq(s.hits, 5);
    ck_assert_int_eq(s.quarantined, 0);
    ck_assert(s.compile_ms_total == 60.0);
    ck_assert_int_eq(kdart__store_getstats(st, NULL), KDART_EINVAL);
    kdart__store_close(st);
    for (int i = 0; i < 3; i++) free_row(&t[i]);
}
END_TEST

typedef struct seen {
    int n, manifests, stop_after;
    char order[8][80];
} seen;

static int list_fn(void *user, const kdart__row *row) {
    seen *s = user;
    ck_assert_ptr_null(row->cubin);
    ck_assert_ptr_null(row->log);
    ck_assert_int_gt(row->cubin_size, 0);
    ck_assert_int_eq(strlen(row->cubin_sha256), 64);
    if (row->manifest) s->manifests++;
    if (s->n < 8) snprintf(s->order[s->n], sizeof s->order[0], "%s/%s", row->kernel, row->spec);
    s->n++;
    return s->stop_after && s->n >= s->stop_after;
}

START_TEST(test_list) {
    kdart__store *st = open_ok(":memory:", 0, 0);
    trow t[4];
    const char *k[4] = {"zeta", "alpha", "mid", "alpha"};
    const char *sp[4] = {"K=64", "K=128", "K=64", "K=64"};
    for (int i = 0; i < 4; i++) {
        make_row(&t[i], k[i], sp[i], 256);
        ck_assert_int_eq(kdart__store_put(st, &t[i].r, 0), KDART_OK);
    }
    seen s = {0};
    ck_assert_int_eq(kdart__store_list(st, 0, list_fn, &s), KDART_OK);
    ck_assert_int_eq(s.n, 4);
    ck_assert_int_eq(s.manifests, 0);
    ck_assert_str_eq(s.order[0], "alpha/K=128");
    ck_assert_str_eq(s.order[1], "alpha/K=64");
    ck_assert_str_eq(s.order[2], "mid/K=64");
    ck_assert_str_eq(s.order[3], "zeta/K=64");
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(kdart__store_list(st, 1, list_fn, &s), KDART_OK);
    ck_assert_int_eq(s.manifests, 4);
    memset(&s, 0, sizeof s);
    s.stop_after = 2;
    ck_assert_int_eq(kdart__store_list(st, 0, list_fn, &s), KDART_OK);
    ck_assert_int_eq(s.n, 2);
    ck_assert_int_eq(kdart__store_list(st, 0, NULL, NULL), KDART_EINVAL);
    kdart__store_close(st);
    for (int i = 0; i < 4; i++) free_row(&t[i]);
}
END_TEST

START_TEST(test_alloc_failures) {
    char path[512];
    path_in(path, sizeof path, "kdart.db");
    kdart__store *st = open_ok(path, 0, 0);
    trow t;
    make_row(&t, "bwd_intra", "io=bf16", 5000);
    ck_assert_int_eq(kdart__store_put(st, &t.r, 0), KDART_OK);
    long base = kdart__alloc_live();
    int failures = 0, done = 0;
    for (long n = 1; n <= 64 && !done; n++) {
        kdart__row r;
        kdart__alloc_fail_at(n);
        int rc = kdart__store_get(st, t.r.key, &r);
        kdart__alloc_fail_at(0);
        ck_assert_msg(rc == KDART_OK || rc == KDART_ENOMEM, "n=%ld rc=%d", n, rc);
        if (rc == KDART_ENOMEM) {
            failures++;
            ck_assert_ptr_null(r.cubin);
            ck_assert_ptr_null(r.kernel);
            ck_assert_str_ne(kdart__store_errmsg(st), "");
        } else {
            ck_assert_mem_eq(r.cubin, t.blob, 5000);
            done = 1;
        }
        kdart__row_release(&r);
        ck_assert_int_eq(kdart__alloc_live(), base);
    }
    ck_assert(done);
    ck_assert_int_ge(failures, 8); /* seven strings and the blob */
    kdart__store_close(st);

    /* open too: every failure leaves nothing behind. */
    base = kdart__alloc_live();
    done = 0;
    for (long n = 1; n <= 64 && !done; n++) {
        kdart__store *s2 = NULL;
        char err[256];
        kdart__alloc_fail_at(n);
        int rc = kdart__store_open(&s2, path, 0, 0, err, sizeof err);
        kdart__alloc_fail_at(0);
        ck_assert_msg(rc == KDART_OK || rc == KDART_ENOMEM, "n=%ld rc=%d %s", n, rc, err);
        if (rc == KDART_OK) done = 1;
        else ck_assert_ptr_null(s2);
        kdart__store_close(s2);
        ck_assert_int_eq(kdart__alloc_live(), base);
    }
    ck_assert(done);
    free_row(&t);
}
END_TEST

START_TEST(test_bad_args) {
    char err[128];
    kdart__store *st = NULL;
    ck_assert_int_eq(kdart__store_open(NULL, ":memory:", 0, 0, err, sizeof err), KDART_EINVAL);
    ck_assert_int_eq(kdart__store_open(&st, NULL, 0, 0, err, sizeof err), KDART_EINVAL);
    ck_assert_int_eq(kdart__store_open(&st, "", 0, 0, NULL, 0), KDART_EINVAL);
    kdart__store_close(NULL);
    kdart__row_release(NULL);
    ck_assert_str_eq(kdart__store_errmsg(NULL), "");
    kdart__row r;
    ck_assert_int_eq(kdart__store_get(NULL, "ab", &r), KDART_EINVAL);
    st = open_ok(":memory:", 0, 0);
    ck_assert_int_eq(kdart__store_get(st, "ab", &r), KDART_EINVAL);
    ck_assert_int_eq(kdart__store_get(st, NULL, &r), KDART_EINVAL);
    ck_assert_int_eq(kdart__store_get(st, "'; DROP TABLE entries; --", &r), KDART_EINVAL);
    ck_assert_int_eq(kdart__store_put(st, NULL, 0), KDART_EINVAL);
    trow t;
    make_row(&t, "k", "s", 10);
    t.r.key[3] = 'X';
    ck_assert_int_eq(kdart__store_put(st, &t.r, 0), KDART_EINVAL);
    t.r.key[3] = 'a';
    t.r.manifest = NULL;
    ck_assert_int_eq(kdart__store_put(st, &t.r, 0), KDART_EINVAL);
    t.r.manifest = "m";
    t.r.report = t.r.log = t.r.lowered = NULL; /* optional */
    ck_assert_int_eq(kdart__store_put(st, &t.r, 0), KDART_OK);
    ck_assert_int_eq(kdart__store_get(st, t.r.key, &r), KDART_OK);
    ck_assert_ptr_null(r.report);
    ck_assert_ptr_null(r.log);
    kdart__row_release(&r);
    ck_assert_int_eq(kdart__store_touch(st, NULL), KDART_EINVAL);
    ck_assert_int_eq(kdart__store_verify(st, NULL, NULL), KDART_OK);
    ck_assert_int_eq(kdart__store_gc(st, 0, NULL, NULL), KDART_OK);
    kdart__store_close(st);
    free_row(&t);
}
END_TEST


/* Several processes opening one fresh path at once (the schema migration
 * races) and publishing overlapping keys: every open succeeds without a
 * move-aside warning and every row arrives once. */
START_TEST(test_concurrent_writers) {
    enum { PROCS = 6, ROWS = 20 };
    char path[512];
    path_in(path, sizeof path, "shared/kdart.db");
    unsigned char seed[8];
    random_bytes(seed, sizeof seed);
    pid_t pids[PROCS];
    for (int p = 0; p < PROCS; p++) {
        pids[p] = fork();
        ck_assert_int_ge(pids[p], 0);
        if (pids[p] == 0) {
            kdart__store *st = NULL;
            char err[512];
            int bad = 0;
            int orc = kdart__store_open(&st, path, 0, 0, err, sizeof err);
            if (orc != KDART_OK || err[0]) {
                char note[600];
                snprintf(note, sizeof note, "%s/child%d.txt", tdir, p);
                FILE *f = fopen(note, "w");
                if (f) fprintf(f, "open rc=%d: %s", orc, err), fclose(f);
                _exit(10);
            }
            for (int i = 0; i < ROWS; i++) {
                /* Half the keys are shared by every process. */
                char name[64];
                unsigned char blob[700];
                kdart__row r;
                memset(&r, 0, sizeof r);
                snprintf(name, sizeof name, "%02x%02x-%d-%d", seed[0], seed[1], i, i % 2 ? p : -1);
                kdart__sha256_hex(name, strlen(name), r.key);
                for (size_t j = 0; j < sizeof blob; j++) blob[j] = (unsigned char)(name[j % strlen(name)] + j);
                r.kernel = "k";
                r.spec = name;
                r.arch = "sm_100a";
                r.manifest = name;
                r.cubin = blob;
                r.cubin_size = sizeof blob;
                if (kdart__store_put(st, &r, 0) != KDART_OK) bad |= 1;
                kdart__row got;
                if (kdart__store_get(st, r.key, &got) != KDART_OK || memcmp(got.cubin, blob, sizeof blob))
                    bad |= 2;
                kdart__row_release(&got);
                if (kdart__store_touch(st, r.key) != KDART_OK) bad |= 4;
            }
            kdart__store_close(st);
            _exit(bad);
        }
    }
    for (int p = 0; p < PROCS; p++) {
        int status;
        ck_assert_int_eq(waitpid(pids[p], &status, 0), pids[p]);
        char note[600], msg[600] = "";
        snprintf(note, sizeof note, "%s/child%d.txt", tdir, p);
        FILE *f = fopen(note, "r");
        if (f) {
            if (!fgets(msg, sizeof msg, f)) msg[0] = 0;
            fclose(f);
        }
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d status %d %s", p, status, msg);
    }
    kdart__store *st = open_ok(path, 0, 0);
    kdart__store_stats s;
    ck_assert_int_eq(kdart__store_getstats(st, &s), KDART_OK);
    ck_assert_int_eq(s.entries, ROWS / 2 + PROCS * ROWS / 2);
    ck_assert_int_eq(s.hits, PROCS * ROWS);
    int64_t c, d;
    ck_assert_int_eq(kdart__store_verify(st, &c, &d), KDART_OK);
    kdart__store_close(st);
    char aside[600];
    ck_assert(!find_file(".corrupt-", aside, sizeof aside));
}
END_TEST

/* A read-only cache whose -shm cannot be opened (a shipped image): read
 * without locks rather than refuse.  Needs permission bits that bind. */
START_TEST(test_readonly_unreadable_shm) {
    char path[512], shm[600];
    trow t[1];
    path_in(path, sizeof path, "kdart.db");
    fill(path, t, 1, 999);
    snprintf(shm, sizeof shm, "%s-shm", path);
    write_file(shm, "", 0);
    ck_assert_int_eq(chmod(shm, 0), 0);
    if (access(shm, R_OK) == 0) { /* root: nothing to test */
        free_row(&t[0]);
        return;
    }
    kdart__store *st = open_ok(path, 1, 0);
    kdart__row r;
    ck_assert_int_eq(kdart__store_get(st, t[0].r.key, &r), KDART_OK);
    ck_assert_mem_eq(r.cubin, t[0].blob, 999);
    kdart__row_release(&r);
    kdart__store_close(st);
    free_row(&t[0]);
}
END_TEST


static int list_count(void *user, const kdart__row *row) {
    (void)row;
    ++*(int *)user;
    return 0;
}

static int known_status(int rc) {
    return rc == KDART_OK || rc == KDART_ENOENT || rc == KDART_ECORRUPT || rc == KDART_ECACHE ||
           rc == KDART_EIO;
}

/* Random bytes written over random places past the header, many times:
 * every call returns a known status and never a blob that differs from
 * what was stored. */
START_TEST(test_random_damage) {
    enum { ROUNDS = 15, ROWS = 30 };
    for (int round = 0; round < ROUNDS; round++) {
        char path[512];
        char name[32];
        trow t[ROWS];
        snprintf(name, sizeof name, "r%d.db", round);
        path_in(path, sizeof path, name);
        fill(path, t, ROWS, 1500 + 100 * (size_t)round);
        off_t size = file_size(path);
        int fd = open(path, O_WRONLY);
        ck_assert_int_ge(fd, 0);
        for (int hit = 0; hit < 1 + round % 4; hit++) {
            uint32_t where, len;
            unsigned char junk[256];
            random_bytes(&where, sizeof where);
            random_bytes(&len, sizeof len);
            random_bytes(junk, sizeof junk);
            off_t off = 100 + (off_t)(where % (uint32_t)(size - 356));
            ck_assert_int_eq(pwrite(fd, junk, 1 + len % sizeof junk, off), (ssize_t)(1 + len % sizeof junk));
        }
        close(fd);
        kdart__store *st = NULL;
        char err[512];
        int rc = kdart__store_open(&st, path, round % 3 == 0, 0, err, sizeof err);
        ck_assert_msg(known_status(rc), "open: %d %s", rc, err);
        if (rc == KDART_OK) {
            for (int i = 0; i < ROWS; i++) {
                kdart__row r;
                char key[65];
                rc = kdart__store_get(st, t[i].r.key, &r);
                ck_assert_msg(known_status(rc), "get: %d %s", rc, kdart__store_errmsg(st));
                if (rc == KDART_OK && !r.failed) {
                    ck_assert_uint_eq(r.cubin_size, t[i].r.cubin_size);
                    ck_assert_mem_eq(r.cubin, t[i].blob, r.cubin_size);
                }
                kdart__row_release(&r);
                ck_assert(known_status(kdart__store_touch(st, t[i].r.key)));
                ck_assert(known_status(kdart__store_resolve(st, t[i].r.key, key)) ||
                          kdart__store_resolve(st, t[i].r.key, key) == KDART_EAMBIGUOUS);
            }
            int n = 0;
            kdart__store_stats s;
            int64_t c, d, e, f;
            ck_assert(known_status(kdart__store_list(st, 1, list_count, &n)));
            ck_assert(known_status(kdart__store_getstats(st, &s)));
            ck_assert(known_status(kdart__store_verify(st, &c, &d)));
            ck_assert(known_status(kdart__store_gc(st, 5000, &e, &f)));
            kdart__store_close(st);
        }
        for (int i = 0; i < ROWS; i++) free_row(&t[i]);
    }
}
END_TEST


/* The key's text in an index page followed by its rowid (>= 100); the
 * page may also hold stale copies of deleted cells, with other rowids. */
static unsigned char *find_live_cell(unsigned char *page, size_t n, const char *key) {
    for (unsigned char *p = page; (p = memmem(p, n - (size_t)(p - page), key, 64)); p++)
        if (p + 64 < page + n && p[64] >= 100) return p;
    return NULL;
}

/* Swaps the rowids that the key index holds for two keys, on disk: the
 * index then sends each key to the other's row, whose blob is intact. */
static void swap_index_rowids(const char *path, const char *ka, const char *kb) {
    /* Rowids of one body byte each (1 and 0 have none in a record). */
    raw_exec(path, "UPDATE entries SET rowid = rowid + 100 WHERE rowid < 100");
    int64_t root = raw_int(path, "SELECT rootpage FROM sqlite_master WHERE name = 'sqlite_autoindex_entries_1'");
    int64_t psize = raw_int(path, "PRAGMA page_size");
    ck_assert_int_gt(root, 0);
    unsigned char *page = malloc((size_t)psize);
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pread(fd, page, (size_t)psize, (root - 1) * psize), psize);
    unsigned char *pa = find_live_cell(page, (size_t)psize, ka), *pb = find_live_cell(page, (size_t)psize, kb);
    ck_assert_ptr_nonnull(pa);
    ck_assert_ptr_nonnull(pb);
    unsigned char t = pa[64]; /* the rowid follows the key in the record */
    pa[64] = pb[64];
    pb[64] = t;
    ck_assert_int_eq(pwrite(fd, page, (size_t)psize, (root - 1) * psize), psize);
    close(fd);
    free(page);
}

START_TEST(test_damaged_index) {
    char path[512];
    trow t[2];
    path_in(path, sizeof path, "kdart.db");
    fill(path, t, 2, 1500);
    swap_index_rowids(path, t[0].r.key, t[1].r.key);
    kdart__row r;
    /* Read-only: reported as damage, never the other entry's blob. */
    kdart__store *st = open_ok(path, 1, 0);
    ck_assert_int_eq(kdart__store_get(st, t[0].r.key, &r), KDART_ECORRUPT);
    ck_assert_ptr_nonnull(strstr(kdart__store_errmsg(st), "index"));
    ck_assert_ptr_null(r.cubin);
    kdart__store_close(st);
    /* Writable: the index is rebuilt from the table and the read retried. */
    st = open_ok(path, 0, 0);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(kdart__store_get(st, t[i].r.key, &r), KDART_OK);
        ck_assert_mem_eq(r.cubin, t[i].blob, 1500);
        kdart__row_release(&r);
    }
    int64_t c, d;
    ck_assert_int_eq(kdart__store_verify(st, &c, &d), KDART_OK);
    ck_assert_int_eq(c, 2);
    kdart__store_close(st);
    /* verify finds the same damage, repairs it and says so. */
    swap_index_rowids(path, t[0].r.key, t[1].r.key);
    st = open_ok(path, 0, 0);
    ck_assert_int_eq(kdart__store_verify(st, &c, &d), KDART_ECORRUPT);
    ck_assert_int_eq(d, 0);
    ck_assert_ptr_nonnull(strstr(kdart__store_errmsg(st), "indexes rebuilt"));
    ck_assert_int_eq(kdart__store_verify(st, &c, &d), KDART_OK);
    ck_assert_int_eq(kdart__store_get(st, t[1].r.key, &r), KDART_OK);
    ck_assert_mem_eq(r.cubin, t[1].blob, 1500);
    kdart__row_release(&r);
    kdart__store_close(st);
    for (int i = 0; i < 2; i++) free_row(&t[i]);
}
END_TEST

/* Copies a file (the test's databases have no -wal once closed). */
static void copy_db(const char *from, const char *to) {
    size_t n = (size_t)file_size(from);
    unsigned char *buf = malloc(n);
    int fd = open(from, O_RDONLY);
    ck_assert_int_eq(read(fd, buf, n), (ssize_t)n);
    close(fd);
    write_file(to, buf, n);
    free(buf);
}

static void overwrite_page(const char *path, int64_t page) {
    int64_t psize = raw_int(path, "PRAGMA page_size");
    unsigned char *junk = malloc((size_t)psize);
    random_bytes(junk, (size_t)psize);
    junk[0] = 0x0d; /* still looks like a b-tree page, so the damage shows inside */
    int fd = open(path, O_WRONLY);
    ck_assert_int_eq(pwrite(fd, junk, (size_t)psize, (page - 1) * psize), psize);
    close(fd);
    free(junk);
}

/* A page of the entries table below its root that is itself interior
 * (the table has three levels), else the root. */
static int64_t entries_interior_page(const char *path) {
    int64_t root = raw_int(path, "SELECT rootpage FROM sqlite_master WHERE name = 'entries'");
    int64_t psize = raw_int(path, "PRAGMA page_size");
    unsigned char *pg = malloc((size_t)psize);
    int fd = open(path, O_RDONLY);
    ck_assert_int_eq(pread(fd, pg, (size_t)psize, (root - 1) * psize), psize);
    ck_assert_int_eq(pg[0], 0x05); /* interior table page */
    unsigned cell = (unsigned)pg[12] << 8 | pg[13];
    int64_t child = (int64_t)pg[cell] << 24 | pg[cell + 1] << 16 | pg[cell + 2] << 8 | pg[cell + 3];
    ck_assert_int_eq(pread(fd, pg, (size_t)psize, (child - 1) * psize), psize);
    int64_t page = pg[0] == 0x05 ? child : root;
    close(fd);
    free(pg);
    return page;
}

enum { HEAL_ROWS = 1800 };

/* Damage inside the pages (an interior page of the entries table, the
 * last page, an index's root page) is healed by verify: it says what is
 * wrong, salvages what can be read into a fresh file and fails once; the
 * next list and verify are healthy and the salvaged entries hit.  An
 * ordinary operation that meets the damage flags it, and the next open
 * heals. */
START_TEST(test_heal_damaged_pages) {
    char seed[512], path[512], aside[600];
    static trow t[HEAL_ROWS];
    path_in(seed, sizeof seed, "seed.db");
    fill(seed, t, HEAL_ROWS, 1000);
    for (int pattern = 0; pattern < 4; pattern++) {
        char name[32];
        snprintf(name, sizeof name, "p%d.db", pattern);
        path_in(path, sizeof path, name);
        copy_db(seed, path);
        int64_t page = pattern == 1 ? raw_int(path, "PRAGMA page_count")
                       : pattern == 2 ? raw_int(path, "SELECT rootpage FROM sqlite_master WHERE name = "
                                                      "'sqlite_autoindex_entries_1'")
                                      : entries_interior_page(path);
        overwrite_page(path, page);
        kdart__store *st = open_ok(path, 0, 0);
        int64_t c, d;
        if (pattern < 3) {
            int rc = kdart__store_verify(st, &c, &d);
            ck_assert_msg(rc == KDART_ECORRUPT, "pattern %d: verify %d", pattern, rc);
            ck_assert_msg(strstr(kdart__store_errmsg(st), "salvaged") != NULL, "pattern %d: %s", pattern,
                          kdart__store_errmsg(st));
        } else {
            /* Ordinary operations: the failures flag the file... */
            int failures = 0, n = 0;
            for (int i = 0; i < HEAL_ROWS; i++) {
                kdart__row r;
                failures += kdart__store_get(st, t[i].r.key, &r) == KDART_ECORRUPT;
                kdart__row_release(&r);
            }
            failures += kdart__store_list(st, 0, list_count, &n) == KDART_ECORRUPT;
            ck_assert_int_gt(failures, 0);
            kdart__store_close(st);
            /* ...and the next open heals it. */
            st = open_ok(path, 0, 0);
            ck_assert_msg(strstr(kdart__store_errmsg(st), "salvaged") != NULL, "open: %s", kdart__store_errmsg(st));
        }
        ck_assert_msg(kdart__store_verify(st, &c, &d) == KDART_OK, "pattern %d after healing: %s", pattern,
                      kdart__store_errmsg(st));
        int n = 0;
        ck_assert_int_eq(kdart__store_list(st, 0, list_count, &n), KDART_OK);
        int hits = 0;
        for (int i = 0; i < HEAL_ROWS; i++) {
            kdart__row r;
            int rc = kdart__store_get(st, t[i].r.key, &r);
            ck_assert(rc == KDART_OK || rc == KDART_ENOENT);
            if (rc == KDART_OK) {
                ck_assert_mem_eq(r.cubin, t[i].blob, 1000);
                hits++;
            }
            kdart__row_release(&r);
        }
        ck_assert_int_eq(hits, n);
        /* Salvage reads every leaf page: an interior page or an index
         * costs no row, the last page (a leaf) its own few rows. */
        ck_assert_msg(hits >= (pattern == 1 ? HEAL_ROWS * 3 / 4 : HEAL_ROWS), "pattern %d: %d of %d entries salvaged",
                      pattern, hits, HEAL_ROWS);
        printf("test_heal_damaged_pages: pattern %d (page %lld): %d of %d entries salvaged\n", pattern,
               (long long)page, hits, HEAL_ROWS);
        kdart__store_close(st);
        st = open_ok(path, 0, 0);
        ck_assert_int_eq(kdart__store_verify(st, &c, &d), KDART_OK);
        ck_assert_int_eq(c, hits);
        kdart__store_close(st);
        snprintf(name, sizeof name, "p%d.db.corrupt-", pattern);
        ck_assert(find_file(name, aside, sizeof aside)); /* the damaged file is kept */
        snprintf(aside, sizeof aside, "%s.damaged", path);
        ck_assert_int_eq(file_size(aside), -1);
    }
    for (int i = 0; i < HEAL_ROWS; i++) free_row(&t[i]);
}
END_TEST

/* ------------------------------------------- healing keeps every entry */

/* The entries table's first leaf page (the leftmost one): a page that
 * publishers, which append at the right, never touch. */
static int64_t entries_leftmost_leaf(const char *path) {
    int64_t page = raw_int(path, "SELECT rootpage FROM sqlite_master WHERE name = 'entries'");
    int64_t psize = raw_int(path, "PRAGMA page_size");
    unsigned char *pg = malloc((size_t)psize);
    int fd = open(path, O_RDONLY);
    for (int depth = 0; depth < 8; depth++) {
        ck_assert_int_eq(pread(fd, pg, (size_t)psize, (page - 1) * psize), psize);
        if (pg[0] != 0x05) break;
        unsigned cell = (unsigned)pg[12] << 8 | pg[13];
        ck_assert_int_ne(cell, 0);
        page = (int64_t)pg[cell] << 24 | pg[cell + 1] << 16 | pg[cell + 2] << 8 | pg[cell + 3];
    }
    ck_assert_int_eq(pg[0], 0x0d);
    close(fd);
    free(pg);
    return page;
}

/* Keys one process reports through a pipe, one per line. */
typedef struct keylist {
    char (*k)[65];
    int n;
} keylist;

static void read_keys(int fd, keylist *out) {
    static char buf[1 << 16];
    size_t have = 0;
    ssize_t r;
    while (have < sizeof buf - 1 && (r = read(fd, buf + have, sizeof buf - 1 - have)) > 0) have += (size_t)r;
    buf[have] = 0;
    out->k = calloc(have / 65 + 1, sizeof *out->k);
    out->n = 0;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
        if (strlen(line) == 64) memcpy(out->k[out->n++], line, 65);
}

/* A publisher: puts n fresh entries, a few milliseconds apart, and
 * reports each key after its put succeeded. */
static void publisher(const char *path, int n, int fd) {
    kdart__store *st = NULL;
    char err[512];
    if (kdart__store_open(&st, path, 0, 0, err, sizeof err) != KDART_OK) _exit(2);
    for (int i = 0; i < n; i++) {
        trow t;
        make_row(&t, "pub", "s", 700);
        if (kdart__store_put(st, &t.r, 0) == KDART_OK) {
            char line[80];
            int len = snprintf(line, sizeof line, "%s\n", t.r.key);
            if (write(fd, line, (size_t)len) != len) _exit(3);
        }
        free_row(&t);
        usleep(3000);
    }
    kdart__store_close(st);
    _exit(0);
}

/* verify heals a damaged file while two processes publish into it: every
 * entry whose put succeeded, before, during or after the healing, is in
 * the cache afterwards. */
START_TEST(test_heal_races_publishers) {
    char path[512];
    static trow t[300];
    path_in(path, sizeof path, "kdart.db");
    fill(path, t, 300, 1500);
    overwrite_page(path, entries_leftmost_leaf(path));
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pub[2];
    for (int i = 0; i < 2; i++) {
        pub[i] = fork();
        ck_assert_int_ge(pub[i], 0);
        if (pub[i] == 0) {
            close(fds[0]);
            publisher(path, 25, fds[1]);
        }
    }
    close(fds[1]);
    usleep(20000);
    kdart__store *st = open_ok(path, 0, 0);
    int64_t c, d;
    int rc = kdart__store_verify(st, &c, &d);
    ck_assert_msg(rc == KDART_ECORRUPT, "verify: %d %s", rc, kdart__store_errmsg(st));
    kdart__store_close(st);
    for (int i = 0; i < 2; i++) {
        int status;
        waitpid(pub[i], &status, 0);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "publisher %d: status %d", i, status);
    }
    keylist keys;
    read_keys(fds[0], &keys);
    close(fds[0]);
    st = open_ok(path, 0, 0);
    int lost = 0;
    for (int i = 0; i < keys.n; i++) {
        kdart__row r;
        if (kdart__store_get(st, keys.k[i], &r) != KDART_OK) lost++;
        kdart__row_release(&r);
    }
    printf("test_heal_races_publishers: %d entries published around the healing, %d lost\n", keys.n, lost);
    ck_assert_int_gt(keys.n, 10);
    ck_assert_int_eq(lost, 0);
    ck_assert_int_eq(kdart__store_verify(st, &c, &d), KDART_OK);
    kdart__store_close(st);
    free(keys.k);
    for (int i = 0; i < 300; i++) free_row(&t[i]);
}
END_TEST

/* Entries a store lists. */
static int count_entries(const char *path) {
    kdart__store *st = open_ok(path, 0, 0);
    int n = 0;
    ck_assert_int_eq(kdart__store_list(st, 0, list_count, &n), KDART_OK);
    kdart__store_close(st);
    return n;
}

/* Heals until verify says the file is clean (two rounds at most). */
static void heal(const char *path) {
    kdart__store *st = open_ok(path, 0, 0);
    int64_t c, d;
    if (kdart__store_verify(st, &c, &d) != KDART_OK)
        ck_assert_msg(kdart__store_verify(st, &c, &d) == KDART_OK, "still damaged: %s", kdart__store_errmsg(st));
    kdart__store_close(st);
}

static int count_files(const char *part) {
    DIR *dir = opendir(tdir);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(dir))) n += strstr(e->d_name, part) != NULL;
    closedir(dir);
    return n;
}

/* Removes path and every file beside it whose name starts with it. */
static void remove_family(const char *path) {
    const char *base = strrchr(path, '/') + 1;
    DIR *dir = opendir(tdir);
    struct dirent *e;
    while ((e = readdir(dir))) {
        if (strncmp(e->d_name, base, strlen(base)) != 0) continue;
        char p[600];
        snprintf(p, sizeof p, "%s/%s", tdir, e->d_name);
        unlink(p);
    }
    closedir(dir);
}

/* A process killed anywhere in healing loses nothing: the cache file is
 * always there, the next verify heals it with every entry that the
 * undisturbed healing keeps, and the killed healer's scratch files are
 * gone.  Two kinds of damage: an interior page of the entries table
 * (healed in place by verify) and page 1 (healed by open). */
START_TEST(test_heal_kills) {
    enum { ROWS = 1200, ROUNDS = 24 };
    char seed[512], tmpl[2][512], path[512];
    static trow t[ROWS];
    path_in(seed, sizeof seed, "seed.db");
    fill(seed, t, ROWS, 1000);
    path_in(tmpl[0], sizeof tmpl[0], "interior.tmpl");
    path_in(tmpl[1], sizeof tmpl[1], "page1.tmpl");
    copy_db(seed, tmpl[0]);
    overwrite_page(tmpl[0], entries_interior_page(tmpl[0]));
    copy_db(seed, tmpl[1]);
    int64_t psize = raw_int(seed, "PRAGMA page_size");
    int fd = open(tmpl[1], O_WRONLY);
    unsigned char junk[65536];
    random_bytes(junk, sizeof junk);
    ck_assert_int_eq(pwrite(fd, junk, (size_t)psize - 100, 100), psize - 100);
    close(fd);
    path_in(path, sizeof path, "kdart.db");
    /* What an undisturbed healing keeps, and how long it takes. */
    int want[2];
    double took[2];
    for (int k = 0; k < 2; k++) {
        copy_db(tmpl[k], path);
        double t0 = kdart__now_ms();
        heal(path);
        took[k] = kdart__now_ms() - t0;
        want[k] = count_entries(path);
        printf("test_heal_kills: %s: %d of %d entries kept, %.0f ms\n", k ? "page 1" : "interior page", want[k], ROWS,
               took[k]);
        remove_family(path);
    }
    srand((unsigned)getpid());
    int lost = 0;
    for (int round = 0; round < ROUNDS; round++) {
        int k = round % 2;
        copy_db(tmpl[k], path);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            kdart__store *st = NULL;
            char err[512];
            int64_t c, d;
            if (kdart__store_open(&st, path, 0, 0, err, sizeof err) == KDART_OK) kdart__store_verify(st, &c, &d);
            _exit(0);
        }
        usleep((useconds_t)(rand() % (int)(1000 * took[k] * 1.3 + 1)));
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        ck_assert_msg(file_size(path) > 0, "round %d: no cache file after the kill", round);
        heal(path);
        int n = count_entries(path);
        if (n < want[k]) lost += want[k] - n;
        ck_assert_msg(n >= want[k], "round %d (%s): %d entries, want %d", round, k ? "page 1" : "interior", n, want[k]);
        ck_assert_msg(count_files(".salvage-") == 0, "round %d: scratch files left behind", round);
        remove_family(path);
    }
    printf("test_heal_kills: %d kills during healing, %d entries lost\n", ROUNDS, lost);
    for (int i = 0; i < ROWS; i++) free_row(&t[i]);
}
END_TEST

/* Damage to the entries table's root (an interior page) or to page 1
 * loses no entry: salvage reads every leaf page.  A truncated file keeps
 * what its remaining pages hold.  verify reports the damage once (also
 * when open already healed it), and the next verify is clean. */
START_TEST(test_heal_interior_and_page1) {
    enum { ROWS = 108 };
    char seed[512], path[512];
    trow t[ROWS];
    path_in(seed, sizeof seed, "seed.db");
    fill(seed, t, ROWS, 1000);
    int64_t psize = raw_int(seed, "PRAGMA page_size");
    static const char *const what[] = {"root of entries", "page 1 body", "page 1 header", "truncated"};
    for (int k = 0; k < 4; k++) {
        char name[32];
        snprintf(name, sizeof name, "k%d.db", k);
        path_in(path, sizeof path, name);
        copy_db(seed, path);
        if (k == 0) {
            overwrite_page(path, raw_int(path, "SELECT rootpage FROM sqlite_master WHERE name = 'entries'"));
        } else if (k < 3) {
            unsigned char junk[65536];
            random_bytes(junk, sizeof junk);
            int fd = open(path, O_WRONLY);
            off_t at = k == 1 ? 100 : 0;
            ck_assert_int_eq(pwrite(fd, junk, (size_t)(psize - at), at), psize - at);
            close(fd);
        } else {
            ck_assert_int_eq(truncate(path, file_size(path) * 2 / 3), 0);
        }
        kdart__store *st = open_ok(path, 0, 0);
        int64_t c = 0, d = 0;
        int rc = kdart__store_verify(st, &c, &d);
        ck_assert_msg(rc == KDART_ECORRUPT, "%s: verify %d (%s)", what[k], rc, kdart__store_errmsg(st));
        ck_assert_msg(strstr(kdart__store_errmsg(st), "salvaged") != NULL, "%s: %s", what[k],
                      kdart__store_errmsg(st));
        printf("test_heal_interior_and_page1: %s: checked %lld, damaged %lld: %s\n", what[k], (long long)c,
               (long long)d, kdart__store_errmsg(st));
        ck_assert_msg(c > 0, "%s: verify says it checked no entry", what[k]);
        ck_assert_int_eq(kdart__store_verify(st, &c, &d), KDART_OK);
        int hits = 0;
        for (int i = 0; i < ROWS; i++) {
            kdart__row r;
            if (kdart__store_get(st, t[i].r.key, &r) == KDART_OK) {
                ck_assert_mem_eq(r.cubin, t[i].blob, 1000);
                hits++;
            }
            kdart__row_release(&r);
        }
        printf("test_heal_interior_and_page1: %s: %d of %d entries salvaged\n", what[k], hits, ROWS);
        ck_assert_msg(hits >= (k == 3 ? ROWS / 2 : ROWS), "%s: %d of %d entries salvaged", what[k], hits, ROWS);
        ck_assert_int_eq(c, hits);
        kdart__store_close(st);
    }
    for (int i = 0; i < ROWS; i++) free_row(&t[i]);
}
END_TEST

/* A file too damaged to open (its header) is replaced by the healed file
 * while another store still has the old one open: that store's entry,
 * committed only in the old file's WAL, is salvaged from the WAL, and its
 * next publish goes into the new file (it notices the new file and
 * reconnects), so nothing is lost. */
START_TEST(test_heal_swap_follow) {
    enum { ROWS = 50 };
    char path[512];
    trow t[ROWS], x, y;
    path_in(path, sizeof path, "kdart.db");
    fill(path, t, ROWS, 1000);
    kdart__store *a = open_ok(path, 0, 0);
    make_row(&x, "x", "s", 1000);
    ck_assert_int_eq(kdart__store_put(a, &x.r, 0), KDART_OK); /* in the WAL only */
    unsigned char junk[100];
    random_bytes(junk, sizeof junk);
    junk[0] = 'X';
    int fd = open(path, O_WRONLY);
    ck_assert_int_eq(pwrite(fd, junk, sizeof junk, 0), (ssize_t)sizeof junk);
    close(fd);
    kdart__store *b = open_ok(path, 0, 0);
    ck_assert_msg(strstr(kdart__store_errmsg(b), "salvaged") != NULL, "%s", kdart__store_errmsg(b));
    int64_t n, d;
    ck_assert_msg(kdart__store_verify(b, &n, &d) == KDART_ECORRUPT, "the healing is reported once");
    kdart__store_close(b);
    make_row(&y, "y", "s", 1000);
    ck_assert_int_eq(kdart__store_put(a, &y.r, 0), KDART_OK);
    kdart__store_close(a);
    kdart__store *c = open_ok(path, 0, 0);
    ck_assert_int_eq(kdart__store_verify(c, &n, &d), KDART_OK);
    ck_assert_int_eq(n, ROWS + 2);
    kdart__row r;
    ck_assert_int_eq(kdart__store_get(c, x.r.key, &r), KDART_OK);
    kdart__row_release(&r);
    ck_assert_int_eq(kdart__store_get(c, y.r.key, &r), KDART_OK);
    kdart__row_release(&r);
    kdart__store_close(c);
    free_row(&x);
    free_row(&y);
    for (int i = 0; i < ROWS; i++) free_row(&t[i]);
}
END_TEST

/* fill, then damage an interior page of the entries table. */
static void fill_damaged(const char *path, trow *t, int n) {
    fill(path, t, n, 1000);
    overwrite_page(path, entries_interior_page(path));
}

/* A kdart.db that is a symlink to a shared file: healing heals the
 * shared file, and the link stays a link. */
START_TEST(test_heal_symlink) {
    enum { ROWS = 200 };
    char target[512], link[512], dir[512];
    trow t[ROWS];
    path_in(dir, sizeof dir, "shared");
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    path_in(dir, sizeof dir, "user");
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    path_in(target, sizeof target, "shared/kdart.db");
    path_in(link, sizeof link, "user/kdart.db");
    fill_damaged(target, t, ROWS);
    ck_assert_int_eq(symlink("../shared/kdart.db", link), 0);
    kdart__store *st = open_ok(link, 0, 0);
    int64_t c, d;
    ck_assert_int_eq(kdart__store_verify(st, &c, &d), KDART_ECORRUPT);
    kdart__store_close(st);
    struct stat sb;
    ck_assert_int_eq(lstat(link, &sb), 0);
    ck_assert_msg(S_ISLNK(sb.st_mode), "the link was replaced by a file");
    st = open_ok(target, 0, 0);
    ck_assert_msg(kdart__store_verify(st, &c, &d) == KDART_OK, "the shared file is still damaged: %s",
                  kdart__store_errmsg(st));
    ck_assert_int_eq(c, ROWS);
    kdart__store_close(st);
    for (int i = 0; i < ROWS; i++) free_row(&t[i]);
}
END_TEST

/* Three verifies at once on one damaged file: one salvage (one copy of
 * the damaged file kept), and every entry is there afterwards. */
START_TEST(test_concurrent_verifies) {
    enum { ROWS = 600 };
    char path[512];
    static trow t[ROWS];
    path_in(path, sizeof path, "kdart.db");
    fill_damaged(path, t, ROWS);
    int go[2];
    ck_assert_int_eq(pipe(go), 0);
    pid_t pid[3];
    for (int i = 0; i < 3; i++) {
        pid[i] = fork();
        ck_assert_int_ge(pid[i], 0);
        if (pid[i] == 0) {
            char b;
            close(go[1]);
            if (read(go[0], &b, 1) < 0) _exit(2);
            kdart__store *st = NULL;
            char err[512];
            int64_t c, d;
            if (kdart__store_open(&st, path, 0, 0, err, sizeof err) != KDART_OK) _exit(3);
            int rc = kdart__store_verify(st, &c, &d);
            kdart__store_close(st);
            _exit(rc == KDART_OK || rc == KDART_ECORRUPT ? 0 : 4);
        }
    }
    close(go[0]);
    close(go[1]); /* all three start */
    for (int i = 0; i < 3; i++) {
        int status;
        waitpid(pid[i], &status, 0);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "verify %d: status %d", i, status);
    }
    int copies = 0;
    DIR *dir = opendir(tdir);
    struct dirent *e;
    while ((e = readdir(dir)))
        copies += strstr(e->d_name, ".corrupt-") && !strstr(e->d_name, "-wal") && !strstr(e->d_name, "-shm");
    closedir(dir);
    printf("test_concurrent_verifies: 3 verifies, %d salvage(s)\n", copies);
    ck_assert_int_eq(copies, 1);
    ck_assert_int_eq(count_entries(path), ROWS);
    for (int i = 0; i < ROWS; i++) free_row(&t[i]);
}
END_TEST

/* The page reader on garbage shaped like a database: pages that claim to
 * be leaves with random cells, overflow pointers and records, and a WAL
 * whose header checks out followed by random frames.  Every call returns,
 * and whatever it decodes stays inside its buffers (the sanitizer builds
 * check that). */
static int count_record(void *user, int64_t rowid, const kdart__field *f, int n) {
    (void)rowid;
    for (int i = 0; i < n; i++)
        if ((f[i].type == SQLITE_TEXT || f[i].type == SQLITE_BLOB) && f[i].n) ck_assert(f[i].p != NULL);
    ++*(int *)user;
    return 0;
}

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8),
    p[3] = (unsigned char)v;
}

START_TEST(test_pages_garbage) {
    enum { PS = 1024, NP = 24, ROUNDS = 300 };
    static const unsigned char types[] = {0x0d, 0x0a, 0x05, 0x02, 0x00};
    char path[512], wal[520];
    path_in(path, sizeof path, "g.db");
    snprintf(wal, sizeof wal, "%s-wal", path);
    static unsigned char db[PS * NP], w[32 + 6 * (24 + PS)];
    int records = 0;
    for (int round = 0; round < ROUNDS; round++) {
        random_bytes(db, sizeof db);
        memcpy(db, "SQLite format 3", 16);
        db[16] = PS >> 8, db[17] = PS & 0xff, db[20] = 0;
        if (round % 3) put_be32(db + 28, NP), memcpy(db + 92, db + 24, 4);
        if (round % 4 == 0) put_be32(db + 32, 1 + (uint32_t)round % NP); /* a free list trunk */
        for (int pg = 0; pg < NP; pg++) {
            unsigned char *p = db + pg * PS + (pg ? 0 : 100);
            p[0] = types[(round + pg) % 5];
            p[3] = 0, p[4] = (unsigned char)(round % 7); /* a few cells */
            for (int c = 0; c < 6; c++) p[8 + 2 * c] = (unsigned char)((p[8 + 2 * c] & 0x03) | 0x01);
        }
        if (round % 3 == 0) {
            /* A whole record of 3000 bytes on page 2, spilling into pages
             * 5 and 6: text of 1000 bytes, a blob of 1995. */
            static const unsigned char cell[] = {0x97, 0x38, 0x05, 0x05, 0x8f, 0x5d, 0x9f, 0x22};
            unsigned char *p = db + PS;
            p[0] = 0x0d, p[3] = 0, p[4] = 1, p[8] = 0, p[9] = 40;
            memcpy(p + 40, cell, sizeof cell);
            put_be32(p + 40 + 3 + 960, 5);
            put_be32(db + 4 * PS, (uint32_t)(round % 2 ? 6 : NP + 9)); /* the chain, or one that leaves the file */
            put_be32(db + 5 * PS, 0);
        }
        write_file(path, db, round % 5 == 4 ? sizeof db / 2 + 37 : sizeof db);
        unlink(wal);
        if (round % 2) {
            random_bytes(w, sizeof w);
            put_be32(w, 0x377f0682), put_be32(w + 4, 3007000), put_be32(w + 8, PS);
            uint32_t s1 = 0, s2 = 0; /* the header's checksum, little-endian words */
            for (int i = 0; i < 24; i += 8) {
                s1 += (uint32_t)(w[i] | w[i + 1] << 8 | w[i + 2] << 16 | (uint32_t)w[i + 3] << 24) + s2;
                s2 += (uint32_t)(w[i + 4] | w[i + 5] << 8 | w[i + 6] << 16 | (uint32_t)w[i + 7] << 24) + s1;
            }
            put_be32(w + 24, s1), put_be32(w + 28, s2);
            for (int f = 0; f < 6; f++) memcpy(w + 32 + f * (24 + PS) + 8, w + 16, 8); /* matching salts */
            write_file(wal, w, sizeof w - (size_t)(round % 7) * 100);
        }
        int64_t leaves = 0;
        ck_assert_int_eq(kdart__pages_each_record(path, wal, count_record, &records, &leaves), 0);
    }
    printf("test_pages_garbage: %d rounds, %d records decoded from garbage\n", ROUNDS, records);
}
END_TEST

/* Writes a lease row behind the store's back. */
static void put_lease(const char *path, const char *key, int64_t pid, const char *host, const char *boot,
                      int64_t heartbeat, int64_t expiry) {
    char sql[1024];
    snprintf(sql, sizeof sql,
             "INSERT OR REPLACE INTO leases (key, owner_pid, owner_host, boot_id, started, heartbeat, expiry) "
             "VALUES ('%s', %lld, '%s', '%s', %lld, %lld, %lld)",
             key, (long long)pid, host, boot, (long long)heartbeat, (long long)heartbeat, (long long)expiry);
    raw_exec(path, sql);
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The holder of the real cross-namespace case: pid 1 of a new pid
 * namespace forks until it has a pid that names no process outside (so
 * kill(pid, 0) there would say "dead"), takes the lease, says so, waits. */
static void ns_holder(const char *path, const char *key, int fd) {
    if (unshare(CLONE_NEWPID) != 0) _exit(77);
    pid_t init = fork();
    if (init < 0) _exit(3);
    if (init > 0) { /* outside: tell the parent whom to kill */
        if (write(fd, &init, sizeof init) != (ssize_t)sizeof init) _exit(4);
        int st;
        waitpid(init, &st, 0);
        _exit(0);
    }
    for (int tries = 0; tries < 200; tries++) {
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/%d", (int)getpid()); /* /proc is the outer namespace's */
        if (access(proc, F_OK) != 0) {
            kdart__store *st = NULL;
            char err[256];
            kdart__lease mine;
            if (kdart__store_open(&st, path, 0, 0, err, sizeof err) || kdart__store_lease_take(st, key, 60000, &mine, NULL))
                _exit(5);
            char y = 'y';
            if (write(fd, &y, 1) != 1) _exit(6);
            for (;;) pause();
        }
        pid_t c = fork();
        if (c < 0) _exit(7);
        if (c > 0) {
            int st;
            waitpid(c, &st, 0);
            _exit(0);
        }
    }
    _exit(8);
}

/* Leases across pid namespaces: a holder's pid is probed only when it ran
 * in this pid namespace (containers share host name and boot id); others
 * are judged by their heartbeat. */
START_TEST(test_lease_pidns) {
    char path[512], key[65], boot[128];
    path_in(path, sizeof path, "kdart.db");
    kdart__store *st = open_ok(path, 0, 0);
    memset(key, 'a', 64);
    key[64] = 0;
    kdart__lease me, holder;
    ck_assert_int_eq(kdart__store_lease_take(st, key, 60000, &me, NULL), KDART_OK);
    ck_assert_int_eq(kdart__store_lease_release(st, &me), KDART_OK);
    char *tag = strstr(me.boot_id, "/pidns:");
    ck_assert_ptr_nonnull(tag);
    snprintf(boot, sizeof boot, "%.*s", (int)(tag - me.boot_id), me.boot_id);
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    char other[200];
    snprintf(other, sizeof other, "%s/pidns:999", boot);
    int64_t now = now_ms();

    /* Another namespace, pid dead here, fresh heartbeat: respected. */
    put_lease(path, key, dead, me.owner_host, other, now, now + 60000);
    ck_assert_int_eq(kdart__store_lease_take(st, key, 60000, &me, &holder), KDART_EAGAIN);
    ck_assert_str_eq(holder.boot_id, other);
    ck_assert_int_eq(kdart__store_lease_live(st, key, NULL), KDART_OK);
    /* A row of a kdart that recorded no namespace: not probed either. */
    put_lease(path, key, dead, me.owner_host, boot, now, now + 60000);
    ck_assert_int_eq(kdart__store_lease_take(st, key, 60000, &me, NULL), KDART_EAGAIN);
    /* Another namespace, stale heartbeat (expiry still ahead): taken over. */
    put_lease(path, key, 1, me.owner_host, other, now - KDART__LEASE_STALE_MS - 1000, now + 30000);
    ck_assert_int_eq(kdart__store_lease_live(st, key, NULL), KDART_ENOENT);
    ck_assert_int_eq(kdart__store_lease_take(st, key, 60000, &me, NULL), KDART_OK);
    ck_assert_int_eq(kdart__store_lease_release(st, &me), KDART_OK);
    /* This namespace, dead pid: taken over at once, as before. */
    put_lease(path, key, dead, me.owner_host, me.boot_id, now, now + 60000);
    ck_assert_int_eq(kdart__store_lease_take(st, key, 60000, &me, NULL), KDART_OK);
    ck_assert_int_eq(kdart__store_lease_release(st, &me), KDART_OK);

    /* The real thing, where unshare(CLONE_NEWPID) is permitted. */
    char key2[65];
    memset(key2, 'b', 64);
    key2[64] = 0;
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t outer = fork();
    ck_assert_int_ge(outer, 0);
    if (outer == 0) {
        close(fds[0]);
        kdart__store_close(st);
        ns_holder(path, key2, fds[1]);
    }
    close(fds[1]);
    pid_t init = 0;
    char y = 0;
    if (read(fds[0], &init, sizeof init) == (ssize_t)sizeof init && read(fds[0], &y, 1) == 1 && y == 'y') {
        int rc = kdart__store_lease_take(st, key2, 60000, &me, &holder);
        kill(init, SIGKILL); /* pid 1 of the namespace: every process in it dies */
        ck_assert_msg(rc == KDART_EAGAIN, "a live holder in another pid namespace (pid %lld there) was taken over",
                      (long long)holder.owner_pid);
        ck_assert_str_ne(holder.boot_id, me.boot_id);
    } else {
        printf("test_lease_pidns: unshare --pid not permitted here; the real cross-namespace part skipped\n");
    }
    close(fds[0]);
    int status;
    waitpid(outer, &status, 0);
    kdart__store_close(st);
}
END_TEST

static Suite *store_suite(void) {
    Suite *s = suite_create("store");
    TCase *tc = tcase_create("store");
    tcase_add_checked_fixture(tc, setup_dir, teardown_dir);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_open_create);
    tcase_add_test(tc, test_roundtrip);
    tcase_add_test(tc, test_conflict_and_replace);
    tcase_add_test(tc, test_failed_row);
    tcase_add_test(tc, test_flipped_byte);
    tcase_add_test(tc, test_garbage_file);
    tcase_add_test(tc, test_truncated);
    tcase_add_test(tc, test_damaged_pages);
    tcase_add_test(tc, test_unwritable);
    tcase_add_test(tc, test_readonly);
    tcase_add_test(tc, test_newer_schema);
    tcase_add_test(tc, test_resolve);
    tcase_add_test(tc, test_budget_and_gc);
    tcase_add_test(tc, test_stats);
    tcase_add_test(tc, test_list);
    tcase_add_test(tc, test_alloc_failures);
    tcase_add_test(tc, test_bad_args);
    tcase_add_test(tc, test_concurrent_writers);
    tcase_add_test(tc, test_readonly_unreadable_shm);
    tcase_add_test(tc, test_random_damage);
    tcase_add_test(tc, test_damaged_index);
    tcase_add_test(tc, test_lease_pidns);
    tcase_add_test(tc, test_heal_damaged_pages);
    tcase_add_test(tc, test_heal_races_publishers);
    tcase_add_test(tc, test_heal_kills);
    tcase_add_test(tc, test_heal_interior_and_page1);
    tcase_add_test(tc, test_heal_symlink);
    tcase_add_test(tc, test_concurrent_verifies);
    tcase_add_test(tc, test_pages_garbage);
    tcase_add_test(tc, test_heal_swap_follow);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(store_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
