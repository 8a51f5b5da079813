/*
 * test_ops.c: argument validation of kdart_kda_bwd_intra and
 * kdart_kda_bwd_dhu, on the CPU.
 *
 * Tensors here carry fake, never-dereferenced device addresses, and CUDA
 * is disabled (KDART_DISABLE_CUDA=1), so a call whose arguments all pass
 * validation stops at "no CUDA" (ENOCUDA) before any launch.  Each bad
 * argument must be caught with its own status and a message naming it.
 * The GPU suite repeats the important cases with real buffers and checks
 * that the outputs were left untouched.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

typedef struct fake {
    DLTensor t;
    int64_t shape[5];
} fake;

static uintptr_t next_addr = 0x100000000ull;

static void mk(fake *f, int code, int bits, int ndim, int64_t a, int64_t b, int64_t c, int64_t d, int64_t e) {
    memset(f, 0, sizeof *f);
    int64_t s[5] = {a, b, c, d, e};
    memcpy(f->shape, s, sizeof s);
    f->t.ndim = ndim;
    f->t.shape = f->shape;
    f->t.dtype.code = (uint8_t)code;
    f->t.dtype.bits = (uint8_t)bits;
    f->t.dtype.lanes = 1;
    f->t.device.device_type = kDLCUDA;
    size_t n = (size_t)bits / 8;
    for (int i = 0; i < ndim; i++) n *= (size_t)s[i];
    f->t.data = (void *)next_addr;
    next_addr += (n + 4095) & ~(size_t)4095; /* distinct, aligned ranges */
}

enum { B = 2, T = 128, H = 2, HV = 4, K = 64, V = 128 };

typedef struct intra_set {
    fake q, k, g, beta, dAqk, dAkk, dq_in, dk_in, dg_in, db_in, dq, dk, dg, db;
    kdart_bwd_intra_args a;
} intra_set;

static void intra_make(intra_set *s, int hv) {
    mk(&s->q, kDLBfloat, 16, 4, B, T, H, K, 0);
    mk(&s->k, kDLBfloat, 16, 4, B, T, H, K, 0);
    mk(&s->g, kDLFloat, 32, 4, B, T, hv, K, 0);
    mk(&s->beta, kDLBfloat, 16, 3, B, T, hv, 0, 0);
    mk(&s->dAqk, kDLFloat, 32, 4, B, T, hv, 64, 0);
    mk(&s->dAkk, kDLFloat, 32, 4, B, T, hv, 64, 0);
    fake *f32[] = {&s->dq_in, &s->dk_in, &s->dg_in, &s->dq, &s->dk, &s->dg};
    for (int i = 0; i < 6; i++) mk(f32[i], kDLFloat, 32, 4, B, T, hv, K, 0);
    mk(&s->db_in, kDLFloat, 32, 3, B, T, hv, 0, 0);
    mk(&s->db, kDLFloat, 32, 3, B, T, hv, 0, 0);
    kdart_bwd_intra_args a = {sizeof a,      &s->q.t,     &s->k.t,     &s->g.t,     &s->beta.t,
                              &s->dAqk.t,    &s->dAkk.t,  &s->dq_in.t, &s->dk_in.t, &s->dg_in.t,
                              &s->db_in.t,   &s->dq.t,    &s->dk.t,    &s->dg.t,    &s->db.t,
                              0,             0};
    s->a = a;
}

static kdart_rt *rt;

static void setup(void) {
    setenv("KDART_DISABLE_CUDA", "1", 1);
    rt = test_open("", NULL, NULL);
    ck_assert_ptr_nonnull(rt);
}

static void teardown(void) { kdart_close(rt); }

static void expect(int rc, int status, const char *word, const char *call) {
    ck_assert_msg(rc == status, "%s: got %s (%s)", call, kdart_errname(rc), kdart_last_error(rt));
    if (word)
        ck_assert_msg(strstr(kdart_last_error(rt), word) != NULL, "message '%s' lacks '%s'", kdart_last_error(rt),
                      word);
}
#define EXPECT(call, status, word) expect((call), (status), (word), #call)

