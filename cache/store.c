/*
 * store.c: the SQLite compile cache (one kdart__store per database file).
 *
 * What it is for: keeping every cubin kdart compiled, with the manifest,
 * report and logs that explain it, so that a later process (or `kdart ls`,
 * `why`, `verify`, `gc`) finds it again.  The contract is store.h; this
 * file adds how it is kept.
 *
 * Guarantees, and how they are kept:
 *   - A blob leaves the store only after its size and SHA-256 matched the
 *     row's cubin_size and cubin_sha256, on every read.  A mismatch moves the
 *     row to `quarantine` in one transaction (re-checked under the write
 *     lock, so a row another writer has just repaired is never moved) and
 *     get reports KDART_ENOENT, so the caller recompiles.  A row is read
 *     from the table by the rowid the key index gives and its key compared,
 *     so a damaged index can never hand out another entry's (intact) blob;
 *     a writable store rebuilds the index (REINDEX) and reads again.
 *   - A plain miss leaves errmsg empty; a non-empty errmsg with ENOENT is
 *     worth a warning (damaged, quarantined).
 *   - put is one BEGIN IMMEDIATE transaction: insert (OR IGNORE, or OR
 *     REPLACE when asked), then the byte budget.  An existing row means
 *     another writer won, which is success.
 *   - open never destroys data: a file SQLite cannot read (bad header,
 *     truncated, NOTADB or CORRUPT while reading the schema) is renamed to
 *     <path>.corrupt-<unixtime>-<pid> (with its -wal, -shm and -journal) and
 *     a fresh database is created; the note stays in errmsg so the runtime
 *     can warn.  A database with a newer user_version is used read-only
 *     (refused with ECACHE if its tables lack our columns); an SQLite file
 *     with tables but no user_version is someone else's and is refused.
 *     A read-only store never creates, moves or writes anything.  A
 *     writable open that fails for want of writing (read-only directory,
 *     file or mount; full disk) falls back to a read-only open of the
 *     file, so its entries are still served.
 *   - Every failure comes back as a KDART status, with the SQLite message and
 *     what we were doing in errmsg.  Nothing here prints, exits or aborts.
 *
 * Schema (PRAGMA user_version = KDART__STORE_SCHEMA):
 *   entries(key TEXT PRIMARY KEY, kernel, spec, arch, failed, manifest,
 *           report, log, lowered, cubin BLOB, cubin_size, cubin_sha256,
 *           compile_ms, created, last_used, hits)
 *     index entries_last_used(last_used): the LRU order of the budget;
 *     index entries_kernel(kernel, spec, arch): the order of list.
 *   quarantine(the same columns, reason, quarantined_at), no unique key: a
 *     key may be quarantined more than once and every copy is kept for
 *     inspection.
 *   leases(key TEXT PRIMARY KEY, owner_pid, owner_host, boot_id, started,
 *          heartbeat, expiry) (schema 2): who is compiling which key, until
 *     when (unix milliseconds).  See "Leases" at the end of this file.
 *   A database of schema 1 is migrated to 2 by creating the table; a
 *   kdart that only knows schema 1 then uses the file read-only.
 * Journal: WAL, synchronous=NORMAL (a power cut may lose the last commits,
 * never corrupt; a lost entry is only a recompile), busy_timeout 10 s so
 * ranks sharing one cache wait for each other instead of failing (and
 * switching to WAL, which SQLite will not wait for, is retried as long).
 * A read-only store whose -shm cannot be opened (a cache shipped in a
 * read-only image) is read again with immutable=1.
 * auto_vacuum=INCREMENTAL on new files, so gc can give space back.
 *
 * Non-goals: thread safety (the runtime serializes calls on one store),
 * network file systems (SQLite's locking there is the caller's risk).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "base.h"
#include "store.h"

#define BUSY_TIMEOUT_MS 10000
#define PATH_BUF 4096
#define PIDNS_TAG "/pidns:" /* in the leases' boot_id column: see identity_init */

/* Every column of a row, in the order the statements below bind and read. */
#define COLS                                                                                   \
    "key, kernel, spec, arch, failed, manifest, report, log, lowered, cubin, cubin_size, "   \
    "cubin_sha256, compile_ms, created, last_used, hits"

/* migrations[n] takes a database from user_version n to n + 1.  Append only:
 * a shipped migration is never edited, since databases in the field have
 * already run it. */
static const char *const migrations[KDART__STORE_SCHEMA] = {
    /* 0 -> 1: the first schema. */
    "CREATE TABLE entries ("
    " key TEXT PRIMARY KEY NOT NULL,"
    " kernel TEXT NOT NULL, spec TEXT NOT NULL, arch TEXT NOT NULL,"
    " failed INTEGER NOT NULL DEFAULT 0,"
    " manifest TEXT NOT NULL, report TEXT, log TEXT, lowered TEXT,"
    " cubin BLOB, cubin_size INTEGER NOT NULL DEFAULT 0, cubin_sha256 TEXT,"
    " compile_ms REAL NOT NULL DEFAULT 0,"
    " created INTEGER NOT NULL, last_used INTEGER NOT NULL, hits INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX entries_last_used ON entries(last_used);"
    "CREATE INDEX entries_kernel ON entries(kernel, spec, arch);"
    "CREATE TABLE quarantine ("
    " key TEXT NOT NULL, kernel TEXT, spec TEXT, arch TEXT, failed INTEGER,"
    " manifest TEXT, report TEXT, log TEXT, lowered TEXT,"
    " cubin BLOB, cubin_size INTEGER, cubin_sha256 TEXT, compile_ms REAL,"
    " created INTEGER, last_used INTEGER, hits INTEGER,"
    " reason TEXT, quarantined_at INTEGER);",
    /* 1 -> 2: compile leases (see "Leases" below). */
    "CREATE TABLE IF NOT EXISTS leases ("
    " key TEXT PRIMARY KEY NOT NULL,"
    " owner_pid INTEGER NOT NULL, owner_host TEXT NOT NULL, boot_id TEXT NOT NULL,"
    " started INTEGER NOT NULL, heartbeat INTEGER NOT NULL, expiry INTEGER NOT NULL);",
};

struct kdart__store {
    sqlite3 *db;
    char *path;         /* as given to open */
    int ro_open;        /* opened with readonly=1 */
    int newer;          /* user_version newer than ours: read, never write */
    int64_t max_bytes;  /* <= 0: no budget */
    int last_src;       /* raw SQLite code of the last failure, 0 if none */
    int healing;        /* salvage in progress: damage met is expected, not flagged */
    int counters_ready; /* the counters table exists on this connection's file */
    char err[1024];     /* last failure, or the warning of a successful open */
};

/* ------------------------------------------------------------ messages */

static int kstatus_of(int src) {
    switch (src & 0xff) {
    case SQLITE_OK: return KDART_OK;
    case SQLITE_NOMEM: return KDART_ENOMEM;
    case SQLITE_IOERR: case SQLITE_CANTOPEN: case SQLITE_READONLY: case SQLITE_FULL:
    case SQLITE_PERM: return KDART_EIO;
    case SQLITE_CORRUPT: case SQLITE_NOTADB: return KDART_ECORRUPT;
    default: return KDART_ECACHE;
    }
}

static int is_damage(int src) { return (src & 0xff) == SQLITE_CORRUPT || (src & 0xff) == SQLITE_NOTADB; }

static int writable(const kdart__store *st) { return !st->ro_open && !st->newer; }

/* "<path>.damaged": left by an operation that met damage inside the file
 * (SQLITE_CORRUPT), so that the next writable open (or verify) heals it
 * instead of every later operation failing the same way.  Best effort: an
 * unwritable directory keeps no flag, and nothing could heal it anyway. */
static void damage_flag_path(const kdart__store *st, char *buf, size_t n) { snprintf(buf, n, "%s.damaged", st->path); }

static void flag_damage(kdart__store *st) {
    char flag[PATH_BUF + 16];
    if (!writable(st) || st->healing || !strcmp(st->path, ":memory:")) return;
    damage_flag_path(st, flag, sizeof flag);
    int fd = open(flag, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) close(fd);
}

static void clear_err(kdart__store *st) {
    st->err[0] = 0;
    st->last_src = 0;
}

/* Records a failure that is ours, not SQLite's; returns status. */
static int set_err(kdart__store *st, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->err, sizeof st->err, fmt, ap);
    va_end(ap);
    return status;
}

/* Records an SQLite failure: our context, then SQLite's own message.  Must
 * be called before any other call on the connection (a rollback or
 * finalize would replace sqlite3_errmsg). */
