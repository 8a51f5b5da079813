/*
 * cache_api.c: the public calls that inspect and maintain the compile
 * cache (list, get, stats, verify, gc, remove, clear) and kdart_info.
 *
 * They operate on the writable cache and, for reading, the read-only
 * caches after it (tier 1, 2, ...), so `kdart ls` shows everything a
 * prepare could hit.  Maintenance (verify's quarantine, gc, remove,
 * clear) only ever writes the writable cache.  Each call holds rt->lock for its duration.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "rt.h"

static int no_cache(kdart_rt *rt) {
    return kdart__err(rt, KDART_ECACHE, "no usable cache (path '%s'); the runtime is compiling in memory",
                      rt->cache_path);
}

static int store_status(kdart_rt *rt, kdart__store *st, int rc, const char *what) {
    if (rc == KDART_OK) return rc;
    return kdart__err(rt, rc, "%s on %s: %s", what, kdart__store_path(st), kdart__store_errmsg(st));
}

static void row_to_entry(const kdart__row *row, int tier, kdart_entry *e) {
    memset(e, 0, sizeof *e);
    memcpy(e->key, row->key, sizeof e->key);
    e->kernel = row->kernel ? row->kernel : "";
    e->spec = row->spec ? row->spec : "";
    e->arch = row->arch ? row->arch : "";
    e->failed = row->failed;
    e->tier = tier;
    e->manifest = row->manifest ? row->manifest : "";
    e->report = row->report ? row->report : "";
    e->log = row->log ? row->log : "";
    e->cubin = row->cubin;
    e->cubin_size = row->cubin_size;
    e->cubin_sha256 = row->cubin_sha256;
    e->compile_ms = row->compile_ms;
    e->created = row->created;
    e->last_used = row->last_used;
    e->hits = row->hits;
}

typedef struct list_ctx {
    kdart_entry_fn fn;
    void *user;
    int tier;
    int stopped;
} list_ctx;

static int list_row(void *user, const kdart__row *row) {
    list_ctx *c = user;
    kdart_entry e;
    row_to_entry(row, c->tier, &e);
    /* list reports sizes but hands out no blob */
    e.cubin = NULL;
    if (c->fn(c->user, &e)) c->stopped = 1;
    return c->stopped;
}

int kdart_cache_list(kdart_rt *rt, kdart_entry_fn fn, void *user) {
    KDART__CHECK_RT(rt);
    if (!fn) return kdart__err(rt, KDART_ENULL, "callback is NULL");
    kdart__store **stores = rt->tiers;
    int n = (int)(1 + rt->n_ro), rc = KDART_OK;
    pthread_mutex_lock(&rt->lock);
    list_ctx c = {fn, user, 0, 0};
    for (int i = 0; i < n && !c.stopped && rc == KDART_OK; i++) {
        if (!stores[i]) continue;
        c.tier = i;
        rc = store_status(rt, stores[i], kdart__store_list(stores[i], 0, list_row, &c), "listing");
    }
    pthread_mutex_unlock(&rt->lock);
    return rc;
}

typedef struct owned_entry {
    kdart_entry e; /* first: kdart_entry_free gets this pointer back */
    kdart__row row;
} owned_entry;

