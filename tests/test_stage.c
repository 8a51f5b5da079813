/*
 * test_stage.c: a stage added in one place.  The description below (one
 * kdart__kernel with its operation, as each file of runtime/core/stages/
 * holds one) and its kernel (tests/kernel_src/test_scale.cuh) are all there
 * is of "test_scale"; kdart__stage_register, the registry's one declared
 * test interface, adds it.  The test shows that everything else follows
 * from that description, as it does for the built-in stages:
 *   listed     kdart_kernel_*, kdart_spec_* and the prewarm set;
 *   described  kdart_op_arg (what the Python package builds its calls from);
 *   checked    bad arguments refused with their status, nothing launched;
 *              kdart_spec_for picks the specialization;
 *   prepared   NVRTC and nvJitLink, the cache entry listed with its manifest;
 *   launched   on a GPU: poisoned output, fresh random input, against float64,
 *              and a refused call leaves the output untouched.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kda_check.h"
#include "stage.h"
#include "test_scale_params.h"
#include "testlib.h"

/* ------------------------------------------------- the stage, in one place */

typedef struct test_scale_args {
    uint32_t struct_size;
    const DLTensor *x; /* [B,T,HV,K] bf16 */
    const DLTensor *y; /* out [B,T,HV,K] fp32 */
    float scale;
} test_scale_args;

#define ARGS test_scale_args

static void shape(const int *vals, int *threads, int *smem) {
    (void)vals;
    *threads = 128;
    *smem = 0;
}

static int dims(kdart_rt *rt, kdart__call *c) {
    const ARGS *a = c->args;
    int rc = kdart__call_io(rt, c, a->x, "x", 4);
    if (rc) return rc;
    if (c->io != 0) return kdart__err(rt, KDART_EUNSUPPORTED, "test_scale takes bfloat16 x only");
    static const int sym[4] = {KDART__D_B, KDART__D_T, KDART__D_HV, KDART__D_K};
    for (int i = 0; i < 4; i++) c->d[sym[i]] = a->x->shape[i];
    const int64_t K = c->d[KDART__D_K], n = c->d[KDART__D_B] * c->d[KDART__D_T] * c->d[KDART__D_HV] * K;
    if (K < 1 || K > 128) return kdart__err(rt, KDART_EUNSUPPORTED, "K=%lld is not supported (1..128)", (long long)K);
    if (n < 1 || n > INT32_MAX) return kdart__err(rt, KDART_ESHAPE, "x has %lld elements", (long long)n);
    c->grid[0] = (unsigned)((n + 127) / 128 < 1024 ? (n + 127) / 128 : 1024);
    c->grid[1] = 1;
    return KDART_OK;
}

static int choose(kdart_rt *rt, kdart__call *c) {
    (void)rt;
    c->vals[0] = c->d[KDART__D_K] > 64;
    return KDART_OK;
}

static int launch(kdart_rt *rt, const kdart__call *c, const kdart__unit *u, void *fn, int *status, void *stream) {
    (void)status;
    const ARGS *a = c->args;
    const int64_t *d = c->d;
    kdart_test_scale_params p = {kdart__ptr(a->x), (float *)kdart__ptr(a->y), a->scale,
                                 (int)(d[KDART__D_B] * d[KDART__D_T] * d[KDART__D_HV]), (int)d[KDART__D_K]};
    return kdart__launch(rt, fn, c->grid[0], c->grid[1], 1, u->threads, u->smem, stream, &p);
}

static const kdart__op op = {
    sizeof(ARGS), sizeof(ARGS), "test_scale_args", 2, 1,
    {
        KDART__TARG("x", ARGS, x, KDART__DT_IO, 0, B, T, HV, K),
        KDART__TARG("y", ARGS, y, KDART__DT_F32, KDART__A_OUT, B, T, HV, K),
    },
    {KDART__SARG("scale", ARGS, scale, 'f')},
    0, 0, 0,
    dims, choose, launch,
};

