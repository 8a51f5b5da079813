/*
 * prepare.c: kdart_prepare, from (kernel, spec, arch) to a cubin that is
 * cached and, when the arch is the current device's, loaded.
 *
 * DESIGN.  A request becomes a manifest: sorted "name=value" lines naming
 * everything that can change the cubin (kernel, spec values, arch, entry
 * expression, NVRTC and nvJitLink options and versions, NVRTC's build id,
 * the key schema, and the SHA-256 of every kernel_src file the unit
 * includes).  The key is the SHA-256 of that text.  No path is in it, so a
 * cache file copied to another machine or directory still hits, while an
 * edit to any included header misses.  The manifest is stored with the
 * entry; `kdart why` diffs it against the nearest entries.
 *
 * Lookup order: units already in this process, the writable cache, then
 * the read-only caches in order, and only then a compile.  A recorded
 * compile failure is answered from the cache (negative caching) until
 * something in the key changes or the caller passes KDART_PREPARE_FORCE.
 *
 * A cache that is missing, read-only or failing never stops a prepare: the
 * unit lives in memory, and the log says so once.
 *
 * Locking: rt->lock is held for lookups and publication and released for
 * the compile itself, so prewarm threads compile different keys at once,
 * and while waiting for a compile of the same key by another thread or
 * process (see PROTOCOL below: one compile per key per cache).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rt.h"

#define KDART__MANIFEST_MAX 64 /* lines */

typedef struct request {
    const kdart__kernel *k;
    int kernel;
    int vals[KDART__MAX_PARAMS];
    char spec[128];
    char arch[16];
    char entry[256];
    kdart__sources src;
    char *tu;
    char *manifest;
    char key[65];
    const char *nvrtc_opts[8];
    int n_nvrtc;
    const char *link_opts[8];
    int n_link;
    char arch_opt[32];
} request;

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }


/* Builds the manifest text of a request (sources already loaded). */
static int build_manifest(kdart_rt *rt, request *q) {
    char *lines[KDART__MANIFEST_MAX];
    int n = 0, rc = KDART_OK;
    char opts[512];
    if (!rt->nvrtc_build && (rc = kdart__nvrtc_build_id(&rt->nvrtc_build)) != KDART_OK)
        return kdart__err(rt, rc, "cannot determine the NVRTC build id");
    const char *build = rt->nvrtc_build;
#define LINE(...)                                                                 \
    do {                                                                          \
        char tmp[1024];                                                           \
        snprintf(tmp, sizeof tmp, __VA_ARGS__);                                   \
        if (n == KDART__MANIFEST_MAX || !(lines[n] = kdart__strdup(tmp))) goto oom; \
        n++;                                                                      \
    } while (0)
    LINE("kdart.key_schema=%d", KDART__KEY_SCHEMA);
    LINE("kernel=%s", q->k->name);
    for (int i = 0; i < q->k->nparams; i++) LINE("spec.%s=%s", q->k->params[i].name, q->k->params[i].values[q->vals[i]]);
    LINE("arch=%s", q->arch);
    LINE("entry=%s", q->entry);
    opts[0] = 0;
    for (int i = 0; i < q->n_nvrtc; i++) {
        strncat(opts, i ? " " : "", sizeof opts - strlen(opts) - 1);
        strncat(opts, q->nvrtc_opts[i], sizeof opts - strlen(opts) - 1);
    }
    LINE("nvrtc.options=%s", opts);
    opts[0] = 0;
    for (int i = 0; i < q->n_link; i++) {
        strncat(opts, i ? " " : "", sizeof opts - strlen(opts) - 1);
        strncat(opts, q->link_opts[i], sizeof opts - strlen(opts) - 1);
    }
    LINE("nvjitlink.options=%s", opts);
    LINE("nvrtc.version=%d.%d", rt->nvrtc_major, rt->nvrtc_minor);
    LINE("nvrtc.build=%s", build);
    LINE("nvjitlink.version=%u.%u", rt->jl_major, rt->jl_minor);
    for (int i = 0; i < q->src.nfiles; i++) LINE("source.%s=%s", q->src.files[i].name, q->src.files[i].sha256);
#undef LINE
    qsort(lines, (size_t)n, sizeof *lines, cmp_str);
    size_t total = 1;
    for (int i = 0; i < n; i++) total += strlen(lines[i]) + 1;
    q->manifest = kdart__malloc(total);
    if (!q->manifest) goto oom;
    char *p = q->manifest;
    for (int i = 0; i < n; i++) {
        size_t l = strlen(lines[i]);
        memcpy(p, lines[i], l);
        p[l] = '\n';
        p += l + 1;
    }
    *p = 0;
    kdart__sha256_hex(q->manifest, strlen(q->manifest), q->key);
    goto done;
oom:
    rc = kdart__err(rt, KDART_ENOMEM, "building the manifest");
done:
    for (int i = 0; i < n; i++) kdart__free(lines[i]);
    return rc;
}