int kdart_cache_get(kdart_rt *rt, const char *prefix, kdart_entry **out) {
    KDART__CHECK_RT(rt);
    if (!prefix || !out) return kdart__err(rt, KDART_ENULL, "key prefix and out must not be NULL");
    *out = NULL;
    kdart__store **stores = rt->tiers;
    int n = (int)(1 + rt->n_ro), rc = KDART_ENOENT;
    char key[65];
    int tier = -1;
    pthread_mutex_lock(&rt->lock);
    for (int i = 0; i < n; i++) {
        if (!stores[i]) continue;
        char k[65];
        int r = kdart__store_resolve(stores[i], prefix, k);
        if (r == KDART_OK) {
            if (tier >= 0 && strcmp(k, key) != 0) {
                rc = KDART_EAMBIGUOUS;
                break;
            }
            if (tier < 0) {
                memcpy(key, k, sizeof key);
                tier = i;
                rc = KDART_OK;
            }
        } else if (r != KDART_ENOENT) {
            rc = r;
            break;
        }
    }
    if (rc == KDART_EAMBIGUOUS) {
        rc = kdart__err(rt, rc, "key prefix '%s' matches more than one entry; give more digits", prefix);
    } else if (rc == KDART_ENOENT) {
        rc = kdart__err(rt, rc, "no cache entry matches key '%s'", prefix);
    } else if (rc == KDART_EINVAL) {
        rc = kdart__err(rt, rc, "'%s' is not a hexadecimal key prefix", prefix);
    } else if (rc == KDART_OK) {
        owned_entry *o = kdart__calloc(1, sizeof *o);
        if (!o) {
            rc = kdart__err(rt, KDART_ENOMEM, "reading an entry");
        } else if ((rc = kdart__store_get(stores[tier], key, &o->row)) != KDART_OK) {
            rc = store_status(rt, stores[tier], rc, "reading entry");
            kdart__free(o);
        } else {
            row_to_entry(&o->row, tier, &o->e);
            *out = &o->e;
        }
    } else {
        rc = kdart__err(rt, rc, "resolving key '%s'", prefix);
    }
    pthread_mutex_unlock(&rt->lock);
    return rc;
}

void kdart_entry_free(kdart_entry *entry) {
    if (!entry) return;
    owned_entry *o = (owned_entry *)entry;
    kdart__row_release(&o->row);
    kdart__free(o);
}

int kdart_cache_stats_get(kdart_rt *rt, kdart_cache_stats *out) {
    KDART__CHECK_RT(rt);
    if (!out) return kdart__err(rt, KDART_ENULL, "out is NULL");
    memset(out, 0, sizeof *out);
    out->max_bytes = rt->cache_max_bytes;
    if (!rt->rw) return no_cache(rt);
    kdart__store_stats s;
    pthread_mutex_lock(&rt->lock);
    int rc = store_status(rt, rt->rw, kdart__store_getstats(rt->rw, &s), "stats");
    pthread_mutex_unlock(&rt->lock);
    if (rc) return rc;
    out->entries = s.entries;
    out->failed_entries = s.failed;
    out->quarantined = s.quarantined;
    out->bytes = s.bytes;
    out->hits = s.hits;
    out->compile_ms_total = s.compile_ms_total;
    /* A counter that cannot be read is no reason to withhold the rest. */
    pthread_mutex_lock(&rt->lock);
    if (kdart__store_counter(rt->rw, "misses", &out->misses) != KDART_OK) out->misses = -1;
    pthread_mutex_unlock(&rt->lock);
    return KDART_OK;
}

int kdart_cache_verify(kdart_rt *rt, int64_t *checked, int64_t *damaged) {
    KDART__CHECK_RT(rt);
    int64_t c = 0, d = 0;
    if (!rt->rw) return no_cache(rt);
    pthread_mutex_lock(&rt->lock);
    int rc = kdart__store_verify(rt->rw, &c, &d);
    if (rc == KDART_ECORRUPT)
        rc = kdart__err(rt, rc, "%lld of %lld entries damaged (quarantined or lost): %s", (long long)d, (long long)c,
                        kdart__store_errmsg(rt->rw));
    else
        rc = store_status(rt, rt->rw, rc, "verify");
    pthread_mutex_unlock(&rt->lock);
    if (checked) *checked = c;
    if (damaged) *damaged = d;
    return rc;
}

int kdart_cache_gc(kdart_rt *rt, int64_t max_bytes, int64_t *evicted, int64_t *freed) {
    KDART__CHECK_RT(rt);
    int64_t e = 0, f = 0;
    if (max_bytes < 0) return kdart__err(rt, KDART_EINVAL, "max_bytes must be >= 0");
    if (!rt->rw) return no_cache(rt);
    pthread_mutex_lock(&rt->lock);
    int rc = store_status(rt, rt->rw, kdart__store_gc(rt->rw, max_bytes, &e, &f), "gc");
    pthread_mutex_unlock(&rt->lock);
    if (evicted) *evicted = e;
    if (freed) *freed = f;
    return rc;
}

