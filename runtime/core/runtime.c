/*
 * runtime.c: kdart_options_init, kdart__open (the core of kdart_open, which
 * runtime/open.c completes with the service client's hook) and kdart_close:
 * a handle's options and environment (KDART_* variables, read through
 * kdart__env_number of env.c, which refuses a value that does not read), the default
 * cache path, the writable cache and the read-only tiers after it, and the
 * teardown.  The path from a (kernel, spec, arch) request to a loaded cubin,
 * kdart_prepare, is prepare.c.
 *
 * Degradation: a cache that cannot be opened never stops kdart_open: the
 * handle compiles in memory and warns once through the log.  One that can
 * be read but not written (a read-only directory or mount, a full disk) is
 * opened read-only as the first tier: its hits are served, misses compile
 * in memory.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt.h"

static void log_stderr(void *user, int level, const char *msg) {
    static const char *names[] = {"error", "warning", "info", "debug"};
    fprintf(stderr, "kdart: %s: %s\n", names[level < 0 ? 0 : level > 3 ? 3 : level], msg);
}

void kdart_options_init(kdart_options *opts) {
    if (!opts) return;
    memset(opts, 0, sizeof *opts);
    opts->struct_size = sizeof *opts;
    opts->log_level = KDART_LOG_WARN;
}

static const char *env(const kdart_rt *rt, const char *name) {
    return kdart__env_get((rt->flags & KDART_OPEN_NO_ENV) != 0, name);
}

/* Default cache file: KDART_CACHE_DIR, XDG_CACHE_HOME/kdart, ~/.cache/kdart. */
static char *default_cache_path(kdart_rt *rt) {
    char buf[4096];
    const char *d;
    if ((d = env(rt, "KDART_CACHE_DIR")) != NULL)
        snprintf(buf, sizeof buf, "%s/kdart.db", d), rt->from_cache_path = "KDART_CACHE_DIR";
    else if ((d = getenv("XDG_CACHE_HOME")) != NULL && d[0] == '/')
        snprintf(buf, sizeof buf, "%s/kdart/kdart.db", d), rt->from_cache_path = "XDG_CACHE_HOME";
    else if ((d = getenv("HOME")) != NULL && d[0])
        snprintf(buf, sizeof buf, "%s/.cache/kdart/kdart.db", d), rt->from_cache_path = "default (~/.cache/kdart)";
    else
        return rt->from_cache_path = "default (no HOME: in memory)", kdart__strdup("");
    return kdart__strdup(buf);
}

void kdart__cache_limit_adopt(kdart_rt *rt, int64_t kept) {
    if (!rt->max_bytes_chosen) {
        rt->cache_max_bytes = kept ? kept : (int64_t)2 << 30;
        rt->from_max_bytes = kept ? "the cache file (kdart gc --max-bytes N --keep)" : "default (2 GiB)";
    }
    kdart__store_set_max_bytes(rt->rw, rt->cache_max_bytes);
}

static void open_stores(kdart_rt *rt) {
    char err[512];
    /* KDART_OPEN_NO_CREATE: a cache that does not exist stays so (a reader has nothing to read) */
    const int absent = (rt->flags & KDART_OPEN_NO_CREATE) && access(rt->cache_path, F_OK) != 0 && errno == ENOENT;
    if (rt->cache_path[0] && strcmp(rt->cache_path, ":memory:") != 0 && !absent) {
        err[0] = 0;
        int rc = kdart__store_open(&rt->rw, rt->cache_path, 0, rt->cache_max_bytes, err, sizeof err);
        if (rc) {
            rt->rw = NULL;
            kdart__log(rt, KDART_LOG_WARN, "cache %s unusable (%s: %s); compiling in memory", rt->cache_path,
                       kdart_errname(rc), err);
        } else if (kdart__store_errmsg(rt->rw)[0]) {
            kdart__log(rt, KDART_LOG_WARN, "cache %s: %s", rt->cache_path, kdart__store_errmsg(rt->rw));
            /* Read-only (it cannot be written): that was the one warning. */
            if (kdart__store_readonly(rt->rw)) rt->cache_warned = 1;
        }
    }
    for (size_t i = 0; i < rt->n_ro; i++) {
        err[0] = 0;
        int rc = kdart__store_open(&rt->tiers[1 + i], rt->ro_paths[i], 1, 0, err, sizeof err);
        if (rc) {
            rt->tiers[1 + i] = NULL;
            kdart__log(rt, KDART_LOG_WARN, "read-only cache %s skipped (%s: %s)", rt->ro_paths[i],
                       kdart_errname(rc), err);
        }
    }
    rt->tiers[0] = rt->rw;
}

