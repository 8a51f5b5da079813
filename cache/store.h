/*
 * store.h: the SQLite compile cache, as the runtime sees it.
 *
 * One kdart__store is one database file, opened writable (the node's cache)
 * or read-only (a prebuilt cache shipped in an image).  Entries are keyed by
 * the hex SHA-256 of their manifest.  The store guarantees:
 *   - a blob is returned only after its SHA-256 matched the stored digest; a
 *     mismatch moves the row to the quarantine table and reports ENOENT so
 *     the caller recompiles (never a crash, never a wrong cubin);
 *   - publication is one transaction; a row that already exists means
 *     another writer won, which is success;
 *   - an entry that was committed stays findable: damage is healed with
 *     every entry that can still be read (from every page of the file),
 *     while publishers wait and then publish into the healed file; a file
 *     SQLite cannot open at all is healed so by open; the path always
 *     names a whole file and the damaged one is kept beside it;
 *   - a writable open of a cache that cannot be written (read-only
 *     directory, file or mount, full disk, fcntl locks that fail) opens
 *     the file read-only instead (kdart__store_readonly then says 1, errmsg
 *     says why), and fails with KDART_EIO only when there is no file to
 *     read, so the runtime carries on in memory;
 *   - gc, remove and clear work on a full disk (a reserve file beside the
 *     cache gives them room) and give the space back;
 *   - last_used and hit counts live in the rows (no file atimes), and the
 *     byte budget evicts by last_used;
 *   - compile leases (schema 2) let processes sharing the file compile
 *     each key once: a row in `leases`, taken in one transaction, that
 *     stops blocking others at its expiry or when its owner is seen dead.
 * Strings and blobs handed out are allocated with kdart__malloc and freed
 * with kdart__row_release.  Not thread-safe by itself: the runtime
 * serializes calls on one store with its own lock.
 */
#ifndef KDART_CACHE_STORE_H
#define KDART_CACHE_STORE_H

#include <stddef.h>
#include <stdint.h>

#define KDART__STORE_SCHEMA 2 /* PRAGMA user_version of the newest schema */

typedef struct kdart__store kdart__store;

/* One row.  For put, the caller fills every field it has; key, kernel,
 * spec, arch and manifest are required, cubin may be absent for failed. */
typedef struct kdart__row {
    char key[65];
    char *kernel, *spec, *arch;
    int failed;              /* 1: a recorded compile failure */
    char *manifest;          /* sorted "name=value\n" lines */
    char *report;            /* "name=value\n" lines (registers, spills, ...) */
    char *log;               /* compiler and linker logs */
    char *lowered;           /* lowered kernel names, one per line */
    unsigned char *cubin;
    size_t cubin_size;
    char cubin_sha256[65];
    double compile_ms;
    int64_t created, last_used, hits;
} kdart__row;

/* Frees the strings and blob a row owns and zeroes it. */
void kdart__row_release(kdart__row *row);

/* Opens (creating the file and its directories when writable) the store.
 * readonly: open with SQLITE_OPEN_READONLY and never write.  A writable
 * open may come back read-only (see above): check kdart__store_readonly.
 * max_bytes: byte budget for cubins, <= 0 unlimited.
 * On failure returns a KDART status and writes a message into err. */
int kdart__store_open(kdart__store **out, const char *path, int readonly,
                      int64_t max_bytes, char *err, size_t errlen);
void kdart__store_close(kdart__store *st);
int kdart__store_readonly(const kdart__store *st);
const char *kdart__store_path(const kdart__store *st);
/* Message of the store's last failure ("" if none). */
const char *kdart__store_errmsg(const kdart__store *st);

/* Looks up a full key.  KDART_OK fills *row (checksum verified);
 * KDART_ENOENT when absent or just quarantined (errmsg says which). */
int kdart__store_get(kdart__store *st, const char *key, kdart__row *row);
/* Publishes one row in one transaction, then enforces the byte budget.
 * An existing row with the same key is kept (another writer won) unless
 * replace is set.  Fills cubin_sha256 itself. */
int kdart__store_put(kdart__store *st, kdart__row *row, int replace);
/* last_used = now, hits += 1.  A read-only store ignores it. */
int kdart__store_touch(kdart__store *st, const char *key);
/* Resolves a unique key prefix to the full key: OK, ENOENT or EAMBIGUOUS. */
int kdart__store_resolve(kdart__store *st, const char *prefix, char key[65]);
/* Calls fn for every row without cubin, log or manifest bodies
 * (manifest is filled when with_manifest is set); fn returns nonzero to stop. */
int kdart__store_list(kdart__store *st, int with_manifest,
                      int (*fn)(void *user, const kdart__row *row), void *user);