int kdart_cache_gc_age(kdart_rt *rt, int64_t seconds, int64_t *evicted, int64_t *freed) {
    KDART__CHECK_RT(rt);
    int64_t e = 0, f = 0;
    if (seconds < 0) return kdart__err(rt, KDART_EINVAL, "seconds must be >= 0");
    if (!rt->rw) return no_cache(rt);
    pthread_mutex_lock(&rt->lock);
    int rc = store_status(rt, rt->rw, kdart__store_gc_age(rt->rw, (int64_t)time(NULL) - seconds, &e, &f), "gc");
    pthread_mutex_unlock(&rt->lock);
    if (evicted) *evicted = e;
    if (freed) *freed = f;
    return rc;
}

int kdart_cache_set_max_bytes(kdart_rt *rt, int64_t max_bytes) {
    KDART__CHECK_RT(rt);
    if (max_bytes < -1) return kdart__err(rt, KDART_EINVAL, "max_bytes must be -1 (no limit), 0 (forget) or a size");
    if (!rt->rw) return no_cache(rt);
    pthread_mutex_lock(&rt->lock);
    int rc = store_status(rt, rt->rw, kdart__store_counter_set(rt->rw, "limit.max_bytes", max_bytes), "set_max_bytes");
    if (rc == KDART_OK) kdart__cache_limit_adopt(rt, max_bytes); /* this handle follows, unless it chose its own */
    pthread_mutex_unlock(&rt->lock);
    return rc;
}

int kdart_cache_zero_stats(kdart_rt *rt) {
    KDART__CHECK_RT(rt);
    if (!rt->rw) return no_cache(rt);
    pthread_mutex_lock(&rt->lock);
    int rc = store_status(rt, rt->rw, kdart__store_zero_stats(rt->rw), "zero_stats");
    pthread_mutex_unlock(&rt->lock);
    return rc;
}

int kdart_setting(kdart_rt *rt, int index, const char **name, const char **value, const char **origin) {
    KDART__CHECK_RT(rt);
    if (!name || !value || !origin) return kdart__err(rt, KDART_ENULL, "name, value and origin must not be NULL");
    kdart_rt_info info;
    int rc = index == 2 ? kdart_info(rt, &info) : KDART_OK; /* the default arch: resolved there (maybe CUDA) */
    if (rc) return rc;
    pthread_mutex_lock(&rt->lock);
    switch (index) {
    case 0:
        *name = "cache_path", *value = rt->cache_path, *origin = rt->from_cache_path;
        break;
    case 1:
        *name = "kernel_dir", *value = rt->kernel_dir, *origin = rt->from_kernel_dir;
        break;
    case 2:
        *name = "default_arch", *value = info.default_arch;
        *origin = rt->from_arch ? rt->from_arch : info.cuda_available ? "the local GPU" : "default (no GPU: sm_100a)";
        break;
    case 3:
        if (rt->cache_max_bytes < 0) snprintf(rt->setting_buf, sizeof rt->setting_buf, "none (no limit)");
        else snprintf(rt->setting_buf, sizeof rt->setting_buf, "%lld", (long long)rt->cache_max_bytes);
        *name = "cache_max_bytes", *value = rt->setting_buf, *origin = rt->from_max_bytes;
        break;
    case 4:
        snprintf(rt->setting_buf2, sizeof rt->setting_buf2, "%d", rt->compile_threads);
        *name = "compile_threads", *value = rt->setting_buf2, *origin = rt->from_threads;
        break;
    default:
        rc = kdart__err(rt, KDART_EINVAL, "no setting %d", index);
    }
    pthread_mutex_unlock(&rt->lock);
    return rc;
}