static void request_free(request *q) {
    kdart__sources_free(&q->src);
    kdart__free(q->tu);
    kdart__free(q->manifest);
}

/* The rest of a request (sources already loaded): what needs no cache and
 * no compiler.  Called under rt->lock (the NVRTC build id is computed
 * once, lazily). */
static int request_init(kdart_rt *rt, request *q, const int *vals, const char *arch) {
    memcpy(q->vals, vals, sizeof q->vals);
    kdart__spec_format(q->k, q->vals, q->spec, sizeof q->spec);
    snprintf(q->arch, sizeof q->arch, "%s", arch);
    kdart__spec_entry(q->k, q->vals, q->entry, sizeof q->entry);
    snprintf(q->arch_opt, sizeof q->arch_opt, "-arch=%s", q->arch);
    /* The option lists are part of the key, in this order. */
    q->nvrtc_opts[q->n_nvrtc++] = q->arch_opt;
    q->nvrtc_opts[q->n_nvrtc++] = "-dlto";
    q->nvrtc_opts[q->n_nvrtc++] = "-std=c++17";
    q->nvrtc_opts[q->n_nvrtc++] = "-default-device";
    q->link_opts[q->n_link++] = q->arch_opt;
    q->link_opts[q->n_link++] = "-lto";
    q->link_opts[q->n_link++] = "-verbose";
    q->link_opts[q->n_link++] = "-Xptxas=-v";
    char tu[512];
    snprintf(tu, sizeof tu,
             "/* kdart unit: %s %s for %s */\n#include \"%s\"\n", q->k->name, q->spec, q->arch, q->k->source);
    q->tu = kdart__strdup(tu);
    if (!q->tu) return kdart__err(rt, KDART_ENOMEM, "building the translation unit");
    return build_manifest(rt, q);
}

static kdart__unit *unit_find(kdart_rt *rt, const char *key) {
    for (kdart__unit *u = rt->units; u; u = u->next)
        if (strcmp(u->key, key) == 0) return u;
    return NULL;
}

/* Takes ownership of cubin and lowered. */
static int unit_add(kdart_rt *rt, const request *q, unsigned char *cubin, size_t size, char *lowered,
                    kdart__unit **out) {
    kdart__unit *u = kdart__calloc(1, sizeof *u);
    if (!u) {
        kdart__free(cubin);
        kdart__free(lowered);
        return kdart__err(rt, KDART_ENOMEM, "recording a unit");
    }
    memcpy(u->key, q->key, sizeof u->key);
    u->kernel = q->kernel;
    u->spec = kdart__spec_index(q->k, q->vals);
    snprintf(u->arch, sizeof u->arch, "%s", q->arch);
    u->cubin = cubin;
    u->cubin_size = size;
    u->lowered = lowered;
    q->k->launch_shape(q->vals, &u->threads, &u->smem);
    u->next = rt->units;
    rt->units = u;
    *out = u;
    return KDART_OK;
}

/* A failing cache (full disk, lost permissions) warns once per handle; the
 * repeats go to DEBUG, or a full disk would warn on every compile. */
static void warn_cache(kdart_rt *rt, const char *what, kdart__store *st) {
    int level = rt->cache_warned ? KDART_LOG_DEBUG : KDART_LOG_WARN;
    rt->cache_warned = 1;
    kdart__log(rt, level, "cache %s: %s failed (%s); continuing in memory", kdart__store_path(st), what,
               kdart__store_errmsg(st));
}

/* Looks the key up in the stores.  On a hit fills row and *tier. */
static int store_lookup(kdart_rt *rt, const char *key, kdart__row *row, int *tier) {
    kdart__store **stores = rt->tiers;
    for (int i = 0; i < (int)(1 + rt->n_ro); i++) {
        if (!stores[i]) continue;
        int rc = kdart__store_get(stores[i], key, row);
        if (rc == KDART_OK) {
            *tier = i;
            if (i == 0 && kdart__store_touch(stores[i], key) != KDART_OK)
                kdart__log(rt, KDART_LOG_DEBUG, "cache touch failed: %s", kdart__store_errmsg(stores[i]));
            return KDART_OK;
        }
        if (rc == KDART_ENOMEM) return kdart__err(rt, rc, "reading the cache");
        if (rc != KDART_ENOENT)
            kdart__log(rt, KDART_LOG_WARN, "cache %s: lookup failed (%s)", kdart__store_path(stores[i]),
                       kdart__store_errmsg(stores[i]));
        else if (kdart__store_errmsg(stores[i])[0])
            kdart__log(rt, KDART_LOG_WARN, "cache %s: %s", kdart__store_path(stores[i]),
                       kdart__store_errmsg(stores[i]));
    }
    return KDART_ENOENT;
}

/* The tail of a log, for error messages: the end is where compilers put
 * the error that stopped them. */
static const char *log_tail(const char *log) {
    if (!log) return "";
    size_t n = strlen(log);
    return n > 1500 ? log + n - 1500 : log;
}