int kdart__open(kdart_rt **out, const kdart_options *user_opts) {
    if (!out) return KDART_ENULL;
    *out = NULL;
    kdart_options opts;
    kdart_options_init(&opts);
    if (user_opts) {
        if (user_opts->struct_size < offsetof(kdart_options, flags) + sizeof(uint32_t) ||
            user_opts->struct_size > sizeof opts)
            return KDART_EINVAL;
        memcpy(&opts, user_opts, user_opts->struct_size);
    }

    int rc = KDART_ENOMEM;
    kdart_rt *rt = kdart__calloc(1, sizeof *rt);
    if (!rt) goto fail_alloc;
    if (pthread_mutex_init(&rt->lock, NULL) != 0) goto fail_mutex;
    if (pthread_mutex_init(&rt->err_lock, NULL) != 0) goto fail_err_lock;
    if (pthread_key_create(&rt->err_key, NULL) != 0) goto fail_key;

    rt->flags = opts.flags;
    rt->log = opts.log;
    rt->log_user = opts.log_user;
    rt->log_level = opts.log_level;
    const char *lv = env(rt, "KDART_LOG");
    int lv_known = !lv || !strcmp(lv, "stderr") || !strcmp(lv, "warn") || !strcmp(lv, "info") ||
                   !strcmp(lv, "debug") || !strcmp(lv, "off");
    /* No callback: warnings and errors to stderr, so that nothing refused or
     * given up on is silent (KDART_LOG=off for none, info or debug for more). */
    if (!rt->log && !(lv && !strcmp(lv, "off"))) {
        rt->log = log_stderr;
        rt->log_level = !lv ? KDART_LOG_WARN
                        : strcmp(lv, "debug") == 0 ? KDART_LOG_DEBUG
                        : strcmp(lv, "info") == 0  ? KDART_LOG_INFO
                                                   : KDART_LOG_WARN;
    }
    /* A typo is said out loud (stderr logging still starts, at WARN). */
    if (!lv_known)
        kdart__log(rt, KDART_LOG_WARN, "KDART_LOG=%.80s unknown (off, stderr, warn, info or debug); read as warn", lv);
    int64_t on;
    if (kdart__env_number(rt, "KDART_CHECK", 0, 0, 1, &on) && on) rt->flags |= KDART_OPEN_CHECK;
    rt->fuse_post = kdart__env_number(rt, "KDART_FUSE_POST", 0, 0, 2, &on) ? (int)on : 2;
    rt->fuse_dav = kdart__env_number(rt, "KDART_FUSE_DAV", 0, 0, 1, &on) ? (int)on : 1;
    rt->fuse_u = kdart__env_number(rt, "KDART_FUSE_U", 0, 0, 1, &on) ? (int)on : 1;
    /* Read here, per handle, as every variable is, and so not under
     * KDART_OPEN_NO_ENV: libcuda itself is loaded once per process. */
    if (kdart__env_number(rt, "KDART_DISABLE_CUDA", 0, 0, 1, &on) && on) {
        rt->cuda_off_by_env = !(rt->flags & KDART_OPEN_NO_CUDA); /* whom the message names */
        rt->flags |= KDART_OPEN_NO_CUDA;
    }
    rt->compile = kdart__compile_nvrtc;
    rt->compile_threads = opts.compile_threads > 0 ? opts.compile_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    rt->from_threads = opts.compile_threads > 0 ? "kdart_options.compile_threads" : "default (one per CPU)";

    rt->cache_max_bytes = opts.cache_max_bytes;
    rt->from_max_bytes = "kdart_options.cache_max_bytes";
    int64_t mb;
    /* "0" in the variable means no budget, as a negative option does. */
    if (rt->cache_max_bytes == 0 && kdart__env_number(rt, "KDART_CACHE_MAX_BYTES", 1, 0, INT64_MAX, &mb))
        rt->cache_max_bytes = mb ? mb : -1, rt->from_max_bytes = "KDART_CACHE_MAX_BYTES";
    /* not chosen: the cache's own limit (kdart_cache_set_max_bytes) or 2 GiB, once the stores are open */
    rt->max_bytes_chosen = rt->cache_max_bytes != 0;

    /* Strings the handle owns. */
    rt->from_cache_path = "kdart_options.cache_path";
    rt->cache_path = opts.cache_path ? kdart__strdup(opts.cache_path) : default_cache_path(rt);
    const char *kd = opts.kernel_dir ? opts.kernel_dir : env(rt, "KDART_KERNEL_DIR");
    rt->from_kernel_dir = opts.kernel_dir ? "kdart_options.kernel_dir" : kd ? "KDART_KERNEL_DIR"
                                                                           : "default (found from the library's place)";
    rt->kernel_dir = kd ? kdart__strdup(kd) : kdart__default_kernel_dir(); /* locate.c */
    /* A malformed options.arch is the caller's error: the open fails.  A
     * bad KDART_ARCH is kept and warned about: commands that compile
     * nothing (list, verify, gc) must not fail on it, and a prepare for the
     * default arch refuses it with a message naming the variable
     * (prepare.c, check_arch). */
    const char *arch = opts.arch ? opts.arch : env(rt, "KDART_ARCH");
    rt->arch_from_env = !opts.arch && arch;
    rt->from_arch = opts.arch ? "kdart_options.arch" : arch ? "KDART_ARCH" : NULL; /* NULL: resolved on first use */
    if (arch && kdart__arch_check(arch) != KDART_OK) {
        if (!rt->arch_from_env) {
            rc = KDART_EARCH;
            goto fail_strings;
        }
        char why[512];
        kdart__arch_supported(arch, why, sizeof why);
        kdart__log(rt, KDART_LOG_WARN, "KDART_ARCH: %s; compiles for the default architecture will fail", why);
    }
    rt->default_arch = arch ? kdart__strdup(arch) : NULL; /* else resolved on first use */
    if (!rt->cache_path || !rt->kernel_dir || (arch && !rt->default_arch)) goto fail_strings;
    if (opts.n_ro_cache_paths) {
        if (!opts.ro_cache_paths) {
            rc = KDART_ENULL;
            goto fail_strings;
        }
        rt->ro_paths = kdart__calloc(opts.n_ro_cache_paths, sizeof *rt->ro_paths);
        if (!rt->ro_paths) goto fail_strings;
        rt->n_ro = opts.n_ro_cache_paths;
        for (size_t i = 0; i < rt->n_ro; i++)
            if (!opts.ro_cache_paths[i] || !(rt->ro_paths[i] = kdart__strdup(opts.ro_cache_paths[i]))) {
                rc = opts.ro_cache_paths[i] ? KDART_ENOMEM : KDART_ENULL;
                goto fail_strings;
            }
    }

    rt->tiers = kdart__calloc(1 + rt->n_ro, sizeof *rt->tiers);
    if (!rt->tiers) goto fail_strings;
    if ((rc = kdart__toolchain_versions(rt)) != KDART_OK) goto fail_strings;
    if (!kdart__is_dir(rt->kernel_dir))
        kdart__log(rt, KDART_LOG_WARN, "kernel source directory %s not found; only cached kernels can be used",
                   rt->kernel_dir);

    open_stores(rt);
    int64_t kept = 0;
    if (!rt->max_bytes_chosen && rt->rw && kdart__store_counter(rt->rw, "limit.max_bytes", &kept) != KDART_OK)
        kept = 0;
    kdart__cache_limit_adopt(rt, kept);
    rt->magic = KDART__MAGIC;
    *out = rt;
    return KDART_OK;

fail_strings:
    for (size_t i = 0; rt->ro_paths && i < rt->n_ro; i++) kdart__free(rt->ro_paths[i]);
    kdart__free(rt->ro_paths);
    kdart__free(rt->tiers);
    kdart__free(rt->default_arch);
    kdart__free(rt->kernel_dir);
    kdart__free(rt->cache_path);
    pthread_key_delete(rt->err_key);
    kdart__errbufs_free(rt);
fail_key:
    pthread_mutex_destroy(&rt->err_lock);
fail_err_lock:
    pthread_mutex_destroy(&rt->lock);
fail_mutex:
    kdart__free(rt);
fail_alloc:
    return rc;
}