START_TEST(intra_valid_reaches_launch) {
    intra_set s;
    intra_make(&s, HV);
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    s.a.fold_dg = 1;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    intra_make(&s, H);
    s.a.emit_bf16 = 1;
    mk(&s.dq, kDLBfloat, 16, 4, B, T, H, K, 0);
    mk(&s.dk, kDLBfloat, 16, 4, B, T, H, K, 0);
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
}
END_TEST

START_TEST(intra_bad_arguments) {
    intra_set s;
    intra_make(&s, HV);
    EXPECT(kdart_kda_bwd_intra(rt, NULL, NULL), KDART_ENULL, "args");
    s.a.struct_size = 8;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_EINVAL, "struct_size");
    intra_make(&s, HV);
    s.a.dAkk = NULL;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_ENULL, "dAkk");
    intra_make(&s, HV);
    s.db.t.data = NULL;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_ENULL, "db");
    intra_make(&s, HV);
    s.g.t.dtype.code = kDLBfloat, s.g.t.dtype.bits = 16;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_EDTYPE, "g");
    intra_make(&s, HV);
    s.k.t.dtype.code = kDLFloat; /* fp16 while q is bf16 */
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_EDTYPE, "tensor k");
    intra_make(&s, HV);
    s.q.t.dtype.code = kDLFloat, s.q.t.dtype.bits = 32;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_EDTYPE, "io dtype");
    intra_make(&s, HV);
    s.dAqk.shape[3] = 32;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_ESHAPE, "dAqk");
    intra_make(&s, HV);
    s.beta.shape[1] = T / 2;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_ESHAPE, "beta");
    intra_make(&s, HV);
    s.db.t.ndim = 4;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_ESHAPE, "db");
    /* unsupported K */
    intra_make(&s, HV);
    s.q.shape[3] = 96;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_EUNSUPPORTED, "K=96");
    /* T not a multiple of 64 */
    intra_make(&s, HV);
    s.q.shape[1] = 100;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_EUNSUPPORTED, "multiple of 64");
    /* HV not a multiple of H */
    intra_make(&s, 3);
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_ESHAPE, "multiple of H");
    /* emit_bf16 with grouped value heads */
    intra_make(&s, HV);
    s.a.emit_bf16 = 1;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_EUNSUPPORTED, "emit_bf16");
    /* strides */
    intra_make(&s, HV);
    int64_t st[4] = {T * H * K, H * K, 1, H}; /* transposed last two dims */
    s.q.t.strides = st;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_ESTRIDE, "tensor q");
    int64_t ok[4] = {T * H * K, H * K, K, 1};
    s.q.t.strides = ok;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    /* alignment */
    intra_make(&s, HV);
    s.dg_in.t.byte_offset = 4;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_EALIGN, "dg_in");
    intra_make(&s, HV);
    s.dq.t.data = (char *)s.dq.t.data + 8;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_EALIGN, "dq");
    /* devices */
    intra_make(&s, HV);
    s.dAqk.t.device.device_type = kDLCPU;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_EDEVICE, "dAqk");
    intra_make(&s, HV);
    s.dk.t.device.device_id = 1;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_EDEVICE, "dk");
    /* in place */
    intra_make(&s, HV);
    s.a.dq = s.a.dq_in;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_EINVAL, "overlaps");
    intra_make(&s, HV);
    s.a.dg = s.a.dk;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_EINVAL, "overlaps");
    /* the runtime handle */
    EXPECT(kdart_kda_bwd_intra(NULL, &s.a, NULL), KDART_EMISUSE, NULL);
}
END_TEST

typedef struct dhu_set {
    fake qg, kg, w, g, d_o, dv, dht, dh, dv2, dh0;
    kdart_bwd_dhu_args a;
} dhu_set;