static int sql_err(kdart__store *st, int src, const char *fmt, ...) {
    char ctx[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    const char *msg = st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(src);
    if (!msg || !strcmp(msg, "not an error")) msg = sqlite3_errstr(src);
    snprintf(st->err, sizeof st->err, "%s: %s", ctx, msg);
    st->last_src = src;
    if (is_damage(src)) flag_damage(st);
    return kstatus_of(src);
}

static int is_hex_lower(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

/* Keys are lowercase hex SHA-256 digests: 64 characters. */
static int is_full_key(const char *key) {
    size_t n = 0;
    for (; key[n]; n++)
        if (n >= 64 || !is_hex_lower(key[n])) return 0;
    return n == 64;
}

/* ------------------------------------------------------- small helpers */

static int sql_exec(kdart__store *st, const char *sql, const char *what) {
    int src = sqlite3_exec(st->db, sql, NULL, NULL, NULL);
    return src == SQLITE_OK ? KDART_OK : sql_err(st, src, "%s", what);
}

/* sql_exec for statements that take the write lock while holding a read
 * lock (switching to WAL): SQLite answers SQLITE_BUSY at once there,
 * without the busy handler, when another process holds the write lock,
 * since waiting could deadlock.  We hold nothing else, so waiting is safe:
 * retry for up to the busy timeout. */
static int sql_exec_retry(kdart__store *st, const char *sql, const char *what) {
    struct timespec pause = {0, 20 * 1000 * 1000};
    int src = SQLITE_BUSY;
    for (int waited = 0; waited <= BUSY_TIMEOUT_MS; waited += 20) {
        src = sqlite3_exec(st->db, sql, NULL, NULL, NULL);
        if ((src & 0xff) != SQLITE_BUSY) break;
        nanosleep(&pause, NULL);
    }
    return src == SQLITE_OK ? KDART_OK : sql_err(st, src, "%s", what);
}

static int prepare(kdart__store *st, const char *sql, sqlite3_stmt **stmt, const char *what) {
    int src = sqlite3_prepare_v2(st->db, sql, -1, stmt, NULL);
    if (src == SQLITE_OK) return KDART_OK;
    *stmt = NULL;
    return sql_err(st, src, "%s", what);
}

/* Runs a statement that yields one integer (or none: *v = 0). */
static int query_int64(kdart__store *st, const char *sql, int64_t *v, const char *what) {
    sqlite3_stmt *stmt;
    int rc = prepare(st, sql, &stmt, what);
    if (rc) return rc;
    *v = 0;
    int src = sqlite3_step(stmt);
    if (src == SQLITE_ROW) {
        *v = sqlite3_column_int64(stmt, 0);
        src = SQLITE_DONE;
    }
    rc = src == SQLITE_DONE ? KDART_OK : sql_err(st, src, "%s", what);
    sqlite3_finalize(stmt);
    return rc;
}

/* Leaves a transaction that failed half way; its own failure changes
 * nothing (SQLite rolls back on close at the latest). */
static void rollback(kdart__store *st) {
    if (!sqlite3_get_autocommit(st->db)) sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
}

/* Why a row's blob cannot be trusted, or NULL when it can. */
static const char *blob_problem(const void *blob, int n, int64_t size, const char *sha) {
    char hex[65];
    if (!blob || n <= 0) return "missing cubin";
    if ((int64_t)n != size) return "size mismatch";
    if (!sha) return "missing checksum";
    kdart__sha256_hex(blob, (size_t)n, hex);
    return strcmp(hex, sha) ? "checksum mismatch" : NULL;
}

/* The digest a failed-compile row carries in cubin_sha256: it has no blob,
 * and a flipped `failed` flag must not turn a good entry into a recorded
 * failure (or the reverse) unnoticed. */
static void failed_digest(const char *key, char out[65]) {
    char text[80];
    int n = snprintf(text, sizeof text, "failed:%s", key ? key : "");
    kdart__sha256_hex(text, (size_t)n, out);
}

/* What is wrong with a row's payload (columns given by index), or NULL. */
static const char *row_problem(sqlite3_stmt *s, const char *key, int c_failed, int c_blob, int c_size, int c_sha) {
    if (sqlite3_column_type(s, c_failed) != SQLITE_INTEGER) return "damaged failed flag";
    sqlite3_int64 failed = sqlite3_column_int64(s, c_failed);
    const char *sha = (const char *)sqlite3_column_text(s, c_sha);
    if (failed == 1) {
        char want[65];
        failed_digest(key, want);
        if (sqlite3_column_bytes(s, c_blob) != 0 || !sha || strcmp(sha, want) != 0) return "damaged failure record";
        return NULL;
    }
    if (failed != 0) return "damaged failed flag";
    return blob_problem(sqlite3_column_blob(s, c_blob), sqlite3_column_bytes(s, c_blob),
                        sqlite3_column_int64(s, c_size), sha);
}

/* --------------------------------------------------------- file system */

static int path_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Checks the 100-byte header before SQLite sees the file, because SQLite
 * itself treats a short or truncated file as smaller, not broken (a 50-byte
 * file of garbage reads as an empty database and would be overwritten; a
 * database cut in half reads until the first missing page).  Returns 1 and
 * a reason when the file looks damaged; 0 when it is fine or absent.
 * This reads without SQLite's locks, so a verdict of damage is only final
 * when it holds twice (header_damaged_stable). */
static int header_damaged_once(const char *path, char *why, size_t n) {
    static const char magic[16] = "SQLite format 3";
    unsigned char h[100];
    struct stat sb;
    char side[PATH_BUF + 16];
    /* With a -wal or -journal beside it the main file may legitimately be
     * behind its header (a checkpoint or commit in progress), so only a
     * lone file is judged by size.  Looked at first: a writer that
     * finishes while we read removes its -wal after the file is whole. */
    int lone = 1;
    snprintf(side, sizeof side, "%s-wal", path);
    lone &= !path_exists(side);
    snprintf(side, sizeof side, "%s-journal", path);
    lone &= !path_exists(side);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0; /* absent, or SQLite will say why */
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size == 0) {
        close(fd);
        return 0;
    }
    ssize_t got = pread(fd, h, sizeof h, 0);
    close(fd);
    if (got < 0) return 0;
    size_t cmp = (size_t)got < sizeof magic ? (size_t)got : sizeof magic;
    if (memcmp(h, magic, cmp) != 0) {
        snprintf(why, n, "not an SQLite database");
        return 1;
    }
    if (got < (ssize_t)sizeof h) {
        snprintf(why, n, "truncated header (%lld bytes)", (long long)sb.st_size);
        return 1;
    }
    uint32_t page = (uint32_t)h[16] << 8 | h[17];
    if (page == 1) page = 65536;
    if (page < 512 || (page & (page - 1))) {
        snprintf(why, n, "bad page size %u in the header", page);
        return 1;
    }
    /* The in-header page count is valid when the change counter matches
     * version-valid-for. */
    uint32_t pages = be32(h + 28);
    if (lone && pages && be32(h + 24) == be32(h + 92) && (int64_t)pages * page > (int64_t)sb.st_size) {
        snprintf(why, n, "truncated (header says %lld bytes, file has %lld)", (long long)pages * page,
                 (long long)sb.st_size);
        return 1;
    }
    return 0;
}

/* Damage is declared only if seen again after a pause: a process that is
 * creating or checkpointing the file can show a half-written state for a
 * moment, and moving its healthy file aside would lose its work. */
static int header_damaged(const char *path, char *why, size_t n) {
    if (!header_damaged_once(path, why, n)) return 0;
    struct timespec pause = {0, 100 * 1000 * 1000};
    nanosleep(&pause, NULL);
    return header_damaged_once(path, why, n);
}

/* mkdir -p of path's directory (0755); writes the directory into dir. */
static int make_parent_dirs(kdart__store *st, char *dir, size_t n) {
    const char *slash = strrchr(st->path, '/');
    if (!slash) {
        snprintf(dir, n, ".");
        return KDART_OK;
    }
    size_t len = (size_t)(slash - st->path);
    if (len == 0) {
        snprintf(dir, n, "/");
        return KDART_OK;
    }
    if (len >= n) return set_err(st, KDART_EIO, "cache path too long: %s", st->path);
    memcpy(dir, st->path, len);
    dir[len] = 0;
    /* Each prefix in turn; the last round (i == len) is the directory. */
    for (size_t i = 1; i <= len; i++) {
        if (dir[i] != '/' && dir[i] != 0) continue;
        char c = dir[i];
        dir[i] = 0;
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
            int e = errno;
            int rc = set_err(st, KDART_EIO, "cannot create cache directory %s: %s", dir, strerror(e));
            dir[i] = c;
            return rc;
        }
        struct stat sb;
        if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            int rc = set_err(st, KDART_EIO, "cannot create cache directory: %s exists and is not a directory",
                             dir);
            dir[i] = c;
            return rc;
        }
        dir[i] = c;
    }
    return KDART_OK;
}

/* Renames a damaged file (and its companions) aside, never deleting it:
 * it may be the only copy of hours of compiles, or evidence of a bug. */
static int move_aside(kdart__store *st, const char *why) {
    static const char *const sides[] = {"-wal", "-shm", "-journal"};
    char aside[PATH_BUF + 64], from[PATH_BUF + 16], to[PATH_BUF + 96];
    int w = snprintf(aside, sizeof aside, "%s.corrupt-%lld-%ld", st->path, (long long)kdart__unix_time(),
                     (long)getpid());
    if (w < 0 || (size_t)w >= sizeof aside)
        return set_err(st, KDART_EIO, "cache %s is damaged (%s) and its path is too long to move it aside",
                       st->path, why);
    if (rename(st->path, aside) != 0) {
        int e = errno;
        return set_err(st, KDART_EIO, "cache %s is damaged (%s) and cannot be moved aside: %s", st->path, why,
                       strerror(e));
    }
    for (size_t i = 0; i < sizeof sides / sizeof *sides; i++) {
        snprintf(from, sizeof from, "%s%s", st->path, sides[i]);
        snprintf(to, sizeof to, "%s%s", aside, sides[i]);
        (void)rename(from, to); /* usually absent; a leftover only costs space */
    }
    set_err(st, KDART_OK, "cache was damaged (%s); moved aside to %s and started a fresh cache", why, aside);
    return KDART_OK;
}

/* ------------------------------------------------------------- opening */

static int db_connect(kdart__store *st, const char *name, int flags) {
    int src = sqlite3_open_v2(name, &st->db, flags, NULL);
    if (src != SQLITE_OK) {
        int rc = sql_err(st, src, "opening %s", st->path);
        sqlite3_close(st->db);
        st->db = NULL;
        return rc == KDART_ECACHE ? KDART_EIO : rc;
    }
    sqlite3_extended_result_codes(st->db, 1);
    sqlite3_busy_timeout(st->db, BUSY_TIMEOUT_MS);
    st->counters_ready = 0; /* a new file (or a healed one) may lack it */
    return KDART_OK;
}

static void disconnect(kdart__store *st) {
    sqlite3_close_v2(st->db);
    st->db = NULL;
}

/* Brings a writable database to our schema in one transaction.  The
 * version is read again under the write lock: another process may have
 * migrated it while we waited. */
static int migrate(kdart__store *st) {
    int64_t v;
    int rc = sql_exec(st, "BEGIN IMMEDIATE", "starting the schema migration");
    if (rc) return rc;
    if ((rc = query_int64(st, "PRAGMA user_version", &v, "reading the schema version"))) goto fail;
    for (; v >= 0 && v < KDART__STORE_SCHEMA; v++)
        if ((rc = sql_exec(st, migrations[v], "migrating the cache schema"))) goto fail;
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", KDART__STORE_SCHEMA);
    if ((rc = sql_exec(st, sql, "setting the schema version"))) goto fail;
    if ((rc = sql_exec(st, "COMMIT", "committing the schema migration"))) goto fail;
    return KDART_OK;
fail:
    rollback(st);
    return rc;
}

/* Everything after sqlite3_open: read the schema (where a damaged file
 * shows), set the journal, migrate, and check that the tables have the
 * columns we read, which is what "compatible" means for a newer schema. */