void kdart_close(kdart_rt *rt) {
    if (!rt || rt->magic != KDART__MAGIC) return;
    rt->magic = 0;
    kdart__threads_stop(rt); /* workers, kdart's uv loop, lease heartbeat (jobs.c) */
    kdart__status_free(rt); /* the contexts' device status words (cuda.c) */
    for (kdart__unit *u = rt->units, *next; u; u = next) {
        next = u->next;
        kdart__unit_unload(rt, u);
        kdart__free(u->cubin);
        kdart__free(u->lowered);
        kdart__free(u);
    }
    for (size_t i = 0; i < 1 + rt->n_ro; i++) kdart__store_close(rt->tiers[i]);
    for (size_t i = 0; i < rt->n_ro; i++) kdart__free(rt->ro_paths[i]);
    kdart__free(rt->tiers);
    kdart__free(rt->ro_paths);
    kdart__free(rt->nvrtc_build);
    kdart__free(rt->default_arch);
    kdart__free(rt->kernel_dir);
    kdart__free(rt->cache_path);
    /* Every thread's message buffer, whether or not the thread still runs. */
    pthread_key_delete(rt->err_key);
    kdart__errbufs_free(rt);
    pthread_mutex_destroy(&rt->err_lock);
    pthread_mutex_destroy(&rt->lock);
    kdart__free(rt);
}