/* ------------------------------------------------------ one compile per key
 *
 * PROTOCOL.  Many threads of one process, and many processes sharing one
 * writable cache, may ask for the same uncompiled key at once.  Exactly one
 * of them compiles it; the others wait and then load what it published.
 *
 *  1. In this process (single flight).  Under rt->lock, a thread that
 *     misses (no unit in memory, no entry in the caches) creates a flight
 *     record for the key in rt->flights and becomes its owner.  A thread
 *     that finds a record waits on its condition variable (rt->lock is
 *     released while it waits), then looks the key up again: the owner's
 *     unit is in memory by then.  A compile failure (ECOMPILE, ELINK) is
 *     handed to the waiters with its message, so a broken kernel is also
 *     compiled once.  With KDART_PREPARE_NO_WAIT a thread that finds a
 *     record returns KDART_EAGAIN instead of waiting.
 *
 *  2. Across processes (leases).  Before compiling, the owner takes the
 *     key's lease in the writable cache (kdart__store_lease_take: one
 *     BEGIN IMMEDIATE transaction).  Taken: it looks the key up once more
 *     (another process may have published and released between our miss
 *     and our take), and compiles only on a miss.  Held by a live process:
 *     the owner polls, sleeping 50 ms growing to 200 ms with rt->lock
 *     released, until the entry appears (then it loads it) or the lease
 *     expires, is released without an entry, or its owner is seen dead
 *     (then it takes the lease and compiles), or rt->lease_wait_ms
 *     (KDART_LEASE_WAIT_MS, default 10 min) has passed (then it compiles
 *     without a lease, with a warning).  Only the flight's owner polls;
 *     the other threads of this process wait on the flight.  NO_WAIT
 *     returns KDART_EAGAIN on a live foreign lease too.
 *
 *  3. While the owner compiles (rt->lock released), the heartbeat thread
 *     renews its lease every rt->lease_renew_ms (5 s) to now + lease_ttl_ms
 *     (60 s).  A process that dies mid-compile stops renewing: others take
 *     over at the expiry at the latest, at once when it ran on their host
 *     (pid probed, same boot id).
 *
 *  4. Publication is one transaction (kdart__store_put); a row already
 *     there means another writer won, which is success.  Then the lease is
 *     released and the flight ends: waiters wake and find the unit.
 *
 * No lock files: a lease is a row, and an abandoned row only lives until
 * its expiry.  A handle without a writable cache (memory only, read-only
 * caches) has nothing to share and takes no lease.  KDART_PREPARE_FORCE
 * rebuilds: it waits for a flight of this process, but takes no lease
 * (its purpose is to replace an entry that exists).
 */

static kdart__flight *flight_find(kdart_rt *rt, const char *key) {
    for (kdart__flight *f = rt->flights; f; f = f->next)
        if (strcmp(f->key, key) == 0) return f;
    return NULL;
}

/* Registers the calling thread as the compiler of key.  Under rt->lock. */
static int flight_begin(kdart_rt *rt, const char *key, kdart__flight **out) {
    kdart__flight *f = kdart__calloc(1, sizeof *f);
    if (!f) return kdart__err(rt, KDART_ENOMEM, "recording an in-flight compile");
    if (pthread_cond_init(&f->cond, NULL) != 0) {
        kdart__free(f);
        return kdart__err(rt, KDART_ENOMEM, "creating a condition variable");
    }
    memcpy(f->key, key, sizeof f->key);
    f->refs = 1;
    f->next = rt->flights;
    rt->flights = f;
    *out = f;
    return KDART_OK;
}

static void flight_put(kdart__flight *f) {
    if (--f->refs > 0) return;
    pthread_cond_destroy(&f->cond);
    kdart__free(f->msg);
    kdart__free(f);
}

/* The owner is done: unlink the record, publish the outcome, wake the
 * waiters.  Under rt->lock. */
static void flight_end(kdart_rt *rt, kdart__flight *f, int rc) {
    for (kdart__flight **p = &rt->flights; *p; p = &(*p)->next)
        if (*p == f) {
            *p = f->next;
            break;
        }
    f->done = 1;
    f->rc = rc;
    if (rc != KDART_OK) {
        /* The message without its "ENAME: " prefix; kdart__err adds it back. */
        const char *m = kdart_last_error(rt);
        const char *colon = strstr(m, ": ");
        f->msg = kdart__strdup(colon ? colon + 2 : m);
    }
    pthread_cond_broadcast(&f->cond);
    flight_put(f);
}

/* Waits for another thread's compile of the same key.  KDART_OK: look the
 * key up again.  The owner's compile failure is returned as this thread's
 * (same status, same message).  Under rt->lock (released while waiting). */
static int flight_wait(kdart_rt *rt, kdart__flight *f) {
    f->refs++;
    while (!f->done) pthread_cond_wait(&f->cond, &rt->lock);
    int rc = f->rc == KDART_ECOMPILE || f->rc == KDART_ELINK ? f->rc : KDART_OK;
    if (rc) rc = kdart__err(rt, rc, "%s", f->msg ? f->msg : "compile failed in another thread");
    flight_put(f);
    return rc;
}