typedef struct kdart__store_stats {
    int64_t entries, failed, quarantined, bytes, hits;
    double compile_ms_total;
} kdart__store_stats;
/* (named _getstats: kdart__store_stats is the struct) */
int kdart__store_getstats(kdart__store *st, kdart__store_stats *out);
/* PRAGMA integrity_check plus every blob's digest; quarantines bad rows,
 * rebuilds damaged indexes, and heals a file with damaged pages in place
 * with every entry that can still be read (a copy of the damaged file is
 * kept beside it).  Also reports, once, a file that open healed.
 * *checked counts the entries found, *damaged those quarantined or lost.
 * Operations that meet such damage leave <path>.damaged, and the next
 * writable open runs this to heal. */
int kdart__store_verify(kdart__store *st, int64_t *checked, int64_t *damaged);
/* Evicts rows by oldest last_used until cubin bytes <= max_bytes. */
int kdart__store_gc(kdart__store *st, int64_t max_bytes, int64_t *evicted, int64_t *freed);
/* Evicts the rows last used before `before` (unix seconds), failed ones too. */
int kdart__store_gc_age(kdart__store *st, int64_t before, int64_t *evicted, int64_t *freed);
/* The budget puts keep (<= 0: none); open's max_bytes until changed. */
void kdart__store_set_max_bytes(kdart__store *st, int64_t max_bytes);

/* Deletes the entry with this full key: OK, or ENOENT when there is none.
 * The writable store only (ECACHE when read-only). */
int kdart__store_remove(kdart__store *st, const char *key);
/* Deletes every entry and quarantined row in one transaction; *removed
 * (may be NULL) counts the entries.  Leases are left alone. */
int kdart__store_clear(kdart__store *st, int64_t *removed);
/* Adds delta to the named counter kept in the file (created at 0); a
 * read-only store counts nothing.  kdart__store_counter reads one (0 when
 * never counted). */
int kdart__store_count(kdart__store *st, const char *name, int64_t delta);
int kdart__store_counter(kdart__store *st, const char *name, int64_t *value);
/* Sets the named counter to value (the file's own settings live there too:
 * "limit.max_bytes"); ECACHE when read-only. */
int kdart__store_counter_set(kdart__store *st, const char *name, int64_t value);
/* Zeroes the statistics: every entry's hit count and the "misses" counter. */
int kdart__store_zero_stats(kdart__store *st);

/* ------------------------------------------------------------- leases */

/* A compile lease: "process owner_pid on owner_host (booted as boot_id)
 * is compiling key; wait for its entry until expiry".  Times are unix
 * milliseconds (wall clock, comparable between processes of one host).
 * started also tells two leases of one process apart (two handles). */
typedef struct kdart__lease {
    char key[65];
    int64_t owner_pid;
    char owner_host[256];
    char boot_id[96];        /* "<boot id>/pidns:<inode of /proc/self/ns/pid>" */
    int64_t started, heartbeat, expiry;
} kdart__lease;

/* A holder whose pid cannot be probed (another host, boot or pid
 * namespace) is dead once its heartbeat is this old: several renewals
 * (KDART__LEASE_RENEW_MS, 5 s) missed. */
#define KDART__LEASE_STALE_MS 20000

/* Takes the lease on key for ttl_ms, in one BEGIN IMMEDIATE transaction.
 * It succeeds when no lease row exists, when the row has expired, when
 * its owner ran on this host under the same boot id in the same pid
 * namespace and its pid is gone (kill(pid, 0) fails with ESRCH), or when
 * its owner is elsewhere (host, boot, namespace; or a row of a kdart that
 * recorded no namespace) and its heartbeat is KDART__LEASE_STALE_MS old.  KDART_OK: *mine holds the lease (pass
 * it to renew and release).  KDART_EAGAIN: a live lease of someone else;
 * *holder (may be NULL) describes it.  Other statuses: the store failed
 * (errmsg says how).  Expired rows of every key are deleted on the way. */
int kdart__store_lease_take(kdart__store *st, const char *key, int64_t ttl_ms, kdart__lease *mine,
                            kdart__lease *holder);
/* heartbeat = now, expiry = now + ttl_ms, if mine is still the lease on
 * its key; KDART_ENOENT when it is not (it expired and was taken over, or
 * was released). */
int kdart__store_lease_renew(kdart__store *st, kdart__lease *mine, int64_t ttl_ms);
/* Deletes the lease if it is still mine; releasing a lost lease is OK. */
int kdart__store_lease_release(kdart__store *st, const kdart__lease *mine);
/* Is there a live lease on key?  KDART_OK and *holder (may be NULL) when
 * there is; KDART_ENOENT when there is none, or it has expired, or its
 * owner is a dead process of this boot and pid namespace, or one elsewhere
 * with a stale heartbeat (as for take). */
int kdart__store_lease_live(kdart__store *st, const char *key, kdart__lease *holder);
/* Test seam: makes this process pose as another owner in the leases it
 * takes from now on (pid 0, host NULL or boot_id NULL: keep the real one);
 * kdart__store_lease_identity(0, NULL, NULL) restores the truth. */
void kdart__store_lease_identity(int64_t pid, const char *host, const char *boot_id);

#endif /* KDART_CACHE_STORE_H */
