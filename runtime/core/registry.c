/*
 * registry.c: the kernel registry, the one table that the runtime, the CLI
 * (through the public kdart_kernel_* and kdart_spec_* calls) and the tests
 * share.
 *
 * Each kernel lists its source file, its template entry point and its
 * specialization parameters in template-argument order, with the values a
 * user may write and the template argument each value becomes.  A spec is
 * parsed into value indices; its canonical text lists every parameter in
 * registry order, so two spellings of one specialization always produce
 * the same manifest and the same cache key.
 *
 * The launch shapes here mirror the traits structs of the kernel sources
 * (RcumsumTraits, BwdIntraTraits, BwdDhuTraits, WyDqkgTraits), whose static_asserts pin the
 * same numbers; the GPU tests launch every specialization, so a mismatch
 * cannot go unnoticed.
 */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

/* Launch shapes of bwd_intra and bwd_dhu, from their traits structs. */
#define KDART__INTRA_THREADS(K) 256 /* BwdIntraTraits<K>::kThreads */
/* BwdIntraTraits<K>::kSmemBytes: 64-column passes; only the db partials
 * ([64][2 * K/64] fp32) grow with the K tile */
#define KDART__INTRA_SMEM(K) (111872 + 64 * 4 * 2 * ((K) / 64))
/* BwdDhuTraits<K, BV>::kWGs: warpgroups of 128 threads (kCtaThreads), two at
 * the K tiles 192 and 256 with BV 64, each scanning 32 of the columns */
#define KDART__DHU_WGS(K, BV) ((K) >= 192 && (BV) == 64 ? 2 : 1)
#define KDART__DHU_THREADS(K, BV) (128 * KDART__DHU_WGS(K, BV))
/* BwdDhuTraits<K, BV>::kSmemBytes: cp.async stages (three; two at K = 192, 256)
 * of kg, qg, w ([64][K] io), do, dv ([64][BV] io) and one fp32 g row, each
 * stage rounded up to 1 KB (where wgmma's swizzle patterns repeat), plus
 * IO(dH) [K][BV]; with two warpgroups qg has one buffer outside the stages */
#define KDART__DHU_STAGES(K) ((K) >= 192 ? 2 : 3)
#define KDART__DHU_QONE(K, BV) ((K) == 256 && KDART__DHU_WGS(K, BV) > 1)
#define KDART__DHU_STAGE(K, BV) \
    (((3 - KDART__DHU_QONE(K, BV)) * 64 * (K) * 2 + 2 * 64 * (BV) * 2 + (K) * 4 + 1023) / 1024 * 1024)
#define KDART__DHU_SMEM(K, BV) \
    (KDART__DHU_STAGES(K) * KDART__DHU_STAGE(K, BV) + KDART__DHU_QONE(K, BV) * 64 * (K) * 2 + (K) * (BV) * 2)
_Static_assert(KDART__DHU_SMEM(256, 64) == 231424 && KDART__DHU_SMEM(256, 32) == 231424 &&
                   KDART__DHU_SMEM(128, 64) == 216064 && KDART__DHU_SMEM(192, 32) == 178176 &&
                   KDART__DHU_SMEM(192, 64) == 206848,
               "bwd_dhu's launch contract (kernel_src/bwd_dhu.cuh asserts the same)");

/* The V tiles of bwd_dhu, written once: the BV parameter's strings (below) and
 * the integers the tile rule works with both expand this list. */
#define KDART__DHU_BVS(X) X(16) X(32) X(64)
#define KDART__INT_(v) v,
#define KDART__STR_(v) #v,
static const int dhu_bvs[] = {KDART__DHU_BVS(KDART__INT_)}; /* the BV parameter's values, in order */
#define KDART__NBV ((int)(sizeof dhu_bvs / sizeof dhu_bvs[0]))

/* The K tiles, in the K parameter's order; bwd_dhu's has one more (192: a
 * head dim in 129..192 scans a quarter fewer K-side bytes than in the 256
 * tile), written once as the V tiles are: its K parameter's strings and the
 * integers below expand this list. */
static const int k_tiles[] = {64, 128, 256};
#define KDART__DHU_KS(X) X(64) X(128) X(192) X(256)
static const int dhu_k_tiles[] = {KDART__DHU_KS(KDART__INT_)};
#define KDART__NDK ((int)(sizeof dhu_k_tiles / sizeof dhu_k_tiles[0]))