static void dhu_make(dhu_set *s, int io_code) {
    mk(&s->qg, io_code, 16, 4, B, T, HV, K, 0);
    mk(&s->kg, io_code, 16, 4, B, T, HV, K, 0);
    mk(&s->w, io_code, 16, 4, B, T, HV, K, 0);
    mk(&s->g, kDLFloat, 32, 4, B, T, HV, K, 0);
    mk(&s->d_o, io_code, 16, 4, B, T, HV, V, 0);
    mk(&s->dv, io_code, 16, 4, B, T, HV, V, 0);
    mk(&s->dht, kDLFloat, 32, 4, B, HV, K, V, 0);
    mk(&s->dh, io_code, 16, 5, B, T / 64, HV, K, V);
    mk(&s->dv2, io_code, 16, 4, B, T, HV, V, 0);
    mk(&s->dh0, kDLFloat, 32, 4, B, HV, K, V, 0);
    kdart_bwd_dhu_args a = {sizeof a, &s->qg.t, &s->kg.t, &s->w.t,   &s->g.t,   &s->d_o.t,
                            &s->dv.t, &s->dht.t, &s->dh.t, &s->dv2.t, &s->dh0.t, 0.088f, 0};
    s->a = a;
}

START_TEST(dhu_validation) {
    dhu_set s;
    dhu_make(&s, kDLBfloat);
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    dhu_make(&s, kDLFloat);
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    dhu_make(&s, kDLBfloat);
    s.a.dht = NULL;
    s.a.dh0 = NULL;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    dhu_make(&s, kDLBfloat);
    s.a.dv2 = NULL;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ENULL, "dv2");
    dhu_make(&s, kDLBfloat);
    s.dh.shape[1] = 3;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ESHAPE, "dh");
    dhu_make(&s, kDLBfloat);
    s.dht.t.dtype.code = kDLBfloat, s.dht.t.dtype.bits = 16;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EDTYPE, "dht");
    dhu_make(&s, kDLBfloat);
    s.d_o.shape[3] = 96;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EUNSUPPORTED, "V=96");
    dhu_make(&s, kDLBfloat);
    s.qg.shape[3] = 256;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EUNSUPPORTED, "K=256");
    dhu_make(&s, kDLBfloat);
    s.qg.shape[1] = 96;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EUNSUPPORTED, "multiple of 64");
    dhu_make(&s, kDLBfloat);
    s.w.t.byte_offset = 2;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EALIGN, "tensor w");
    dhu_make(&s, kDLBfloat);
    s.a.dv2 = s.a.dv;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EINVAL, "overlaps");
    dhu_make(&s, kDLBfloat);
    s.g.t.device.device_type = kDLCUDAHost;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EDEVICE, "tensor g");
    dhu_make(&s, kDLBfloat);
    s.a.v_tile = 48;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EUNSUPPORTED, "v_tile=48");
    dhu_make(&s, kDLBfloat);
    s.a.v_tile = 32; /* valid: reaches the launch, which needs CUDA */
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    int bv = -1;
    EXPECT(kdart_dhu_v_tile(rt, 1, 32, 128, 128, NULL), KDART_ENULL, "v_tile");
    EXPECT(kdart_dhu_v_tile(rt, 1, 32, 128, 96, &bv), KDART_ESHAPE, "V=96");
    EXPECT(kdart_dhu_v_tile(rt, 0, 32, 128, 128, &bv), KDART_ESHAPE, "B=0");
    EXPECT(kdart_dhu_v_tile(rt, 1, 32, 256, 128, &bv), KDART_EUNSUPPORTED, "K=256");
    EXPECT(kdart_dhu_v_tile(rt, 1, 32, 128, 128, &bv), KDART_ENOCUDA, NULL);
    ck_assert_int_eq(bv, -1); /* untouched on failure */
}
END_TEST

int main(void) {
    Suite *s = suite_create("ops");
    TCase *tc = tcase_create("validation");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, intra_valid_reaches_launch);
    tcase_add_test(tc, intra_bad_arguments);
    tcase_add_test(tc, dhu_validation);
    suite_add_tcase(s, tc);
    return test_run(s);
}