static int setup(kdart__store *st) {
    int64_t n, v;
    int rc = query_int64(st, "SELECT count(*) FROM sqlite_master", &n, "reading the cache schema");
    if (rc) return rc;
    if ((rc = query_int64(st, "PRAGMA user_version", &v, "reading the schema version"))) return rc;
    if (!st->ro_open) {
        if (sqlite3_db_readonly(st->db, "main") == 1)
            return set_err(st, KDART_EIO, "cache file %s is read-only", st->path);
        /* Our migrations create tables and set the version in one
         * transaction, so tables without a version are someone else's. */
        if (v <= 0 && n > 0)
            return set_err(st, KDART_ECACHE, "%s is an SQLite database but not a kdart cache; left alone",
                           st->path);
        if (v < KDART__STORE_SCHEMA) {
            /* auto_vacuum can only be chosen before the first table exists. */
            if (n == 0 && (rc = sql_exec_retry(st, "PRAGMA auto_vacuum = INCREMENTAL", "setting auto_vacuum")))
                return rc;
            if ((rc = sql_exec_retry(st, "PRAGMA journal_mode = WAL", "switching the cache to WAL"))) return rc;
            if ((rc = migrate(st))) return rc;
        }
        if ((rc = sql_exec_retry(st, "PRAGMA synchronous = NORMAL", "setting synchronous"))) return rc;
    }
    if (v > KDART__STORE_SCHEMA) {
        st->newer = 1;
        set_err(st, KDART_OK,
                "cache schema version %lld is newer than this kdart's (%d); using it read-only",
                (long long)v, KDART__STORE_SCHEMA);
    }
    sqlite3_stmt *stmt;
    char warn[sizeof st->err];
    memcpy(warn, st->err, sizeof warn);
    rc = prepare(st, "SELECT " COLS " FROM entries LIMIT 0", &stmt, "checking the entries table");
    if (!rc) {
        sqlite3_finalize(stmt);
        rc = prepare(st, "SELECT " COLS ", reason, quarantined_at FROM quarantine LIMIT 0", &stmt,
                     "checking the quarantine table");
        sqlite3_finalize(stmt);
    }
    if (rc && !is_damage(st->last_src)) {
        char msg[sizeof st->err];
        memcpy(msg, st->err, sizeof msg);
        return set_err(st, KDART_ECACHE, "%s is not a kdart cache of a compatible schema (version %lld): %s",
                       st->path, (long long)v, msg);
    }
    if (!rc) memcpy(st->err, warn, sizeof warn);
    return rc;
}

/* Percent-encodes path into a file: URI with immutable=1 (allocated). */
static char *immutable_uri(const char *path) {
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(path);
    char *u = kdart__malloc(3 * n + 32);
    if (!u) return NULL;
    char *p = u + sprintf(u, "file:");
    for (const unsigned char *s = (const unsigned char *)path; *s; s++) {
        if ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '/' ||
            *s == '-' || *s == '_' || *s == '.' || *s == '~') {
            *p++ = (char)*s;
        } else {
            *p++ = '%';
            *p++ = hex[*s >> 4];
            *p++ = hex[*s & 15];
        }
    }
    strcpy(p, "?immutable=1");
    return u;
}