/* Lease settings, resolved once under rt->lock.  Tests may preset them. */
static void lease_settings(kdart_rt *rt) {
    if (rt->lease_init) return;
    if (rt->lease_ttl_ms <= 0) rt->lease_ttl_ms = KDART__LEASE_TTL_MS;
    if (rt->lease_renew_ms <= 0) rt->lease_renew_ms = KDART__LEASE_RENEW_MS;
    if (rt->lease_wait_ms == 0 &&
        !kdart__env_number(rt, "KDART_LEASE_WAIT_MS", 0, 0, INT64_MAX, &rt->lease_wait_ms))
        rt->lease_wait_ms = KDART__LEASE_WAIT_MS;
    if (rt->lease_wait_ms < 0) rt->lease_wait_ms = 0;
    rt->lease_init = 1;
}

/* ------------------------------------------------------------- heartbeat */

/* Renews every lease this handle holds when it is due, sleeping until the
 * next is due; idle (no timer) while none is held. */
static void *heartbeat_main(void *arg) {
    kdart_rt *rt = arg;
    pthread_mutex_lock(&rt->lock);
    while (!atomic_load(&rt->stopping)) {
        double now = kdart__now_ms(), next = -1;
        for (kdart__flight *f = rt->flights; f; f = f->next) {
            if (!f->leased) continue;
            if (f->renewed_ms + (double)rt->lease_renew_ms <= now) {
                f->renewed_ms = now; /* on failure too: the next try is a period later */
                int rc = kdart__store_lease_renew(rt->rw, &f->lease, rt->lease_ttl_ms);
                if (rc == KDART_ENOENT) {
                    f->leased = 0;
                    kdart__log(rt, KDART_LOG_WARN, "compile lease on %.12s lost (%s); compiling on",
                               f->key, kdart__store_errmsg(rt->rw));
                    continue;
                } else if (rc) {
                    /* The store is busy or failing: try again next period. */
                    kdart__log(rt, KDART_LOG_DEBUG, "renewing the lease on %.12s: %s", f->key,
                               kdart__store_errmsg(rt->rw));
                }
            }
            double due = f->renewed_ms + (double)rt->lease_renew_ms;
            if (next < 0 || due < next) next = due;
        }
        if (next < 0) {
            pthread_cond_wait(&rt->heartbeat_cond, &rt->lock);
            continue;
        }
        int64_t wait = (int64_t)(next - kdart__now_ms());
        if (wait < 1) wait = 1;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += (time_t)(wait / 1000);
        ts.tv_nsec += (long)(wait % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&rt->heartbeat_cond, &rt->lock, &ts);
    }
    pthread_mutex_unlock(&rt->lock);
    return NULL;
}

/* A lease was taken: make sure the heartbeat runs.  Under rt->lock.  If
 * the thread cannot start, the lease simply expires after its ttl. */
static void heartbeat_kick(kdart_rt *rt) {
    if (!rt->heartbeat_started) {
        pthread_condattr_t a;
        int ok = pthread_condattr_init(&a) == 0;
        ok = ok && pthread_condattr_setclock(&a, CLOCK_MONOTONIC) == 0;
        ok = ok && pthread_cond_init(&rt->heartbeat_cond, &a) == 0;
        pthread_condattr_destroy(&a);
        if (!ok) {
            kdart__log(rt, KDART_LOG_WARN, "cannot start the lease heartbeat; leases will expire after %lld ms",
                       (long long)rt->lease_ttl_ms);
            return;
        }
        if (pthread_create(&rt->heartbeat, NULL, heartbeat_main, rt) != 0) {
            pthread_cond_destroy(&rt->heartbeat_cond);
            kdart__log(rt, KDART_LOG_WARN, "cannot start the lease heartbeat; leases will expire after %lld ms",
                       (long long)rt->lease_ttl_ms);
            return;
        }
        rt->heartbeat_started = 1;
    }
    pthread_cond_signal(&rt->heartbeat_cond);
}

void kdart__heartbeat_stop(kdart_rt *rt) {
    pthread_mutex_lock(&rt->lock);
    atomic_store(&rt->stopping, 1);
    int started = rt->heartbeat_started;
    if (started) pthread_cond_broadcast(&rt->heartbeat_cond);
    pthread_mutex_unlock(&rt->lock);
    if (!started) return;
    pthread_join(rt->heartbeat, NULL);
    pthread_cond_destroy(&rt->heartbeat_cond);
    rt->heartbeat_started = 0;
}

/* ------------------------------------------------------ lookup and compile */

/* The caches' answer for q: KDART_OK with *out (a new unit), KDART_ENOENT
 * on a miss, KDART_ECOMPILE for a recorded failure, or a failure. */