int kdart__k_tile(int64_t K) { return K < 1 || K > 256 ? -1 : K <= 64 ? 64 : K <= 128 ? 128 : 256; }
int kdart__k_index(int k_tile) { return k_tile == 64 ? 0 : k_tile == 128 ? 1 : 2; }
int kdart__dhu_k_tile(int64_t K) { return K > 128 && K <= 192 ? 192 : kdart__k_tile(K); }
int kdart__dhu_k_index(int k_tile) {
    for (int i = 0; i < KDART__NDK; i++)
        if (dhu_k_tiles[i] == k_tile) return i;
    return -1;
}

static void rcumsum_shape(const int *vals, int *threads, int *smem) {
    *threads = k_tiles[vals[0]]; /* one thread per channel */
    *smem = 0;
}

/* BwdIntraTraits<K> in kernel_src/bwd_intra.cuh. vals: io, fold, emit, K, varlen,
 * tail, beta (every specialization of one K tile launches with the same shape). */
static void bwd_intra_shape(const int *vals, int *threads, int *smem) {
    int K = k_tiles[vals[3]];
    *threads = KDART__INTRA_THREADS(K);
    *smem = KDART__INTRA_SMEM(K);
}

/* BwdDhuTraits<K, BV> in kernel_src/bwd_dhu.cuh. vals: io, K, BV, varlen.
 * Every (K, BV) is a kernel (the K tiles 192 and 256 run BV 64 as two
 * warpgroups of 32 columns: dH and qg^T sum in registers, 2 * BV floats per
 * thread each at K = 256). */
static void bwd_dhu_shape(const int *vals, int *threads, int *smem) {
    int K = dhu_k_tiles[vals[1]], bv = dhu_bvs[vals[2]];
    *threads = KDART__DHU_THREADS(K, bv);
    *smem = KDART__DHU_SMEM(K, bv);
}

/* WyDqkgTraits<K> in kernel_src/wy_dqkg.cuh: 256 threads; two stages of six
 * 64 x 64 io tiles, A, and the small per-row and per-column slots, the same at
 * every K tile (the K blocks of 64 columns are walked in turn). */
#define KDART__WY_SMEM 108864
static void wy_dqkg_shape(const int *vals, int *threads, int *smem) {
    (void)vals;
    *threads = 256;
    *smem = KDART__WY_SMEM;
}

int kdart__dhu_bv_index(int bv) {
    for (int i = 0; i < KDART__NBV; i++)
        if (dhu_bvs[i] == bv) return i;
    return -1;
}

/* The scan is serial over chunks, so only the grid runs in parallel: a CTA
 * (one scan of BV columns) takes about the same time per chunk wherever it
 * runs, and the launch takes ceil(CTAs / SMs) of those times (every tile
 * width runs one CTA per SM at K = 128; at K = 64 two fit, but the pair
 * shares the SM, so it is not counted as free).  The relative per-chunk
 * times below were measured on the H200 with an earlier, mma.sync-only form of
 * the kernel (at K = 128 a 64-column scan took 2.15 us per chunk, 32 columns
 * 1.35 us, 16 columns 1.01 us); with the wgmma kernel of today they still pick
 * the measured-best tile on every row of the standard table (measured on the
 * H200 at every tile width).  The narrower tile wins only when its extra
 * waves are paid for; ties go to the wider tile, which moves fewer K-side
 * bytes. */
int kdart__dhu_pick_bv(long long B, long long HV, long long V, int K, int sms) {
    /* per-chunk time, per mille of the widest tile; one entry per dhu_bvs value */
    static const int rel128[KDART__NBV] = {470, 630, 1000};
    static const int rel64[KDART__NBV] = {550, 745, 1000};
    /* K = 192 and 256: BV 64 is two warpgroups over one copy of the K-side tiles
     * (K = 256 on one wave, B1 T8192 H4, on the H200: 0.244, 0.283, 0.463 ms; 192 taken as 256's) */
    static const int rel256[KDART__NBV] = {530, 610, 1000};
    const int kt0 = kdart__dhu_k_tile(K), kt = kt0 > 0 ? kt0 : 128;
    const int *rel = kt == 64 ? rel64 : kt >= 192 ? rel256 : rel128;
    if (sms < 1) sms = 1;
    int best = -1;
    long long best_cost = -1;
    for (int i = KDART__NBV - 1; i >= 0; i--) {
        long long ctas = B * HV * ((V + dhu_bvs[i] - 1) / dhu_bvs[i]);
        long long cost = (ctas + sms - 1) / sms * rel[i];
        if (best_cost < 0 || cost < best_cost) best = i, best_cost = cost;
    }
    return dhu_bvs[best];
}

