/*
 * registry.c: the kernel registry, the one table that the runtime, the CLI
 * (through the public kdart_kernel_* and kdart_spec_* calls), the bindings
 * and the tests share.
 *
 * Each stage is described in one file under runtime/core/stages/ (stage.h):
 * its source file, template entry point and specialization parameters in
 * template-argument order, with the values a user may write and the template
 * argument each value becomes, its launch shape, its default prewarm rule and
 * its operation.  Here they are listed, found, and their specs parsed: a spec
 * is parsed into value indices; its canonical text lists every parameter in
 * registry order, so two spellings of one specialization always produce the
 * same manifest and the same cache key.
 */
#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage.h"

/* The built-in stages, in the order kdart_kernel_name lists them; a test
 * may append its own (kdart__stage_register) before opening a handle. */
static const kdart__kernel *kernels[KDART__MAX_KERNELS] = {
    &kdart__stage_chunk_rcumsum,
    &kdart__stage_bwd_intra,
    &kdart__stage_bwd_dhu,
    &kdart__stage_wy_dqkg,
    &kdart__stage_recompute_wu,
    &kdart__stage_bwd_dav,
    &kdart__stage_fwd_h,
    &kdart__stage_bwd_post,
};
static _Atomic int nkernels = 8;
static pthread_mutex_t register_lock = PTHREAD_MUTEX_INITIALIZER;

int kdart__kernel_count(void) { return atomic_load_explicit(&nkernels, memory_order_acquire); }

const kdart__kernel *kdart__kernel_at(int index) {
    return index >= 0 && index < kdart__kernel_count() ? kernels[index] : NULL;
}

int kdart__kernel_index(const kdart__kernel *k) {
    for (int i = 0, n = kdart__kernel_count(); i < n; i++)
        if (kernels[i] == k) return i;
    return -1;
}

static int spec_count(const kdart__kernel *k) {
    int n = 1;
    for (int i = 0; i < k->nparams; i++) n *= k->params[i].nvalues;
    return n;
}