static int lookup_cached(kdart_rt *rt, request *q, kdart_prepared *info, kdart__unit **out) {
    kdart__row row;
    int tier = 0;
    memset(&row, 0, sizeof row);
    int rc = store_lookup(rt, q->key, &row, &tier);
    if (rc != KDART_OK) return rc;
    if (row.failed) {
        rc = kdart__err(rt, KDART_ECOMPILE,
                        "%s %s for %s failed to compile earlier (recorded in the cache; "
                        "fix the source or prepare with KDART_PREPARE_FORCE):\n%s",
                        q->k->name, q->spec, q->arch, log_tail(row.log));
        kdart__row_release(&row);
        return rc;
    }
    info->source = tier == 0 ? KDART_FROM_CACHE : KDART_FROM_RO_CACHE;
    rc = unit_add(rt, q, row.cubin, row.cubin_size, row.lowered, out);
    row.cubin = NULL;
    row.lowered = NULL;
    kdart__row_release(&row);
    return rc;
}

static void sleep_ms(int64_t ms) {
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Step 2 of the protocol, for the flight's owner.  Returns KDART_ENOENT
 * when the caller must compile (f->leased says whether under a lease),
 * KDART_OK with *out when another process's entry appeared, or a status
 * (EAGAIN for NO_WAIT, ECOMPILE for a recorded failure, ECANCELED when
 * the handle is closing).  Under rt->lock, released while sleeping. */
static int lease_or_wait(kdart_rt *rt, request *q, kdart__flight *f, uint32_t flags, kdart_prepared *info,
                         kdart__unit **out) {
    if (!rt->rw || kdart__store_readonly(rt->rw) || (flags & KDART_PREPARE_FORCE)) return KDART_ENOENT;
    lease_settings(rt);
    double t0 = kdart__now_ms();
    int64_t nap = 50;
    int logged = 0, rc;
    kdart__lease holder;
    for (;;) {
        rc = kdart__store_lease_take(rt->rw, q->key, rt->lease_ttl_ms, &f->lease, &holder);
        if (rc == KDART_OK) {
            f->leased = 1;
            f->renewed_ms = kdart__now_ms();
            heartbeat_kick(rt);
            /* Published between our miss and our take? */
            return lookup_cached(rt, q, info, out);
        }
        if (rc != KDART_EAGAIN) {
            warn_cache(rt, "taking a compile lease", rt->rw);
            return KDART_ENOENT;
        }
        /* Someone else is compiling it: wait for its entry or its end. */
        for (;;) {
            if (flags & KDART_PREPARE_NO_WAIT)
                return kdart__err(rt, KDART_EAGAIN, "%s %s for %s is being compiled by process %lld on %s",
                                  q->k->name, q->spec, q->arch, (long long)holder.owner_pid, holder.owner_host);
            if (atomic_load(&rt->stopping))
                return kdart__err(rt, KDART_ECANCELED, "the runtime is closing");
            double waited = kdart__now_ms() - t0;
            if (waited >= (double)rt->lease_wait_ms) {
                kdart__log(rt, KDART_LOG_WARN,
                           "waited %.0f ms for process %lld on %s to compile %s %s for %s; compiling it here too",
                           waited, (long long)holder.owner_pid, holder.owner_host, q->k->name, q->spec, q->arch);
                return KDART_ENOENT;
            }
            if (!logged++)
                kdart__log(rt, KDART_LOG_INFO, "waiting for process %lld on %s, which is compiling %s %s for %s",
                           (long long)holder.owner_pid, holder.owner_host, q->k->name, q->spec, q->arch);
            int64_t left = rt->lease_wait_ms - (int64_t)waited;
            pthread_mutex_unlock(&rt->lock);
            sleep_ms(nap < left ? nap : left > 0 ? left : 1);
            pthread_mutex_lock(&rt->lock);
            nap = nap * 3 / 2 > 200 ? 200 : nap * 3 / 2;
            rc = lookup_cached(rt, q, info, out);
            if (rc != KDART_ENOENT) return rc;
            rc = kdart__store_lease_live(rt->rw, q->key, &holder);
            if (rc == KDART_ENOENT) break; /* expired, released or dead: take it */
            if (rc != KDART_OK) {
                warn_cache(rt, "reading a compile lease", rt->rw);
                return KDART_ENOENT;
            }
        }
    }
}

static int compile_and_publish(kdart_rt *rt, request *q, uint32_t flags, kdart_prepared *info,
                               kdart__unit **out) {
    kdart__compile_in in = {q->tu, &q->src, q->entry, q->nvrtc_opts, q->n_nvrtc, q->link_opts, q->n_link};
    kdart__compile_out co;
    kdart__log(rt, KDART_LOG_INFO, "compiling %s %s for %s (key %.12s)", q->k->name, q->spec, q->arch, q->key);
    atomic_fetch_add(&rt->compiles, 1);
    pthread_mutex_unlock(&rt->lock);
    int rc = rt->compile(rt->compile_user, &in, &co);
    pthread_mutex_lock(&rt->lock);
    if (info) info->compile_ms = co.ms;
    if (rc == KDART_ENOMEM) {
        kdart__compile_out_free(&co);
        return kdart__err(rt, rc, "compiling %s %s", q->k->name, q->spec);
    }
    /* A forced rebuild may race a plain compile of the same key. */
    kdart__unit *other = unit_find(rt, q->key);
    if (other && rc == KDART_OK) {
        kdart__compile_out_free(&co);
        *out = other;
        return KDART_OK;
    }
    kdart__row row;
    memset(&row, 0, sizeof row);
    memcpy(row.key, q->key, sizeof row.key);
    row.kernel = (char *)q->k->name;
    row.spec = q->spec;
    row.arch = q->arch;
    row.failed = rc != KDART_OK;
    row.manifest = q->manifest;
    row.report = co.report;
    row.log = co.log;
    row.lowered = co.lowered;
    row.cubin = co.cubin;
    row.cubin_size = co.cubin_size;
    row.compile_ms = co.ms;
    /* One transaction; a row already there is another writer's win. */
    /* A cache that could only be opened read-only was warned about at
     * open; the entry stays in memory without a warning per compile. */
    if (rt->rw && !kdart__store_readonly(rt->rw) &&
        kdart__store_put(rt->rw, &row, (flags & KDART_PREPARE_FORCE) != 0) != KDART_OK)
        warn_cache(rt, "publish", rt->rw);
    if (rc != KDART_OK) {
        rc = kdart__err(rt, rc, "%s %s for %s failed to %s:\n%s", q->k->name, q->spec, q->arch,
                        rc == KDART_ELINK ? "link" : "compile", log_tail(co.log));
        kdart__compile_out_free(&co);
        return rc;
    }
    rc = unit_add(rt, q, co.cubin, co.cubin_size, co.lowered, out);
    co.cubin = NULL;
    co.lowered = NULL;
    kdart__compile_out_free(&co);
    return rc;
}

/* The default arch: KDART_ARCH / options, else the current device's, else
 * sm_100a (the design's primary target) when there is no GPU. */
static const char *default_arch(kdart_rt *rt) {
    if (rt->default_arch) return rt->default_arch;
    void *ctx;
    char arch[16];
    const char *pick = kdart__cuda_context(rt, &ctx, arch) == KDART_OK ? arch : "sm_100a";
    kdart__err_clear(rt);
    rt->default_arch = kdart__strdup(pick);
    return rt->default_arch ? rt->default_arch : "sm_100a";
}

/* kdart__arch_supported with the message set.  The default arch that came
 * from KDART_ARCH is named as the variable's, so that a bad value is found
 * where it was set (kdart_open accepts it: commands that compile nothing
 * must not fail on it).  No lock: arch_from_env and the default_arch it
 * implies are fixed at open. */
static int check_arch(kdart_rt *rt, const char *arch) {
    char why[512];
    int rc = kdart__arch_supported(arch, why, sizeof why);
    if (rc == KDART_OK) return rc;
    int env = rt->arch_from_env && strcmp(arch, rt->default_arch) == 0;
    return kdart__err(rt, rc, "%s%s", env ? "KDART_ARCH: " : "", why);
}

/* Starts a request: resolves arch (NULL: the default) and checks it, then
 * reads the kernel sources before rt->lock is taken (a slow or stuck file
 * system must cost only the caller's thread, never stall the handle's
 * others while the lock is held), then takes the lock and builds the rest.
 * Returns with rt->lock held whatever the status; request_free is safe. */
static int request_begin(kdart_rt *rt, request *q, int kernel, const int *vals, const char *arch) {
    memset(q, 0, sizeof *q);
    q->kernel = kernel;
    q->k = kdart__kernel_at(kernel);
    if (!arch) {
        pthread_mutex_lock(&rt->lock);
        arch = default_arch(rt); /* set once, then fixed until kdart_close */
        pthread_mutex_unlock(&rt->lock);
    }
    int rc = check_arch(rt, arch);
    if (rc == KDART_OK) rc = kdart__sources_load(rt, q->k->source, &q->src);
    pthread_mutex_lock(&rt->lock);
    if (rc == KDART_OK) rc = request_init(rt, q, vals, arch);
    return rc;
}

/* Memory, then the caches, then one compile per key (see PROTOCOL above).
 * Under rt->lock; *out is the unit on success. */
static int find_or_compile(kdart_rt *rt, request *q, uint32_t flags, kdart_prepared *info, kdart__unit **out) {
    int force = (flags & KDART_PREPARE_FORCE) != 0;
    double t0 = kdart__now_ms();
    for (;;) {
        if (!force && (*out = unit_find(rt, q->key)) != NULL) {
            info->source = KDART_FROM_MEMORY;
            return KDART_OK;
        }
        kdart__flight *f = flight_find(rt, q->key);
        if (f) {
            if (flags & KDART_PREPARE_NO_WAIT)
                return kdart__err(rt, KDART_EAGAIN, "%s %s for %s is being compiled by another thread",
                                  q->k->name, q->spec, q->arch);
            int rc = flight_wait(rt, f);
            if (rc) return rc;
            continue; /* FORCE: rebuild after the other's compile */
        }
        if (!force) {
            int rc = lookup_cached(rt, q, info, out);
            info->lookup_ms = kdart__now_ms() - t0;
            if (rc != KDART_ENOENT) return rc;
            /* A miss of every cache, kept in the file for `kdart stats`;
             * failing to count it is not worth a warning. */
            if (rt->rw && kdart__store_count(rt->rw, "misses", 1) != KDART_OK)
                kdart__log(rt, KDART_LOG_DEBUG, "counting a miss: %s", kdart__store_errmsg(rt->rw));
        }
        int rc = flight_begin(rt, q->key, &f);
        if (rc) return rc;
        /* The remote-prepare hook (rt.h; the KDART_SERVICE client installs it): the node's
         * compile service compiles and publishes the key, then it is read from the cache;
         * before the lease, which the service takes itself.  KDART_ENOENT: no service, or
         * it could not help. */
        rc = rt->remote_prepare ? rt->remote_prepare(rt->remote_ctx, rt, q->k->name, q->spec, q->arch, flags, q->key)
                                : KDART_ENOENT;
        rc = rc == KDART_OK ? lookup_cached(rt, q, info, out) : KDART_ENOENT;
        if (rc == KDART_ENOENT) rc = lease_or_wait(rt, q, f, flags, info, out);
        if (rc == KDART_ENOENT) {
            info->source = KDART_FROM_COMPILE;
            rc = compile_and_publish(rt, q, flags, info, out);
        }
        if (f->leased) {
            f->leased = 0;
            if (kdart__store_lease_release(rt->rw, &f->lease) != KDART_OK)
                kdart__log(rt, KDART_LOG_DEBUG, "releasing the lease on %.12s: %s (it will expire)", q->key,
                           kdart__store_errmsg(rt->rw));
        }
        flight_end(rt, f, rc);
        return rc;
    }
}

int kdart__prepare(kdart_rt *rt, int kernel, const int *vals, const char *arch, uint32_t flags,
                   kdart_prepared *info, kdart__unit **unit_out) {
    kdart_prepared dummy;
    if (!info) info = &dummy;
    memset(info, 0, sizeof *info);
    request q;
    kdart__unit *u = NULL;
    int rc = request_begin(rt, &q, kernel, vals, arch);
    if (rc) goto done;
    memcpy(info->key, q.key, sizeof info->key);
    rc = find_or_compile(rt, &q, flags, info, &u);
    if (rc) goto done;

    /* Load when the target is this device; a cubin for another arch is
     * only cached (prewarm for other machines). */
    if (!(flags & KDART_PREPARE_NO_LOAD) && !(rt->flags & KDART_OPEN_NO_CUDA)) {
        void *ctx;
        char dev_arch[16];
        if (kdart__cuda_context(rt, &ctx, dev_arch) == KDART_OK && strcmp(dev_arch, q.arch) == 0) {
            double t1 = kdart__now_ms();
            pthread_mutex_unlock(&rt->lock);
            void *fn;
            rc = kdart__unit_function(rt, u, ctx, &fn);
            pthread_mutex_lock(&rt->lock);
            info->load_ms = kdart__now_ms() - t1;
            if (rc) goto done;
            info->loaded = 1;
            atomic_store(&rt->slots[u->kernel][u->spec], u);
        } else {
            kdart__err_clear(rt);
        }
    }
done:
    if (rc == KDART_OK && unit_out) *unit_out = u;
    request_free(&q);
    pthread_mutex_unlock(&rt->lock);
    return rc;
}

int kdart_prepare(kdart_rt *rt, const char *kernel, const char *spec, const char *arch, uint32_t flags,
                  kdart_prepared *out) {
    KDART__CHECK_RT(rt);
    const kdart__kernel *k;
    int vals[KDART__MAX_PARAMS];
    int rc = kdart__kernel_spec(rt, kernel, spec, &k, vals);
    if (rc) return rc;
    return kdart__prepare(rt, kdart__kernel_index(k), vals, arch, flags, out, NULL);
}

/* ------------------------------------------------------------- kdart_why */

typedef struct nearest {
    const char *want;     /* the request's manifest */
    char best_key[65];
    char *best_manifest;
    int best_diff;
    const char *kernel;
    int exact;
} nearest;

static int count_diff(const char *a, const char *b) {
    int diff = 0;
    /* Lines are sorted "name=value": compare line by line by name. */
    const char *p = a;
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        int found = 0;
        for (const char *r = b; *r;) {
            const char *e2 = strchr(r, '\n');
            size_t l2 = e2 ? (size_t)(e2 - r) : strlen(r);
            if (l2 == len && strncmp(p, r, len) == 0) found = 1;
            r = e2 ? e2 + 1 : r + l2;
        }
        diff += !found;
        p = eol ? eol + 1 : p + len;
    }
    return diff;
}