static const kdart__kernel test_scale = {
    "test_scale", "test_scale.cuh", "kdart_test_scale", 1,
    {{"K", 2, {"64", "128"}, {"64", "128"}, 0}},
    shape, NULL, NULL, &op,
};

/* ------------------------------------------------------------------ tests */

static char dir[256], db[512], kdir[512];

static void setup(void) {
    test_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/cache/kdart.db", dir);
    snprintf(kdir, sizeof kdir, "%s/tests/kernel_src", KDART_TEST_SOURCE_DIR);
}

static void teardown(void) { test_rmtree(dir); }

START_TEST(listed) {
    const int n = kdart_kernel_count();
    ck_assert_int_ge(n, 5);
    ck_assert_str_eq(kdart_kernel_name(n - 1), "test_scale");
    ck_assert_str_eq(kdart_kernel_params("test_scale"), "K={64,128}");
    ck_assert_int_eq(kdart_spec_count("test_scale"), 2);
    char buf[64];
    ck_assert_int_gt(kdart_spec_at("test_scale", 1, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "K=128");
    ck_assert_int_eq(kdart_spec_prewarmed("test_scale", 0), 1);
    /* a name is registered once; a full or malformed row is refused */
    ck_assert_int_eq(kdart__stage_register(&test_scale), KDART_EINVAL);
    ck_assert_int_eq(kdart__stage_register(NULL), KDART_EINVAL);
}
END_TEST

START_TEST(described) {
    kdart_op_arg_info a;
    ck_assert_int_eq(kdart_op_arg("test_scale", 0, &a), 3);
    ck_assert_str_eq(a.name, "x");
    ck_assert_int_eq(a.kind, KDART_ARG_INPUT);
    ck_assert_str_eq(a.dtype, "io");
    ck_assert_str_eq(a.dims, "B, T, HV, K");
    ck_assert_int_eq(a.offset, offsetof(ARGS, x));
    ck_assert_int_eq(a.args_size, sizeof(ARGS));
    ck_assert_int_eq(kdart_op_arg("test_scale", 1, &a), 3);
    ck_assert_str_eq(a.name, "y");
    ck_assert_int_eq(a.kind, KDART_ARG_OUTPUT);
    ck_assert_str_eq(a.dtype, "float32");
    ck_assert_int_eq(kdart_op_arg("test_scale", 2, &a), 3);
    ck_assert_str_eq(a.name, "scale");
    ck_assert_int_eq(a.kind, KDART_ARG_FLOAT);
    ck_assert_ptr_null(a.dims);
    ck_assert_int_eq(kdart_op_arg("test_scale", 3, &a), KDART_EINVAL);
    ck_assert_int_eq(kdart_op_arg("nope", 0, &a), KDART_EKERNEL);
    ck_assert_int_eq(kdart_op_arg("chunk_rcumsum", 0, &a), 0); /* no operation of its own */
    /* the built-in stages answer from the same tables their checks read */
    ck_assert_int_eq(kdart_op_arg("wy_dqkg", 0, &a), 23);
    ck_assert_int_eq(kdart_op_arg("bwd_intra", 10, &a), 18);
    ck_assert_str_eq(a.name, "dq");
    ck_assert_str_eq(a.dtype, "io?");
    ck_assert_str_eq(a.flag, "emit_bf16");
    ck_assert_int_eq(kdart_op_arg("bwd_dhu", 10, &a), 17);
    ck_assert_str_eq(a.name, "dh0");
    ck_assert_int_eq(a.optional, 1);
    ck_assert_str_eq(a.dims, "N, HV, S1, S2");
    ck_assert_int_eq(kdart_op_arg("bwd_dhu", 16, &a), 17);
    ck_assert_str_eq(a.name, "chunk_offsets");
    ck_assert_int_eq(a.kind, KDART_ARG_SEQS);
}
END_TEST

typedef struct host_tensor {
    DLTensor t;
    int64_t shape[4];
} host_tensor;

static void fake(host_tensor *h, int code, int bits, int64_t b, int64_t t, int64_t hv, int64_t k, uintptr_t at) {
    memset(h, 0, sizeof *h);
    h->shape[0] = b, h->shape[1] = t, h->shape[2] = hv, h->shape[3] = k;
    h->t.data = (void *)at; /* never read: every call here stops before a launch */
    h->t.device.device_type = kDLCUDA;
    h->t.ndim = 4;
    h->t.shape = h->shape;
    h->t.dtype.code = (uint8_t)code, h->t.dtype.bits = (uint8_t)bits, h->t.dtype.lanes = 1;
}

START_TEST(checked) {
    kdart_rt *rt = test_open_flags(db, kdir, NULL, KDART_OPEN_NO_ENV | KDART_OPEN_NO_CUDA);
    ck_assert_ptr_nonnull(rt);
    host_tensor x, y;
    fake(&x, kDLBfloat, 16, 2, 64, 3, 50, 0x100000);
    fake(&y, kDLFloat, 32, 2, 64, 3, 50, 0x200000);
    test_scale_args a = {sizeof a, &x.t, &y.t, 0.5f};
    char spec[64];
    ck_assert_int_eq(kdart_spec_for(rt, "test_scale", &a, spec, sizeof spec), 4);
    ck_assert_str_eq(spec, "K=64");
    x.shape[3] = y.shape[3] = 100;
    ck_assert_int_gt(kdart_spec_for(rt, "test_scale", &a, spec, sizeof spec), 0);
    ck_assert_str_eq(spec, "K=128");
    ck_assert_int_eq(kdart_op_run(rt, "test_scale", &a, NULL), KDART_ENOCUDA); /* valid: reaches the launch */
    y.t.dtype.bits = 16, y.t.dtype.code = kDLBfloat;
    ck_assert_int_eq(kdart_op_run(rt, "test_scale", &a, NULL), KDART_EDTYPE);
    ck_assert_ptr_nonnull(strstr(kdart_last_error(rt), "tensor y"));
    y.t.dtype.bits = 32, y.t.dtype.code = kDLFloat;
    y.shape[1] = 63;
    ck_assert_int_eq(kdart_op_run(rt, "test_scale", &a, NULL), KDART_ESHAPE);
    y.shape[1] = 64;
    y.t.data = (void *)0x100008; /* unaligned */
    ck_assert_int_eq(kdart_op_run(rt, "test_scale", &a, NULL), KDART_EALIGN);
    y.t.data = (void *)0x100000; /* over x */
    ck_assert_int_eq(kdart_op_run(rt, "test_scale", &a, NULL), KDART_EINVAL);
    ck_assert_ptr_nonnull(strstr(kdart_last_error(rt), "overlaps"));
    a.y = NULL;
    ck_assert_int_eq(kdart_op_run(rt, "test_scale", &a, NULL), KDART_ENULL);
    a.struct_size = 4;
    ck_assert_int_eq(kdart_op_run(rt, "test_scale", &a, NULL), KDART_EINVAL);
    ck_assert_int_eq(kdart_op_run(rt, "chunk_rcumsum", &a, NULL), KDART_EINVAL);
    ck_assert_int_eq(kdart_op_run(rt, "nope", &a, NULL), KDART_EKERNEL);
    kdart_close(rt);
}
END_TEST

static int find_entry(void *user, const kdart_entry *e) {
    if (strcmp(e->kernel, "test_scale") == 0 && strcmp(e->spec, "K=128") == 0) ++*(int *)user;
    return 0;
}

START_TEST(prepared) {
    kdart_rt *rt = test_open_flags(db, kdir, NULL, KDART_OPEN_NO_ENV | KDART_OPEN_NO_CUDA);
    ck_assert_ptr_nonnull(rt);
    kdart_prepared info;
    ck_assert_msg(kdart_prepare(rt, "test_scale", "K=128", "sm_90a", KDART_PREPARE_NO_LOAD, &info) == KDART_OK, "%s",
                  kdart_last_error(rt));
    ck_assert_int_eq(info.source, KDART_FROM_COMPILE);
    int found = 0;
    ck_assert_int_eq(kdart_cache_list(rt, find_entry, &found), KDART_OK);
    ck_assert_int_eq(found, 1);
    kdart_close(rt);
    rt = test_open_flags(db, kdir, NULL, KDART_OPEN_NO_ENV | KDART_OPEN_NO_CUDA);
    ck_assert_int_eq(kdart_prepare(rt, "test_scale", "K=128", "sm_90a", KDART_PREPARE_NO_LOAD, &info), KDART_OK);
    ck_assert_int_eq(info.source, KDART_FROM_CACHE);
    kdart_close(rt);
}
END_TEST

START_TEST(launched) {
    char why[256];
    if (kc_init(why, sizeof why) != 0) {
        printf("test_stage launched: skipped (%s)\n", why);
        return;
    }
    kdart_rt *rt = test_open_flags(db, kdir, NULL, KDART_OPEN_NO_ENV);
    ck_assert_ptr_nonnull(rt);
    const int64_t sh[4] = {2, 100, 3, 100};
    const size_t n = 2 * 100 * 3 * 100;
    kc_tensor x, y;
    ck_assert_int_eq(kc_tensor_make(&x, 0, 4, sh), 0);
    ck_assert_int_eq(kc_tensor_make(&y, 32, 4, sh), 0);
    double *hx = malloc(n * sizeof *hx), *hy = malloc(n * sizeof *hy);
    ck_assert(hx && hy);
    srand((unsigned)time(NULL));
    for (size_t i = 0; i < n; i++) hx[i] = (rand() / (double)RAND_MAX - 0.5) * 8;
    ck_assert_int_eq(kc_tensor_put(&x, hx), 0);
    ck_assert_int_eq(kc_tensor_get(&x, hx), 0); /* as rounded to bf16 */
    ck_assert_int_eq(kc_tensor_poison(&y), 0);
    test_scale_args a = {sizeof a, &x.t, &y.t, 0.75f};
    /* refused (x passed as y: the dtype), nothing written */
    test_scale_args bad = {sizeof bad, &x.t, &x.t, 0.75f};
    ck_assert_int_eq(kdart_op_run(rt, "test_scale", &bad, NULL), KDART_EDTYPE);
    ck_assert_int_eq(kc_sync(), 0);
    ck_assert_int_eq(kc_tensor_get(&y, hy), 0);
    for (size_t i = 0; i < n; i++) ck_assert(isnan(hy[i]));
    ck_assert_msg(kdart_op_run(rt, "test_scale", &a, NULL) == KDART_OK, "%s", kdart_last_error(rt));
    ck_assert_int_eq(kc_sync(), 0);
    ck_assert_int_eq(kc_tensor_get(&y, hy), 0);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double ref = 0.75 * hx[i], err = fabs(hy[i] - ref) / (fabs(ref) + 1e-30);
        if (!(err <= worst)) worst = err; /* NaN wins */
    }
    printf("test_stage launched: %zu elements, worst relative error %.2e\n", n, worst);
    ck_assert_msg(worst <= 1e-7, "worst relative error %g", worst);
    kc_tensor_free(&x);
    kc_tensor_free(&y);
    free(hx);
    free(hy);
    kdart_close(rt);
}
END_TEST

int main(void) {
    if (kdart__stage_register(&test_scale) != KDART_OK) {
        fprintf(stderr, "test_stage: kdart__stage_register refused test_scale\n");
        return 1;
    }
    Suite *s = suite_create("stage");
    TCase *tc = tcase_create("one_place");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, listed);
    tcase_add_test(tc, described);
    tcase_add_test(tc, checked);
    tcase_add_test(tc, prepared);
    tcase_add_test(tc, launched);
    suite_add_tcase(s, tc);
    return test_run(s);
}