#define IO_PARAM {"io", 2, {"bf16", "fp16"}, {"kdart::bf16", "kdart::fp16"}, 0}
#define K_PARAM {"K", 3, {"64", "128", "256"}, {"64", "128", "256"}, 1}
#define DHU_K_PARAM {"K", KDART__NDK, {KDART__DHU_KS(KDART__STR_)}, {KDART__DHU_KS(KDART__STR_)}, 1}
#define BV_PARAM {"BV", KDART__NBV, {KDART__DHU_BVS(KDART__STR_)}, {KDART__DHU_BVS(KDART__STR_)}, KDART__NBV - 1}
#define FLAG_PARAM(n) {n, 2, {"0", "1"}, {"false", "true"}, 0}
/* bwd_intra's beta: in the io dtype, or fp32 (fla hands the stage fp32 beta
 * when chunk_kda applies the beta sigmoid itself, the configuration most
 * models train with) */
#define BETA_PARAM {"beta", 2, {"io", "f32"}, {"false", "true"}, 0}
/* bwd_dhu's tail: 0 native, 1 masked (head dims below the K tile, partial V
 * tiles, the V-first state at those), 2 the V-first state at native dims */
#define DHU_TAIL_PARAM {"tail", 3, {"0", "1", "2"}, {"0", "1", "2"}, 0}

/* rt->slots keeps KDART__MAX_SPECS units per kernel, indexed by spec: every
 * kernel's spec count (the product of its parameters' value counts, as in
 * the table below) must fit, or the launch path's slots overrun the fields
 * after them (108 bwd_dhu specs once did, into the device status words, and
 * crashed GPU processes: test_core's registry_specs checks every kernel's
 * count as well). */
_Static_assert(3 <= KDART__MAX_SPECS, "chunk_rcumsum's specs exceed KDART__MAX_SPECS");
_Static_assert(2 * 2 * 2 * 3 * 2 * 2 * 2 <= KDART__MAX_SPECS, "bwd_intra's specs exceed KDART__MAX_SPECS");
_Static_assert(2 * KDART__NDK * KDART__NBV * 2 * 3 <= KDART__MAX_SPECS, "bwd_dhu's specs exceed KDART__MAX_SPECS");
_Static_assert(2 * 3 * 2 * 2 * 2 * 2 <= KDART__MAX_SPECS, "wy_dqkg's specs exceed KDART__MAX_SPECS");

const kdart__kernel kdart__kernels[KDART__NKERNELS] = {
    [KDART__K_RCUMSUM] = {"chunk_rcumsum", "chunk_rcumsum.cuh", "kdart_chunk_rcumsum", 1,
                          {K_PARAM}, rcumsum_shape},
    [KDART__K_BWD_INTRA] = {"bwd_intra", "bwd_intra.cuh", "kdart_bwd_intra", 7,
                            {IO_PARAM, FLAG_PARAM("fold_dg"), FLAG_PARAM("emit_bf16"), K_PARAM,
                             FLAG_PARAM("varlen"), FLAG_PARAM("tail"), BETA_PARAM},
                            bwd_intra_shape},
    [KDART__K_BWD_DHU] = {"bwd_dhu", "bwd_dhu.cuh", "kdart_bwd_dhu", 5,
                          {IO_PARAM, DHU_K_PARAM, BV_PARAM, FLAG_PARAM("varlen"), DHU_TAIL_PARAM},
                          bwd_dhu_shape},
    /* tail: a head dim below the K tile or V not a multiple of 64 (element
     * loads and stores); svf: the V-first state layout of h and dh */
    [KDART__K_WY_DQKG] = {"wy_dqkg", "wy_dqkg.cuh", "kdart_wy_dqkg", 6,
                          {IO_PARAM, K_PARAM, FLAG_PARAM("varlen"), FLAG_PARAM("tail"), BETA_PARAM, FLAG_PARAM("svf")},
                          wy_dqkg_shape},
};