int kdart_cache_remove(kdart_rt *rt, const char *prefix, char removed_key[65]) {
    KDART__CHECK_RT(rt);
    if (!prefix) return kdart__err(rt, KDART_ENULL, "key prefix is NULL");
    if (removed_key) removed_key[0] = '\0';
    if (!rt->rw) return no_cache(rt);
    char key[65];
    pthread_mutex_lock(&rt->lock);
    int rc = kdart__store_resolve(rt->rw, prefix, key);
    if (rc == KDART_ENOENT)
        rc = kdart__err(rt, rc, "no entry of the writable cache %s matches key '%s'", rt->cache_path, prefix);
    else if (rc == KDART_EAMBIGUOUS)
        rc = kdart__err(rt, rc, "key prefix '%s' matches more than one entry; give more digits", prefix);
    else if (rc == KDART_EINVAL)
        rc = kdart__err(rt, rc, "'%s' is not a hexadecimal key prefix", prefix);
    else if (rc == KDART_OK)
        rc = store_status(rt, rt->rw, kdart__store_remove(rt->rw, key), "removing an entry");
    else
        rc = store_status(rt, rt->rw, rc, "resolving a key");
    pthread_mutex_unlock(&rt->lock);
    if (rc == KDART_OK && removed_key) memcpy(removed_key, key, sizeof key);
    return rc;
}

int kdart_cache_clear(kdart_rt *rt, int64_t *removed) {
    KDART__CHECK_RT(rt);
    int64_t n = 0;
    if (removed) *removed = 0;
    if (!rt->rw) return no_cache(rt);
    pthread_mutex_lock(&rt->lock);
    int rc = store_status(rt, rt->rw, kdart__store_clear(rt->rw, &n), "clearing the cache");
    pthread_mutex_unlock(&rt->lock);
    if (removed) *removed = n;
    return rc;
}

int kdart_info(kdart_rt *rt, kdart_rt_info *info) {
    KDART__CHECK_RT(rt);
    if (!info) return kdart__err(rt, KDART_ENULL, "info is NULL");
    memset(info, 0, sizeof *info);
    pthread_mutex_lock(&rt->lock);
    if (!rt->nvrtc_build) kdart__nvrtc_build_id(&rt->nvrtc_build);
    pthread_mutex_unlock(&rt->lock);
    /* Whether CUDA works is only known by trying: this may load libcuda
     * and retain device 0's primary context, as a launch would. */
    void *ctx;
    char arch[16];
    int cuda_ok = !(rt->flags & KDART_OPEN_NO_CUDA) && kdart__cuda_context(rt, &ctx, arch) == KDART_OK;
    kdart__err_clear(rt);
    pthread_mutex_lock(&rt->lock);
    if (!rt->default_arch) rt->default_arch = kdart__strdup(cuda_ok ? arch : "sm_100a");
    pthread_mutex_unlock(&rt->lock);
    /* the path of a cache KDART_OPEN_NO_CREATE left unopened (it does not exist yet) is still its path */
    const int absent = !rt->rw && (rt->flags & KDART_OPEN_NO_CREATE) && strcmp(rt->cache_path, ":memory:") != 0;
    info->cache_path = rt->rw || absent ? rt->cache_path : "";
    info->cache_writable = rt->rw && !kdart__store_readonly(rt->rw);
    info->kernel_dir = rt->kernel_dir;
    info->default_arch = rt->default_arch ? rt->default_arch : "sm_100a";
    info->nvrtc_major = rt->nvrtc_major;
    info->nvrtc_minor = rt->nvrtc_minor;
    info->nvrtc_build = rt->nvrtc_build ? rt->nvrtc_build : "unknown";
    info->nvjitlink_major = (int)rt->jl_major;
    info->nvjitlink_minor = (int)rt->jl_minor;
    info->cuda_available = cuda_ok;
    info->cache_max_bytes = rt->cache_max_bytes;
    return KDART_OK;
}