static int open_readonly(kdart__store *st) {
    struct stat sb;
    char why[256];
    if (stat(st->path, &sb) != 0) {
        int e = errno;
        return set_err(st, e == ENOENT ? KDART_ENOENT : KDART_EIO, "cannot open read-only cache %s: %s", st->path,
                       strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) return set_err(st, KDART_EIO, "read-only cache %s is not a regular file", st->path);
    if (header_damaged(st->path, why, sizeof why))
        return set_err(st, KDART_ECORRUPT, "read-only cache %s is damaged (%s); left as it is", st->path, why);
    int rc = db_connect(st, st->path, SQLITE_OPEN_READONLY);
    if (rc) return rc;
    rc = setup(st);
    int prim = st->last_src & 0xff;
    if (rc && (prim == SQLITE_CANTOPEN || prim == SQLITE_READONLY || prim == SQLITE_IOERR)) {
        /* A WAL database in a read-only image cannot create its -shm, nor
         * grow it on a full disk (IOERR); a file nobody can write is read
         * without locks. */
        disconnect(st);
        char *uri = immutable_uri(st->path);
        if (!uri) return set_err(st, KDART_ENOMEM, "opening %s: out of memory", st->path);
        clear_err(st);
        rc = db_connect(st, uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
        kdart__free(uri);
        if (rc) return rc;
        rc = setup(st);
    }
    if (rc && is_damage(st->last_src)) {
        char msg[sizeof st->err];
        memcpy(msg, st->err, sizeof msg);
        return set_err(st, KDART_ECORRUPT, "read-only cache %s is damaged; left as it is (%s)", st->path, msg);
    }
    return rc;
}

static int open_writable(kdart__store *st) {
    char dir[PATH_BUF], why[sizeof st->err];
    struct stat sb;
    int rc = make_parent_dirs(st, dir, sizeof dir);
    if (rc) return rc;
    if (access(dir, W_OK | X_OK) != 0) {
        int e = errno;
        return set_err(st, KDART_EIO, "cache directory %s is not writable: %s", dir, strerror(e));
    }
    if (stat(st->path, &sb) == 0) {
        if (!S_ISREG(sb.st_mode)) return set_err(st, KDART_EIO, "cache path %s is not a regular file", st->path);
        if (access(st->path, R_OK | W_OK) != 0) {
            int e = errno;
            return set_err(st, KDART_EIO, "cache file %s is not writable: %s", st->path, strerror(e));
        }
    } else if (errno != ENOENT) {
        int e = errno;
        return set_err(st, KDART_EIO, "cannot reach cache file %s: %s", st->path, strerror(e));
    }
    /* Two rounds at most: the file as found, then a fresh one. */
    for (int round = 0; round < 2; round++) {
        if (!header_damaged(st->path, why, sizeof why)) {
            if ((rc = db_connect(st, st->path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE))) return rc;
            char note[sizeof st->err];
            memcpy(note, st->err, sizeof note); /* a move-aside note of round 0 */
            rc = setup(st);
            if (!rc) {
                if (!st->err[0]) memcpy(st->err, note, sizeof note);
                return KDART_OK;
            }
            if (!is_damage(st->last_src)) return rc;
            memcpy(why, st->err, sizeof why);
            disconnect(st);
        }
        if (round > 0)
            return set_err(st, KDART_ECORRUPT, "cache %s is still unreadable after starting afresh: %s", st->path,
                           why);
        if ((rc = move_aside(st, why))) return rc;
    }
    return KDART_ECORRUPT; /* not reached */
}

/* A writable open that failed for want of writing (a read-only directory,
 * file or mount; a full disk) still leaves a valid cache worth reading: a
 * prebuilt cache shipped read-only in an image is the common case.  The
 * file is then opened read-only (open_readonly falls back to immutable=1
 * when the -shm cannot be made) and the store behaves as one opened with
 * readonly=1; the note saying so stays in errmsg for the runtime's one
 * warning.  No file, or one that does not open read-only either: the
 * first failure stands. */
static int open_fallback_readonly(kdart__store *st) {
    char first[sizeof st->err];
    memcpy(first, st->err, sizeof first);
    if (st->db) disconnect(st);
    if (!path_exists(st->path)) return KDART_EIO;
    clear_err(st);
    st->ro_open = 1;
    if (open_readonly(st) != KDART_OK) {
        if (st->db) disconnect(st);
        st->ro_open = 0;
        memcpy(st->err, first, sizeof first);
        return KDART_EIO;
    }
    set_err(st, KDART_OK, "cannot write the cache (%s); reading it read-only, misses are compiled in memory", first);
    return KDART_OK;
}

/* An earlier operation met damage inside the file (flag_damage): verify
 * now, which salvages what it can into a fresh file, so that the damage
 * costs one failed operation and not every later one.  The outcome stays
 * in errmsg, the note of a successful open. */
static int heal_if_flagged(kdart__store *st) {
    char flag[PATH_BUF + 16], note[sizeof st->err];
    damage_flag_path(st, flag, sizeof flag);
    if (!path_exists(flag)) return KDART_OK;
    memcpy(note, st->err, sizeof note);
    int64_t c, d;
    int rc = kdart__store_verify(st, &c, &d);
    if (rc == KDART_OK) unlink(flag); /* healthy after all (or healed by another process) */
    char what[sizeof st->err];
    memcpy(what, st->err, sizeof what);
    snprintf(st->err, sizeof st->err, "%.300s%sdamage seen earlier; verify: %.680s", note, note[0] ? "; " : "",
             what[0] ? what : "no damage found");
    return KDART_OK;
}

int kdart__store_open(kdart__store **out, const char *path, int readonly, int64_t max_bytes, char *err,
                      size_t errlen) {
    kdart__store *st;
    int rc;
    if (err && errlen) err[0] = 0;
    if (!out || !path || !path[0]) {
        if (err && errlen) snprintf(err, errlen, "store_open: out and path must be given");
        if (out) *out = NULL;
        return KDART_EINVAL;
    }
    *out = NULL;
    int memory = strcmp(path, ":memory:") == 0;
    if (memory && readonly) {
        if (err && errlen) snprintf(err, errlen, "an in-memory cache cannot be opened read-only");
        return KDART_EINVAL;
    }
    if (strlen(path) >= PATH_BUF) {
        if (err && errlen) snprintf(err, errlen, "cache path too long (%zu bytes)", strlen(path));
        return KDART_EIO;
    }
    st = kdart__calloc(1, sizeof *st);
    if (!st) {
        rc = KDART_ENOMEM;
        if (err && errlen) snprintf(err, errlen, "opening cache %s: out of memory", path);
        goto fail_alloc;
    }
    st->path = kdart__strdup(path);
    if (!st->path) {
        rc = set_err(st, KDART_ENOMEM, "opening cache %s: out of memory", path);
        goto fail_path;
    }
    st->ro_open = readonly != 0;
    st->max_bytes = max_bytes;
    if (memory) {
        if ((rc = db_connect(st, ":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE))) goto fail_db;
        rc = setup(st);
    } else {
        rc = readonly ? open_readonly(st) : open_writable(st);
        if (rc == KDART_EIO && !readonly) rc = open_fallback_readonly(st);
    }
    if (rc) goto fail_db;
    if (!memory && writable(st)) heal_if_flagged(st);
    if (err && errlen) snprintf(err, errlen, "%s", st->err);
    *out = st;
    return KDART_OK;

fail_db:
    if (st->db) disconnect(st);
fail_path:
    if (err && errlen) snprintf(err, errlen, "%s", st->err);
    kdart__free(st->path);
    kdart__free(st);
fail_alloc:
    return rc;
}

void kdart__store_close(kdart__store *st) {
    if (!st) return;
    if (st->db) sqlite3_close_v2(st->db);
    kdart__free(st->path);
    kdart__free(st);
}

int kdart__store_readonly(const kdart__store *st) { return st ? !writable(st) : 1; }
const char *kdart__store_path(const kdart__store *st) { return st && st->path ? st->path : ""; }
const char *kdart__store_errmsg(const kdart__store *st) { return st ? st->err : ""; }

void kdart__row_release(kdart__row *row) {
    if (!row) return;
    kdart__free(row->kernel);
    kdart__free(row->spec);
    kdart__free(row->arch);
    kdart__free(row->manifest);
    kdart__free(row->report);
    kdart__free(row->log);
    kdart__free(row->lowered);
    kdart__free(row->cubin);
    memset(row, 0, sizeof *row);
}

/* ---------------------------------------------------------- quarantine */

enum { Q_MOVED, Q_GOOD, Q_GONE };

/* Moves the row at rowid (which must still hold key) to quarantine if,
 * under the write lock, it is still damaged.  *state says what was found:
 * another writer may have replaced or removed the row since we read it.
 * Rows are addressed by rowid, not key: a damaged key index could point a
 * key at another entry, and that entry must not be moved for it. */
static int quarantine_row(kdart__store *st, int64_t rowid, const char *key, int *state) {
    sqlite3_stmt *sel = NULL, *ins = NULL, *del = NULL;
    int rc = sql_exec(st, "BEGIN IMMEDIATE", "starting the quarantine");
    if (rc) return rc;
    if ((rc = prepare(st, "SELECT key, failed, cubin, cubin_size, cubin_sha256 FROM entries WHERE rowid = ?1",
                      &sel, "re-reading a damaged entry")))
        goto fail;
    sqlite3_bind_int64(sel, 1, rowid);
    int src = sqlite3_step(sel);
    if (src == SQLITE_DONE) {
        *state = Q_GONE;
    } else if (src == SQLITE_ROW) {
        const char *k = (const char *)sqlite3_column_text(sel, 0);
        const void *b = sqlite3_column_blob(sel, 2);
        int n = sqlite3_column_bytes(sel, 2);
        const char *why = NULL;
        (void)b;
        (void)n;
        if (!k || strcmp(k, key)) *state = Q_GONE;
        else why = row_problem(sel, key, 1, 2, 3, 4);
        if (k && !strcmp(k, key)) *state = why ? Q_MOVED : Q_GOOD;
        if (why) {
            char reason[64];
            snprintf(reason, sizeof reason, "%s", why);
            sqlite3_reset(sel);
            if ((rc = prepare(st,
                              "INSERT INTO quarantine (" COLS ", reason, quarantined_at) SELECT " COLS
                              ", ?2, ?3 FROM entries WHERE rowid = ?1",
                              &ins, "quarantining a damaged entry")))
                goto fail;
            sqlite3_bind_int64(ins, 1, rowid);
            sqlite3_bind_text(ins, 2, reason, -1, SQLITE_STATIC);
            sqlite3_bind_int64(ins, 3, kdart__unix_time());
            if ((src = sqlite3_step(ins)) != SQLITE_DONE) {
                rc = sql_err(st, src, "quarantining entry %.16s", key);
                goto fail;
            }
            if ((rc = prepare(st, "DELETE FROM entries WHERE rowid = ?1", &del, "removing a damaged entry")))
                goto fail;
            sqlite3_bind_int64(del, 1, rowid);
            if ((src = sqlite3_step(del)) != SQLITE_DONE) {
                rc = sql_err(st, src, "removing damaged entry %.16s", key);
                goto fail;
            }
        }
    } else {
        rc = sql_err(st, src, "re-reading damaged entry %.16s", key);
        goto fail;
    }
    sqlite3_finalize(sel);
    sqlite3_finalize(ins);
    sqlite3_finalize(del);
    sel = ins = del = NULL;
    if ((rc = sql_exec(st, "COMMIT", "committing the quarantine"))) goto fail;
    return KDART_OK;
fail:
    sqlite3_finalize(sel);
    sqlite3_finalize(ins);
    sqlite3_finalize(del);
    rollback(st);
    return rc;
}

/* ---------------------------------------------------------------- get */

/* Copies a text column; NULL stays NULL.  0 or KDART_ENOMEM. */
static int dup_col(sqlite3_stmt *stmt, int i, char **out) {
    *out = NULL;
    if (sqlite3_column_type(stmt, i) == SQLITE_NULL) return KDART_OK;
    const char *s = (const char *)sqlite3_column_text(stmt, i);
    if (!s) return KDART_ENOMEM; /* SQLite's own conversion ran out */
    *out = kdart__strndup(s, (size_t)sqlite3_column_bytes(stmt, i));
    return *out ? KDART_OK : KDART_ENOMEM;
}

/* Copies a checked row (columns in COLS order) into *row: KDART_OK, or
 * KDART_ENOMEM with whatever was copied left for kdart__row_release. */
static int fill_row(sqlite3_stmt *stmt, const char *key, kdart__row *row) {
    row->failed = sqlite3_column_int(stmt, 4) != 0;
    if (dup_col(stmt, 1, &row->kernel) || dup_col(stmt, 2, &row->spec) || dup_col(stmt, 3, &row->arch) ||
        dup_col(stmt, 5, &row->manifest) || dup_col(stmt, 6, &row->report) || dup_col(stmt, 7, &row->log) ||
        dup_col(stmt, 8, &row->lowered))
        return KDART_ENOMEM;
    if (!row->failed) {
        int n = sqlite3_column_bytes(stmt, 9);
        if (!(row->cubin = kdart__malloc((size_t)n))) return KDART_ENOMEM;
        memcpy(row->cubin, sqlite3_column_blob(stmt, 9), (size_t)n);
        row->cubin_size = (size_t)n;
        const char *sha = (const char *)sqlite3_column_text(stmt, 11);
        snprintf(row->cubin_sha256, sizeof row->cubin_sha256, "%s", sha ? sha : "");
    }
    snprintf(row->key, sizeof row->key, "%s", key);
    row->compile_ms = sqlite3_column_double(stmt, 12);
    row->created = sqlite3_column_int64(stmt, 13);
    row->last_used = sqlite3_column_int64(stmt, 14);
    row->hits = sqlite3_column_int64(stmt, 15);
    return KDART_OK;
}

enum { ROW_FOUND, ROW_MISS, ROW_BADBLOB, ROW_WRONGROW };

/* One read of the row.  *what: ROW_FOUND (row filled), ROW_MISS, ROW_BADBLOB (the
 * blob failed its check; *bad says why, *rowid where), or ROW_WRONGROW (the
 * key index led to a row with another key: the index is damaged, and the
 * blob, though intact, is not this key's). */
static int read_row(kdart__store *st, const char *key, kdart__row *row, int *what, const char **bad,
                    int64_t *rowid) {
    sqlite3_stmt *stmt;
    *bad = NULL;
    *what = ROW_MISS;
    /* The index finds the rowid; the row is then read from the table by
     * rowid, so that its key comes from the table (SQLite would otherwise
     * take it from the index) and a damaged index shows as a mismatch. */
    int rc = prepare(st,
                     "SELECT " COLS ", rowid FROM entries WHERE rowid = "
                     "(SELECT rowid FROM entries WHERE key = ?1)",
                     &stmt, "reading the cache");
    if (rc) return rc;
    sqlite3_bind_text(stmt, 1, key, -1, SQLITE_STATIC);
    int src = sqlite3_step(stmt);
    if (src == SQLITE_DONE) {
        rc = KDART_ENOENT; /* a plain miss: errmsg stays empty */
        goto out;
    }
    if (src != SQLITE_ROW) {
        rc = sql_err(st, src, "reading entry %.16s", key);
        goto out;
    }
    *rowid = sqlite3_column_int64(stmt, 16);
    const char *k = (const char *)sqlite3_column_text(stmt, 0);
    if (!k || strcmp(k, key)) {
        *what = ROW_WRONGROW;
        rc = KDART_ECORRUPT;
        goto out;
    }
    row->failed = sqlite3_column_int(stmt, 4) != 0;
    const void *blob = sqlite3_column_blob(stmt, 9);
    int n = sqlite3_column_bytes(stmt, 9);
    if (!blob && n > 0) {
        rc = sql_err(st, SQLITE_NOMEM, "reading entry %.16s", key);
        goto out;
    }
    if ((*bad = row_problem(stmt, key, 4, 9, 10, 11)) != NULL) {
        *what = ROW_BADBLOB;
        rc = KDART_ENOENT;
        goto out;
    }
    if (fill_row(stmt, key, row)) {
        rc = set_err(st, KDART_ENOMEM, "reading entry %.16s: out of memory", key);
        goto out;
    }
    *what = ROW_FOUND;
    rc = KDART_OK;
out:
    sqlite3_finalize(stmt);
    if (rc) kdart__row_release(row);
    return rc;
}

int kdart__store_get(kdart__store *st, const char *key, kdart__row *row) {
    if (!st) return KDART_EINVAL;
    clear_err(st);
    if (!row) return set_err(st, KDART_EINVAL, "get: row is NULL");
    memset(row, 0, sizeof *row);
    if (!key || !is_full_key(key)) return set_err(st, KDART_EINVAL, "get: '%s' is not a full key", key ? key : "");
    int reindexed = 0;
    /* A few rounds at most: after rebuilding a damaged index, or when the
     * quarantine finds the row repaired by another writer, read again. */
    for (int round = 0; round < 3; round++) {
        const char *bad;
        int what, state;
        int64_t rowid = 0;
        int rc = read_row(st, key, row, &what, &bad, &rowid);
        if (what == ROW_FOUND || what == ROW_MISS) return rc;
        if (what == ROW_WRONGROW) {
            if (!writable(st) || reindexed)
                return set_err(st, KDART_ECORRUPT,
                               "the cache's key index is damaged (looking up %.16s found another entry)%s", key,
                               writable(st) ? " even after REINDEX" : "; read-only cache, left as it is");
            /* The table is the truth and the index can be rebuilt from it. */
            if ((rc = sql_exec(st, "REINDEX entries", "rebuilding the damaged key index"))) return rc;
            reindexed = 1;
            continue;
        }
        if (!writable(st))
            return set_err(st, KDART_ENOENT, "entry %.16s is damaged (%s); read-only cache, left in place", key,
                           bad);
        if ((rc = quarantine_row(st, rowid, key, &state))) {
            char msg[sizeof st->err];
            memcpy(msg, st->err, sizeof msg);
            return set_err(st, KDART_ENOENT, "entry %.16s is damaged (%s); quarantine failed: %s", key, bad, msg);
        }
        if (state == Q_MOVED)
            return set_err(st, KDART_ENOENT, "entry %.16s: %s, quarantined%s", key, bad,
                           reindexed ? " (and the key index rebuilt)" : "");
        if (state == Q_GONE) return KDART_ENOENT;
    }
    return set_err(st, KDART_ENOENT, "entry %.16s keeps changing while being read", key);
}

/* ---------------------------------------------------------------- put */

/* Deletes rows by oldest last_used (failed rows too) until the cubins
 * hold at most max_bytes, sparing keep (may be NULL).  One statement:
 * a row goes when the bytes of the rows older than it still leave the
 * store over budget. */
static int evict(kdart__store *st, int64_t max_bytes, const char *keep, int64_t *evicted, int64_t *freed) {
    int64_t before, after;
    sqlite3_stmt *del;
    *evicted = *freed = 0;
    int rc = query_int64(st, "SELECT COALESCE(SUM(cubin_size), 0) FROM entries", &before, "sizing the cache");
    if (rc || before <= max_bytes) return rc;
    if ((rc = prepare(st,
                      "DELETE FROM entries WHERE key IN (SELECT key FROM (SELECT key, cubin_size, "
                      "SUM(cubin_size) OVER (ORDER BY last_used, created, key ROWS UNBOUNDED PRECEDING) AS cum "
                      "FROM entries WHERE key IS NOT ?1) WHERE cum - cubin_size < ?2)",
                      &del, "evicting old entries")))
        return rc;
    if (keep) sqlite3_bind_text(del, 1, keep, -1, SQLITE_STATIC);
    sqlite3_bind_int64(del, 2, before - max_bytes);
    int src = sqlite3_step(del);
    if (src != SQLITE_DONE) rc = sql_err(st, src, "evicting old entries");
    sqlite3_finalize(del);
    if (rc) return rc;
    *evicted = sqlite3_changes(st->db);
    if ((rc = query_int64(st, "SELECT COALESCE(SUM(cubin_size), 0) FROM entries", &after, "sizing the cache")))
        return rc;
    *freed = before - after;
    return KDART_OK;
}

int kdart__store_put(kdart__store *st, kdart__row *row, int replace) {
    static const char *const sql[2] = {
        "INSERT OR IGNORE INTO entries (" COLS ") VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16)",
        "INSERT OR REPLACE INTO entries (" COLS ") VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16)",
    };
    sqlite3_stmt *ins = NULL;
    if (!st) return KDART_EINVAL;
    clear_err(st);
    if (!row) return set_err(st, KDART_EINVAL, "put: row is NULL");
    if (!is_full_key(row->key)) return set_err(st, KDART_EINVAL, "put: key is not 64 lowercase hex digits");
    if (!row->kernel || !row->spec || !row->arch || !row->manifest)
        return set_err(st, KDART_EINVAL, "put: kernel, spec, arch and manifest are required");
    if (!row->failed && (!row->cubin || !row->cubin_size))
        return set_err(st, KDART_EINVAL, "put: an entry that did not fail needs a cubin");
    if (row->cubin_size > (size_t)INT32_MAX)
        return set_err(st, KDART_EINVAL, "put: cubin of %zu bytes is too large", row->cubin_size);
    if (!writable(st))
        return set_err(st, KDART_ECACHE, "cache %s is read-only%s", st->path,
                       st->newer ? " (its schema is newer than this kdart's)" : "");
    /* A failed compile keeps its log, never a blob: nothing could load it. */
    const unsigned char *blob = row->failed ? NULL : row->cubin;
    size_t size = row->failed ? 0 : row->cubin_size;
    if (blob) kdart__sha256_hex(blob, size, row->cubin_sha256);
    else failed_digest(row->key, row->cubin_sha256);
    int64_t now = kdart__unix_time();
    if (!row->created) row->created = now;
    if (!row->last_used) row->last_used = now;

    int rc = sql_exec(st, "BEGIN IMMEDIATE", "starting the publication");
    if (rc) return rc;
    if ((rc = prepare(st, sql[replace != 0], &ins, "publishing an entry"))) goto fail;
    sqlite3_bind_text(ins, 1, row->key, -1, SQLITE_STATIC);
    sqlite3_bind_text(ins, 2, row->kernel, -1, SQLITE_STATIC);
    sqlite3_bind_text(ins, 3, row->spec, -1, SQLITE_STATIC);
    sqlite3_bind_text(ins, 4, row->arch, -1, SQLITE_STATIC);
    sqlite3_bind_int(ins, 5, row->failed != 0);
    sqlite3_bind_text(ins, 6, row->manifest, -1, SQLITE_STATIC);
    sqlite3_bind_text(ins, 7, row->report, -1, SQLITE_STATIC); /* NULL binds NULL */
    sqlite3_bind_text(ins, 8, row->log, -1, SQLITE_STATIC);
    sqlite3_bind_text(ins, 9, row->lowered, -1, SQLITE_STATIC);
    if (blob) sqlite3_bind_blob64(ins, 10, blob, size, SQLITE_STATIC);
    sqlite3_bind_int64(ins, 11, (int64_t)size);
    sqlite3_bind_text(ins, 12, row->cubin_sha256, -1, SQLITE_STATIC);
    sqlite3_bind_double(ins, 13, row->compile_ms);
    sqlite3_bind_int64(ins, 14, row->created);
    sqlite3_bind_int64(ins, 15, row->last_used);
    sqlite3_bind_int64(ins, 16, row->hits);
    int src = sqlite3_step(ins);
    if (src != SQLITE_DONE) {
        rc = sql_err(st, src, "publishing entry %.16s", row->key);
        goto fail;
    }
    sqlite3_finalize(ins);
    ins = NULL;
    if (st->max_bytes > 0) {
        int64_t e, f;
        if ((rc = evict(st, st->max_bytes, row->key, &e, &f))) goto fail;
    }
    if ((rc = sql_exec(st, "COMMIT", "committing the publication"))) goto fail;
    return KDART_OK;
fail:
    sqlite3_finalize(ins);
    rollback(st);
    return rc;
}

/* -------------------------------------------------------------- touch */

int kdart__store_touch(kdart__store *st, const char *key) {
    sqlite3_stmt *up;
    if (!st) return KDART_EINVAL;
    clear_err(st);
    if (!key) return set_err(st, KDART_EINVAL, "touch: key is NULL");
    if (!writable(st)) return KDART_OK; /* a read-only cache keeps no usage */
    int rc = prepare(st, "UPDATE entries SET last_used = ?2, hits = hits + 1 WHERE key = ?1", &up,
                     "recording a cache hit");
    if (rc) return rc;
    sqlite3_bind_text(up, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(up, 2, kdart__unix_time());
    int src = sqlite3_step(up);
    if (src != SQLITE_DONE) rc = sql_err(st, src, "recording a hit on %.16s", key);
    else if (sqlite3_changes(st->db) == 0) rc = set_err(st, KDART_ENOENT, "touch: no entry %.16s", key);
    sqlite3_finalize(up);
    return rc;
}

/* ------------------------------------------------------------ resolve */

int kdart__store_resolve(kdart__store *st, const char *prefix, char key[65]) {
    char lo[65], hi[66];
    sqlite3_stmt *sel;
    if (!st) return KDART_EINVAL;
    clear_err(st);
    if (key) key[0] = 0;
    if (!prefix || !key) return set_err(st, KDART_EINVAL, "resolve: prefix and key must be given");
    size_t n = 0;
    for (; prefix[n]; n++) {
        char c = prefix[n];
        if (c >= 'A' && c <= 'F') c = (char)(c - 'A' + 'a');
        if (n >= 64 || !is_hex_lower(c))
            return set_err(st, KDART_EINVAL, "'%.80s' is not a hexadecimal key prefix", prefix);
        lo[n] = c;
    }
    if (n == 0) return set_err(st, KDART_EINVAL, "empty key prefix");
    lo[n] = 0;
    /* Keys are lowercase hex, so every key with this prefix sorts in
     * [prefix, prefix "g"): a range on the primary key index. */
    memcpy(hi, lo, n);
    hi[n] = 'g';
    hi[n + 1] = 0;
    int rc = prepare(st, "SELECT key FROM entries WHERE key >= ?1 AND key < ?2 ORDER BY key LIMIT 2", &sel,
                     "resolving a key prefix");
    if (rc) return rc;
    sqlite3_bind_text(sel, 1, lo, -1, SQLITE_STATIC);
    sqlite3_bind_text(sel, 2, hi, -1, SQLITE_STATIC);
    int found = 0, src;
    while ((src = sqlite3_step(sel)) == SQLITE_ROW) {
        if (++found == 1) {
            const char *k = (const char *)sqlite3_column_text(sel, 0);
            snprintf(key, 65, "%s", k ? k : "");
        }
    }
    if (src != SQLITE_DONE) rc = sql_err(st, src, "resolving key prefix %s", lo);
    else if (found == 0) rc = KDART_ENOENT;
    else if (found > 1) rc = set_err(st, KDART_EAMBIGUOUS, "key prefix %s matches more than one entry", lo);
    if (rc) key[0] = 0;
    sqlite3_finalize(sel);
    return rc;
}

/* --------------------------------------------------------------- list */

int kdart__store_list(kdart__store *st, int with_manifest, int (*fn)(void *user, const kdart__row *row),
                      void *user) {
    sqlite3_stmt *sel;
    if (!st) return KDART_EINVAL;
    clear_err(st);
    if (!fn) return set_err(st, KDART_EINVAL, "list: callback is NULL");
    /* The row handed to fn points into SQLite's buffers: valid for the
     * call only, and nothing to allocate (or fail) per row. */
    int rc = prepare(st,
                     with_manifest ? "SELECT key, kernel, spec, arch, failed, report, lowered, cubin_size, "
                                     "cubin_sha256, compile_ms, created, last_used, hits, manifest FROM entries "
                                     "ORDER BY kernel, spec, arch, key"
                                   : "SELECT key, kernel, spec, arch, failed, report, lowered, cubin_size, "
                                     "cubin_sha256, compile_ms, created, last_used, hits FROM entries "
                                     "ORDER BY kernel, spec, arch, key",
                     &sel, "listing the cache");
    if (rc) return rc;
    int src;
    while ((src = sqlite3_step(sel)) == SQLITE_ROW) {
        kdart__row row;
        memset(&row, 0, sizeof row);
        const char *k = (const char *)sqlite3_column_text(sel, 0);
        snprintf(row.key, sizeof row.key, "%s", k ? k : "");
        row.kernel = (char *)sqlite3_column_text(sel, 1);
        row.spec = (char *)sqlite3_column_text(sel, 2);
        row.arch = (char *)sqlite3_column_text(sel, 3);
        row.failed = sqlite3_column_int(sel, 4) != 0;
        row.report = (char *)sqlite3_column_text(sel, 5);
        row.lowered = (char *)sqlite3_column_text(sel, 6);
        int64_t size = sqlite3_column_int64(sel, 7);
        row.cubin_size = size > 0 ? (size_t)size : 0;
        const char *sha = (const char *)sqlite3_column_text(sel, 8);
        snprintf(row.cubin_sha256, sizeof row.cubin_sha256, "%s", sha ? sha : "");
        row.compile_ms = sqlite3_column_double(sel, 9);
        row.created = sqlite3_column_int64(sel, 10);
        row.last_used = sqlite3_column_int64(sel, 11);
        row.hits = sqlite3_column_int64(sel, 12);
        if (with_manifest) row.manifest = (char *)sqlite3_column_text(sel, 13);
        if (fn(user, &row)) {
            src = SQLITE_DONE;
            break;
        }
    }
    if (src != SQLITE_DONE) rc = sql_err(st, src, "listing the cache");
    sqlite3_finalize(sel);
    return rc;
}

/* -------------------------------------------------------------- stats */

int kdart__store_getstats(kdart__store *st, kdart__store_stats *out) {
    sqlite3_stmt *sel;
    if (!st) return KDART_EINVAL;
    clear_err(st);
    if (!out) return set_err(st, KDART_EINVAL, "stats: out is NULL");
    memset(out, 0, sizeof *out);
    int rc = prepare(st,
                     "SELECT count(*), COALESCE(SUM(failed), 0), COALESCE(SUM(cubin_size), 0), "
                     "COALESCE(SUM(hits), 0), COALESCE(SUM(compile_ms), 0), "
                     "(SELECT count(*) FROM quarantine) FROM entries",
                     &sel, "reading cache statistics");
    if (rc) return rc;
    int src = sqlite3_step(sel);
    if (src == SQLITE_ROW) {
        out->entries = sqlite3_column_int64(sel, 0);
        out->failed = sqlite3_column_int64(sel, 1);
        out->bytes = sqlite3_column_int64(sel, 2);
        out->hits = sqlite3_column_int64(sel, 3);
        out->compile_ms_total = sqlite3_column_double(sel, 4);
        out->quarantined = sqlite3_column_int64(sel, 5);
    } else {
        rc = sql_err(st, src, "reading cache statistics");
    }
    sqlite3_finalize(sel);
    return rc;
}

/* ------------------------------------------------------------- verify */

/* Appends to st->err, "; " between parts. */
static void add_err(kdart__store *st, const char *fmt, ...) {
    size_t used = strlen(st->err);
    if (used + 3 >= sizeof st->err) return;
    if (used) {
        memcpy(st->err + used, "; ", 3);
        used += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->err + used, sizeof st->err - used, fmt, ap);
    va_end(ap);
}

/* PRAGMA integrity_check; *bad = 1 and the first lines added to errmsg
 * when it is not "ok". */
static int integrity(kdart__store *st, int *bad) {
    sqlite3_stmt *sel;
    int src;
    *bad = 0;
    int rc = prepare(st, "PRAGMA integrity_check(20)", &sel, "checking cache integrity");
    if (rc) return rc;
    for (int line = 0; (src = sqlite3_step(sel)) == SQLITE_ROW; line++) {
        const char *t = (const char *)sqlite3_column_text(sel, 0);
        if (t && !strcmp(t, "ok")) continue;
        if (!*bad) add_err(st, "integrity_check:");
        *bad = 1;
        if (line < 5) add_err(st, "%s", t ? t : "?");
    }
    if (src != SQLITE_DONE) {
        char keep[sizeof st->err];
        memcpy(keep, st->err, sizeof keep);
        rc = sql_err(st, src, "checking cache integrity");
        char msg[sizeof st->err];
        memcpy(msg, st->err, sizeof msg);
        memcpy(st->err, keep, sizeof keep);
        add_err(st, "%s", msg);
    }
    sqlite3_finalize(sel);
    return rc;
}

/* ------------------------------------------------------------ salvage */

typedef struct rowids {
    int64_t *v;
    size_t n, cap;
} rowids;

/* Adds the rowids one query yields until it ends or meets damage. */
static void collect_rowids(kdart__store *st, const char *sql, rowids *ids) {
    sqlite3_stmt *sel;
    if (sqlite3_prepare_v2(st->db, sql, -1, &sel, NULL) != SQLITE_OK) return;
    while (sqlite3_step(sel) == SQLITE_ROW) {
        if (ids->n == ids->cap) {
            size_t cap = ids->cap ? 2 * ids->cap : 256;
            int64_t *v = kdart__realloc(ids->v, cap * sizeof *v);
            if (!v) break;
            ids->v = v;
            ids->cap = cap;
        }
        ids->v[ids->n++] = sqlite3_column_int64(sel, 0);
    }
    sqlite3_finalize(sel);
}

static int cmp_rowid(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Copies every entry that can still be read and passes its checks into
 * the fresh store `to`.  A damaged page cuts a scan short, so rowids are
 * gathered along every path that reaches rows: the table from both ends
 * and each index (whose entries carry the rowid); each row is then read
 * on its own, so only the rows under the damaged page are lost. */
static int salvage_rows(kdart__store *st, kdart__store *to, int64_t *saved, int64_t *seen) {
    static const char *const paths[] = {
        "SELECT rowid FROM entries NOT INDEXED ORDER BY rowid",
        "SELECT rowid FROM entries NOT INDEXED ORDER BY rowid DESC",
        "SELECT rowid FROM entries INDEXED BY sqlite_autoindex_entries_1",
        "SELECT rowid FROM entries INDEXED BY entries_last_used",
        "SELECT rowid FROM entries INDEXED BY entries_kernel",
    };
    rowids ids = {0};
    sqlite3_stmt *sel = NULL;
    int rc = KDART_OK;
    *saved = *seen = 0;
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) collect_rowids(st, paths[i], &ids);
    if (ids.n) qsort(ids.v, ids.n, sizeof *ids.v, cmp_rowid);
    if (sqlite3_prepare_v2(st->db, "SELECT " COLS " FROM entries WHERE rowid = ?1", -1, &sel, NULL) != SQLITE_OK)
        ids.n = 0;
    for (size_t i = 0; i < ids.n && rc == KDART_OK; i++) {
        if (i && ids.v[i] == ids.v[i - 1]) continue;
        ++*seen;
        sqlite3_bind_int64(sel, 1, ids.v[i]);
        if (sqlite3_step(sel) == SQLITE_ROW) {
            const char *k = (const char *)sqlite3_column_text(sel, 0);
            char key[65];
            snprintf(key, sizeof key, "%s", k ? k : "");
            kdart__row row;
            memset(&row, 0, sizeof row);
            if (is_full_key(key) && !row_problem(sel, key, 4, 9, 10, 11)) {
                if (fill_row(sel, key, &row)) rc = KDART_ENOMEM;
                else if (kdart__store_put(to, &row, 0) == KDART_OK) ++*saved;
            }
            kdart__row_release(&row);
        }
        sqlite3_reset(sel);
    }
    sqlite3_finalize(sel);
    kdart__free(ids.v);
    return rc;
}

/* Replaces a file whose pages are damaged (what REINDEX cannot repair)
 * with a fresh one holding every entry that can still be read: the rows
 * go into <path>.salvage-<pid>, the damaged file is moved aside as open
 * does (never deleted), the fresh file takes its place and the store
 * reconnects to it.  Other processes still holding the old file keep
 * using it until they reopen; the aside copy keeps whatever they add.
 * Leaves what it did in errmsg (appended); returns a KDART status. */
static int salvage(kdart__store *st, const char *why) {
    char tmp[PATH_BUF + 64], msg[sizeof st->err], err[512];
    kdart__store *to = NULL;
    int64_t saved = 0, seen = 0;
    snprintf(tmp, sizeof tmp, "%s.salvage-%ld", st->path, (long)getpid());
    unlink(tmp);
    int rc = kdart__store_open(&to, tmp, 0, 0, err, sizeof err);
    if (rc) {
        add_err(st, "cannot salvage into %s: %s", tmp, err);
        return rc;
    }
    st->healing = 1;
    rc = salvage_rows(st, to, &saved, &seen);
    st->healing = 0;
    kdart__store_close(to);
    if (rc) {
        unlink(tmp);
        add_err(st, "salvage ran out of memory; cache left as it is");
        return rc;
    }
    memcpy(msg, st->err, sizeof msg);
    disconnect(st);
    if ((rc = move_aside(st, why)) == KDART_OK && rename(tmp, st->path) != 0) rc = KDART_EIO;
    char aside[sizeof st->err];
    memcpy(aside, st->err, sizeof aside);
    memcpy(st->err, msg, sizeof msg);
    if (rc) {
        unlink(tmp);
        add_err(st, "salvage failed: %s", aside);
    } else {
        char flag[PATH_BUF + 16];
        damage_flag_path(st, flag, sizeof flag);
        unlink(flag);
        add_err(st, "%lld of %lld entries salvaged into a fresh file (%s)", (long long)saved, (long long)seen,
                strstr(aside, "moved aside") ? strstr(aside, "moved aside") : aside);
    }
    /* Connected again either way: to the fresh file, or to the old one. */
    char note[sizeof st->err];
    memcpy(note, st->err, sizeof note);
    int rc2 = open_writable(st);
    memcpy(st->err, note, sizeof note);
    return rc ? rc : rc2;
}

int kdart__store_verify(kdart__store *st, int64_t *checked, int64_t *damaged) {
    sqlite3_stmt *sel = NULL;
    int64_t nchecked = 0, ndamaged = 0, last = 0;
    int db_bad = 0, rc, src;
    char key[65];
    if (checked) *checked = 0;
    if (damaged) *damaged = 0;
    if (!st) return KDART_EINVAL;
    clear_err(st);

    /* 1. SQLite's own view of the file.  Indexes can be rebuilt from the
     * table, so a writable store tries that once.  Damage that REINDEX
     * cannot repair, or that stops integrity_check itself, is in the
     * pages: the rows are checked as far as they can be read, then
     * salvaged into a fresh file (step 3). */
    int pages_bad = 0;
    if ((rc = integrity(st, &db_bad))) {
        if (!is_damage(st->last_src)) goto done;
        db_bad = pages_bad = 1;
    }
    if (db_bad && !pages_bad && writable(st)) {
        int still = 0;
        if (sqlite3_exec(st->db, "REINDEX", NULL, NULL, NULL) == SQLITE_OK && !integrity(st, &still) && !still)
            add_err(st, "indexes rebuilt, integrity_check now ok");
        else
            pages_bad = 1;
    }

    /* 2. Every blob against its digest, in rowid order and one row per
     * query: the table b-tree alone (a damaged index cannot hide a row),
     * and quarantining never runs under an open read of the table. */
    if ((rc = prepare(st,
                      "SELECT rowid, key, failed, cubin, cubin_size, cubin_sha256 FROM entries WHERE rowid > ?1 "
                      "ORDER BY rowid LIMIT 1",
                      &sel, "verifying entries")))
        goto done;
    for (;;) {
        sqlite3_bind_int64(sel, 1, last);
        src = sqlite3_step(sel);
        if (src == SQLITE_DONE) break;
        if (src != SQLITE_ROW) {
            char keep[sizeof st->err], msg[sizeof st->err];
            memcpy(keep, st->err, sizeof keep);
            rc = sql_err(st, src, "verifying entries after rowid %lld", (long long)last);
            memcpy(msg, st->err, sizeof msg);
            memcpy(st->err, keep, sizeof keep);
            add_err(st, "%s", msg);
            if (!is_damage(src)) goto done;
            db_bad = pages_bad = 1;
            break;
        }
        int64_t rowid = sqlite3_column_int64(sel, 0);
        const char *k = (const char *)sqlite3_column_text(sel, 1);
        snprintf(key, sizeof key, "%s", k ? k : "");
        const void *blob = sqlite3_column_blob(sel, 3);
        int n = sqlite3_column_bytes(sel, 3);
        (void)blob;
        (void)n;
        const char *why = row_problem(sel, key, 2, 3, 4, 5);
        char reason[64];
        snprintf(reason, sizeof reason, "%s", why ? why : "");
        sqlite3_reset(sel);
        nchecked++;
        if (rowid <= last) break; /* cannot advance: stop, never loop */
        last = rowid;
        if (!why) continue;
        ndamaged++;
        if (!writable(st)) {
            add_err(st, "entry %.16s: %s (read-only cache, left in place)", key, reason);
            continue;
        }
        int state = Q_MOVED;
        char keep[sizeof st->err];
        memcpy(keep, st->err, sizeof keep);
        if ((rc = quarantine_row(st, rowid, key, &state))) {
            char msg[sizeof st->err];
            memcpy(msg, st->err, sizeof msg);
            memcpy(st->err, keep, sizeof keep);
            add_err(st, "entry %.16s: %s, quarantine failed: %s", key, reason, msg);
            goto done;
        }
        if (state == Q_MOVED) add_err(st, "entry %.16s: %s, quarantined", key, reason);
        else ndamaged--; /* repaired or removed by another writer meanwhile */
    }
    rc = KDART_OK;

    /* 3. Damaged pages: what can be read goes into a fresh file. */
    if (pages_bad && writable(st)) {
        sqlite3_finalize(sel);
        sel = NULL;
        rc = salvage(st, "damaged pages found by verify");
    } else if (pages_bad) {
        add_err(st, "read-only cache, left as it is");
    }

done:
    sqlite3_finalize(sel);
    if (checked) *checked = nchecked;
    if (damaged) *damaged = ndamaged;
    if (rc == KDART_ECORRUPT || (!rc && (db_bad || ndamaged))) return KDART_ECORRUPT;
    return rc;
}

/* ----------------------------------------------------------------- gc */

int kdart__store_gc(kdart__store *st, int64_t max_bytes, int64_t *evicted, int64_t *freed) {
    int64_t e = 0, f = 0;
    if (evicted) *evicted = 0;
    if (freed) *freed = 0;
    if (!st) return KDART_EINVAL;
    clear_err(st);
    if (max_bytes < 0) return set_err(st, KDART_EINVAL, "gc: max_bytes must be >= 0");
    if (!writable(st)) return set_err(st, KDART_ECACHE, "cache %s is read-only", st->path);
    int rc = sql_exec(st, "BEGIN IMMEDIATE", "starting gc");
    if (rc) return rc;
    if ((rc = evict(st, max_bytes, NULL, &e, &f)) || (rc = sql_exec(st, "COMMIT", "committing gc"))) {
        rollback(st);
        return rc;
    }
    if (evicted) *evicted = e;
    if (freed) *freed = f;
    /* Give the freed pages back to the file system; failing to is only
     * a missed chance, the eviction itself is committed. */
    if (e) sqlite3_exec(st->db, "PRAGMA incremental_vacuum", NULL, NULL, NULL);
    return KDART_OK;
}

/* ------------------------------------------------------------- leases */

/* Leases.  A process about to compile key K takes the row leases[K]; other
 * processes that miss K find the row and wait for the entry instead of
 * compiling it too.  The row names its owner (pid, host name, boot id) and
 * carries an expiry that the owner pushes forward (heartbeat) while it
 * compiles.  Nothing else can make a lease block forever: a row whose
 * expiry has passed is free for the taking, and so is one whose owner ran
 * on this host in this boot and no longer exists (kill(pid, 0) == ESRCH),
 * which is how a compiler killed with SIGKILL stops blocking at once.  A
 * pid of another host, boot or pid namespace (containers share host name
 * and boot id) is never probed: such a holder is judged by its heartbeat
 * alone (dead once it is KDART__LEASE_STALE_MS old, or at its expiry).  Every take is one BEGIN IMMEDIATE transaction, so two
 * processes can never both see "free" and both take it.  No lock files. */

typedef struct lease_identity {
    int64_t pid;
    char host[256];
    char boot_id[96];
} lease_identity;

static pthread_once_t identity_once = PTHREAD_ONCE_INIT;
static lease_identity identity_real;
static pthread_mutex_t identity_lock = PTHREAD_MUTEX_INITIALIZER;
static lease_identity identity_pose; /* test seam; zero fields: the truth */

static void identity_init(void) {
    if (gethostname(identity_real.host, sizeof identity_real.host - 1) != 0) identity_real.host[0] = 0;
    identity_real.host[sizeof identity_real.host - 1] = 0;
    if (!identity_real.host[0]) snprintf(identity_real.host, sizeof identity_real.host, "localhost");
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, identity_real.boot_id, sizeof identity_real.boot_id - 1) : -1;
    if (fd >= 0) close(fd);
    identity_real.boot_id[n > 0 ? n : 0] = 0;
    char *nl = strchr(identity_real.boot_id, '\n');
    if (nl) *nl = 0;
    /* Without a boot id a pid cannot be trusted to mean the same process
     * (a reboot reuses pids): such leases are freed by expiry only. */
    if (!identity_real.boot_id[0]) snprintf(identity_real.boot_id, sizeof identity_real.boot_id, "unknown");
}

/* Containers share the host name and boot id but not pids: the pid
 * namespace (the inode of /proc/self/ns/pid) is part of the identity, kept
 * in the boot_id column as "<boot id>/pidns:<inode>" so that the schema,
 * and kdarts that predate it, are unchanged (theirs and ours never compare
 * equal, so neither probes the other's pids).  A process never changes
 * namespace, but a child forked after unshare(CLONE_NEWPID) is in a new
 * one, so it is read again whenever the pid changed (fork). */
static void identity_pidns(lease_identity *me) {
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static pid_t read_by;
    static char tag[40];
    pthread_mutex_lock(&lock);
    if (read_by != getpid()) {
        struct stat ns;
        if (stat("/proc/self/ns/pid", &ns) == 0)
            snprintf(tag, sizeof tag, PIDNS_TAG "%llu", (unsigned long long)ns.st_ino);
        else
            snprintf(tag, sizeof tag, PIDNS_TAG "unknown");
        read_by = getpid();
    }
    size_t len = strlen(me->boot_id);
    snprintf(me->boot_id + len, sizeof me->boot_id - len, "%s", tag);
    pthread_mutex_unlock(&lock);
}

/* Who takes leases here: the real pid (after fork too), host and boot. */
static void identity_get(lease_identity *me) {
    pthread_once(&identity_once, identity_init);
    *me = identity_real;
    me->pid = (int64_t)getpid();
    identity_pidns(me);
    pthread_mutex_lock(&identity_lock);
    if (identity_pose.pid) me->pid = identity_pose.pid;
    if (identity_pose.host[0]) memcpy(me->host, identity_pose.host, sizeof me->host);
    if (identity_pose.boot_id[0]) memcpy(me->boot_id, identity_pose.boot_id, sizeof me->boot_id);
    pthread_mutex_unlock(&identity_lock);
}

void kdart__store_lease_identity(int64_t pid, const char *host, const char *boot_id) {
    pthread_mutex_lock(&identity_lock);
    identity_pose.pid = pid;
    snprintf(identity_pose.host, sizeof identity_pose.host, "%s", host ? host : "");
    snprintf(identity_pose.boot_id, sizeof identity_pose.boot_id, "%s", boot_id ? boot_id : "");
    pthread_mutex_unlock(&identity_lock);
}

static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Whether an identity's pids can be probed with kill(): its boot id and
 * pid namespace are both known. */
static int probeable(const char *boot_id) {
    const char *ns = strstr(boot_id, PIDNS_TAG);
    return ns && strncmp(boot_id, "unknown", 7) != 0 && strcmp(ns + strlen(PIDNS_TAG), "unknown") != 0;
}

/* Whether a lease row still stops others at time now. */
static int lease_alive(const kdart__lease *l, int64_t now) {
    if (l->expiry <= now) return 0;
    lease_identity me;
    identity_get(&me);
    if (strcmp(l->owner_host, me.host) != 0 || strcmp(l->boot_id, me.boot_id) != 0 || !probeable(l->boot_id)) {
        /* Not ours to probe (another host, boot or pid namespace, or a
         * kdart that did not record its namespace): its pid means nothing
         * here, so only its heartbeat speaks.  One that has not beaten for
         * KDART__LEASE_STALE_MS is dead, though its expiry may be later. */
        return now - l->heartbeat < KDART__LEASE_STALE_MS;
    }
    if (l->owner_pid <= 0 || l->owner_pid > INT32_MAX) return 1;
    if (l->owner_pid == (int64_t)getpid()) return 1; /* another handle of this process */
    return !(kill((pid_t)l->owner_pid, 0) != 0 && errno == ESRCH);
}

/* Reads leases[key] into *l: KDART_OK, KDART_ENOENT or a store failure. */
static int lease_read(kdart__store *st, const char *key, kdart__lease *l) {
    sqlite3_stmt *sel;
    int rc = prepare(st,
                     "SELECT owner_pid, owner_host, boot_id, started, heartbeat, expiry FROM leases WHERE key = ?1",
                     &sel, "reading a compile lease");
    if (rc) return rc;
    sqlite3_bind_text(sel, 1, key, -1, SQLITE_STATIC);
    int src = sqlite3_step(sel);
    if (src == SQLITE_ROW) {
        memset(l, 0, sizeof *l);
        snprintf(l->key, sizeof l->key, "%s", key);
        l->owner_pid = sqlite3_column_int64(sel, 0);
        const char *h = (const char *)sqlite3_column_text(sel, 1);
        const char *b = (const char *)sqlite3_column_text(sel, 2);
        snprintf(l->owner_host, sizeof l->owner_host, "%s", h ? h : "");
        snprintf(l->boot_id, sizeof l->boot_id, "%s", b ? b : "");
        l->started = sqlite3_column_int64(sel, 3);
        l->heartbeat = sqlite3_column_int64(sel, 4);
        l->expiry = sqlite3_column_int64(sel, 5);
        rc = KDART_OK;
    } else if (src == SQLITE_DONE) {
        rc = KDART_ENOENT;
    } else {
        rc = sql_err(st, src, "reading the compile lease of %.16s", key);
    }
    sqlite3_finalize(sel);
    return rc;
}

/* Runs one statement binding (?1 text key, ?2.. int64 args). */
static int lease_exec(kdart__store *st, const char *sql, const char *key, const int64_t *args, int nargs,
                      const char *const *texts, int ntexts, const char *what) {
    sqlite3_stmt *stmt;
    int rc = prepare(st, sql, &stmt, what);
    if (rc) return rc;
    int i = 1;
    if (key) sqlite3_bind_text(stmt, i++, key, -1, SQLITE_STATIC);
    for (int t = 0; t < ntexts; t++) sqlite3_bind_text(stmt, i++, texts[t], -1, SQLITE_STATIC);
    for (int a = 0; a < nargs; a++) sqlite3_bind_int64(stmt, i++, args[a]);
    int src = sqlite3_step(stmt);
    rc = src == SQLITE_DONE ? KDART_OK : sql_err(st, src, "%s", what);
    sqlite3_finalize(stmt);
    return rc;
}

static int lease_check(kdart__store *st, const char *key, const char *op) {
    if (!key || !is_full_key(key)) return set_err(st, KDART_EINVAL, "%s: key is not a full key", op);
    if (!writable(st)) return set_err(st, KDART_ECACHE, "%s: cache %s is read-only", op, st->path);
    return KDART_OK;
}

int kdart__store_lease_take(kdart__store *st, const char *key, int64_t ttl_ms, kdart__lease *mine,
                            kdart__lease *holder) {
    if (!st) return KDART_EINVAL;
    clear_err(st);
    if (!mine) return set_err(st, KDART_EINVAL, "lease_take: mine is NULL");
    memset(mine, 0, sizeof *mine);
    int rc = lease_check(st, key, "lease_take");
    if (rc) return rc;
    if (ttl_ms <= 0) return set_err(st, KDART_EINVAL, "lease_take: ttl must be positive");
    lease_identity me;
    identity_get(&me);
    if ((rc = sql_exec(st, "BEGIN IMMEDIATE", "starting a lease"))) return rc;
    int64_t now = wall_ms();
    kdart__lease cur;
    rc = lease_read(st, key, &cur);
    if (rc == KDART_OK && lease_alive(&cur, now)) {
        if (holder) *holder = cur;
        rollback(st);
        return KDART_EAGAIN;
    }
    if (rc != KDART_OK && rc != KDART_ENOENT) goto fail;
    int64_t prev_started = rc == KDART_OK ? cur.started : 0;
    /* Expired leases, of this key and any other, go. */
    int64_t t[1] = {now};
    if ((rc = lease_exec(st, "DELETE FROM leases WHERE expiry <= ?1", NULL, t, 1, NULL, 0,
                         "clearing expired leases")))
        goto fail;
    snprintf(mine->key, sizeof mine->key, "%s", key);
    mine->owner_pid = me.pid;
    memcpy(mine->owner_host, me.host, sizeof mine->owner_host);
    memcpy(mine->boot_id, me.boot_id, sizeof mine->boot_id);
    /* started is unique per key, so renew and release can tell this lease
     * from a later one taken by another handle of the same process. */
    mine->started = prev_started >= now ? prev_started + 1 : now;
    mine->heartbeat = now;
    mine->expiry = now + ttl_ms;
    const char *texts[2] = {mine->owner_host, mine->boot_id};
    int64_t args[4] = {mine->owner_pid, mine->started, mine->heartbeat, mine->expiry};
    if ((rc = lease_exec(st,
                         "INSERT OR REPLACE INTO leases (key, owner_host, boot_id, owner_pid, started, heartbeat, "
                         "expiry) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                         key, args, 4, texts, 2, "taking a compile lease")))
        goto fail;
    if ((rc = sql_exec(st, "COMMIT", "committing a compile lease"))) goto fail;
    return KDART_OK;
fail:
    rollback(st);
    memset(mine, 0, sizeof *mine);
    return rc;
}

/* The WHERE clause that matches exactly one lease (?1 key, ?2 host,
 * ?3 boot id, ?4 pid, ?5 started). */
#define LEASE_IS_MINE "key = ?1 AND owner_host = ?2 AND boot_id = ?3 AND owner_pid = ?4 AND started = ?5"

int kdart__store_lease_renew(kdart__store *st, kdart__lease *mine, int64_t ttl_ms) {
    if (!st) return KDART_EINVAL;
    clear_err(st);
    if (!mine) return set_err(st, KDART_EINVAL, "lease_renew: mine is NULL");
    int rc = lease_check(st, mine->key, "lease_renew");
    if (rc) return rc;
    int64_t now = wall_ms();
    const char *texts[2] = {mine->owner_host, mine->boot_id};
    int64_t args[4] = {mine->owner_pid, mine->started, now, now + ttl_ms};
    /* One statement is one transaction; a lease that expired meanwhile is
     * still renewed if nobody took it over (the row is then still ours). */
    if ((rc = lease_exec(st, "UPDATE leases SET heartbeat = ?6, expiry = ?7 WHERE " LEASE_IS_MINE, mine->key,
                         args, 4, texts, 2, "renewing a compile lease")))
        return rc;
    if (sqlite3_changes(st->db) == 0)
        return set_err(st, KDART_ENOENT, "lease on %.16s was lost (expired and taken over, or released)",
                       mine->key);
    mine->heartbeat = now;
    mine->expiry = now + ttl_ms;
    return KDART_OK;
}

int kdart__store_lease_release(kdart__store *st, const kdart__lease *mine) {
    if (!st) return KDART_EINVAL;
    clear_err(st);
    if (!mine) return set_err(st, KDART_EINVAL, "lease_release: mine is NULL");
    int rc = lease_check(st, mine->key, "lease_release");
    if (rc) return rc;
    const char *texts[2] = {mine->owner_host, mine->boot_id};
    int64_t args[2] = {mine->owner_pid, mine->started};
    return lease_exec(st, "DELETE FROM leases WHERE " LEASE_IS_MINE, mine->key, args, 2, texts, 2,
                      "releasing a compile lease");
}

int kdart__store_lease_live(kdart__store *st, const char *key, kdart__lease *holder) {
    if (!st) return KDART_EINVAL;
    clear_err(st);
    if (!key || !is_full_key(key)) return set_err(st, KDART_EINVAL, "lease_live: key is not a full key");
    kdart__lease cur;
    int rc = lease_read(st, key, &cur);
    if (rc == KDART_ENOENT) return rc;
    if (rc) {
        /* A schema-1 file opened read-only has no leases table: no lease. */
        if (!writable(st) && strstr(st->err, "no such table")) {
            clear_err(st);
            return KDART_ENOENT;
        }
        return rc;
    }
    if (!lease_alive(&cur, wall_ms())) return KDART_ENOENT;
    if (holder) *holder = cur;
    return KDART_OK;
}

/* --------------------------------------------------- removal, counters */

/* Removing entries is the user's explicit wish (`kdart rm`, `kdart clear`),
 * unlike eviction, which follows the budget.  A removed key is simply a
 * miss next time.  Counters are named totals kept in the file (the misses
 * that `kdart stats` shows); their table is created on first use, so
 * files of schema 2 gain it without a migration, and a file without it
 * reads as all zeros. */

int kdart__store_remove(kdart__store *st, const char *key) {
    if (!st || !key) return KDART_EINVAL;
    clear_err(st);
    if (!is_full_key(key)) return set_err(st, KDART_EINVAL, "remove: '%s' is not a full key", key);
    if (!writable(st)) return set_err(st, KDART_ECACHE, "cache %s is read-only", st->path);
    sqlite3_stmt *del;
    int rc = prepare(st, "DELETE FROM entries WHERE key = ?1", &del, "removing an entry");
    if (rc) return rc;
    sqlite3_bind_text(del, 1, key, -1, SQLITE_STATIC);
    int src = sqlite3_step(del);
    rc = src == SQLITE_DONE ? KDART_OK : sql_err(st, src, "removing entry %.12s", key);
    sqlite3_finalize(del);
    if (rc == KDART_OK && sqlite3_changes(st->db) == 0)
        rc = set_err(st, KDART_ENOENT, "no entry %.12s in %s", key, st->path);
    if (rc == KDART_OK) sqlite3_exec(st->db, "PRAGMA incremental_vacuum", NULL, NULL, NULL);
    return rc;
}

int kdart__store_clear(kdart__store *st, int64_t *removed) {
    int64_t n = 0;
    if (removed) *removed = 0;
    if (!st) return KDART_EINVAL;
    clear_err(st);
    if (!writable(st)) return set_err(st, KDART_ECACHE, "cache %s is read-only", st->path);
    int rc = sql_exec(st, "BEGIN IMMEDIATE", "starting clear");
    if (rc) return rc;
    if ((rc = query_int64(st, "SELECT count(*) FROM entries", &n, "counting entries")) ||
        (rc = sql_exec(st, "DELETE FROM entries; DELETE FROM quarantine", "clearing the cache")) ||
        (rc = sql_exec(st, "COMMIT", "committing clear"))) {
        rollback(st);
        return rc;
    }
    if (removed) *removed = n;
    sqlite3_exec(st->db, "PRAGMA incremental_vacuum", NULL, NULL, NULL);
    return KDART_OK;
}

int kdart__store_count(kdart__store *st, const char *name, int64_t delta) {
    if (!st || !name) return KDART_EINVAL;
    clear_err(st);
    if (!writable(st)) return KDART_OK; /* a read-only cache counts nothing */
    int rc;
    if (!st->counters_ready) { /* once per connection, not once per miss */
        rc = sql_exec(st, "CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
                      "creating the counters table");
        if (rc) return rc;
        st->counters_ready = 1;
    }
    sqlite3_stmt *up;
    if ((rc = prepare(st,
                      "INSERT INTO counters(name, value) VALUES (?1, ?2) "
                      "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
                      &up, "counting")))
        return rc;
    sqlite3_bind_text(up, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(up, 2, delta);
    int src = sqlite3_step(up);
    rc = src == SQLITE_DONE ? KDART_OK : sql_err(st, src, "counting %s", name);
    sqlite3_finalize(up);
    return rc;
}

int kdart__store_counter(kdart__store *st, const char *name, int64_t *value) {
    if (!st || !name || !value) return KDART_EINVAL;
    clear_err(st);
    *value = 0;
    int64_t exists = 0;
    int rc = query_int64(st, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'counters'", &exists,
                         "looking for the counters table");
    if (rc || !exists) return rc;
    sqlite3_stmt *sel;
    if ((rc = prepare(st, "SELECT value FROM counters WHERE name = ?1", &sel, "reading a counter"))) return rc;
    sqlite3_bind_text(sel, 1, name, -1, SQLITE_STATIC);
    int src = sqlite3_step(sel);
    if (src == SQLITE_ROW) *value = sqlite3_column_int64(sel, 0);
    rc = src == SQLITE_ROW || src == SQLITE_DONE ? KDART_OK : sql_err(st, src, "reading counter %s", name);
    sqlite3_finalize(sel);
    return rc;
}