/* The varlen specializations (those that take a device status word): the
 * varlen parameter, wherever the kernel lists it, is 1. */
int kdart__spec_is_varlen(int kernel, int spec) {
    const kdart__kernel *k = &kdart__kernels[kernel];
    int vals[KDART__MAX_PARAMS];
    kdart__spec_values(k, spec, vals);
    for (int i = 0; i < k->nparams; i++)
        if (strcmp(k->params[i].name, "varlen") == 0) return vals[i] == 1;
    return 0;
}

/* Stubs: specializations that compile to a trap and are never launched
 * (bwd_intra's tail without varlen: FixedParams has no Kr). */
static int spec_is_stub(int kernel, const int *vals) {
    if (kernel == KDART__K_BWD_INTRA) return vals[5] == 1 && vals[4] == 0;
    return 0;
}

/* The default prewarm set.  Every native specialization (the tail
 * parameter 0) with beta in the io dtype, and the ones most calls need:
 * bwd_intra with fp32 beta as kdart.fla calls it (fold_dg=1, emit_bf16=0:
 * the beta sigmoid inside chunk_kda, both io dtypes), bf16 bwd_intra's tail
 * as kdart.fla calls it (every K tile, either beta: head dims 60, 100, 192)
 * and bf16 bwd_dhu at the K tile 128 (tail 1: head dim 100, partial V
 * tiles; tail 2: the V-first state of K = 128 models).  bwd_dhu's K tile 192
 * (head dims 129..192) is prewarmed native and bf16 only.  The other
 * specializations compile on first use (about 1.5 s each for bwd_intra,
 * 0.5 s for bwd_dhu): all of them would double the prewarm time.  Stubs
 * are never prewarmed. */
int kdart__spec_prewarmed(int kernel, int spec) {
    const kdart__kernel *k = &kdart__kernels[kernel];
    int vals[KDART__MAX_PARAMS];
    kdart__spec_values(k, spec, vals);
    if (spec_is_stub(kernel, vals)) return 0;
    /* beta in fp32: as kdart.fla calls it (fold_dg=1, emit_bf16=0), both io dtypes */
    if (kernel == KDART__K_BWD_INTRA && vals[6] == 1 && (vals[1] != 1 || vals[2] != 0)) return 0;
    if (kernel == KDART__K_BWD_INTRA && vals[5] == 1) return vals[0] == 0 && vals[1] == 1 && vals[2] == 0;
    if (kernel == KDART__K_BWD_DHU && dhu_k_tiles[vals[1]] == 192) return vals[0] == 0 && vals[4] == 0;
    if (kernel == KDART__K_BWD_DHU && vals[4] != 0) return vals[0] == 0 && dhu_k_tiles[vals[1]] == 128;
    /* wy_dqkg: every native one with the K-first state; the V-first state and
     * the tail (head dims 60, 100, 192) in bf16 with fp32 beta, as the
     * configuration most models train with hands them over */
    if (kernel == KDART__K_WY_DQKG && (vals[3] == 1 || vals[5] == 1)) return vals[0] == 0 && vals[4] == 1;
    return 1;
}

const kdart__kernel *kdart__kernel_find(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < KDART__NKERNELS; i++)
        if (strcmp(kdart__kernels[i].name, name) == 0) return &kdart__kernels[i];
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

int kdart_kernel_count(void) { return KDART__NKERNELS; }

const char *kdart_kernel_name(int index) {
    return index >= 0 && index < KDART__NKERNELS ? kdart__kernels[index].name : NULL;
}

const char *kdart_kernel_params(const char *kernel) {
    static char text[KDART__NKERNELS][256]; /* built once; the table is constant */
    const kdart__kernel *k = kdart__kernel_find(kernel);
    if (!k) return NULL;
    char *t = text[k - kdart__kernels];
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
    int n = 1;
    for (int i = 0; i < k->nparams; i++) n *= k->params[i].nvalues;
    return n;
}

int kdart_spec_prewarmed(const char *kernel, int index) {
    const kdart__kernel *k = kdart__kernel_find(kernel);
    if (!k) return KDART_EKERNEL;
    if (index < 0 || index >= kdart_spec_count(kernel)) return KDART_EINVAL;
    return kdart__spec_prewarmed((int)(k - kdart__kernels), index);
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