int kdart__stage_register(const kdart__kernel *k) {
    if (!k || !k->name || !k->source || !k->entry || !k->launch_shape || k->nparams < 0 ||
        k->nparams > KDART__MAX_PARAMS || spec_count(k) > KDART__MAX_SPECS)
        return KDART_EINVAL;
    pthread_mutex_lock(&register_lock);
    int n = kdart__kernel_count(), rc = KDART_OK;
    if (n >= KDART__MAX_KERNELS || kdart__kernel_find(k->name))
        rc = KDART_EINVAL;
    else {
        kernels[n] = k;
        atomic_store_explicit(&nkernels, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&register_lock);
    return rc;
}

/* The K tiles of bwd_intra, wy_dqkg and chunk_rcumsum, in their K parameter's order. */
int kdart__k_tile(int64_t K) { return K < 1 || K > 256 ? -1 : K <= 64 ? 64 : K <= 128 ? 128 : 256; }
int kdart__k_index(int k_tile) { return k_tile == 64 ? 0 : k_tile == 128 ? 1 : 2; }
int kdart__k_tile_at(int i) { return 64 << i; }

/* The varlen specializations (those that take a device status word): the
 * varlen parameter, wherever the kernel lists it, is 1. */
int kdart__spec_is_varlen(int kernel, int spec) {
    const kdart__kernel *k = kdart__kernel_at(kernel);
    int vals[KDART__MAX_PARAMS];
    kdart__spec_values(k, spec, vals);
    for (int i = 0; i < k->nparams; i++)
        if (strcmp(k->params[i].name, "varlen") == 0) return vals[i] == 1;
    return 0;
}

/* The default prewarm set: each stage's own rule; stubs never. */
int kdart__spec_prewarmed(int kernel, int spec) {
    const kdart__kernel *k = kdart__kernel_at(kernel);
    int vals[KDART__MAX_PARAMS];
    kdart__spec_values(k, spec, vals);
    if (k->stub && k->stub(vals)) return 0;
    return k->prewarmed ? k->prewarmed(vals) : 1;
}

const kdart__kernel *kdart__kernel_find(const char *name) {
    if (!name) return NULL;
    for (int i = 0, n = kdart__kernel_count(); i < n; i++)
        if (strcmp(kernels[i]->name, name) == 0) return kernels[i];
    return NULL;
}

static const kdart__param *param_find(const kdart__kernel *k, const char *name, size_t len, int *at) {
    for (int i = 0; i < k->nparams; i++) {
        if (strlen(k->params[i].name) == len && strncmp(k->params[i].name, name, len) == 0) {
            *at = i;
            return &k->params[i];
        }
    }
    return NULL;
}

/* Accepts "a=x,b=y" with optional spaces; commas or spaces separate pairs.
 * A parameter given twice is an error: silently taking the last would let
 * a typo pick a specialization the user did not mean. */
int kdart__spec_parse(const kdart__kernel *k, const char *spec, int *vals, char *err, size_t errlen) {
    int seen[KDART__MAX_PARAMS] = {0};
    for (int i = 0; i < k->nparams; i++) vals[i] = k->params[i].dflt;
    const char *p = spec ? spec : "";
    while (*p) {
        while (*p == ',' || isspace((unsigned char)*p)) p++;
        if (!*p) break;
        const char *name = p;
        while (*p && *p != '=' && *p != ',' && !isspace((unsigned char)*p)) p++;
        size_t nlen = (size_t)(p - name);
        if (*p != '=') {
            snprintf(err, errlen, "spec item '%.*s' of %s is not name=value", (int)nlen, name, k->name);
            return KDART_ESPEC;
        }
        p++;
        const char *val = p;
        while (*p && *p != ',' && !isspace((unsigned char)*p)) p++;
        size_t vlen = (size_t)(p - val);
        int at;
        const kdart__param *prm = param_find(k, name, nlen, &at);
        if (!prm) {
            snprintf(err, errlen, "%s has no parameter '%.*s'", k->name, (int)nlen, name);
            return KDART_ESPEC;
        }
        if (seen[at]) {
            snprintf(err, errlen, "parameter '%s' given twice", prm->name);
            return KDART_ESPEC;
        }
        int found = -1;
        for (int v = 0; v < prm->nvalues; v++)
            if (strlen(prm->values[v]) == vlen && strncmp(prm->values[v], val, vlen) == 0) found = v;
        if (found < 0) {
            char allowed[128] = "";
            for (int v = 0; v < prm->nvalues; v++) {
                strncat(allowed, v ? ", " : "", sizeof allowed - strlen(allowed) - 1);
                strncat(allowed, prm->values[v], sizeof allowed - strlen(allowed) - 1);
            }
            snprintf(err, errlen, "%s: %s=%.*s is not supported (allowed: %s)", k->name, prm->name,
                     (int)vlen, val, allowed);
            return KDART_ESPEC;
        }
        vals[at] = found;
        seen[at] = 1;
    }
    return KDART_OK;
}

int kdart__kernel_spec(kdart_rt *rt, const char *kernel, const char *spec, const kdart__kernel **k, int *vals) {
    if (!kernel) return kdart__err(rt, KDART_ENULL, "kernel name is NULL");
    if (!(*k = kdart__kernel_find(kernel)))
        return kdart__err(rt, KDART_EKERNEL, "no kernel named '%s' (see kdart_kernel_name)", kernel);
    char err[256];
    int rc = kdart__spec_parse(*k, spec, vals, err, sizeof err);
    return rc ? kdart__err(rt, rc, "%s", err) : KDART_OK;
}

int kdart__spec_index(const kdart__kernel *k, const int *vals) {
    int idx = 0;
    for (int i = 0; i < k->nparams; i++) idx = idx * k->params[i].nvalues + vals[i];
    return idx;
}

void kdart__spec_values(const kdart__kernel *k, int index, int *vals) {
    for (int i = k->nparams - 1; i >= 0; i--) {
        vals[i] = index % k->params[i].nvalues;
        index /= k->params[i].nvalues;
    }
}

int kdart__spec_format(const kdart__kernel *k, const int *vals, char *buf, size_t n) {
    size_t used = 0;
    if (n) buf[0] = 0;
    for (int i = 0; i < k->nparams; i++) {
        int w = snprintf(buf + used, n > used ? n - used : 0, "%s%s=%s", i ? "," : "",
                         k->params[i].name, k->params[i].values[vals[i]]);
        used += (size_t)w;
    }
    return used < n ? (int)used : KDART_EINVAL;
}

int kdart__spec_entry(const kdart__kernel *k, const int *vals, char *buf, size_t n) {
    size_t used = (size_t)snprintf(buf, n, "%s<", k->entry);
    for (int i = 0; i < k->nparams; i++)
        used += (size_t)snprintf(buf + (used < n ? used : n), used < n ? n - used : 0, "%s%s",
                                 i ? ", " : "", k->params[i].targs[vals[i]]);
    used += (size_t)snprintf(buf + (used < n ? used : n), used < n ? n - used : 0, ">");
    return used < n ? (int)used : KDART_EINVAL;
}

/* 1 if arch is "sm_<2 or 3 digits>[a|f]" (no GPU needs more). */
static int arch_well_formed(const char *arch) {
    if (!arch || strncmp(arch, "sm_", 3) != 0 || arch[3] == '0') return 0; /* "sm_090a": another key for sm_90a */
    const char *p = arch + 3;
    int digits = 0;
    while (isdigit((unsigned char)*p)) p++, digits++;
    if (digits < 2 || digits > 3) return 0;
    if (*p == 'a' || *p == 'f') p++;
    return *p == '\0';
}

/* The kernels use Hopper-generation instructions (stmatrix). */
#define KDART__MIN_SM 90

int kdart__arch_check(const char *arch) {
    return arch_well_formed(arch) && atoi(arch + 3) >= KDART__MIN_SM ? KDART_OK : KDART_EARCH;
}

/* NVRTC's targets, asked once: a compile for a target it does not know
 * fails only after the whole front end ran, and recorded a failed entry. */
static int nvrtc_archs[128];
static int n_nvrtc_archs; /* < 0: NVRTC could not say */
static pthread_once_t nvrtc_archs_once = PTHREAD_ONCE_INIT;
static void nvrtc_archs_init(void) {
    n_nvrtc_archs = kdart__nvrtc_archs(nvrtc_archs, (int)(sizeof nvrtc_archs / sizeof nvrtc_archs[0]));
}

int kdart__arch_supported(const char *arch, char *msg, size_t n) {
    char dummy[8];
    if (!msg) msg = dummy, n = sizeof dummy;
    if (!arch_well_formed(arch)) {
        snprintf(msg, n, "'%.64s' is not a target architecture (expected e.g. sm_90a, sm_100a)", arch ? arch : "");
        return KDART_EARCH;
    }
    int sm = atoi(arch + 3);
    if (sm < KDART__MIN_SM) {
        snprintf(msg, n, "%s is not supported: kdart's kernels use Hopper instructions; kdart needs sm_90 or newer",
                 arch);
        return KDART_EARCH;
    }
    pthread_once(&nvrtc_archs_once, nvrtc_archs_init);
    if (n_nvrtc_archs <= 0) return KDART_OK; /* NVRTC cannot say: its compile will */
    for (int i = 0; i < n_nvrtc_archs; i++)
        if (nvrtc_archs[i] == sm) return KDART_OK;
    size_t used = (size_t)snprintf(msg, n, "%s is not a target that this NVRTC knows (it knows", arch);
    for (int i = 0, first = 1; i < n_nvrtc_archs && used < n; i++)
        if (nvrtc_archs[i] >= KDART__MIN_SM) {
            used += (size_t)snprintf(msg + used, n - used, "%s sm_%d", first ? "" : ",", nvrtc_archs[i]);
            first = 0;
        }
    if (used < n) snprintf(msg + used, n - used, ")");
    return KDART_EARCH;
}

int kdart_arch_supported(const char *arch, char *msg, size_t n) { return kdart__arch_supported(arch, msg, n); }

/* ------------------------------------------------------- public registry */

int kdart_kernel_count(void) { return kdart__kernel_count(); }

const char *kdart_kernel_name(int index) {
    const kdart__kernel *k = kdart__kernel_at(index);
    return k ? k->name : NULL;
}

const char *kdart_kernel_params(const char *kernel) {
    static char text[KDART__MAX_KERNELS][256]; /* built once; the table is constant */
    const kdart__kernel *k = kdart__kernel_find(kernel);
    if (!k) return NULL;
    char *t = text[kdart__kernel_index(k)];
    if (!t[0]) {
        char tmp[256] = "";
        for (int i = 0; i < k->nparams; i++) {
            size_t u = strlen(tmp);
            snprintf(tmp + u, sizeof tmp - u, "%s%s={", i ? " " : "", k->params[i].name);
            for (int v = 0; v < k->params[i].nvalues; v++) {
                u = strlen(tmp);
                snprintf(tmp + u, sizeof tmp - u, "%s%s", v ? "," : "", k->params[i].values[v]);
            }
            u = strlen(tmp);
            snprintf(tmp + u, sizeof tmp - u, "}");
        }
        memcpy(t, tmp, sizeof tmp);
    }
    return t;
}

int kdart_spec_count(const char *kernel) {
    const kdart__kernel *k = kdart__kernel_find(kernel);
    if (!k) return KDART_EKERNEL;
    return spec_count(k);
}

int kdart_spec_prewarmed(const char *kernel, int index) {
    const kdart__kernel *k = kdart__kernel_find(kernel);
    if (!k) return KDART_EKERNEL;
    if (index < 0 || index >= kdart_spec_count(kernel)) return KDART_EINVAL;
    return kdart__spec_prewarmed(kdart__kernel_index(k), index);
}

int kdart_spec_at(const char *kernel, int index, char *buf, size_t n) {
    const kdart__kernel *k = kdart__kernel_find(kernel);
    if (!k) return KDART_EKERNEL;
    if (!buf) return KDART_ENULL;
    if (index < 0 || index >= kdart_spec_count(kernel)) return KDART_EINVAL;
    int vals[KDART__MAX_PARAMS];
    kdart__spec_values(k, index, vals);
    return kdart__spec_format(k, vals, buf, n);
}

int kdart_spec_canonical(const char *kernel, const char *spec, char *buf, size_t n) {
    const kdart__kernel *k = kdart__kernel_find(kernel);
    if (!k) return KDART_EKERNEL;
    if (!buf) return KDART_ENULL;
    int vals[KDART__MAX_PARAMS];
    char err[256];
    int rc = kdart__spec_parse(k, spec, vals, err, sizeof err);
    if (rc) return rc;
    return kdart__spec_format(k, vals, buf, n);
}