static int nearest_fn(void *user, const kdart__row *row) {
    nearest *n = user;
    if (!row->manifest || strcmp(row->kernel, n->kernel) != 0) return 0;
    int d = count_diff(n->want, row->manifest) + count_diff(row->manifest, n->want);
    if (d == 0) n->exact = 1;
    if (n->best_diff < 0 || d < n->best_diff) {
        char *m = kdart__strdup(row->manifest);
        if (!m) return 0;
        kdart__free(n->best_manifest);
        n->best_manifest = m;
        n->best_diff = d;
        memcpy(n->best_key, row->key, sizeof n->best_key);
    }
    return 0;
}

/* Value of "name=" in a manifest, or NULL. */
static const char *field(const char *m, const char *name, size_t nlen, size_t *vlen) {
    for (const char *p = m; *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        if (len > nlen && strncmp(p, name, nlen) == 0 && p[nlen] == '=') {
            *vlen = len - nlen - 1;
            return p + nlen + 1;
        }
        p = eol ? eol + 1 : p + len;
    }
    return NULL;
}

/* Lists the fields of a that differ from or are missing in b. */
static void diff_fields(const char *a, const char *b, kdart__buf *out, int reverse) {
    for (const char *p = a; *p;) {
        const char *eol = strchr(p, '\n');
        size_t llen = eol ? (size_t)(eol - p) : strlen(p);
        const char *eq = memchr(p, '=', llen);
        if (eq) {
            size_t nlen = (size_t)(eq - p), vb = 0;
            const char *v = field(b, p, nlen, &vb);
            int va = (int)(llen - nlen - 1);
            if (!v && !reverse)
                kdart__buf_fmt(out, "  %.*s: requested %.*s, entry has none\n", (int)nlen, p, va, eq + 1);
            else if (!v && reverse)
                kdart__buf_fmt(out, "  %.*s: entry has %.*s, request has none\n", (int)nlen, p, va, eq + 1);
            else if (!reverse && ((size_t)va != vb || strncmp(v, eq + 1, vb) != 0))
                kdart__buf_fmt(out, "  %.*s: entry has %.*s, request needs %.*s\n", (int)nlen, p, (int)vb, v,
                       va, eq + 1);
        }
        p = eol ? eol + 1 : p + llen;
    }
}

