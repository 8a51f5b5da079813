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
 *   - An entry that was committed stays findable (docs/design.md, "The
 *     cache is a cache").  Damage is healed, never by starting afresh:
 *     every entry that can still be read, through SQLite and from every
 *     leaf page of the file (pages.c), is kept, and at most the rows of the
 *     damaged pages are lost.  A file with damaged pages is healed in place
 *     (heal_in_place); a file SQLite cannot open at all (bad or cut header,
 *     a damaged page 1) is replaced by the healed file in one rename
 *     (heal_by_swap).  Either way the path always names a whole cache
 *     file, writers wait at the gate (gate_enter) while a healing runs and
 *     publish into the healed file, one healing runs at a time, a kill
 *     anywhere loses nothing, and the damaged file is kept beside it as
 *     <real>.corrupt-<unixtime>-<pid>; the note stays in errmsg so the
 *     runtime can warn, and the next verify reports it.
 *   - Cleaning works on a full disk: gc, rm and clear use a reserve file
 *     when there is no room for their WAL frames, and give the space back
 *     (clean).
 *   - A database with a newer user_version is used read-only
 *     (refused with ECACHE if its tables lack our columns); an SQLite file
 *     with tables but no user_version is someone else's and is refused.
 *     A read-only store never creates, moves or writes anything.  A
 *     writable open that fails for want of writing (read-only directory,
 *     file or mount; full disk; fcntl locks that fail) falls back to a
 *     read-only open of the file, so its entries are still served.
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
 * read-only image), or where locks fail, is read without locks, its WAL
 * included (open_lockfree).  auto_vacuum=INCREMENTAL on new files, so gc
 * can give space back; secure_delete=FAST, so that deleting a cubin does
 * not rewrite its pages.
 *
 * Non-goals: thread safety (the runtime serializes calls on one store),
 * network file systems beyond reading where locks fail (SQLite's locking
 * there is the caller's risk).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "base.h"
#include "pages.h"
#include "store.h"

#define BUSY_TIMEOUT_MS 10000
#ifndef SQLITE_DEFAULT_WAL_AUTOCHECKPOINT
#define SQLITE_DEFAULT_WAL_AUTOCHECKPOINT 1000 /* pages: SQLite's default */
#endif
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
    char *real;         /* the file itself, symlinks resolved (NULL: in memory, or scratch) */
    int dirfd;          /* real's directory, whose flock is the write gate; -1: none */
    int gate_depth;     /* gate_enter calls not yet left */
    dev_t dev;          /* the file the connection has open, to notice that */
    ino_t ino;          /* another one took its place (ino 0: not known) */
    int ro_open;        /* opened with readonly=1 */
    int newer;          /* user_version newer than ours: read, never write */
    int nolocks;        /* fcntl locks fail on this file system: read without them */
    int64_t max_bytes;  /* <= 0: no budget */
    int last_src;       /* raw SQLite code of the last failure, 0 if none */
    int healing;        /* salvage in progress: damage met is expected, not flagged */
    int counters_ready; /* the counters table exists on this connection's file */
    int64_t open_seen;  /* open healed an unreadable file: entries found (-1: it did not) */
    int64_t open_saved; /* ... and salvaged, for the next verify to report */
    char open_heal[512];
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
static void damage_flag_path(const kdart__store *st, char *buf, size_t n) { snprintf(buf, n, "%s.damaged", st->real); }

static void flag_damage(kdart__store *st) {
    char flag[PATH_BUF + 16];
    if (!writable(st) || st->healing || !st->real) return;
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

/* What is wrong with a row's payload, or NULL: failed must be an integer
 * (failed_is_int) of 0 or 1; a failure record has no blob and the digest
 * of its key, an entry a blob of its size and digest. */
static const char *payload_problem(const char *key, int failed_is_int, int64_t failed, const void *blob, int n,
                                   int64_t size, const char *sha) {
    if (!failed_is_int) return "damaged failed flag";
    if (failed == 1) {
        char want[65];
        failed_digest(key, want);
        if (n != 0 || !sha || strcmp(sha, want) != 0) return "damaged failure record";
        return NULL;
    }
    if (failed != 0) return "damaged failed flag";
    return blob_problem(blob, n, size, sha);
}

/* The same for a row of a statement (columns given by index). */
static const char *row_problem(sqlite3_stmt *s, const char *key, int c_failed, int c_blob, int c_size, int c_sha) {
    return payload_problem(key, sqlite3_column_type(s, c_failed) == SQLITE_INTEGER, sqlite3_column_int64(s, c_failed),
                           sqlite3_column_blob(s, c_blob), sqlite3_column_bytes(s, c_blob),
                           sqlite3_column_int64(s, c_size), (const char *)sqlite3_column_text(s, c_sha));
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

/* ------------------------------------------------- where the file lives */

/* The file SQLite opens for path: every symlink resolved (SQLite resolves
 * them too, for its -wal and -shm).  Healing, the reserve and the scratch
 * files act on this file and beside it, so that a kdart.db linked to a
 * shared cache heals the shared file and the link stays a link.  A path
 * that does not exist yet resolves through its directory. */
static char *resolve_real(const char *path) {
    char buf[PATH_MAX], dir[PATH_BUF];
    if (realpath(path, buf)) return kdart__strdup(buf);
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!slash) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    if (!realpath(dir, buf)) return kdart__strdup(path);
    size_t n = strlen(buf) + strlen(base) + 2;
    char *out = kdart__malloc(n);
    if (out) snprintf(out, n, "%s%s%s", buf, strcmp(buf, "/") ? "/" : "", base);
    return out;
}

/* Whether fcntl record locks work in this directory: on a file system
 * without a lock manager (NFS without lockd) they fail with ENOLCK, which
 * SQLite takes for "busy" and waits out its whole busy timeout on every
 * lock, then fails.  Tried with an open file description lock on the
 * directory, never on the database: closing a descriptor of the database
 * would drop the locks SQLite holds on it in this process. */
static int locks_fail(int dirfd, int *err) {
    struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    if (fcntl(dirfd, F_OFD_SETLK, &fl) == 0) {
        fl.l_type = F_UNLCK;
        fcntl(dirfd, F_OFD_SETLK, &fl);
        return 0;
    }
    *err = errno;
    return errno == ENOLCK || errno == EOPNOTSUPP || errno == ENOSYS;
}

/* Fills real, dirfd and nolocks, once (the directory must exist). */
static int locate(kdart__store *st) {
    if (st->real) return KDART_OK;
    if (!(st->real = resolve_real(st->path))) return set_err(st, KDART_ENOMEM, "opening %s: out of memory", st->path);
    char dir[PATH_BUF];
    const char *slash = strrchr(st->real, '/');
    snprintf(dir, sizeof dir, "%.*s", slash && slash != st->real ? (int)(slash - st->real) : 1,
             slash ? st->real : ".");
    st->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int e = 0;
    if (st->dirfd >= 0 && locks_fail(st->dirfd, &e)) {
        st->nolocks = 1;
        set_err(st, KDART_EIO, "file locks fail on this file system (%s)", strerror(e));
    }
    return KDART_OK;
}

/* ------------------------------------------------------------ the gate */

/* Writers and healers of one cache take turns through a flock(2) on its
 * directory (flock, not fcntl: it is independent of SQLite's locks, and a
 * directory is never a database, whose descriptors we must not open and
 * close).  Every write (a publish, a lease, a quarantine, gc, ...) holds
 * it shared for the length of its transaction; healing holds it
 * exclusive from before it reads the damaged file until the healed
 * contents are committed, so that no entry is published in between, where
 * the healing would not see it and then overwrite it: publishers wait
 * and publish into the healed file.  Connecting holds it shared too, so
 * that a file put in place of an unreadable one is never paired with the
 * old file's -wal or -shm.  Where flock fails nothing is gated; SQLite's
 * own locks still keep each transaction whole. */
static void gate_enter(kdart__store *st, int exclusive) {
    if (st->gate_depth++ > 0 || st->dirfd < 0) return;
    while (flock(st->dirfd, exclusive ? LOCK_EX : LOCK_SH) != 0 && errno == EINTR) {
    }
}

static void gate_leave(kdart__store *st) {
    if (st->gate_depth > 0 && --st->gate_depth == 0 && st->dirfd >= 0) flock(st->dirfd, LOCK_UN);
}

/* ------------------------------------------------------------- opening */

static int db_connect(kdart__store *st, const char *name, int flags, const char *vfs) {
    int src = sqlite3_open_v2(name, &st->db, flags, vfs);
    if (src != SQLITE_OK) {
        int rc = sql_err(st, src, "opening %s", st->path);
        sqlite3_close(st->db);
        st->db = NULL;
        return rc == KDART_ECACHE ? KDART_EIO : rc;
    }
    sqlite3_extended_result_codes(st->db, 1);
    sqlite3_busy_timeout(st->db, BUSY_TIMEOUT_MS);
    st->counters_ready = 0; /* a new file (or a healed one) may lack it */
    struct stat sb;
    st->ino = 0;
    if (st->real && stat(st->real, &sb) == 0) {
        st->dev = sb.st_dev;
        st->ino = sb.st_ino;
    }
    return KDART_OK;
}

/* Whether another file has taken the place of the one we have open (an
 * unreadable file healed by another process, see heal_by_swap). */
static int replaced(const kdart__store *st) {
    struct stat sb;
    return st->db && st->ino && stat(st->real, &sb) == 0 && (sb.st_ino != st->ino || sb.st_dev != st->dev);
}

static void disconnect(kdart__store *st) {
    if (!st->db) return;
    /* SQLite deletes the -wal and -shm by name when the last connection
     * to a database closes; once another file has taken the path, those
     * names are the new file's, so they must be kept. */
    if (replaced(st)) {
        int on = 1;
        sqlite3_file_control(st->db, "main", SQLITE_FCNTL_PERSIST_WAL, &on);
    }
    sqlite3_close_v2(st->db);
    st->db = NULL;
    st->ino = 0;
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
        /* Deleted rows are zeroed on their b-tree pages, but freed pages
         * are not rewritten: with SQLite's secure_delete on (Debian's
         * default) deleting a cubin writes every page of it again, into
         * the WAL, which a full disk has no room for. */
        if ((rc = sql_exec(st, "PRAGMA secure_delete = FAST", "setting secure_delete"))) return rc;
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

/* Connects to the file that has taken the place of ours (an unreadable
 * file healed by another process, heal_by_swap), if one has; the old
 * connection stays when the new file cannot be set up. */
static int follow(kdart__store *st) {
    if (!writable(st) || !replaced(st)) return KDART_OK;
    gate_enter(st, 0);
    int rc = KDART_OK;
    if (replaced(st)) {
        sqlite3 *old = st->db;
        dev_t dev = st->dev;
        ino_t ino = st->ino;
        st->db = NULL;
        rc = db_connect(st, st->real, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
        if (!rc) rc = setup(st);
        if (rc) {
            if (st->db) sqlite3_close_v2(st->db);
            st->db = old;
            st->dev = dev;
            st->ino = ino;
        } else {
            /* The old file's -wal and -shm names are the new file's now
             * (see disconnect). */
            int on = 1;
            sqlite3_file_control(old, "main", SQLITE_FCNTL_PERSIST_WAL, &on);
            sqlite3_close_v2(old);
        }
    }
    gate_leave(st);
    return rc;
}

/* The start of every operation: follow a replaced file, clear errmsg. */
static void op_begin(kdart__store *st) {
    follow(st);
    clear_err(st);
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

/* Reads the file without any lock: where its -shm cannot be made (a
 * read-only image or mount) or locks fail (ENOLCK).  immutable=1 would
 * ignore the -wal, and with it every entry not yet checkpointed into the
 * file, so a database with a WAL is opened through the unix-none VFS (no
 * locks) in exclusive locking mode, where SQLite keeps the WAL index in
 * memory instead of the -shm and reads the WAL itself.  What other
 * processes commit later is not seen: a snapshot is all a read-only cache
 * needs. */
static int open_lockfree(kdart__store *st) {
    char wal[PATH_BUF + 8];
    struct stat sb;
    snprintf(wal, sizeof wal, "%s-wal", st->real);
    if (stat(wal, &sb) == 0 && sb.st_size > 0) {
        int rc = db_connect(st, st->real, SQLITE_OPEN_READONLY, "unix-none");
        if (!rc) rc = sql_exec(st, "PRAGMA locking_mode = EXCLUSIVE", "reading the cache without locks");
        if (!rc) rc = setup(st);
        if (!rc) return KDART_OK;
        if (st->db) disconnect(st);
        clear_err(st);
    }
    char *uri = immutable_uri(st->real);
    if (!uri) return set_err(st, KDART_ENOMEM, "opening %s: out of memory", st->path);
    int rc = db_connect(st, uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL);
    kdart__free(uri);
    return rc ? rc : setup(st);
}

static int open_readonly(kdart__store *st) {
    struct stat sb;
    char why[256];
    int rc = locate(st);
    if (rc) return rc;
    if (stat(st->path, &sb) != 0) {
        int e = errno;
        return set_err(st, e == ENOENT ? KDART_ENOENT : KDART_EIO, "cannot open read-only cache %s: %s", st->path,
                       strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) return set_err(st, KDART_EIO, "read-only cache %s is not a regular file", st->path);
    if (header_damaged(st->real, why, sizeof why))
        return set_err(st, KDART_ECORRUPT, "read-only cache %s is damaged (%s); left as it is", st->path, why);
    clear_err(st);
    if (st->nolocks) {
        rc = open_lockfree(st);
    } else {
        rc = db_connect(st, st->real, SQLITE_OPEN_READONLY, NULL);
        if (rc) return rc;
        rc = setup(st);
        int prim = st->last_src & 0xff;
        if (rc && (prim == SQLITE_CANTOPEN || prim == SQLITE_READONLY || prim == SQLITE_IOERR)) {
            /* A WAL database in a read-only image cannot create its
             * -shm, nor grow it on a full disk (IOERR), and a lock that
             * fails is an IOERR too: read it without locks. */
            disconnect(st);
            clear_err(st);
            rc = open_lockfree(st);
        }
    }
    if (rc && is_damage(st->last_src)) {
        char msg[sizeof st->err];
        memcpy(msg, st->err, sizeof msg);
        return set_err(st, KDART_ECORRUPT, "read-only cache %s is damaged; left as it is (%s)", st->path, msg);
    }
    return rc;
}

static int heal_by_swap(kdart__store *st, const char *why);
static void remove_stale_scratch(kdart__store *st, int wait);
static void reserve_keep(kdart__store *st);

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
    if ((rc = locate(st))) return rc;
    /* Writing needs locks; without them the cache is read as a read-only
     * file system's would be (open_fallback_readonly). */
    if (st->nolocks) return KDART_EIO;
    remove_stale_scratch(st, 0);
    /* The file as found, then (after healing an unreadable one) the file
     * in its place. */
    for (int round = 0; round < 3; round++) {
        gate_enter(st, 0);
        int bad = header_damaged(st->real, why, sizeof why);
        if (!bad) {
            if ((rc = db_connect(st, st->real, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL))) {
                gate_leave(st);
                return rc;
            }
            rc = setup(st);
            if (!rc || !is_damage(st->last_src)) {
                gate_leave(st);
                if (!rc) {
                    if (st->open_heal[0] && !st->err[0]) snprintf(st->err, sizeof st->err, "%s", st->open_heal);
                    reserve_keep(st);
                }
                return rc;
            }
            memcpy(why, st->err, sizeof why);
            disconnect(st);
        }
        gate_leave(st);
        if (round == 2 || st->open_seen >= 0)
            return set_err(st, KDART_ECORRUPT, "cache %s is still unreadable after healing it: %s", st->path, why);
        if ((rc = heal_by_swap(st, why))) return rc;
    }
    return KDART_ECORRUPT; /* not reached */
}

/* A writable open that failed for want of writing (a read-only directory,
 * file or mount; a full disk; locks that fail) still leaves a valid cache
 * worth reading: a prebuilt cache shipped read-only in an image is the
 * common case.  The file is then opened read-only (open_readonly reads it
 * without locks when its -shm cannot be made or locks fail) and the store
 * behaves as one opened with readonly=1; the note saying so stays in
 * errmsg for the runtime's one warning.  No file, or one that does not
 * open read-only either: the first failure stands. */
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
    st->dirfd = -1;
    st->open_seen = -1;
    st->path = kdart__strdup(path);
    if (!st->path) {
        rc = set_err(st, KDART_ENOMEM, "opening cache %s: out of memory", path);
        goto fail_path;
    }
    st->ro_open = readonly != 0;
    st->max_bytes = max_bytes;
    if (memory) {
        if ((rc = db_connect(st, ":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL))) goto fail_db;
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
    if (st->dirfd >= 0) close(st->dirfd);
    kdart__free(st->real);
    kdart__free(st->path);
    kdart__free(st);
fail_alloc:
    return rc;
}

void kdart__store_close(kdart__store *st) {
    if (!st) return;
    gate_enter(st, 0); /* so that the file cannot be replaced between looking and closing */
    disconnect(st);
    gate_leave(st);
    if (st->dirfd >= 0) close(st->dirfd);
    kdart__free(st->real);
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
    gate_enter(st, 0);
    int rc = sql_exec(st, "BEGIN IMMEDIATE", "starting the quarantine");
    if (rc) goto fail;
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
    gate_leave(st);
    return KDART_OK;
fail:
    sqlite3_finalize(sel);
    sqlite3_finalize(ins);
    sqlite3_finalize(del);
    rollback(st);
    gate_leave(st);
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
    op_begin(st);
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
            gate_enter(st, 0);
            rc = sql_exec(st, "REINDEX entries", "rebuilding the damaged key index");
            gate_leave(st);
            if (rc) return rc;
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
    op_begin(st);
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

    gate_enter(st, 0);
    int rc = sql_exec(st, "BEGIN IMMEDIATE", "starting the publication");
    if (rc) goto fail;
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
    gate_leave(st);
    return KDART_OK;
fail:
    sqlite3_finalize(ins);
    rollback(st);
    gate_leave(st);
    return rc;
}

/* -------------------------------------------------------------- touch */

int kdart__store_touch(kdart__store *st, const char *key) {
    sqlite3_stmt *up;
    if (!st) return KDART_EINVAL;
    op_begin(st);
    if (!key) return set_err(st, KDART_EINVAL, "touch: key is NULL");
    if (!writable(st)) return KDART_OK; /* a read-only cache keeps no usage */
    int rc = prepare(st, "UPDATE entries SET last_used = ?2, hits = hits + 1 WHERE key = ?1", &up,
                     "recording a cache hit");
    if (rc) return rc;
    sqlite3_bind_text(up, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(up, 2, kdart__unix_time());
    gate_enter(st, 0);
    int src = sqlite3_step(up);
    gate_leave(st);
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
    op_begin(st);
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
    op_begin(st);
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
    op_begin(st);
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

/* sql_err, appended to errmsg instead of replacing what it says. */
static int sql_note(kdart__store *st, int src, const char *fmt, ...) {
    char keep[sizeof st->err], ctx[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    memcpy(keep, st->err, sizeof keep);
    int rc = sql_err(st, src, "%s", ctx);
    char msg[sizeof st->err];
    memcpy(msg, st->err, sizeof msg);
    memcpy(st->err, keep, sizeof keep);
    add_err(st, "%s", msg);
    return rc;
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
        if (line < 5) add_err(st, "%.200s%s", t ? t : "?", t && strlen(t) > 200 ? "..." : "");
    }
    if (src != SQLITE_DONE) rc = sql_note(st, src, "checking cache integrity");
    sqlite3_finalize(sel);
    return rc;
}

/* ------------------------------------------------------------ salvage */

typedef struct rowids {
    int64_t *v;
    size_t n, cap;
} rowids;

static int rowids_add(rowids *ids, int64_t id) {
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? 2 * ids->cap : 256;
        int64_t *v = kdart__realloc(ids->v, cap * sizeof *v);
        if (!v) return KDART_ENOMEM;
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return KDART_OK;
}

static int cmp_rowid(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorts ids and drops repeats; returns how many remain. */
static size_t rowids_unique(rowids *ids) {
    if (!ids->n) return 0;
    qsort(ids->v, ids->n, sizeof *ids->v, cmp_rowid);
    size_t k = 1;
    for (size_t i = 1; i < ids->n; i++)
        if (ids->v[i] != ids->v[k - 1]) ids->v[k++] = ids->v[i];
    return ids->n = k;
}

/* Adds the rowids one query yields until it ends or meets damage. */
static void collect_rowids(kdart__store *st, const char *sql, rowids *ids) {
    sqlite3_stmt *sel;
    if (sqlite3_prepare_v2(st->db, sql, -1, &sel, NULL) != SQLITE_OK) return;
    while (sqlite3_step(sel) == SQLITE_ROW && rowids_add(ids, sqlite3_column_int64(sel, 0)) == KDART_OK) {
    }
    sqlite3_finalize(sel);
}

/* Whether the scratch store has key already. */
static int has_key(kdart__store *to, const char *key) {
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(to->db, "SELECT 1 FROM entries WHERE key = ?1", -1, &s, NULL) != SQLITE_OK) return 0;
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    int found = sqlite3_step(s) == SQLITE_ROW;
    sqlite3_finalize(s);
    return found;
}

/* Copies every entry SQLite can still reach, and that passes its checks,
 * into the scratch store `to`.  A damaged page cuts a scan short, so
 * rowids are gathered along every path that reaches rows: the table from
 * both ends and each index (whose entries carry the rowid); each row is
 * then read on its own.  ids gets every rowid found (readable or not). */
static int salvage_sql(kdart__store *st, kdart__store *to, rowids *ids, int64_t *saved) {
    static const char *const paths[] = {
        "SELECT rowid FROM entries NOT INDEXED ORDER BY rowid",
        "SELECT rowid FROM entries NOT INDEXED ORDER BY rowid DESC",
        "SELECT rowid FROM entries INDEXED BY sqlite_autoindex_entries_1",
        "SELECT rowid FROM entries INDEXED BY entries_last_used",
        "SELECT rowid FROM entries INDEXED BY entries_kernel",
    };
    sqlite3_stmt *sel = NULL;
    int rc = KDART_OK;
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) collect_rowids(st, paths[i], ids);
    size_t n = rowids_unique(ids);
    if (sqlite3_prepare_v2(st->db, "SELECT " COLS " FROM entries WHERE rowid = ?1", -1, &sel, NULL) != SQLITE_OK)
        n = 0;
    for (size_t i = 0; i < n && rc == KDART_OK; i++) {
        sqlite3_bind_int64(sel, 1, ids->v[i]);
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
    return rc;
}

/* The page walk's view of an entries row (pages.h): its 16 columns in
 * COLS order, checked as get checks a row, then published into `to`
 * unless a row of that key is there already. */
typedef struct walk {
    kdart__store *to;
    rowids *ids;
    int64_t saved;
    int oom;
} walk;

static char *field_text(const kdart__field *f, int *oom) {
    if (f->type != SQLITE_TEXT) return NULL;
    char *s = kdart__malloc(f->n + 1);
    if (!s) {
        *oom = 1;
        return NULL;
    }
    memcpy(s, f->p, f->n);
    s[f->n] = 0;
    return s;
}

static int walk_record(void *user, int64_t rowid, const kdart__field *f, int n) {
    walk *w = user;
    char key[65], sha[65];
    /* A record of the key index (key, rowid): an entry that existed,
     * counted as found even where its row cannot be read any more. */
    if (rowid < 0) {
        if (n == 2 && f[0].type == SQLITE_TEXT && f[0].n == 64 && f[1].type == SQLITE_INTEGER &&
            rowids_add(w->ids, f[1].i))
            return w->oom = 1;
        return 0;
    }
    /* Other tables' rows (quarantine has 18 columns, leases 7) and
     * damaged cells do not have this shape. */
    if (n != 16 || f[0].type != SQLITE_TEXT || f[0].n != 64) return 0;
    memcpy(key, f[0].p, 64);
    key[64] = 0;
    if (!is_full_key(key) || f[1].type != SQLITE_TEXT || f[2].type != SQLITE_TEXT || f[3].type != SQLITE_TEXT ||
        f[5].type != SQLITE_TEXT)
        return 0;
    if (rowids_add(w->ids, rowid)) return w->oom = 1;
    if (has_key(w->to, key)) return 0;
    int has_sha = f[11].type == SQLITE_TEXT && f[11].n == 64;
    if (has_sha) memcpy(sha, f[11].p, 64);
    sha[has_sha ? 64 : 0] = 0;
    const void *blob = f[9].type == SQLITE_BLOB ? f[9].p : NULL;
    int nblob = blob && f[9].n <= INT32_MAX ? (int)f[9].n : 0;
    if (payload_problem(key, f[4].type == SQLITE_INTEGER, f[4].i, blob, nblob,
                        f[10].type == SQLITE_INTEGER ? f[10].i : -1, has_sha ? sha : NULL))
        return 0;
    kdart__row row;
    memset(&row, 0, sizeof row);
    memcpy(row.key, key, sizeof row.key);
    row.failed = f[4].i == 1;
    row.kernel = field_text(&f[1], &w->oom);
    row.spec = field_text(&f[2], &w->oom);
    row.arch = field_text(&f[3], &w->oom);
    row.manifest = field_text(&f[5], &w->oom);
    row.report = field_text(&f[6], &w->oom);
    row.log = field_text(&f[7], &w->oom);
    row.lowered = field_text(&f[8], &w->oom);
    row.compile_ms = f[12].type == SQLITE_FLOAT ? f[12].d : (double)f[12].i;
    row.created = f[13].i;
    row.last_used = f[14].i;
    row.hits = f[15].i;
    if (!w->oom) {
        row.cubin = (unsigned char *)blob; /* put reads it; it stays the walk's */
        row.cubin_size = (size_t)nblob;
        if (kdart__store_put(w->to, &row, 0) == KDART_OK) w->saved++;
        row.cubin = NULL;
    }
    kdart__row_release(&row);
    return w->oom;
}

/* Adds the entries that only the leaf pages still hold (below a damaged
 * interior page, or in a file whose schema is unreadable): every table
 * leaf page of the file, with the WAL at wal laid over it. */
static int salvage_pages(kdart__store *st, kdart__store *to, const char *wal, rowids *ids, int64_t *saved) {
    walk w = {to, ids, 0, 0};
    if (kdart__pages_each_record(st->real, wal, walk_record, &w, NULL) != 0)
        add_err(st, "cannot read %s page by page: %s", st->real, strerror(errno));
    *saved += w.saved;
    return w.oom ? KDART_ENOMEM : KDART_OK;
}

/* Copies the rows of a table into the scratch store.  required: every
 * row must arrive (KDART_OK or a failure); otherwise (quarantine and
 * counters while healing: not entries) what cannot be read is left
 * behind without a word. */
static int copy_table(kdart__store *st, kdart__store *to, const char *table, int required) {
    char sql[160];
    sqlite3_stmt *sel = NULL, *ins = NULL;
    int src = SQLITE_OK, bad = 0;
    snprintf(sql, sizeof sql, "SELECT * FROM %s", table);
    if ((src = sqlite3_prepare_v2(st->db, sql, -1, &sel, NULL)) != SQLITE_OK) goto out;
    int n = sqlite3_column_count(sel);
    int w = snprintf(sql, sizeof sql, "INSERT OR REPLACE INTO %s VALUES (?", table);
    for (int i = 1; i < n && w < (int)sizeof sql - 4; i++) w += snprintf(sql + w, sizeof sql - (size_t)w, ",?");
    snprintf(sql + w, sizeof sql - (size_t)w, ")");
    if (sqlite3_prepare_v2(to->db, sql, -1, &ins, NULL) != SQLITE_OK) {
        bad = 1;
        goto out;
    }
    while ((src = sqlite3_step(sel)) == SQLITE_ROW) {
        for (int i = 0; i < n; i++) sqlite3_bind_value(ins, i + 1, sqlite3_column_value(sel, i));
        bad |= sqlite3_step(ins) != SQLITE_DONE;
        sqlite3_reset(ins);
    }
out:
    sqlite3_finalize(sel);
    sqlite3_finalize(ins);
    if (!required || (!bad && (src == SQLITE_DONE || src == SQLITE_OK))) return KDART_OK;
    return set_err(st, KDART_ECACHE, "copying the %s table: %s", table,
                   bad ? sqlite3_errmsg(to->db) : sqlite3_errstr(src));
}

#define COUNTERS_TABLE "CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)"

/* How many times the file was healed (the "heals" counter): a healer that
 * waited for the gate compares it with what it read before it found the
 * damage, to tell that another process healed the file meanwhile.  0: no
 * counter yet; -1: unreadable. */
static int64_t heals_of(kdart__store *st) {
    sqlite3_stmt *s;
    int src = sqlite3_prepare_v2(st->db, "SELECT value FROM counters WHERE name = 'heals'", -1, &s, NULL);
    if (src != SQLITE_OK) return (src & 0xff) == SQLITE_ERROR ? 0 : -1; /* no such table: never healed */
    src = sqlite3_step(s);
    int64_t v = src == SQLITE_ROW ? sqlite3_column_int64(s, 0) : src == SQLITE_DONE ? 0 : -1;
    sqlite3_finalize(s);
    return v;
}

/* "<real>.salvage-<pid><suffix>": the scratch files of a healing. */
static void scratch_name(const kdart__store *st, const char *suffix, char *buf, size_t n) {
    snprintf(buf, n, "%s.salvage-%ld%s", st->real, (long)getpid(), suffix);
}

/* A scratch store beside the cache: our schema, the page size and
 * auto_vacuum given (so that it can be copied over the damaged file page
 * for page), no journal and no syncs, since a healer that dies leaves it
 * to be removed (remove_stale_scratch), never used. */
static int scratch_open(kdart__store *st, int64_t page_size, int64_t auto_vacuum, kdart__store **out) {
    char path[PATH_BUF + 64], sql[256];
    *out = NULL;
    scratch_name(st, "", path, sizeof path);
    kdart__store *to = kdart__calloc(1, sizeof *to);
    if (!to || !(to->path = kdart__strdup(path))) {
        kdart__free(to);
        return set_err(st, KDART_ENOMEM, "salvaging: out of memory");
    }
    to->dirfd = -1;
    to->open_seen = -1;
    unlink(path);
    snprintf(sql, sizeof sql,
             "PRAGMA page_size = %lld; PRAGMA auto_vacuum = %lld; PRAGMA journal_mode = OFF; "
             "PRAGMA synchronous = OFF",
             (long long)page_size, (long long)auto_vacuum);
    int rc = db_connect(to, path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (!rc) rc = sql_exec(to, sql, "setting up the scratch file");
    if (!rc) rc = migrate(to);
    if (!rc) rc = sql_exec(to, COUNTERS_TABLE, "creating the counters table");
    if (rc) {
        add_err(st, "cannot salvage into %s: %s", path, to->err);
        kdart__store_close(to);
        unlink(path);
        return rc;
    }
    *out = to;
    return KDART_OK;
}

/* Copies a file's bytes: 0, or -1 with errno set. */
static int copy_bytes(const char *from, const char *to) {
    enum { CHUNK = 1 << 20 };
    int in = open(from, O_RDONLY | O_CLOEXEC), out = -1, rc = -1, e = 0;
    char *buf = kdart__malloc(CHUNK);
    if (in < 0 || !buf || (out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) goto done;
    for (;;) {
        ssize_t n = read(in, buf, CHUNK);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) goto done;
        if (n == 0) break;
        for (ssize_t w = 0; w < n;) {
            ssize_t k = write(out, buf + w, (size_t)(n - w));
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) goto done;
            w += k;
        }
    }
    rc = 0;
done:
    e = errno;
    if (in >= 0) close(in);
    if (out >= 0 && close(out) != 0 && rc == 0) rc = -1, e = errno;
    kdart__free(buf);
    errno = e;
    return rc;
}

/* Copies the scratch store over the cache file: every page, in one write
 * transaction of the cache file (SQLite's backup API), which waits for
 * the write lock as any writer does. */
static int copy_over(kdart__store *st, kdart__store *from) {
    sqlite3_backup *b = sqlite3_backup_init(st->db, "main", from->db, "main");
    if (!b) return sql_note(st, sqlite3_errcode(st->db), "healing the cache file");
    struct timespec pause = {0, 50 * 1000 * 1000};
    int src;
    for (int tries = 0;; tries++) {
        src = sqlite3_backup_step(b, -1);
        if (src == SQLITE_DONE || tries == 20) break;
        if ((src & 0xff) != SQLITE_BUSY && (src & 0xff) != SQLITE_LOCKED) break;
        nanosleep(&pause, NULL);
    }
    int fin = sqlite3_backup_finish(b);
    if (src == SQLITE_DONE && fin == SQLITE_OK) {
        st->counters_ready = 0;
        return KDART_OK;
    }
    return sql_note(st, src == SQLITE_DONE ? fin : src, "healing the cache file");
}

/* Scratch files (<real>.salvage-<pid>...) of a healer that died.  A
 * healer holds the gate exclusive for as long as its scratch files exist,
 * so whoever holds it exclusive may remove every one of them, whatever
 * pid (or pid namespace) its name carries; held: the caller holds it.
 * Otherwise it is taken for a moment if free (never waited for: a healer
 * at work holds it).  Where flock does not work, only files of a pid that
 * is gone from this pid namespace go. */
static void remove_stale_scratch(kdart__store *st, int held) {
    if (!st->real || st->dirfd < 0) return;
    const char *slash = strrchr(st->real, '/');
    char prefix[PATH_BUF];
    snprintf(prefix, sizeof prefix, "%s.salvage-", slash ? slash + 1 : st->real);
    size_t plen = strlen(prefix);
    int fd = dup(st->dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0) close(fd);
        return;
    }
    int locked = held, found = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, plen) != 0) continue;
        if (!found++ && !held) locked = flock(st->dirfd, LOCK_EX | LOCK_NB) == 0;
        long pid = strtol(e->d_name + plen, NULL, 10);
        if (pid == (long)getpid()) continue;
        if (locked || (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH)) unlinkat(st->dirfd, e->d_name, 0);
    }
    if (locked && !held) flock(st->dirfd, LOCK_UN);
    closedir(d);
}

/* Heals a file whose pages are damaged (what REINDEX cannot repair) in
 * place: every entry that can still be read, through SQLite and then
 * from every leaf page, goes into a scratch store, which is copied over
 * the damaged file as one transaction of it (copy_over).  So the cache
 * file is never missing or renamed (a symlink to it stays a link to the
 * healed file), a kill anywhere leaves the damaged file or the healed one
 * and never a mix, and processes that have the file open simply read the
 * healed contents next.  Under the gate, exclusive (see gate_enter): no
 * entry is published between the salvage's reading and the commit.  A
 * copy of the damaged file (and its -wal) is kept as
 * <real>.corrupt-<time>-<pid>.  gen: the heal count read before the
 * damage was found; when it changed while we waited for the gate,
 * another process has healed the file (*other = 1) and nothing is done.
 * Adds what it did to errmsg; *seen counts the entries found by any path,
 * readable or not, *saved those salvaged. */
static int heal_in_place(kdart__store *st, int64_t gen, int64_t *seen, int64_t *saved, int *other) {
    char copy[PATH_BUF + 96], copy_wal[PATH_BUF + 96], wal[PATH_BUF + 8], aside[PATH_BUF + 96], side[PATH_BUF + 100],
        scratch[PATH_BUF + 96];
    kdart__store *to = NULL;
    rowids ids = {0};
    int64_t psize = 4096, vacuum = 2;
    int rc;
    *seen = *saved = 0;
    *other = 0;
    gate_enter(st, 1);
    remove_stale_scratch(st, 1);
    if (heals_of(st) != gen) {
        *other = 1;
        add_err(st, "another process healed the cache meanwhile");
        gate_leave(st);
        return KDART_OK;
    }
    query_int64(st, "PRAGMA page_size", &psize, "reading the page size");
    query_int64(st, "PRAGMA auto_vacuum", &vacuum, "reading auto_vacuum");
    scratch_name(st, "", scratch, sizeof scratch);
    scratch_name(st, "-damaged", copy, sizeof copy);
    scratch_name(st, "-damaged-wal", copy_wal, sizeof copy_wal);
    snprintf(wal, sizeof wal, "%s-wal", st->real);
    if ((rc = scratch_open(st, psize, vacuum, &to))) goto out;
    /* The damaged file is kept, never lost: it may hold what salvage
     * cannot read, and it is the evidence of what went wrong. */
    if (copy_bytes(st->real, copy) != 0 || (path_exists(wal) && copy_bytes(wal, copy_wal) != 0)) {
        rc = KDART_EIO;
        add_err(st, "cannot keep a copy of the damaged file (%s); left as it is", strerror(errno));
        goto out;
    }
    st->healing = 1;
    rc = salvage_sql(st, to, &ids, saved);
    if (!rc) rc = salvage_pages(st, to, wal, &ids, saved);
    copy_table(st, to, "quarantine", 0);
    copy_table(st, to, "counters", 0);
    st->healing = 0;
    if (rc) {
        add_err(st, "salvage ran out of memory; cache left as it is");
        goto out;
    }
    snprintf(side, sizeof side, "INSERT OR REPLACE INTO counters (name, value) VALUES ('heals', %lld)",
             (long long)(gen > 0 ? gen + 1 : 1));
    if ((rc = sql_exec(to, side, "counting the heal"))) {
        add_err(st, "%s", to->err);
        goto out;
    }
    st->healing = 1;
    rc = copy_over(st, to);
    st->healing = 0;
    if (rc) goto out;
    snprintf(aside, sizeof aside, "%s.corrupt-%lld-%ld", st->real, (long long)kdart__unix_time(), (long)getpid());
    rename(copy, aside);
    snprintf(side, sizeof side, "%s-wal", aside);
    rename(copy_wal, side);
    damage_flag_path(st, side, sizeof side);
    unlink(side);
    *seen = (int64_t)rowids_unique(&ids);
    add_err(st, "%lld of %lld entries salvaged into the healed file (the damaged one is kept as %s)",
            (long long)*saved, (long long)*seen, aside);
out:
    st->healing = 0;
    kdart__store_close(to);
    unlink(scratch);
    unlink(copy);
    unlink(copy_wal);
    kdart__free(ids.v);
    gate_leave(st);
    return rc;
}

/* The name the damaged file keeps beside the healed one, and its WAL.
 * A healing killed after giving the file that name and before taking it
 * away may have left one already (the same inode as real): it is used
 * again, and its -wal (the damaged file's, moved with it) is read too. */
static void aside_of(kdart__store *st, char *aside, size_t n, char *wal, size_t nwal) {
    struct stat me, sb;
    snprintf(aside, n, "%s.corrupt-%lld-%ld", st->real, (long long)kdart__unix_time(), (long)getpid());
    snprintf(wal, nwal, "%s-wal", st->real);
    if (stat(st->real, &me) != 0 || (stat(wal, &sb) == 0 && sb.st_size > 0)) return;
    const char *slash = strrchr(st->real, '/');
    size_t dlen = slash ? (size_t)(slash - st->real) : 0;
    char prefix[PATH_BUF];
    snprintf(prefix, sizeof prefix, "%s.corrupt-", slash ? slash + 1 : st->real);
    int fd = dup(st->dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0) close(fd);
        return;
    }
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0 || strchr(e->d_name + strlen(prefix), '-') !=
                                                                       strrchr(e->d_name + strlen(prefix), '-'))
            continue; /* not <prefix><time>-<pid> (a -wal or -shm) */
        if (fstatat(st->dirfd, e->d_name, &sb, 0) != 0 || sb.st_ino != me.st_ino || sb.st_dev != me.st_dev) continue;
        snprintf(aside, n, "%.*s/%s", (int)dlen, st->real, e->d_name);
        snprintf(wal, nwal, "%s-wal", aside);
        break;
    }
    closedir(d);
}

/* Heals a file SQLite cannot open at all (a garbage or cut header; a
 * damaged page 1, where the schema is): nothing can be written into it
 * through SQLite, so the entries its leaf pages still hold go into a
 * scratch store, which then takes the cache file's name by rename(2),
 * atomically: the path always names a whole file, the damaged one or the
 * healed one.  The damaged file first gets a second name (a hard link,
 * or a copy where links are refused), and its -wal and -shm move to that
 * name, so that no process pairs the new file with the old one's WAL.
 * Processes that still have the old file open notice the new one at
 * their next operation (replaced()) and reconnect.  Under the gate,
 * exclusive; when another process has healed the file while we waited,
 * nothing is done and the caller connects again.  What it did is kept
 * for open's note and the next verify (open_heal, open_seen). */
static int heal_by_swap(kdart__store *st, const char *why) {
    static const char *const sides[] = {"-wal", "-shm", "-journal"};
    char aside[PATH_BUF + 96], wal[PATH_BUF + 128], scratch[PATH_BUF + 96], from[PATH_BUF + 16],
        to_name[PATH_BUF + 128], check[256];
    kdart__store *to = NULL;
    rowids ids = {0};
    int64_t saved = 0;
    gate_enter(st, 1);
    remove_stale_scratch(st, 1);
    if (!header_damaged(st->real, check, sizeof check)) {
        int ok = db_connect(st, st->real, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) == KDART_OK &&
                 setup(st) == KDART_OK;
        disconnect(st);
        if (ok) {
            clear_err(st);
            gate_leave(st);
            return KDART_OK;
        }
    }
    clear_err(st);
    scratch_name(st, "", scratch, sizeof scratch);
    int rc = scratch_open(st, 4096, 2, &to);
    if (rc) goto out;
    aside_of(st, aside, sizeof aside, wal, sizeof wal);
    st->healing = 1;
    rc = salvage_pages(st, to, wal, &ids, &saved);
    st->healing = 0;
    if (!rc) rc = sql_exec(to, "PRAGMA journal_mode = WAL", "making the healed file a WAL database");
    if (rc) {
        add_err(st, "%s", to->err);
        goto out;
    }
    kdart__store_close(to); /* checkpoints: the scratch file is whole */
    to = NULL;
    int fd = open(scratch, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    if (!path_exists(aside) && link(st->real, aside) != 0 && copy_bytes(st->real, aside) != 0) {
        rc = set_err(st, KDART_EIO, "cache %s is damaged (%s) and no copy of it can be kept: %s", st->path, why,
                     strerror(errno));
        goto out;
    }
    for (size_t i = 0; i < sizeof sides / sizeof *sides; i++) {
        snprintf(from, sizeof from, "%s%s", st->real, sides[i]);
        snprintf(to_name, sizeof to_name, "%s%s", aside, sides[i]);
        (void)rename(from, to_name); /* usually absent */
    }
    if (rename(scratch, st->real) != 0) {
        rc = set_err(st, KDART_EIO, "cache %s is damaged (%s) and the healed file cannot take its place: %s",
                     st->path, why, strerror(errno));
        goto out;
    }
    fsync(st->dirfd);
    damage_flag_path(st, from, sizeof from);
    unlink(from);
    st->open_seen = (int64_t)rowids_unique(&ids);
    st->open_saved = saved;
    snprintf(st->open_heal, sizeof st->open_heal,
             "cache was damaged (%.200s); moved aside to %.200s, %lld of %lld entries salvaged into a fresh file", why,
             aside, (long long)saved, (long long)st->open_seen);
out:
    st->healing = 0;
    kdart__store_close(to);
    unlink(scratch);
    kdart__free(ids.v);
    gate_leave(st);
    return rc;
}

/* ------------------------------------------------------------- reserve */

/* A full disk is when cleaning matters most, and deleting needs room too:
 * each transaction appends its pages to the WAL, and the WAL gives space
 * back only once a checkpoint has copied it into the database.  So the
 * writable cache keeps <real>.reserve, a file of allocated blocks (1/64
 * of the file system, at least 256 KiB and at most 8 MiB), which gc, rm
 * and clear delete when they fail for want of space; then the cleaning
 * commits, a checkpoint truncates the WAL and the reserve is made again
 * once there is room. */
static void reserve_path(const kdart__store *st, char *buf, size_t n) { snprintf(buf, n, "%s.reserve", st->real); }

static void reserve_keep(kdart__store *st) {
    char path[PATH_BUF + 16];
    struct statvfs fs;
    struct stat sb;
    struct rlimit rl;
    if (!st->real || !writable(st) || statvfs(st->real, &fs) != 0) return;
    off_t want = (off_t)((uint64_t)fs.f_blocks * fs.f_frsize / 64);
    want = want < (256 << 10) ? (256 << 10) : want > (8 << 20) ? (8 << 20) : want;
    /* Past RLIMIT_FSIZE the allocation would raise SIGXFSZ. */
    if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (rlim_t)want > rl.rlim_cur) return;
    reserve_path(st, path, sizeof path);
    if (stat(path, &sb) == 0 && sb.st_size >= want) return;
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    int bad = posix_fallocate(fd, 0, want) != 0;
    close(fd);
    if (bad) unlink(path); /* no room for it: nothing held back */
}

/* Gives the reserve's space to the file system: 1 when there was one. */
static int reserve_release(kdart__store *st) {
    char path[PATH_BUF + 16];
    if (!st->real) return 0;
    reserve_path(st, path, sizeof path);
    return unlink(path) == 0;
}

static int reserve_present(const kdart__store *st) {
    char path[PATH_BUF + 16];
    if (!st->real) return 1;
    reserve_path(st, path, sizeof path);
    return path_exists(path);
}

/* Whether a checkpoint can finish in the free space once the free pages
 * are gone (after_vacuum), or now: it writes the WAL's pages into the
 * database file, up to the database's size, and the file must grow that
 * far first.  One that cannot finish still grows the file into whatever
 * space there is, which is then gone for the WAL frames cleaning needs. */
static int checkpoint_fits(kdart__store *st, int after_vacuum) {
    int64_t pages = 0, psize = 0, free_pages = 0;
    struct stat sb;
    struct statvfs fs;
    if (query_int64(st, "PRAGMA page_count", &pages, "sizing the cache") ||
        query_int64(st, "PRAGMA page_size", &psize, "sizing the cache") ||
        (after_vacuum && query_int64(st, "PRAGMA freelist_count", &free_pages, "sizing the cache")) ||
        stat(st->real, &sb) != 0 || statvfs(st->real, &fs) != 0)
        return 0;
    return (pages - free_pages) * psize - (int64_t)sb.st_size <= (int64_t)fs.f_bavail * (int64_t)fs.f_frsize;
}

/* Whether what the database holds (its pages less the free ones) fits
 * twice in the free space: once in a scratch file, once more as the
 * database file grows when the WAL is checkpointed into it. */
static int compact_fits(kdart__store *st) {
    int64_t pages = 0, psize = 0, free_pages = 0;
    struct stat sb;
    struct statvfs fs;
    if (query_int64(st, "PRAGMA page_count", &pages, "sizing the cache") ||
        query_int64(st, "PRAGMA page_size", &psize, "sizing the cache") ||
        query_int64(st, "PRAGMA freelist_count", &free_pages, "sizing the cache") || stat(st->real, &sb) != 0 ||
        statvfs(st->real, &fs) != 0)
        return 0;
    int64_t live = (pages - free_pages) * psize, grow = live - (int64_t)sb.st_size;
    return live + (grow > 0 ? grow : 0) <= (int64_t)fs.f_bavail * (int64_t)fs.f_frsize;
}

/* Rebuilds the file with what it holds: every row into a scratch store,
 * copied over the file page for page (copy_over), as one transaction whose
 * WAL frames are the kept pages only.  An incremental vacuum would make
 * every freed page dirty, and the page cache spills those into the WAL,
 * which is what a full disk has no room for.  Under the gate, exclusive,
 * so that nothing is published between the copying and the commit. */
static int compact(kdart__store *st) {
    static const char *const tables[] = {"entries", "quarantine", "leases", "counters"};
    char scratch[PATH_BUF + 96];
    kdart__store *to = NULL;
    int64_t psize = 4096, vacuum = 2;
    gate_enter(st, 1);
    query_int64(st, "PRAGMA page_size", &psize, "reading the page size");
    query_int64(st, "PRAGMA auto_vacuum", &vacuum, "reading auto_vacuum");
    scratch_name(st, "", scratch, sizeof scratch);
    int rc = scratch_open(st, psize, vacuum, &to);
    for (size_t i = 0; !rc && i < sizeof tables / sizeof *tables; i++) rc = copy_table(st, to, tables[i], i == 0);
    if (!rc) rc = copy_over(st, to);
    kdart__store_close(to);
    unlink(scratch);
    gate_leave(st);
    return rc;
}

/* Runs a cleaning operation (gc, rm, clear) under the gate, in one
 * transaction that ends with an incremental vacuum, so that the freed
 * pages go back to the file system with it.  When that fails for want of
 * space, the disk is full: the reserve is given up and the operation runs
 * again without the vacuum, which needs room of its own (and so it does
 * from the start while the reserve is gone).  Then, while the
 * reserve is gone, the space comes back as soon as what is left fits
 * (after clear, or a gc to a small budget): the file is rebuilt with it
 * (compact) and the WAL, which may hold the whole cache, is checkpointed
 * and truncated; and the reserve is made again once there is room.  No
 * checkpoint runs that cannot finish, not even on close (checkpoint_fits
 * says why). */
static int clean(kdart__store *st, int (*op)(kdart__store *st, void *arg), void *arg) {
    gate_enter(st, 0);
    sqlite3_wal_autocheckpoint(st->db, 0);
    int rc = KDART_OK;
    /* No reserve: the disk was full, and a vacuum that fails there still
     * leaves the WAL grown into the last free bytes. */
    for (int round = st->real && !reserve_present(st); round < 2; round++) {
        clear_err(st);
        if ((rc = sql_exec(st, "BEGIN IMMEDIATE", "starting to clean the cache")) || (rc = op(st, arg)) ||
            (round == 0 && (rc = sql_exec(st, "PRAGMA incremental_vacuum", "giving freed pages back"))) ||
            (rc = sql_exec(st, "COMMIT", "committing the cleaning")))
            rollback(st);
        if (rc == KDART_OK || (st->last_src & 0xff) != SQLITE_FULL) break;
        reserve_release(st);
    }
    gate_leave(st);
    if (rc == KDART_OK && st->real && !reserve_present(st)) {
        char note[sizeof st->err];
        memcpy(note, st->err, sizeof note);
        if (!checkpoint_fits(st, 0) && compact_fits(st)) compact(st);
        if (checkpoint_fits(st, 0)) sqlite3_exec(st->db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL);
        else sqlite3_db_config(st->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)NULL);
        reserve_keep(st);
        memcpy(st->err, note, sizeof note); /* the cleaning worked; the rest was a try */
    }
    sqlite3_wal_autocheckpoint(st->db, SQLITE_DEFAULT_WAL_AUTOCHECKPOINT);
    return rc;
}

int kdart__store_verify(kdart__store *st, int64_t *checked, int64_t *damaged) {
    sqlite3_stmt *sel = NULL;
    int64_t nchecked = 0, ndamaged = 0, last = 0;
    int db_bad = 0, rc, src;
    char key[65];
    if (checked) *checked = 0;
    if (damaged) *damaged = 0;
    if (!st) return KDART_EINVAL;
    op_begin(st);
    /* 0. Damage that open healed (an unreadable file): said once, here. */
    int64_t open_seen = st->open_seen, open_lost = 0;
    if (open_seen >= 0) {
        add_err(st, "%s", st->open_heal);
        open_lost = st->open_seen - st->open_saved;
        st->open_seen = -1;
        db_bad = 1;
    }
    int64_t gen = writable(st) ? heals_of(st) : 0;
    if (writable(st)) remove_stale_scratch(st, 0);

    /* 1. SQLite's own view of the file.  Indexes can be rebuilt from the
     * table, so a writable store tries that once.  Damage that REINDEX
     * cannot repair, or that stops integrity_check itself, is in the
     * pages: the rows are checked as far as they can be read, then the
     * file is healed (step 3). */
    int pages_bad = 0, bad = 0;
    if ((rc = integrity(st, &bad))) {
        if (!is_damage(st->last_src)) goto done;
        bad = pages_bad = 1;
    }
    if (bad && !pages_bad && writable(st)) {
        int still = 0;
        gate_enter(st, 0);
        if (sqlite3_exec(st->db, "REINDEX", NULL, NULL, NULL) == SQLITE_OK && !integrity(st, &still) && !still)
            add_err(st, "indexes rebuilt, integrity_check now ok");
        else
            pages_bad = 1;
        gate_leave(st);
    }
    db_bad |= bad;

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
            rc = sql_note(st, src, "verifying entries after rowid %lld", (long long)last);
            if (!is_damage(src)) goto done;
            db_bad = pages_bad = 1;
            break;
        }
        int64_t rowid = sqlite3_column_int64(sel, 0);
        const char *k = (const char *)sqlite3_column_text(sel, 1);
        snprintf(key, sizeof key, "%s", k ? k : "");
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

    /* 3. Damaged pages: the file is healed with what can be read.  The
     * counts then say how many entries there were (as far as any path
     * shows them) and how many of them are lost, not only what the
     * damaged b-tree let step 2 see. */
    if (pages_bad && writable(st) && st->real) {
        sqlite3_finalize(sel);
        sel = NULL;
        int64_t seen, saved;
        int other;
        rc = heal_in_place(st, gen, &seen, &saved, &other);
        if (!rc && !other) {
            if (seen > nchecked) nchecked = seen;
            if (seen > saved) ndamaged += seen - saved;
        }
    } else if (pages_bad) {
        add_err(st, "read-only cache, left as it is");
    }

done:
    sqlite3_finalize(sel);
    if (open_seen > nchecked) nchecked = open_seen;
    ndamaged += open_lost;
    if (checked) *checked = nchecked;
    if (damaged) *damaged = ndamaged;
    if (rc == KDART_ECORRUPT || (!rc && (db_bad || ndamaged))) return KDART_ECORRUPT;
    return rc;
}

/* ----------------------------------------------------------------- gc */

typedef struct gc_args {
    int64_t max_bytes, evicted, freed;
} gc_args;

static int gc_op(kdart__store *st, void *arg) {
    gc_args *a = arg;
    return evict(st, a->max_bytes, NULL, &a->evicted, &a->freed);
}

typedef struct age_args {
    int64_t before, evicted, freed;
} age_args;

static int age_op(kdart__store *st, void *arg) {
    age_args *a = arg;
    int64_t total0, total1;
    sqlite3_stmt *del;
    int rc = query_int64(st, "SELECT COALESCE(SUM(cubin_size), 0) FROM entries", &total0, "sizing the cache");
    if (rc || (rc = prepare(st, "DELETE FROM entries WHERE last_used < ?1", &del, "evicting unused entries")))
        return rc;
    sqlite3_bind_int64(del, 1, a->before);
    int src = sqlite3_step(del);
    if (src != SQLITE_DONE) rc = sql_err(st, src, "evicting unused entries");
    sqlite3_finalize(del);
    if (rc) return rc;
    a->evicted = sqlite3_changes(st->db);
    if ((rc = query_int64(st, "SELECT COALESCE(SUM(cubin_size), 0) FROM entries", &total1, "sizing the cache")))
        return rc;
    a->freed = total0 - total1;
    return KDART_OK;
}

int kdart__store_gc_age(kdart__store *st, int64_t before, int64_t *evicted, int64_t *freed) {
    if (evicted) *evicted = 0;
    if (freed) *freed = 0;
    if (!st) return KDART_EINVAL;
    op_begin(st);
    if (!writable(st)) return set_err(st, KDART_ECACHE, "cache %s is read-only", st->path);
    age_args a = {before, 0, 0};
    int rc = clean(st, age_op, &a);
    if (rc) return rc;
    if (evicted) *evicted = a.evicted;
    if (freed) *freed = a.freed;
    return KDART_OK;
}

void kdart__store_set_max_bytes(kdart__store *st, int64_t max_bytes) {
    if (st) st->max_bytes = max_bytes;
}

int kdart__store_gc(kdart__store *st, int64_t max_bytes, int64_t *evicted, int64_t *freed) {
    if (evicted) *evicted = 0;
    if (freed) *freed = 0;
    if (!st) return KDART_EINVAL;
    op_begin(st);
    if (max_bytes < 0) return set_err(st, KDART_EINVAL, "gc: max_bytes must be >= 0");
    if (!writable(st)) return set_err(st, KDART_ECACHE, "cache %s is read-only", st->path);
    gc_args a = {max_bytes, 0, 0};
    int rc = clean(st, gc_op, &a);
    if (rc) return rc;
    if (evicted) *evicted = a.evicted;
    if (freed) *freed = a.freed;
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
    gate_enter(st, 0);
    int src = sqlite3_step(stmt);
    gate_leave(st);
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
    op_begin(st);
    if (!mine) return set_err(st, KDART_EINVAL, "lease_take: mine is NULL");
    memset(mine, 0, sizeof *mine);
    int rc = lease_check(st, key, "lease_take");
    if (rc) return rc;
    if (ttl_ms <= 0) return set_err(st, KDART_EINVAL, "lease_take: ttl must be positive");
    lease_identity me;
    identity_get(&me);
    gate_enter(st, 0);
    if ((rc = sql_exec(st, "BEGIN IMMEDIATE", "starting a lease"))) goto fail;
    int64_t now = wall_ms();
    kdart__lease cur;
    rc = lease_read(st, key, &cur);
    if (rc == KDART_OK && lease_alive(&cur, now)) {
        if (holder) *holder = cur;
        rollback(st);
        gate_leave(st);
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
    gate_leave(st);
    return KDART_OK;
fail:
    rollback(st);
    gate_leave(st);
    memset(mine, 0, sizeof *mine);
    return rc;
}

/* The WHERE clause that matches exactly one lease (?1 key, ?2 host,
 * ?3 boot id, ?4 pid, ?5 started). */
#define LEASE_IS_MINE "key = ?1 AND owner_host = ?2 AND boot_id = ?3 AND owner_pid = ?4 AND started = ?5"

int kdart__store_lease_renew(kdart__store *st, kdart__lease *mine, int64_t ttl_ms) {
    if (!st) return KDART_EINVAL;
    op_begin(st);
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
    op_begin(st);
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
    op_begin(st);
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

static int remove_op(kdart__store *st, void *arg) {
    const char *key = arg;
    sqlite3_stmt *del;
    int rc = prepare(st, "DELETE FROM entries WHERE key = ?1", &del, "removing an entry");
    if (rc) return rc;
    sqlite3_bind_text(del, 1, key, -1, SQLITE_STATIC);
    int src = sqlite3_step(del);
    rc = src == SQLITE_DONE ? KDART_OK : sql_err(st, src, "removing entry %.12s", key);
    sqlite3_finalize(del);
    if (rc == KDART_OK && sqlite3_changes(st->db) == 0)
        rc = set_err(st, KDART_ENOENT, "no entry %.12s in %s", key, st->path);
    return rc;
}

int kdart__store_remove(kdart__store *st, const char *key) {
    if (!st || !key) return KDART_EINVAL;
    op_begin(st);
    if (!is_full_key(key)) return set_err(st, KDART_EINVAL, "remove: '%s' is not a full key", key);
    if (!writable(st)) return set_err(st, KDART_ECACHE, "cache %s is read-only", st->path);
    return clean(st, remove_op, (void *)key);
}

static int clear_op(kdart__store *st, void *arg) {
    int rc = query_int64(st, "SELECT count(*) FROM entries", arg, "counting entries");
    return rc ? rc : sql_exec(st, "DELETE FROM entries; DELETE FROM quarantine", "clearing the cache");
}

int kdart__store_clear(kdart__store *st, int64_t *removed) {
    int64_t n = 0;
    if (removed) *removed = 0;
    if (!st) return KDART_EINVAL;
    op_begin(st);
    if (!writable(st)) return set_err(st, KDART_ECACHE, "cache %s is read-only", st->path);
    int rc = clean(st, clear_op, &n);
    if (rc == KDART_OK && removed) *removed = n;
    return rc;
}

int kdart__store_count(kdart__store *st, const char *name, int64_t delta) {
    if (!st || !name) return KDART_EINVAL;
    op_begin(st);
    if (!writable(st)) return KDART_OK; /* a read-only cache counts nothing */
    int rc;
    gate_enter(st, 0);
    if (!st->counters_ready) { /* once per connection, not once per miss */
        rc = sql_exec(st, COUNTERS_TABLE, "creating the counters table");
        if (rc) {
            gate_leave(st);
            return rc;
        }
        st->counters_ready = 1;
    }
    sqlite3_stmt *up;
    if ((rc = prepare(st,
                      "INSERT INTO counters(name, value) VALUES (?1, ?2) "
                      "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
                      &up, "counting"))) {
        gate_leave(st);
        return rc;
    }
    sqlite3_bind_text(up, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(up, 2, delta);
    int src = sqlite3_step(up);
    rc = src == SQLITE_DONE ? KDART_OK : sql_err(st, src, "counting %s", name);
    sqlite3_finalize(up);
    gate_leave(st);
    return rc;
}

int kdart__store_counter_set(kdart__store *st, const char *name, int64_t value) {
    if (!st || !name) return KDART_EINVAL;
    op_begin(st);
    if (!writable(st)) return set_err(st, KDART_ECACHE, "cache %s is read-only", st->path);
    gate_enter(st, 0);
    int rc = sql_exec(st, COUNTERS_TABLE, "creating the counters table");
    sqlite3_stmt *up = NULL;
    if (!rc && !(rc = prepare(st, "INSERT OR REPLACE INTO counters(name, value) VALUES (?1, ?2)", &up, "setting"))) {
        sqlite3_bind_text(up, 1, name, -1, SQLITE_STATIC);
        sqlite3_bind_int64(up, 2, value);
        int src = sqlite3_step(up);
        rc = src == SQLITE_DONE ? KDART_OK : sql_err(st, src, "setting %s", name);
        sqlite3_finalize(up);
    }
    if (!rc) st->counters_ready = 1;
    gate_leave(st);
    return rc;
}

static int zero_op(kdart__store *st, void *arg) {
    (void)arg;
    int rc = sql_exec(st, "UPDATE entries SET hits = 0 WHERE hits != 0", "zeroing the hit counts");
    if (!rc) rc = sql_exec(st, COUNTERS_TABLE, "creating the counters table");
    if (!rc) rc = sql_exec(st, "UPDATE counters SET value = 0 WHERE name = 'misses'", "zeroing the misses");
    return rc;
}

int kdart__store_zero_stats(kdart__store *st) {
    if (!st) return KDART_EINVAL;
    op_begin(st);
    if (!writable(st)) return set_err(st, KDART_ECACHE, "cache %s is read-only", st->path);
    return clean(st, zero_op, NULL);
}

int kdart__store_counter(kdart__store *st, const char *name, int64_t *value) {
    if (!st || !name || !value) return KDART_EINVAL;
    op_begin(st);
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