int kdart_why(kdart_rt *rt, const char *kernel, const char *spec, const char *arch, char **text) {
    KDART__CHECK_RT(rt);
    if (!text) return kdart__err(rt, KDART_ENULL, "text must not be NULL");
    *text = NULL;
    const kdart__kernel *k;
    int vals[KDART__MAX_PARAMS];
    int rc = kdart__kernel_spec(rt, kernel, spec, &k, vals);
    if (rc) return rc;
    request q;
    rc = request_begin(rt, &q, kdart__kernel_index(k), vals, arch);
    if (rc) {
        request_free(&q);
        pthread_mutex_unlock(&rt->lock);
        return rc;
    }
    kdart__buf out = {0};
    kdart__buf_fmt(&out, "request: %s %s for %s\nkey:     %s\n", k->name, q.spec, q.arch, q.key);
    nearest n = {q.manifest, "", NULL, -1, k->name, 0};
    for (size_t i = 0; i < 1 + rt->n_ro; i++)
        if (rt->tiers[i]) kdart__store_list(rt->tiers[i], 1, nearest_fn, &n);
    if (unit_find(rt, q.key) || n.exact) {
        kdart__buf_fmt(&out, "status:  hit (the cache holds this key)\n");
    } else if (!n.best_manifest) {
        kdart__buf_fmt(&out, "status:  miss: the cache holds no entry for kernel %s\n", k->name);
    } else {
        /* the fields, one line each (best_diff counts a changed line on both sides) */
        kdart__buf diffs = {0};
        diff_fields(q.manifest, n.best_manifest, &diffs, 0);
        diff_fields(n.best_manifest, q.manifest, &diffs, 1);
        int nfields = 0;
        for (const char *c = diffs.s ? diffs.s : ""; *c; c++) nfields += *c == '\n';
        kdart__buf_fmt(&out, "status:  miss; nearest entry %.12s differs in %d field%s:\n%s", n.best_key, nfields,
                       nfields == 1 ? "" : "s", diffs.s ? diffs.s : "");
        out.oom |= diffs.oom;
        kdart__buf_free(&diffs);
    }
    kdart__buf_fmt(&out, "manifest:\n%s", q.manifest);
    kdart__free(n.best_manifest);
    request_free(&q);
    pthread_mutex_unlock(&rt->lock);
    /* The caller frees the text with free(): hand out plain malloc memory. */
    *text = out.oom || !out.s ? NULL : strdup(out.s);
    kdart__buf_free(&out);
    if (!*text) return kdart__err(rt, KDART_ENOMEM, "formatting kdart_why");
    return KDART_OK;
}
