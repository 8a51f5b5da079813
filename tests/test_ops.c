/*
 * test_ops.c: argument validation of kdart_kda_bwd_intra, kdart_kda_bwd_dhu,
 * kdart_kda_wy_dqkg, kdart_kda_recompute_wu, kdart_kda_bwd_dav and kdart_kda_fwd_h, on the CPU.
 *
 * Tensors here carry fake, never-dereferenced device addresses, and CUDA
 * is disabled (KDART_OPEN_NO_CUDA), so a call whose arguments all pass
 * validation stops at "no CUDA" (ENOCUDA) before any launch.  Each bad
 * argument must be caught with its own status and a message naming it.
 * The GPU suite repeats the important cases with real buffers and checks
 * that the outputs were left untouched.
 */
#include <stddef.h>
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

/* b rows of t tokens, head dim k */
static void intra_make_btk(intra_set *s, int hv, int64_t b, int64_t t, int64_t k) {
    mk(&s->q, kDLBfloat, 16, 4, b, t, H, k, 0);
    mk(&s->k, kDLBfloat, 16, 4, b, t, H, k, 0);
    mk(&s->g, kDLFloat, 32, 4, b, t, hv, k, 0);
    mk(&s->beta, kDLBfloat, 16, 3, b, t, hv, 0, 0);
    mk(&s->dAqk, kDLFloat, 32, 4, b, t, hv, 64, 0);
    mk(&s->dAkk, kDLFloat, 32, 4, b, t, hv, 64, 0);
    fake *f32[] = {&s->dq_in, &s->dk_in, &s->dg_in, &s->dq, &s->dk, &s->dg};
    for (int i = 0; i < 6; i++) mk(f32[i], kDLFloat, 32, 4, b, t, hv, k, 0);
    mk(&s->db_in, kDLFloat, 32, 3, b, t, hv, 0, 0);
    mk(&s->db, kDLFloat, 32, 3, b, t, hv, 0, 0);
    kdart_bwd_intra_args a = {sizeof a,      &s->q.t,     &s->k.t,     &s->g.t,     &s->beta.t,
                              &s->dAqk.t,    &s->dAkk.t,  &s->dq_in.t, &s->dk_in.t, &s->dg_in.t,
                              &s->db_in.t,   &s->dq.t,    &s->dk.t,    &s->dg.t,    &s->db.t,
                              0,             0,           NULL,        NULL};
    s->a = a;
}
static void intra_make_bt(intra_set *s, int hv, int64_t b, int64_t t) { intra_make_btk(s, hv, b, t, K); }
static void intra_make(intra_set *s, int hv) { intra_make_bt(s, hv, B, T); }
static void intra_make_t(intra_set *s, int hv, int64_t t) { intra_make_bt(s, hv, B, t); }

static kdart_rt *rt;

static void setup(void) {
    rt = test_open_flags("", NULL, NULL, KDART_OPEN_NO_ENV | KDART_OPEN_NO_CUDA);
    ck_assert_ptr_nonnull(rt);
}

static void teardown(void) { kdart_close(rt); }

static void expect(int rc, int status, const char *word, const char *call, int line) {
    ck_assert_msg(rc == status, "line %d: %s: got %s (%s)", line, call, kdart_errname(rc), kdart_last_error(rt));
    if (word)
        ck_assert_msg(strstr(kdart_last_error(rt), word) != NULL, "message '%s' lacks '%s'", kdart_last_error(rt),
                      word);
}
#define EXPECT(call, status, word) expect((call), (status), (word), #call, __LINE__)

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
    /* beta in fp32 (fla's with the beta sigmoid inside chunk_kda): its own specialization */
    intra_make(&s, HV);
    mk(&s.beta, kDLFloat, 32, 3, B, T, HV, 0, 0);
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
    /* beta: the io dtype or fp32, nothing else (fp16 beside bf16 q, fp64), and an fp32 beta's shape */
    intra_make(&s, HV);
    s.beta.t.dtype.code = kDLFloat;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_EDTYPE, "beta is float16, expected bfloat16");
    intra_make(&s, HV);
    s.beta.t.dtype.code = kDLFloat, s.beta.t.dtype.bits = 64;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_EDTYPE, "or float32");
    intra_make(&s, HV);
    mk(&s.beta, kDLFloat, 32, 3, B, T, H, 0, 0);
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_ESHAPE, "beta");
    intra_make(&s, HV);
    s.db.t.ndim = 4;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_ESHAPE, "db");
    /* unsupported K (past 256; every K in 1..256 is served) */
    intra_make(&s, HV);
    s.q.shape[3] = 300;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_EUNSUPPORTED, "K=300");
    /* T not a multiple of 64: the varlen=1 specialization, past every check */
    intra_make_t(&s, HV, 100);
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
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
    fake qg, kg, w, g, d_o, dv, dht, dh, dv2, dh0, aqk;
    kdart_bwd_dhu_args a;
} dhu_set;

/* b rows of t tokens, n sequences (dht, dh0), nt dh rows, head dims k, v,
 * the state [k, v] or (svf) [v, k] */
static void dhu_make_kv(dhu_set *s, int io_code, int64_t b, int64_t t, int64_t n, int64_t nt, int64_t k, int64_t v,
                        int svf) {
    const int64_t s1 = svf ? v : k, s2 = svf ? k : v;
    mk(&s->qg, io_code, 16, 4, b, t, HV, k, 0);
    mk(&s->kg, io_code, 16, 4, b, t, HV, k, 0);
    mk(&s->w, io_code, 16, 4, b, t, HV, k, 0);
    mk(&s->g, kDLFloat, 32, 4, b, t, HV, k, 0);
    mk(&s->d_o, io_code, 16, 4, b, t, HV, v, 0);
    mk(&s->dv, io_code, 16, 4, b, t, HV, v, 0);
    mk(&s->dht, kDLFloat, 32, 4, n, HV, s1, s2, 0);
    mk(&s->dh, io_code, 16, 5, b, nt, HV, s1, s2);
    mk(&s->dv2, io_code, 16, 4, b, t, HV, v, 0);
    mk(&s->dh0, kDLFloat, 32, 4, n, HV, s1, s2, 0);
    kdart_bwd_dhu_args a = {sizeof a, &s->qg.t, &s->kg.t, &s->w.t,   &s->g.t,   &s->d_o.t, &s->dv.t, &s->dht.t,
                            &s->dh.t, &s->dv2.t, &s->dh0.t, 0.088f,  0,         NULL,      NULL,     NULL, svf, NULL};
    s->a = a;
}
static void dhu_make_v(dhu_set *s, int io_code, int64_t b, int64_t t, int64_t n, int64_t nt) {
    dhu_make_kv(s, io_code, b, t, n, nt, K, V, 0);
}
static void dhu_make(dhu_set *s, int io_code) { dhu_make_v(s, io_code, B, T, B, T / 64); }

/* wy_dqkg: b rows of t tokens (packed: b = 1 and nt chunk rows of h, dh), head dim k, value dim v */
typedef struct wy_set {
    fake q, k, v, vn, g, beta, A, h, dh, dout, dv, dq, dk, dv2, dg, db, dA, cu;
    kdart_wy_dqkg_args a;
} wy_set;

static void wy_make(wy_set *s, int64_t b, int64_t t, int64_t k, int64_t v, int64_t nt) {
    mk(&s->q, kDLBfloat, 16, 4, b, t, H, k, 0);
    mk(&s->k, kDLBfloat, 16, 4, b, t, H, k, 0);
    fake *vs[] = {&s->v, &s->vn, &s->dout, &s->dv, &s->dv2};
    for (int i = 0; i < 5; i++) mk(vs[i], kDLBfloat, 16, 4, b, t, HV, v, 0);
    fake *ks[] = {&s->g, &s->dq, &s->dk, &s->dg};
    for (int i = 0; i < 4; i++) mk(ks[i], kDLFloat, 32, 4, b, t, HV, k, 0);
    mk(&s->beta, kDLFloat, 32, 3, b, t, HV, 0, 0);
    mk(&s->db, kDLFloat, 32, 3, b, t, HV, 0, 0);
    mk(&s->A, kDLBfloat, 16, 4, b, t, HV, 64, 0);
    mk(&s->dA, kDLFloat, 32, 4, b, t, HV, 64, 0);
    mk(&s->h, kDLBfloat, 16, 5, b, nt, HV, k, v);
    mk(&s->dh, kDLBfloat, 16, 5, b, nt, HV, k, v);
    mk(&s->cu, kDLInt, 32, 1, 3, 0, 0, 0, 0);
    kdart_wy_dqkg_args a = {sizeof a, &s->q.t,  &s->k.t,  &s->v.t,  &s->vn.t,  &s->g.t,  &s->beta.t,
                            &s->A.t,  &s->h.t,  &s->dh.t, &s->dout.t, &s->dv.t, &s->dq.t,  &s->dk.t,
                            &s->dv2.t, &s->dg.t, &s->db.t, &s->dA.t, 0.125f,    0,         NULL, NULL, NULL, 0};
    s->a = a;
}

START_TEST(wy_validation) {
    wy_set s;
    char buf[128];
    wy_make(&s, B, T, K, V, T / 64);
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    ck_assert_int_gt(kdart_spec_for(rt, "wy_dqkg", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,K=64,varlen=0,tail=0,beta=f32,svf=0,dAqk=0,intra=0,post=0");
    /* a head dim below the tile, V not a multiple of 64: the tail; any T: varlen; the V-first state */
    wy_make(&s, B, 100, 100, 100, 2);
    s.a.state_v_first = 1;
    mk(&s.h, kDLBfloat, 16, 5, B, 2, HV, 100, 100);
    mk(&s.dh, kDLBfloat, 16, 5, B, 2, HV, 100, 100);
    ck_assert_int_gt(kdart_spec_for(rt, "wy_dqkg", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,K=128,varlen=1,tail=1,beta=f32,svf=1,dAqk=0,intra=0,post=0");
    /* packed: h has any number of rows >= 1; beta in the io dtype */
    wy_make(&s, 1, 300, K, V, 7);
    mk(&s.beta, kDLBfloat, 16, 3, 1, 300, HV, 0, 0);
    s.a.cu_seqlens = &s.cu.t;
    ck_assert_int_gt(kdart_spec_for(rt, "wy_dqkg", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,K=64,varlen=1,tail=0,beta=io,svf=0,dAqk=0,intra=0,post=0");
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    /* bad arguments, each named */
    wy_make(&s, B, T, K, V, T / 64);
    EXPECT(kdart_kda_wy_dqkg(rt, NULL, NULL), KDART_ENULL, "args");
    s.a.struct_size = 8;
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_EINVAL, "struct_size");
    wy_make(&s, B, T, K, V, T / 64);
    s.a.dh = NULL;
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_ENULL, "dh");
    wy_make(&s, B, T, K, V, T / 64);
    s.dA.t.data = NULL;
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_ENULL, "dA");
    /* dAqk (fla's dAv dA, fused): optional, [B,T,HV,64] fp32, no overlaps; an older caller's struct
     * without it is accepted */
    fake daqk;
    wy_make(&s, B, T, K, V, T / 64);
    mk(&daqk, kDLFloat, 32, 4, B, T, HV, 64, 0);
    s.a.dAqk = &daqk.t;
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    ck_assert_int_gt(kdart_spec_for(rt, "wy_dqkg", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,K=64,varlen=0,tail=0,beta=f32,svf=0,dAqk=1,intra=0,post=0");
    mk(&daqk, kDLBfloat, 16, 4, B, T, HV, 64, 0);
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_EDTYPE, "dAqk");
    s.a.dAqk = &s.dA.t;
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_EINVAL, "overlaps");
    s.a.struct_size = offsetof(kdart_wy_dqkg_args, dAqk);
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    /* intra (bwd_intra's terms in the same launch): dA and dAqk become optional outputs (the kernel hands them
     * to the intra part in shared memory), and the specialization computes dAqk either way; without intra dA
     * is required; a head dim below its K tile takes the varlen body; an older caller's struct without the
     * field means intra = 0 */
    wy_make(&s, B, T, K, V, T / 64);
    s.a.dA = NULL;
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_ENULL, "dA");
    s.a.intra = 1;
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    ck_assert_int_gt(kdart_spec_for(rt, "wy_dqkg", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,K=64,varlen=0,tail=0,beta=f32,svf=0,dAqk=1,intra=1,post=0");
    s.a.dA = &s.dA.t;
    mk(&daqk, kDLFloat, 32, 4, B, T, HV, 64, 0);
    s.a.dAqk = &daqk.t;
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    ck_assert_int_gt(kdart_spec_for(rt, "wy_dqkg", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,K=64,varlen=0,tail=0,beta=f32,svf=0,dAqk=1,intra=1,post=0");
    s.a.struct_size = offsetof(kdart_wy_dqkg_args, intra);
    ck_assert_int_gt(kdart_spec_for(rt, "wy_dqkg", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,K=64,varlen=0,tail=0,beta=f32,svf=0,dAqk=1,intra=0,post=0");
    wy_make(&s, B, T, K - 4, V, T / 64);
    s.a.intra = 1, s.a.dAqk = &daqk.t;
    ck_assert_int_gt(kdart_spec_for(rt, "wy_dqkg", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,K=64,varlen=1,tail=1,beta=f32,svf=0,dAqk=1,intra=1,post=0");
    s.a.struct_size = offsetof(kdart_wy_dqkg_args, dAqk) - 4;
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_EINVAL, "struct_size");
    wy_make(&s, B, T, K, V, T / 64);
    mk(&s.A, kDLFloat, 32, 4, B, T, HV, 64, 0);
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_EDTYPE, "tensor A");
    wy_make(&s, B, T, K, V, T / 64);
    mk(&s.beta, kDLFloat, 16, 3, B, T, HV, 0, 0);
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_EDTYPE, "beta");
    wy_make(&s, B, T, K, V, T / 64 + 1);
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_ESHAPE, "tensor h");
    wy_make(&s, B, T, K, V, T / 64);
    s.a.state_v_first = 1; /* h is [.., K, V], the V-first state needs [.., V, K] */
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_ESHAPE, "tensor h");
    wy_make(&s, B, T, K, V, T / 64);
    s.dv.shape[3] = V - 1;
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_ESHAPE, "dv");
    wy_make(&s, B, T, 300, V, T / 64);
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_EUNSUPPORTED, "K=300");
    wy_make(&s, B, T, K, 600, T / 64);
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_EUNSUPPORTED, "V=600");
    wy_make(&s, B, T, K, V, T / 64);
    s.a.dq = &s.dk.t; /* two outputs in one buffer */
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_EINVAL, "overlaps");
    wy_make(&s, B, T, K, V, T / 64);
    s.a.dv2 = &s.dv.t; /* in place */
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_EINVAL, "overlaps input dv");
    wy_make(&s, B, T, K, V, T / 64);
    s.a.cu_seqlens = &s.cu.t; /* packed needs B == 1 */
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_ESHAPE, "B == 1");
    wy_make(&s, B, T, K, V, T / 64);
    s.q.t.data = (void *)((uintptr_t)s.q.t.data + 2);
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_EALIGN, "q");
    /* 2^31 token rows at fixed length: past the 32-bit coordinates of sm_90a's tensor maps */
    wy_make(&s, 2, (int64_t)1 << 30, K, V, ((int64_t)1 << 30) / 64);
    EXPECT(kdart_kda_wy_dqkg(rt, &s.a, NULL), KDART_EUNSUPPORTED, "token rows");
}
END_TEST

/* recompute_wu: b rows of t tokens, head dim k, value dim v; the cumsummed gate in (gate = 0) or the raw
 * gate with A_log, dt_bias in and its cumsum out */
typedef struct rwu_set {
    fake q, k, v, beta, A, g, g_raw, A_log, dt_bias, g_out, w, u, qg, kg, cu;
    kdart_recompute_wu_args a;
} rwu_set;

static void rwu_make(rwu_set *s, int64_t b, int64_t t, int64_t k, int64_t v, int gate) {
    mk(&s->q, kDLBfloat, 16, 4, b, t, H, k, 0);
    mk(&s->k, kDLBfloat, 16, 4, b, t, H, k, 0);
    mk(&s->v, kDLBfloat, 16, 4, b, t, HV, v, 0);
    mk(&s->u, kDLBfloat, 16, 4, b, t, HV, v, 0);
    mk(&s->beta, kDLFloat, 32, 3, b, t, HV, 0, 0);
    mk(&s->A, kDLBfloat, 16, 4, b, t, HV, 64, 0);
    mk(&s->g, kDLFloat, 32, 4, b, t, HV, k, 0);
    mk(&s->g_out, kDLFloat, 32, 4, b, t, HV, k, 0);
    mk(&s->g_raw, kDLBfloat, 16, 4, b, t, HV, k, 0);
    fake *ks[] = {&s->w, &s->qg, &s->kg};
    for (int i = 0; i < 3; i++) mk(ks[i], kDLBfloat, 16, 4, b, t, HV, k, 0);
    mk(&s->A_log, kDLFloat, 32, 1, HV, 0, 0, 0, 0);
    mk(&s->dt_bias, kDLFloat, 32, 2, HV, k, 0, 0, 0);
    mk(&s->cu, kDLInt, 32, 1, 3, 0, 0, 0, 0);
    kdart_recompute_wu_args a = {sizeof a, &s->q.t, &s->k.t, &s->v.t, &s->beta.t, &s->A.t,
                                 gate ? NULL : &s->g.t, gate ? &s->g_raw.t : NULL, gate ? &s->A_log.t : NULL,
                                 gate ? &s->dt_bias.t : NULL, gate ? &s->g_out.t : NULL, &s->w.t, &s->u.t,
                                 &s->qg.t, &s->kg.t, -5.0f, gate, NULL, NULL};
    s->a = a;
}

START_TEST(rwu_validation) {
    rwu_set s;
    char buf[128];
    rwu_make(&s, B, T, K, V, 0);
    EXPECT(kdart_kda_recompute_wu(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    ck_assert_int_gt(kdart_spec_for(rt, "recompute_wu", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,varlen=0,tail=0,beta=f32,gate=0");
    /* the raw gate (fp32 here), any head dim and T, no q (then no qg) */
    rwu_make(&s, B, 100, 100, 72, 1);
    mk(&s.g_raw, kDLFloat, 32, 4, B, 100, HV, 100, 0);
    s.a.q = s.a.qg = NULL;
    ck_assert_int_gt(kdart_spec_for(rt, "recompute_wu", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,varlen=1,tail=1,beta=f32,gate=1");
    EXPECT(kdart_kda_recompute_wu(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    /* packed, beta in the io dtype, no dt_bias */
    rwu_make(&s, 1, 300, K, V, 1);
    mk(&s.beta, kDLBfloat, 16, 3, 1, 300, HV, 0, 0);
    s.a.dt_bias = NULL;
    s.a.cu_seqlens = &s.cu.t;
    ck_assert_int_gt(kdart_spec_for(rt, "recompute_wu", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,varlen=1,tail=0,beta=io,gate=1");
    /* bad arguments, each named */
    rwu_make(&s, B, T, K, V, 0);
    s.a.g = NULL;
    EXPECT(kdart_kda_recompute_wu(rt, &s.a, NULL), KDART_ENULL, "give either g");
    rwu_make(&s, B, T, K, V, 1);
    s.a.g = &s.g.t;
    EXPECT(kdart_kda_recompute_wu(rt, &s.a, NULL), KDART_EINVAL, "give either g");
    rwu_make(&s, B, T, K, V, 1);
    s.a.A_log = NULL;
    EXPECT(kdart_kda_recompute_wu(rt, &s.a, NULL), KDART_ENULL, "A_log");
    rwu_make(&s, B, T, K, V, 0);
    s.a.g_out = &s.g_out.t;
    EXPECT(kdart_kda_recompute_wu(rt, &s.a, NULL), KDART_EINVAL, "go with g_raw");
    rwu_make(&s, B, T, K, V, 0);
    s.a.qg = NULL;
    EXPECT(kdart_kda_recompute_wu(rt, &s.a, NULL), KDART_ENULL, "q needs qg");
    rwu_make(&s, B, T, K, V, 1);
    mk(&s.dt_bias, kDLFloat, 32, 1, HV * K, 0, 0, 0, 0); /* fla's [HV*K]: kdart takes [HV, K] */
    EXPECT(kdart_kda_recompute_wu(rt, &s.a, NULL), KDART_ESHAPE, "dt_bias");
    rwu_make(&s, B, T, K, V, 1);
    mk(&s.g_out, kDLBfloat, 16, 4, B, T, HV, K, 0);
    EXPECT(kdart_kda_recompute_wu(rt, &s.a, NULL), KDART_EDTYPE, "g_out");
    rwu_make(&s, B, T, K, V, 0);
    mk(&s.A, kDLBfloat, 16, 4, B, T, HV, 32, 0);
    EXPECT(kdart_kda_recompute_wu(rt, &s.a, NULL), KDART_ESHAPE, "tensor A");
    rwu_make(&s, B, T, 300, V, 0);
    EXPECT(kdart_kda_recompute_wu(rt, &s.a, NULL), KDART_EUNSUPPORTED, "K=300");
    rwu_make(&s, 64, 2147483584, K, V, 0); /* 2^25 - 1 chunks of 64 * HV rows: 2^32 CTAs or more */
    EXPECT(kdart_kda_recompute_wu(rt, &s.a, NULL), KDART_EUNSUPPORTED, "too large");
    rwu_make(&s, B, T, K, V, 0);
    s.a.w = &s.kg.t;
    EXPECT(kdart_kda_recompute_wu(rt, &s.a, NULL), KDART_EINVAL, "overlaps");
    rwu_make(&s, B, T, K, V, 1);
    s.a.g_out = &s.g_raw.t; /* in place: g_out over the raw gate (also the wrong dtype) */
    EXPECT(kdart_kda_recompute_wu(rt, &s.a, NULL), KDART_EDTYPE, "g_out");
    rwu_make(&s, B, T, K, V, 0);
    s.a.cu_seqlens = &s.cu.t; /* packed needs B == 1 */
    EXPECT(kdart_kda_recompute_wu(rt, &s.a, NULL), KDART_ESHAPE, "B == 1");
    rwu_make(&s, B, T, K, V, 0);
    s.v.t.data = (void *)((uintptr_t)s.v.t.data + 2);
    EXPECT(kdart_kda_recompute_wu(rt, &s.a, NULL), KDART_EALIGN, "v");
}
END_TEST

/* bwd_dav: b rows of t tokens, value dim v */
typedef struct dav_set {
    fake v, d_o, A, dA, dv, cu, ci;
    kdart_bwd_dav_args a;
} dav_set;

static void dav_make(dav_set *s, int64_t b, int64_t t, int64_t v) {
    mk(&s->v, kDLBfloat, 16, 4, b, t, HV, v, 0);
    mk(&s->d_o, kDLBfloat, 16, 4, b, t, HV, v, 0);
    mk(&s->dv, kDLBfloat, 16, 4, b, t, HV, v, 0);
    mk(&s->A, kDLBfloat, 16, 4, b, t, HV, 64, 0);
    mk(&s->dA, kDLFloat, 32, 4, b, t, HV, 64, 0);
    mk(&s->cu, kDLInt, 32, 1, 3, 0, 0, 0, 0);
    mk(&s->ci, kDLInt, 32, 2, 5, 2, 0, 0, 0);
    kdart_bwd_dav_args a = {sizeof a, &s->v.t, &s->d_o.t, &s->A.t, &s->dA.t, &s->dv.t, 0.125f, NULL, NULL};
    s->a = a;
}

/* bwd_post: b rows of t tokens; gate (g_raw, A_log, dt_bias, their gradients, the workspace) and the
 * beta logits in bf16, l2norm on */
typedef struct post_set {
    fake dq_in, dk_in, q, k, q_rstd, k_rstd, dg_in, g_raw, A_log, dt_bias, db_in, beta_raw, ws, dq, dk, dg, db, dA,
        dbias;
    kdart_bwd_post_args a;
} post_set;

static void post_make_k(post_set *s, int64_t b, int64_t t, int64_t k) {
    mk(&s->dq_in, kDLFloat, 32, 4, b, t, HV, k, 0);
    mk(&s->dk_in, kDLFloat, 32, 4, b, t, HV, k, 0);
    mk(&s->q, kDLBfloat, 16, 4, b, t, H, k, 0);
    mk(&s->k, kDLBfloat, 16, 4, b, t, H, k, 0);
    mk(&s->q_rstd, kDLFloat, 32, 3, b, t, H, 0, 0);
    mk(&s->k_rstd, kDLFloat, 32, 3, b, t, H, 0, 0);
    mk(&s->dg_in, kDLFloat, 32, 4, b, t, HV, k, 0);
    mk(&s->g_raw, kDLBfloat, 16, 4, b, t, HV, k, 0);
    mk(&s->A_log, kDLFloat, 32, 1, HV, 0, 0, 0, 0);
    mk(&s->dt_bias, kDLFloat, 32, 2, HV, k, 0, 0, 0);
    mk(&s->db_in, kDLFloat, 32, 3, b, t, HV, 0, 0);
    mk(&s->beta_raw, kDLBfloat, 16, 3, b, t, HV, 0, 0);
    mk(&s->ws, kDLFloat, 32, 1, kdart_bwd_post_workspace(H, HV, k), 0, 0, 0, 0);
    mk(&s->dq, kDLBfloat, 16, 4, b, t, H, k, 0);
    mk(&s->dk, kDLBfloat, 16, 4, b, t, H, k, 0);
    mk(&s->dg, kDLBfloat, 16, 4, b, t, HV, k, 0);
    mk(&s->db, kDLBfloat, 16, 3, b, t, HV, 0, 0);
    mk(&s->dA, kDLFloat, 32, 1, HV, 0, 0, 0, 0);
    mk(&s->dbias, kDLFloat, 32, 2, HV, k, 0, 0, 0);
    kdart_bwd_post_args a = {sizeof a, &s->dq_in.t, &s->dk_in.t, &s->q.t, &s->k.t, &s->q_rstd.t, &s->k_rstd.t,
                             &s->dg_in.t, &s->g_raw.t, &s->A_log.t, &s->dt_bias.t, &s->db_in.t, &s->beta_raw.t,
                             &s->ws.t, &s->dq.t, &s->dk.t, &s->dg.t, &s->db.t, &s->dA.t, &s->dbias.t,
                             -5.0f, 1, 1.0f, 1, 1};
    s->a = a;
}
static void post_make(post_set *s) { post_make_k(s, B, T, K); }

START_TEST(post_validation) {
    post_set s;
    char buf[128];
    post_make(&s);
    EXPECT(kdart_kda_bwd_post(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    EXPECT(kdart_op_run(rt, "bwd_post", &s.a, NULL), KDART_ENOCUDA, NULL);
    ck_assert_int_gt(kdart_spec_for(rt, "bwd_post", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,g_io=1,beta_io=1,tail=0");
    ck_assert_int_eq(kdart_bwd_post_workspace(H, HV, K), 256 * HV * (K + 1) + H);
    ck_assert_int_eq(kdart_bwd_post_workspace(0, HV, K), 0);
    /* nothing but the casts and the value heads' sum (no l2norm, no gate, no sigmoid), fp32 dg and db, K = 63 */
    post_make_k(&s, B, T, 63);
    s.a.q = s.a.k = s.a.q_rstd = s.a.k_rstd = NULL;
    s.a.g_raw = s.a.A_log = s.a.dt_bias = s.a.dA_log = s.a.ddt_bias = s.a.workspace = s.a.beta_raw = NULL;
    mk(&s.dg, kDLFloat, 32, 4, B, T, HV, 63, 0);
    mk(&s.db, kDLFloat, 32, 3, B, T, HV, 0, 0);
    s.a.g_io = s.a.beta_io = 0;
    ck_assert_int_gt(kdart_spec_for(rt, "bwd_post", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,g_io=0,beta_io=0,tail=1");
    EXPECT(kdart_kda_bwd_post(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    /* bad arguments, each named */
    post_make(&s);
    s.a.q_rstd = NULL;
    EXPECT(kdart_kda_bwd_post(rt, &s.a, NULL), KDART_ENULL, "q_rstd");
    post_make(&s);
    s.a.A_log = NULL;
    EXPECT(kdart_kda_bwd_post(rt, &s.a, NULL), KDART_ENULL, "A_log");
    post_make(&s);
    s.a.workspace = NULL;
    EXPECT(kdart_kda_bwd_post(rt, &s.a, NULL), KDART_ENULL, "workspace");
    post_make(&s);
    s.a.ddt_bias = NULL;
    EXPECT(kdart_kda_bwd_post(rt, &s.a, NULL), KDART_ENULL, "ddt_bias");
    post_make(&s);
    s.a.g_raw = NULL;
    EXPECT(kdart_kda_bwd_post(rt, &s.a, NULL), KDART_EINVAL, "g_raw");
    post_make(&s);
    s.a.beta_scale = 3.0f;
    EXPECT(kdart_kda_bwd_post(rt, &s.a, NULL), KDART_EINVAL, "beta_scale");
    post_make(&s);
    s.a.g_io = 0; /* g_raw is bf16 */
    EXPECT(kdart_kda_bwd_post(rt, &s.a, NULL), KDART_EDTYPE, "g_raw");
    post_make(&s);
    mk(&s.dq_in, kDLBfloat, 16, 4, B, T, HV, K, 0); /* the chunk stages' gradients are fp32 */
    EXPECT(kdart_kda_bwd_post(rt, &s.a, NULL), KDART_EDTYPE, "dq_in");
    post_make(&s);
    mk(&s.ws, kDLFloat, 32, 1, 1000, 0, 0, 0, 0);
    EXPECT(kdart_kda_bwd_post(rt, &s.a, NULL), KDART_ESHAPE, "workspace");
    post_make(&s);
    mk(&s.dq_in, kDLFloat, 32, 4, B, T, 3, K, 0); /* 3 value heads over 2 heads */
    EXPECT(kdart_kda_bwd_post(rt, &s.a, NULL), KDART_ESHAPE, "HV");
    post_make_k(&s, B, T, 300);
    EXPECT(kdart_kda_bwd_post(rt, &s.a, NULL), KDART_EUNSUPPORTED, "K=300");
    post_make(&s);
    s.dq.t.data = NULL;
    EXPECT(kdart_kda_bwd_post(rt, &s.a, NULL), KDART_ENULL, "dq");
    post_make(&s);
    s.q.t.data = (void *)((uintptr_t)s.q.t.data + 8);
    EXPECT(kdart_kda_bwd_post(rt, &s.a, NULL), KDART_EALIGN, "tensor q");
    post_make(&s);
    s.a.dg = &s.dg_in.t; /* in place (and fp32 where bf16 is asked for) */
    s.a.g_io = 0, s.a.g_raw = NULL, s.a.A_log = s.a.dt_bias = s.a.dA_log = s.a.ddt_bias = NULL;
    EXPECT(kdart_kda_bwd_post(rt, &s.a, NULL), KDART_EINVAL, "overlaps");
}
END_TEST

/* each bad argument refused with its own status and a message naming it (so before anything is
 * launched or written: a valid call stops at ENOCUDA) */
START_TEST(dav_validation) {
    dav_set s;
    char buf[128];
    dav_make(&s, B, T, V);
    EXPECT(kdart_kda_bwd_dav(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    EXPECT(kdart_op_run(rt, "bwd_dav", &s.a, NULL), KDART_ENOCUDA, NULL);
    ck_assert_int_gt(kdart_spec_for(rt, "bwd_dav", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,varlen=0,tail=0");
    /* dv alone (dA NULL): the same specialization */
    s.a.dA = NULL;
    EXPECT(kdart_kda_bwd_dav(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    ck_assert_int_gt(kdart_spec_for(rt, "bwd_dav", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,varlen=0,tail=0");
    /* any T (the varlen body at fixed length), V not a multiple of 64, fp16 */
    dav_make(&s, B, 100, 100);
    mk(&s.v, kDLFloat, 16, 4, B, 100, HV, 100, 0);
    mk(&s.d_o, kDLFloat, 16, 4, B, 100, HV, 100, 0);
    mk(&s.dv, kDLFloat, 16, 4, B, 100, HV, 100, 0);
    mk(&s.A, kDLFloat, 16, 4, B, 100, HV, 64, 0);
    ck_assert_int_gt(kdart_spec_for(rt, "bwd_dav", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=fp16,varlen=1,tail=1");
    EXPECT(kdart_kda_bwd_dav(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    /* packed, with fla's chunk_indices, V = 512 */
    dav_make(&s, 1, 300, 512);
    s.a.cu_seqlens = &s.cu.t, s.a.chunk_indices = &s.ci.t;
    ck_assert_int_gt(kdart_spec_for(rt, "bwd_dav", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,varlen=1,tail=0");
    EXPECT(kdart_kda_bwd_dav(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    /* bad arguments, each named */
    dav_make(&s, B, T, V);
    EXPECT(kdart_kda_bwd_dav(rt, NULL, NULL), KDART_ENULL, "args");
    s.a.struct_size = 8;
    EXPECT(kdart_kda_bwd_dav(rt, &s.a, NULL), KDART_EINVAL, "struct_size");
    dav_make(&s, B, T, V);
    s.a.d_o = NULL;
    EXPECT(kdart_kda_bwd_dav(rt, &s.a, NULL), KDART_ENULL, "do");
    dav_make(&s, B, T, V);
    s.a.A = NULL;
    EXPECT(kdart_kda_bwd_dav(rt, &s.a, NULL), KDART_ENULL, "tensor A");
    dav_make(&s, B, T, V);
    s.dv.t.data = NULL;
    EXPECT(kdart_kda_bwd_dav(rt, &s.a, NULL), KDART_ENULL, "dv");
    dav_make(&s, B, T, V);
    mk(&s.d_o, kDLFloat, 32, 4, B, T, HV, V, 0); /* float32 io */
    EXPECT(kdart_kda_bwd_dav(rt, &s.a, NULL), KDART_EDTYPE, "do");
    dav_make(&s, B, T, V);
    mk(&s.v, kDLFloat, 16, 4, B, T, HV, V, 0); /* fp16 beside bf16 do */
    EXPECT(kdart_kda_bwd_dav(rt, &s.a, NULL), KDART_EDTYPE, "tensor v");
    dav_make(&s, B, T, V);
    mk(&s.dA, kDLBfloat, 16, 4, B, T, HV, 64, 0); /* dA is fp32 */
    EXPECT(kdart_kda_bwd_dav(rt, &s.a, NULL), KDART_EDTYPE, "tensor dA");
    dav_make(&s, B, T, V);
    mk(&s.A, kDLBfloat, 16, 4, B, T, HV, 32, 0);
    EXPECT(kdart_kda_bwd_dav(rt, &s.a, NULL), KDART_ESHAPE, "tensor A");
    dav_make(&s, B, T, V);
    mk(&s.v, kDLBfloat, 16, 4, B, T, HV + 1, V, 0);
    EXPECT(kdart_kda_bwd_dav(rt, &s.a, NULL), KDART_ESHAPE, "tensor v");
    dav_make(&s, B, T, V);
    mk(&s.dv, kDLBfloat, 16, 3, B, T, HV * V, 0, 0);
    EXPECT(kdart_kda_bwd_dav(rt, &s.a, NULL), KDART_ESHAPE, "tensor dv");
    dav_make(&s, B, T, 513);
    EXPECT(kdart_kda_bwd_dav(rt, &s.a, NULL), KDART_EUNSUPPORTED, "V=513");
    dav_make(&s, B, 0, V);
    EXPECT(kdart_kda_bwd_dav(rt, &s.a, NULL), KDART_ESHAPE, "empty");
    dav_make(&s, B, T, V);
    int64_t st[4] = {T * HV * V, 1, V, HV}; /* do's last two dims swapped in memory */
    s.d_o.t.strides = st;
    EXPECT(kdart_kda_bwd_dav(rt, &s.a, NULL), KDART_ESTRIDE, "do");
    dav_make(&s, B, T, V);
    s.A.t.data = (void *)((uintptr_t)s.A.t.data + 8);
    EXPECT(kdart_kda_bwd_dav(rt, &s.a, NULL), KDART_EALIGN, "tensor A");
    dav_make(&s, B, T, V);
    s.dv.t.device.device_type = kDLCPU;
    EXPECT(kdart_kda_bwd_dav(rt, &s.a, NULL), KDART_EDEVICE, "dv");
    dav_make(&s, B, T, V);
    s.a.dv = &s.v.t; /* in place */
    EXPECT(kdart_kda_bwd_dav(rt, &s.a, NULL), KDART_EINVAL, "overlaps");
    dav_make(&s, B, T, V);
    s.a.cu_seqlens = &s.cu.t; /* packed needs B == 1 */
    EXPECT(kdart_kda_bwd_dav(rt, &s.a, NULL), KDART_ESHAPE, "B == 1");
    dav_make(&s, 1, T, V);
    s.a.chunk_indices = &s.ci.t; /* without cu_seqlens */
    EXPECT(kdart_kda_bwd_dav(rt, &s.a, NULL), KDART_EINVAL, "chunk_indices");
    dav_make(&s, 1, T, V);
    mk(&s.cu, kDLFloat, 32, 1, 3, 0, 0, 0, 0);
    s.a.cu_seqlens = &s.cu.t;
    EXPECT(kdart_kda_bwd_dav(rt, &s.a, NULL), KDART_EDTYPE, "cu_seqlens");
    dav_make(&s, 1, T, V);
    mk(&s.ci, kDLInt, 64, 2, 5, 2, 0, 0, 0); /* int64 beside int32 cu_seqlens */
    s.a.cu_seqlens = &s.cu.t, s.a.chunk_indices = &s.ci.t;
    EXPECT(kdart_kda_bwd_dav(rt, &s.a, NULL), KDART_EDTYPE, "chunk_indices");
}
END_TEST

/* kdart_spec_for: the spec a launch would prepare, from the same checks and choices, without CUDA
 * and without looking at memory (NULL data is fine there; a launch refuses it). */
START_TEST(spec_for) {
    char buf[128];
    intra_set s;
    intra_make(&s, HV);
    ck_assert_int_gt(kdart_spec_for(rt, "bwd_intra", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,fold_dg=0,emit_bf16=0,K=64,varlen=0,tail=0,beta=io");
    s.a.fold_dg = 1;
    mk(&s.beta, kDLFloat, 32, 3, B, T, HV, 0, 0);
    s.q.t.data = NULL;
    ck_assert_int_eq(kdart_spec_for(rt, "bwd_intra", &s.a, buf, sizeof buf), (int)strlen(buf));
    ck_assert_str_eq(buf, "io=bf16,fold_dg=1,emit_bf16=0,K=64,varlen=0,tail=0,beta=f32");
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_ENULL, "q");
    intra_make_btk(&s, HV, B, 100, 60); /* a partial chunk and a head dim below its tile */
    ck_assert_int_gt(kdart_spec_for(rt, "bwd_intra", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,fold_dg=0,emit_bf16=0,K=64,varlen=1,tail=1,beta=io");
    intra_make_btk(&s, HV, B, T, 200);
    ck_assert_int_gt(kdart_spec_for(rt, "bwd_intra", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,fold_dg=0,emit_bf16=0,K=256,varlen=1,tail=1,beta=io");
    /* the operation's own refusals, with its messages; a buffer too small */
    intra_make(&s, HV);
    s.dAkk.shape[3] = 32;
    EXPECT(kdart_spec_for(rt, "bwd_intra", &s.a, buf, sizeof buf), KDART_ESHAPE, "dAkk");
    intra_make(&s, HV);
    EXPECT(kdart_spec_for(rt, "bwd_intra", &s.a, buf, 8), KDART_EINVAL, "fit");
    EXPECT(kdart_spec_for(rt, "bwd_intra", NULL, buf, sizeof buf), KDART_ENULL, NULL);
    EXPECT(kdart_spec_for(rt, "chunk_rcumsum", &s.a, buf, sizeof buf), KDART_EINVAL, "no operation");
    EXPECT(kdart_spec_for(rt, "nope", &s.a, buf, sizeof buf), KDART_EKERNEL, "nope");
    /* bwd_dhu: its V tile needs the device's SM count, unless args.v_tile names one */
    dhu_set d;
    dhu_make(&d, kDLBfloat);
    EXPECT(kdart_spec_for(rt, "bwd_dhu", &d.a, buf, sizeof buf), KDART_ENOCUDA, NULL);
    d.a.v_tile = 32;
    ck_assert_int_gt(kdart_spec_for(rt, "bwd_dhu", &d.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,K=64,BV=32,varlen=0,tail=0");
    dhu_make_kv(&d, kDLFloat, B, T, B, T / 64, 100, 64, 1); /* fp16, K below its tile, the V-first state */
    d.a.v_tile = 64;
    ck_assert_int_gt(kdart_spec_for(rt, "bwd_dhu", &d.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=fp16,K=128,BV=64,varlen=0,tail=1");
    dhu_make_kv(&d, kDLBfloat, B, T, B, T / 64, 192, 128, 1);
    d.a.v_tile = 64;
    ck_assert_int_gt(kdart_spec_for(rt, "bwd_dhu", &d.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,K=192,BV=64,varlen=0,tail=2");
}
END_TEST

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
    s.d_o.shape[3] = 600;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EUNSUPPORTED, "V=600");
    dhu_make(&s, kDLBfloat);
    s.qg.shape[3] = 257;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EUNSUPPORTED, "K=257");
    dhu_make(&s, kDLBfloat);
    s.qg.shape[1] = 96; /* the other tensors still say T = 128 */
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ESHAPE, "tensor kg");
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
    EXPECT(kdart_dhu_v_tile(rt, 1, 32, 128, 600, &bv), KDART_EUNSUPPORTED, "V=600");
    EXPECT(kdart_dhu_v_tile(rt, 0, 32, 128, 128, &bv), KDART_ESHAPE, "B=0");
    EXPECT(kdart_dhu_v_tile(rt, 1, 32, 257, 128, &bv), KDART_EUNSUPPORTED, "K=257");
    EXPECT(kdart_dhu_v_tile(rt, 1, 32, 128, 128, &bv), KDART_ENOCUDA, NULL);
    ck_assert_int_eq(bv, -1); /* untouched on failure */
    /* fla's dAv fused: Aqk [B,T,HV,64] in place of dv, exactly one of them; K 64 or 128, V a multiple of
     * 64, the V tile 64 (kdart's pick) */
    dhu_make(&s, kDLBfloat);
    mk(&s.aqk, kDLBfloat, 16, 4, B, T, HV, 64, 0);
    s.a.Aqk = &s.aqk.t;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EINVAL, "dv or Aqk (not both)");
    s.a.dv = NULL;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    char buf[128];
    ck_assert_int_gt(kdart_spec_for(rt, "bwd_dhu", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,K=64,BV=64,varlen=0,tail=0");
    s.a.v_tile = 32;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EUNSUPPORTED, "v_tile=32");
    s.a.v_tile = 64;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    s.a.Aqk = NULL;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ENULL, "both are NULL");
    s.a.Aqk = &s.aqk.t;
    mk(&s.aqk, kDLFloat, 32, 4, B, T, HV, 64, 0);
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EDTYPE, "Aqk");
    mk(&s.aqk, kDLBfloat, 16, 4, B, T, HV, 32, 0);
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ESHAPE, "Aqk");
    dhu_make_kv(&s, kDLBfloat, B, T, B, T / 64, 100, 128, 0);
    mk(&s.aqk, kDLBfloat, 16, 4, B, T, HV, 64, 0);
    s.a.Aqk = &s.aqk.t, s.a.dv = NULL;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EUNSUPPORTED, "K = 64 or 128");
    dhu_make_kv(&s, kDLBfloat, B, T, B, T / 64, 128, 100, 0);
    s.a.Aqk = &s.aqk.t, s.a.dv = NULL;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EUNSUPPORTED, "multiple of 64");
    /* an older caller's struct (without Aqk) reads it as NULL */
    dhu_make(&s, kDLBfloat);
    s.a.Aqk = &s.aqk.t;
    s.a.struct_size = offsetof(kdart_bwd_dhu_args, Aqk);
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
}
END_TEST

/* A 1-D integer tensor (cu_seqlens, chunk_offsets) or [n,2] (chunk_indices). */
static void mk_idx(fake *f, int bits, int ndim, int64_t n) {
    mk(f, kDLInt, bits, ndim, n, 2, 0, 0, 0);
}

/* Variable-length and partial-chunk calls: every host-side check with its
 * own status and a message naming the argument; valid ones reach the launch
 * (ENOCUDA here).  Nothing reads the fake device addresses. */
START_TEST(dhu_varlen_validation) {
    dhu_set s;
    fake cu, ci, co;
    enum { TT = 1000, NSEQ = 3, NTV = TT / 64 + NSEQ };
    /* fixed length, partial last chunk: dh [B, ceil(T/64)] exactly */
    dhu_make_v(&s, kDLBfloat, B, 65, B, 2);
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    dhu_make_v(&s, kDLBfloat, B, 1, B, 1);
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    dhu_make_v(&s, kDLBfloat, B, 65, B, 1);
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ESHAPE, "tensor dh");
    /* packed: B = 1, cu_seqlens [N+1] int32 or int64 */
    for (int bits = 32; bits <= 64; bits += 32) {
        dhu_make_v(&s, kDLBfloat, 1, TT, NSEQ, NTV);
        mk_idx(&cu, bits, 1, NSEQ + 1);
        s.a.cu_seqlens = &cu.t;
        EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
        mk_idx(&ci, bits, 2, NTV);
        mk_idx(&co, bits, 1, NSEQ + 1);
        s.a.chunk_indices = &ci.t;
        s.a.chunk_offsets = &co.t;
        EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    }
    /* any dh rows >= 1 without chunk_indices (the device checks the count) */
    dhu_make_v(&s, kDLBfloat, 1, TT, NSEQ, 1);
    mk_idx(&cu, 32, 1, NSEQ + 1);
    s.a.cu_seqlens = &cu.t;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    /* dh0/dht optional */
    s.a.dht = NULL, s.a.dh0 = NULL;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    /* dh with fewer rows than chunk_indices */
    dhu_make_v(&s, kDLBfloat, 1, TT, NSEQ, 10);
    mk_idx(&cu, 32, 1, NSEQ + 1), mk_idx(&ci, 32, 2, 11);
    s.a.cu_seqlens = &cu.t, s.a.chunk_indices = &ci.t;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ESHAPE, "chunk_indices");
    /* dh with no rows */
    dhu_make_v(&s, kDLBfloat, 1, TT, NSEQ, 0);
    s.a.cu_seqlens = &cu.t;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ESHAPE, "dh has 0 chunk rows");
    /* cu_seqlens on the host, pinned host memory included */
    dhu_make_v(&s, kDLBfloat, 1, TT, NSEQ, NTV);
    mk_idx(&cu, 32, 1, NSEQ + 1);
    cu.t.device.device_type = kDLCPU;
    s.a.cu_seqlens = &cu.t;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EDEVICE, "cu_seqlens");
    cu.t.device.device_type = kDLCUDAHost;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EDEVICE, "cu_seqlens");
    /* on another GPU than the tensors */
    cu.t.device.device_type = kDLCUDA, cu.t.device.device_id = 1;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EDEVICE, "cu_seqlens is on cuda:1");
    /* another dtype: float32, int16, uint32 */
    mk(&cu, kDLFloat, 32, 1, NSEQ + 1, 0, 0, 0, 0);
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EDTYPE, "cu_seqlens");
    mk_idx(&cu, 16, 1, NSEQ + 1);
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EDTYPE, "cu_seqlens");
    mk(&cu, kDLUInt, 32, 1, NSEQ + 1, 0, 0, 0, 0);
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EDTYPE, "cu_seqlens");
    /* not 1-D; too short */
    mk_idx(&cu, 32, 2, NSEQ + 1);
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ESHAPE, "cu_seqlens has 2 dims");
    mk_idx(&cu, 32, 1, 1);
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ESHAPE, "cu_seqlens has 1 entries");
    /* NULL data, strided, misaligned */
    mk_idx(&cu, 32, 1, NSEQ + 1);
    cu.t.data = NULL;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ENULL, "cu_seqlens");
    mk_idx(&cu, 32, 1, NSEQ + 1);
    int64_t st2[1] = {2};
    cu.t.strides = st2;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ESTRIDE, "cu_seqlens");
    mk_idx(&cu, 64, 1, NSEQ + 1);
    cu.t.byte_offset = 4;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EALIGN, "cu_seqlens");
    /* an output over cu_seqlens */
    mk_idx(&cu, 32, 1, NSEQ + 1);
    cu.t.data = s.dv2.t.data;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EINVAL, "output dv2 overlaps cu_seqlens");
    /* B != 1 */
    dhu_make_v(&s, kDLBfloat, 2, TT, NSEQ, NTV);
    mk_idx(&cu, 32, 1, NSEQ + 1);
    s.a.cu_seqlens = &cu.t;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ESHAPE, "B == 1");
    /* dht, dh0 whose first dim is not N */
    dhu_make_v(&s, kDLBfloat, 1, TT, NSEQ + 1, NTV);
    s.a.cu_seqlens = &cu.t;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ESHAPE, "tensor dht");
    s.a.dht = NULL;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ESHAPE, "tensor dh0");
    /* chunk_indices / chunk_offsets of another dtype or shape, or without cu_seqlens */
    dhu_make_v(&s, kDLBfloat, 1, TT, NSEQ, NTV);
    s.a.cu_seqlens = &cu.t;
    mk_idx(&ci, 64, 2, NTV);
    s.a.chunk_indices = &ci.t;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EDTYPE, "chunk_indices");
    mk_idx(&ci, 32, 1, NTV);
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ESHAPE, "chunk_indices");
    mk_idx(&ci, 32, 2, NTV);
    mk_idx(&co, 32, 1, NSEQ);
    s.a.chunk_offsets = &co.t;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ESHAPE, "chunk_offsets");
    mk_idx(&co, 64, 1, NSEQ + 1);
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EDTYPE, "chunk_offsets");
    dhu_make(&s, kDLBfloat);
    s.a.chunk_offsets = &co.t;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EINVAL, "chunk_offsets given without cu_seqlens");
    dhu_make(&s, kDLBfloat);
    s.a.chunk_indices = &ci.t;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EINVAL, "chunk_indices given without cu_seqlens");
    /* too many scans for the grid: N * HV > 65535 */
    dhu_make_v(&s, kDLBfloat, 1, TT, 20000, NTV);
    mk_idx(&cu, 32, 1, 20001);
    s.a.cu_seqlens = &cu.t;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EUNSUPPORTED, "N*HV");
}
END_TEST

/* Past 32-bit indexing: more than 2^32 elements in one tensor
 * passes every check (both kernels index with 64-bit offsets), and so does a
 * bwd_intra batch past the grid's 65535 rows in y (the varlen body takes it);
 * only bwd_dhu's one scan per (sequence, value head) stays bounded by the grid. */
START_TEST(beyond_32bit_indexing) {
    intra_set s;
    intra_make_bt(&s, 64, 1, (int64_t)1048576 + 256); /* q, g: 4.3e9 elements */
    ck_assert(s.g.shape[1] * s.g.shape[2] * s.g.shape[3] > ((int64_t)1 << 32));
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    intra_make_bt(&s, 32, 2049, 64); /* B*HV = 65568 */
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    dhu_set d;
    const int64_t t = ((int64_t)1 << 23) + 64; /* dh, do: 4.3e9 elements */
    dhu_make_v(&d, kDLBfloat, 1, t, 1, t / 64);
    ck_assert(d.dh.shape[1] * HV * K * V > ((int64_t)1 << 32));
    EXPECT(kdart_kda_bwd_dhu(rt, &d.a, NULL), KDART_ENOCUDA, NULL);
    dhu_make_v(&d, kDLBfloat, 16384, 64, 16384, 1); /* B*HV = 65536 scans */
    EXPECT(kdart_kda_bwd_dhu(rt, &d.a, NULL), KDART_EUNSUPPORTED, "N*HV");
}
END_TEST

/* Callers built against 0.2's struct (no varlen fields) keep working: the
 * fields past their struct_size are never read. */
START_TEST(old_struct_size) {
    dhu_set s;
    dhu_make(&s, kDLBfloat);
    fake cu;
    mk_idx(&cu, 32, 1, 1); /* would be ESHAPE if it were read */
    s.a.cu_seqlens = &cu.t;
    s.a.struct_size = (uint32_t)offsetof(kdart_bwd_dhu_args, cu_seqlens);
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    s.a.struct_size = (uint32_t)offsetof(kdart_bwd_dhu_args, cu_seqlens) - 4;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EINVAL, "struct_size");
    s.a.struct_size = (uint32_t)sizeof s.a + 8;
    EXPECT(kdart_kda_bwd_dhu(rt, &s.a, NULL), KDART_EINVAL, "struct_size");
    intra_set t;
    intra_make(&t, HV);
    t.a.cu_seqlens = &cu.t;
    t.a.struct_size = (uint32_t)offsetof(kdart_bwd_intra_args, cu_seqlens);
    EXPECT(kdart_kda_bwd_intra(rt, &t.a, NULL), KDART_ENOCUDA, NULL);
    t.a.struct_size = (uint32_t)sizeof t.a;
    EXPECT(kdart_kda_bwd_intra(rt, &t.a, NULL), KDART_ESHAPE, "cu_seqlens has 1 entries");
}
END_TEST

/* bwd_intra: the same host checks; a valid varlen call gets past all of
 * them (to ENOCUDA here). */
START_TEST(intra_varlen_validation) {
    intra_set s;
    fake cu, ci;
    intra_make_bt(&s, HV, 1, 1000);
    mk_idx(&cu, 64, 1, 4);
    s.a.cu_seqlens = &cu.t;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    mk_idx(&ci, 64, 2, 18);
    s.a.chunk_indices = &ci.t;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    mk_idx(&ci, 32, 2, 18);
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_EDTYPE, "chunk_indices");
    s.a.chunk_indices = NULL;
    cu.t.device.device_type = kDLCPU;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_EDEVICE, "cu_seqlens");
    mk_idx(&cu, 8, 1, 4);
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_EDTYPE, "cu_seqlens");
    mk_idx(&cu, 32, 2, 4);
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_ESHAPE, "cu_seqlens");
    intra_make_bt(&s, HV, 2, 1000);
    mk_idx(&cu, 32, 1, 4);
    s.a.cu_seqlens = &cu.t;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_ESHAPE, "B == 1");
    /* fixed length, T = 1 and 63: varlen too */
    intra_make_t(&s, HV, 1);
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    intra_make_t(&s, HV, 63);
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    /* bad tensors are still found first */
    intra_make_t(&s, HV, 63);
    s.beta.shape[1] = 64;
    EXPECT(kdart_kda_bwd_intra(rt, &s.a, NULL), KDART_ESHAPE, "beta");
}
END_TEST

/* kdart_device_status needs CUDA; KDART_CHECK's host copy too (after the
 * host checks: a bad shape is still ESHAPE). */
START_TEST(device_status_and_check) {
    int bits = -1;
    EXPECT(kdart_device_status(rt, NULL, 0), KDART_ENULL, "bits");
    EXPECT(kdart_device_status(rt, &bits, 0), KDART_ENOCUDA, NULL);
    ck_assert_int_eq(bits, -1);
    EXPECT(kdart_device_status(NULL, &bits, 0), KDART_EMISUSE, NULL);
    setenv("KDART_CHECK", "1", 1);
    kdart_rt *chk = test_open_flags("", NULL, NULL, KDART_OPEN_NO_CUDA); /* reads KDART_CHECK */
    ck_assert_ptr_nonnull(chk);
    unsetenv("KDART_CHECK");
    dhu_set s;
    fake cu;
    dhu_make_v(&s, kDLBfloat, 1, 1000, 3, 18);
    mk_idx(&cu, 32, 1, 4);
    s.a.cu_seqlens = &cu.t;
    ck_assert_int_eq(kdart_kda_bwd_dhu(chk, &s.a, NULL), KDART_ENOCUDA); /* the copy needs CUDA */
    dhu_make_v(&s, kDLBfloat, 1, 1000, 4, 18);
    s.a.cu_seqlens = &cu.t;
    ck_assert_int_eq(kdart_kda_bwd_dhu(chk, &s.a, NULL), KDART_ESHAPE);
    kdart_close(chk);
}
END_TEST

/* Head dims: K outside 1..256 and V outside 1..512 are refused with their
 * limits; every K and V inside, and state_v_first, pass validation
 * (ENOCUDA here), and KDART_EXPERIMENTAL, a gate of earlier versions, no
 * longer changes anything. */
START_TEST(head_dims) {
    static const int64_t ks[] = {1, 16, 60, 64, 100, 128, 192, 256};
    static const int64_t vs[] = {1, 16, 60, 64, 100, 128, 192, 256, 512};
    /* a handle that reads the environment (the fixture's ignores it) */
    kdart_rt *fixture = rt;
    kdart_options o;
    kdart_options_init(&o);
    o.cache_path = "";
    o.kernel_dir = TEST_KERNEL_DIR;
    ck_assert_int_eq(kdart_open(&rt, &o), KDART_OK);
    setenv("KDART_EXPERIMENTAL", "0", 1);
    intra_set is;
    dhu_set ds;
    /* out of range: each case's message names the limit (intra: NULL where
     * the case is bwd_dhu's V alone) */
    static const struct {
        int64_t k, v;
        int svf;
        const char *intra, *dhu;
    } range[] = {
        {257, V, 0, "K must be 1..256", "K must be 1..256"}, {K, 513, 0, NULL, "V must be 1..512"},
        {K, 513, 1, NULL, "V must be 1..512"},                {0, V, 0, "K=0", "K=0"},
        {K, 0, 0, NULL, "V must be 1..512"},
    };
    static const struct {
        int64_t k, v;
        const char *msg;
    } vt[] = {{0, 128, "K must be 1..256"}, {128, 513, "V must be 1..512"}, {128, 0, "V=0"}};
    for (size_t i = 0; i < sizeof range / sizeof range[0]; i++) {
        if (range[i].intra) {
            intra_make_btk(&is, HV, B, T, range[i].k);
            EXPECT(kdart_kda_bwd_intra(rt, &is.a, NULL), KDART_EUNSUPPORTED, range[i].intra);
        }
        dhu_make_kv(&ds, kDLBfloat, B, T, B, T / 64, range[i].k, range[i].v, range[i].svf);
        EXPECT(kdart_kda_bwd_dhu(rt, &ds.a, NULL), KDART_EUNSUPPORTED, range[i].dhu);
    }
    for (size_t i = 0; i < sizeof vt / sizeof vt[0]; i++) {
        int bv = -1;
        EXPECT(kdart_dhu_v_tile(rt, 1, 32, vt[i].k, vt[i].v, &bv), KDART_EUNSUPPORTED, vt[i].msg);
    }
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        intra_make_btk(&is, HV, B, T, ks[i]);
        EXPECT(kdart_kda_bwd_intra(rt, &is.a, NULL), KDART_ENOCUDA, NULL);
        intra_make_btk(&is, HV, 1, 100, ks[i]); /* varlen=1 too */
        EXPECT(kdart_kda_bwd_intra(rt, &is.a, NULL), KDART_ENOCUDA, NULL);
        dhu_make_kv(&ds, kDLFloat, B, T, B, T / 64, ks[i], V, 0);
        EXPECT(kdart_kda_bwd_dhu(rt, &ds.a, NULL), KDART_ENOCUDA, NULL);
        int bv = -1;
        EXPECT(kdart_dhu_v_tile(rt, 2, HV, ks[i], V, &bv), KDART_ENOCUDA, NULL);
    }
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
        dhu_make_kv(&ds, kDLBfloat, B, T, B, T / 64, K, vs[i], 0);
        EXPECT(kdart_kda_bwd_dhu(rt, &ds.a, NULL), KDART_ENOCUDA, NULL);
        dhu_make_kv(&ds, kDLBfloat, 1, 100, 1, 2, 100, vs[i], 0); /* varlen=1, K tile 128 */
        EXPECT(kdart_kda_bwd_dhu(rt, &ds.a, NULL), KDART_ENOCUDA, NULL);
    }
    /* state_v_first: dh [B,NT,HV,V,K], dht/dh0 [N,HV,V,K] */
    dhu_make_kv(&ds, kDLBfloat, B, T, B, T / 64, K, V, 1);
    EXPECT(kdart_kda_bwd_dhu(rt, &ds.a, NULL), KDART_ENOCUDA, NULL);
    dhu_make_kv(&ds, kDLBfloat, B, T, B, T / 64, 60, 100, 1);
    EXPECT(kdart_kda_bwd_dhu(rt, &ds.a, NULL), KDART_ENOCUDA, NULL);
    dhu_make_kv(&ds, kDLBfloat, B, T, B, T / 64, K, V, 0); /* K-first shapes with the flag set */
    ds.a.state_v_first = 1;
    EXPECT(kdart_kda_bwd_dhu(rt, &ds.a, NULL), KDART_ESHAPE, "dht");
    dhu_make_kv(&ds, kDLBfloat, B, T, B, T / 64, K, V, 1); /* V-first shapes without it */
    ds.a.state_v_first = 0;
    EXPECT(kdart_kda_bwd_dhu(rt, &ds.a, NULL), KDART_ESHAPE, "dht");
    /* a 0.2 caller's struct_size does not cover state_v_first: read as 0 */
    dhu_make_kv(&ds, kDLBfloat, B, T, B, T / 64, K, V, 0);
    ds.a.state_v_first = 1;
    ds.a.struct_size = (uint32_t)offsetof(kdart_bwd_dhu_args, state_v_first);
    EXPECT(kdart_kda_bwd_dhu(rt, &ds.a, NULL), KDART_ENOCUDA, NULL);
    /* every K tile takes BV 64 (192 and 256: two warpgroups), and no width but 16, 32, 64 */
    dhu_make_kv(&ds, kDLBfloat, B, T, B, T / 64, 192, V, 0);
    ds.a.v_tile = 64;
    EXPECT(kdart_kda_bwd_dhu(rt, &ds.a, NULL), KDART_ENOCUDA, NULL);
    dhu_make_kv(&ds, kDLBfloat, B, T, B, T / 64, 256, V, 0);
    ds.a.v_tile = 64;
    EXPECT(kdart_kda_bwd_dhu(rt, &ds.a, NULL), KDART_ENOCUDA, NULL);
    ds.a.v_tile = 48;
    EXPECT(kdart_kda_bwd_dhu(rt, &ds.a, NULL), KDART_EUNSUPPORTED, "v_tile=48");
    unsetenv("KDART_EXPERIMENTAL");
    kdart_close(rt);
    rt = fixture;
}
END_TEST

/* fwd_h: b rows of t tokens, H key heads, head dim k, value dim v; h with nt chunk rows */
typedef struct fwdh_set {
    fake k, w, u, gk, h0, h, vn, ht, cu, ci, co, A, beta;
    kdart_fwd_h_args a;
} fwdh_set;

static void fwdh_make(fwdh_set *s, int64_t b, int64_t t, int64_t k, int64_t v, int64_t nt) {
    /* (the io tensors bf16, the gate and the states fp32; the index tensors int32 for N = 2) */
    const struct {
        fake *f;
        int f32, ndim;
        int64_t d[5];
    } row[] = {
        {&s->k, 0, 4, {b, t, H, k, 0}},  {&s->w, 0, 4, {b, t, HV, k, 0}},   {&s->u, 0, 4, {b, t, HV, v, 0}},
        {&s->gk, 1, 4, {b, t, HV, k, 0}}, {&s->h0, 1, 4, {b, HV, k, v, 0}},  {&s->h, 0, 5, {b, nt, HV, k, v}},
        {&s->vn, 0, 4, {b, t, HV, v, 0}}, {&s->ht, 1, 4, {b, HV, k, v, 0}},
    };
    for (size_t i = 0; i < sizeof row / sizeof row[0]; i++)
        mk(row[i].f, row[i].f32 ? kDLFloat : kDLBfloat, row[i].f32 ? 32 : 16, row[i].ndim, row[i].d[0], row[i].d[1],
           row[i].d[2], row[i].d[3], row[i].d[4]);
    mk(&s->cu, kDLInt, 32, 1, 3, 0, 0, 0, 0);
    mk(&s->ci, kDLInt, 32, 2, 5, 2, 0, 0, 0);
    mk(&s->co, kDLInt, 32, 1, 3, 0, 0, 0, 0);
    kdart_fwd_h_args a = {sizeof a, &s->k.t, &s->w.t, &s->u.t, &s->gk.t, &s->h0.t, &s->h.t, &s->vn.t, &s->ht.t,
                          64, 0, NULL, NULL, NULL, NULL, NULL};
    s->a = a;
}
static void fwdh_std(fwdh_set *s) { fwdh_make(s, B, T, K, V, T / 64); }

/* kdart_kda_chunk_bwd: the production configuration (raw gate with A_log and dt_bias, safe gate, l2norm,
 * beta logits, initial and final state) reaches the first launch; its workspace is what its layout says;
 * every refusal comes before any launch (a bad output of the last stage is caught by the checks that
 * run before the first launch, not by a launch: without CUDA a launch would say ENOCUDA). */
typedef struct whole_set {
    fake q, k, v, g, gc, beta, Aqk, Akk, dout, dht, h0, qr, kr, braw, alog, dtb;
    fake w, u, qg, kg, vn, h, dq, dk, dv, dg, dbeta, dalog, ddtb, dh0, ws;
    kdart_chunk_bwd_args a;
} whole_set;

static void whole_make(whole_set *s, int64_t ws_bytes) {
    mk(&s->q, kDLBfloat, 16, 4, B, T, H, K, 0);
    mk(&s->k, kDLBfloat, 16, 4, B, T, H, K, 0);
    mk(&s->v, kDLBfloat, 16, 4, B, T, HV, V, 0);
    mk(&s->g, kDLBfloat, 16, 4, B, T, HV, K, 0);
    mk(&s->gc, kDLFloat, 32, 4, B, T, HV, K, 0);
    mk(&s->beta, kDLFloat, 32, 3, B, T, HV, 0, 0);
    mk(&s->Aqk, kDLBfloat, 16, 4, B, T, HV, 64, 0);
    mk(&s->Akk, kDLBfloat, 16, 4, B, T, HV, 64, 0);
    mk(&s->dout, kDLBfloat, 16, 4, B, T, HV, V, 0);
    mk(&s->dht, kDLFloat, 32, 4, B, HV, K, V, 0);
    mk(&s->h0, kDLFloat, 32, 4, B, HV, K, V, 0);
    mk(&s->qr, kDLFloat, 32, 3, B, T, H, 0, 0);
    mk(&s->kr, kDLFloat, 32, 3, B, T, H, 0, 0);
    mk(&s->braw, kDLBfloat, 16, 3, B, T, HV, 0, 0);
    mk(&s->alog, kDLFloat, 32, 1, HV, 0, 0, 0, 0);
    mk(&s->dtb, kDLFloat, 32, 2, HV, K, 0, 0, 0);
    mk(&s->w, kDLBfloat, 16, 4, B, T, HV, K, 0);
    mk(&s->u, kDLBfloat, 16, 4, B, T, HV, V, 0);
    mk(&s->qg, kDLBfloat, 16, 4, B, T, HV, K, 0);
    mk(&s->kg, kDLBfloat, 16, 4, B, T, HV, K, 0);
    mk(&s->vn, kDLBfloat, 16, 4, B, T, HV, V, 0);
    mk(&s->h, kDLBfloat, 16, 5, B, T / 64, HV, K, V);
    mk(&s->dq, kDLBfloat, 16, 4, B, T, H, K, 0);
    mk(&s->dk, kDLBfloat, 16, 4, B, T, H, K, 0);
    mk(&s->dv, kDLBfloat, 16, 4, B, T, HV, V, 0);
    mk(&s->dg, kDLBfloat, 16, 4, B, T, HV, K, 0);
    mk(&s->dbeta, kDLBfloat, 16, 3, B, T, HV, 0, 0);
    mk(&s->dalog, kDLFloat, 32, 1, HV, 0, 0, 0, 0);
    mk(&s->ddtb, kDLFloat, 32, 2, HV, K, 0, 0, 0);
    mk(&s->dh0, kDLFloat, 32, 4, B, HV, K, V, 0);
    mk(&s->ws, kDLUInt, 8, 1, ws_bytes, 0, 0, 0, 0);
    memset(&s->a, 0, sizeof s->a);
    kdart_chunk_bwd_args *a = &s->a;
    a->struct_size = sizeof *a;
    a->q = &s->q.t, a->k = &s->k.t, a->v = &s->v.t, a->g = &s->g.t, a->beta = &s->beta.t;
    a->Aqk = &s->Aqk.t, a->Akk = &s->Akk.t, a->d_o = &s->dout.t, a->dht = &s->dht.t, a->h0 = &s->h0.t;
    a->q_rstd = &s->qr.t, a->k_rstd = &s->kr.t, a->beta_raw = &s->braw.t, a->A_log = &s->alog.t;
    a->dt_bias = &s->dtb.t, a->scale = 0.125f, a->lower_bound = -5.f, a->safe_gate = 1;
    a->dq = &s->dq.t, a->dk = &s->dk.t, a->dv = &s->dv.t, a->dg = &s->dg.t, a->dbeta = &s->dbeta.t;
    a->dA_log = &s->dalog.t, a->ddt_bias = &s->ddtb.t, a->dh0 = &s->dh0.t, a->workspace = &s->ws.t;
}

static int64_t al256(int64_t n) { return (n + 255) / 256 * 256; }

START_TEST(chunk_bwd_validation) {
    whole_set s;
    whole_make(&s, 0);
    /* the fused layout (K 64, V a multiple of 64): bwd_post's partials, wy_dqkg's partial rows (K + 4 floats a
     * CTA), gk (fp32), h, v_new, dh, dv2 (io),
     * then one region for w, u, qg, kg (io) or, later, dq, dk, dg (fp32) and db (dA and dAqk stay in the
     * fused kernel's shared memory) */
    const int64_t tk = (int64_t)B * T * HV * K, tv = (int64_t)B * T * HV * V, tb = (int64_t)B * T * HV,
                  th = (int64_t)B * (T / 64) * HV * K * V;
    const int64_t early = 2 * tk + 2 * tv + 2 * tk + 2 * tk, late = 3 * 4 * tk + al256(4 * tb);
    const int64_t want = al256(4 * kdart_bwd_post_workspace(H, HV, K)) + al256(4 * (int64_t)B * (T / 64) * HV * (K + 4)) +
                         4 * tk + 2 * th + 2 * tv + 2 * th + 2 * tv +
                         (early > late ? early : late);
    const int64_t n = kdart_chunk_bwd_workspace(rt, &s.a);
    ck_assert_int_eq(n, want);
    whole_make(&s, n);
    EXPECT(kdart_kda_chunk_bwd(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    /* the workspace */
    whole_make(&s, n - 1);
    EXPECT(kdart_kda_chunk_bwd(rt, &s.a, NULL), KDART_ESHAPE, "workspace");
    whole_make(&s, n);
    mk(&s.ws, kDLFloat, 32, 1, n, 0, 0, 0, 0);
    EXPECT(kdart_kda_chunk_bwd(rt, &s.a, NULL), KDART_EDTYPE, "workspace");
    whole_make(&s, n);
    s.a.workspace = NULL;
    EXPECT(kdart_kda_chunk_bwd(rt, &s.a, NULL), KDART_ENULL, "workspace");
    whole_make(&s, n);
    s.ws.t.byte_offset = 16;
    EXPECT(kdart_kda_chunk_bwd(rt, &s.a, NULL), KDART_EALIGN, "workspace");
    /* the call's own rules */
    whole_make(&s, n);
    s.a.struct_size -= 8;
    EXPECT(kdart_kda_chunk_bwd(rt, &s.a, NULL), KDART_EINVAL, "struct_size");
    ck_assert_int_eq(kdart_chunk_bwd_workspace(rt, &s.a), KDART_EINVAL);
    whole_make(&s, n);
    s.a.g = NULL;
    EXPECT(kdart_kda_chunk_bwd(rt, &s.a, NULL), KDART_ENULL, "raw gate");
    whole_make(&s, n);
    s.a.A_log = NULL;
    EXPECT(kdart_kda_chunk_bwd(rt, &s.a, NULL), KDART_ENULL, "g_cumsum");
    whole_make(&s, n);
    mk(&s.q, kDLFloat, 32, 4, B, T, H, K, 0);
    EXPECT(kdart_kda_chunk_bwd(rt, &s.a, NULL), KDART_EDTYPE, "q");
    whole_make(&s, n);
    s.a.cu_seqlens = &s.alog.t;
    EXPECT(kdart_kda_chunk_bwd(rt, &s.a, NULL), KDART_ENULL, "chunk_indices");
    /* a stage's refusal, before any launch: an output of the last stage, an input of the first */
    whole_make(&s, n);
    mk(&s.dq, kDLBfloat, 16, 4, B, T, HV, K, 0); /* (bwd_post reads the heads from dq: q is then blamed) */
    EXPECT(kdart_kda_chunk_bwd(rt, &s.a, NULL), KDART_ESHAPE, "shape");
    whole_make(&s, n);
    mk(&s.dbeta, kDLFloat, 32, 3, B, T, HV, 0, 0); /* (the logits are bf16: dbeta must be too) */
    ck_assert_int_lt(kdart_kda_chunk_bwd(rt, &s.a, NULL), 0);
    ck_assert_int_ne(kdart_kda_chunk_bwd(rt, &s.a, NULL), KDART_ENOCUDA);
    whole_make(&s, n);
    mk(&s.Akk, kDLBfloat, 16, 4, B, T, HV, 32, 0);
    EXPECT(kdart_kda_chunk_bwd(rt, &s.a, NULL), KDART_ESHAPE, "A");
    /* without the recompute (fla's disable_recompute): the forward's w, u, qg, kg, v_new, h, g_cumsum */
    whole_make(&s, n);
    s.a.w = &s.w.t, s.a.u = &s.u.t, s.a.qg = &s.qg.t, s.a.kg = &s.kg.t, s.a.v_new = &s.vn.t, s.a.h = &s.h.t;
    s.a.g_cumsum = &s.gc.t;
    ck_assert_int_lt(kdart_chunk_bwd_workspace(rt, &s.a), n);
    EXPECT(kdart_kda_chunk_bwd(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    s.a.h = NULL;
    EXPECT(kdart_kda_chunk_bwd(rt, &s.a, NULL), KDART_ENULL, "h");
    /* the log gate given, no gate in the kernel, no l2norm, no sigmoid: fp32 dg and dbeta */
    whole_make(&s, n);
    s.a.g = NULL, s.a.A_log = s.a.dt_bias = s.a.dA_log = s.a.ddt_bias = NULL, s.a.g_cumsum = &s.gc.t;
    s.a.q_rstd = s.a.k_rstd = s.a.beta_raw = NULL;
    mk(&s.dg, kDLFloat, 32, 4, B, T, HV, K, 0);
    mk(&s.dbeta, kDLFloat, 32, 3, B, T, HV, 0, 0);
    mk(&s.dq, kDLBfloat, 16, 4, B, T, H, K, 0);
    EXPECT(kdart_kda_chunk_bwd(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    ck_assert_int_lt(kdart_chunk_bwd_workspace(rt, &s.a), n); /* (no gk, no bwd_post partials) */
}
END_TEST

START_TEST(fwdh_validation) {
    fwdh_set s;
    char buf[128];
    fwdh_std(&s);
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    EXPECT(kdart_op_run(rt, "fwd_h", &s.a, NULL), KDART_ENOCUDA, NULL);
    ck_assert_int_gt(kdart_spec_for(rt, "fwd_h", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,K=64,BV=64,varlen=0,tail=0,uv=0");
    /* the optional tensors absent, BV 32 */
    s.a.h0 = s.a.ht = s.a.v_new = NULL, s.a.v_tile = 32;
    ck_assert_int_gt(kdart_spec_for(rt, "fwd_h", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,K=64,BV=32,varlen=0,tail=0,uv=0");
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    /* u made in the scan: v (in u), A and beta given together; beta in the io dtype or fp32 */
    fwdh_std(&s);
    mk(&s.A, kDLBfloat, 16, 4, B, T, HV, 64, 0);
    mk(&s.beta, kDLFloat, 32, 3, B, T, HV, 0, 0);
    s.a.A = &s.A.t, s.a.beta = &s.beta.t;
    ck_assert_int_gt(kdart_spec_for(rt, "fwd_h", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,K=64,BV=64,varlen=0,tail=0,uv=1");
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    mk(&s.beta, kDLBfloat, 16, 3, B, T, HV, 0, 0);
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    mk(&s.beta, kDLFloat, 16, 3, B, T, HV, 0, 0); /* fp16 beside bf16 */
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_EDTYPE, "beta");
    mk(&s.beta, kDLFloat, 32, 3, B, T, HV, 0, 0);
    mk(&s.A, kDLBfloat, 16, 4, B, T, HV, 32, 0); /* A is [B,T,HV,64] */
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_ESHAPE, "tensor A");
    mk(&s.A, kDLBfloat, 16, 4, B, T, HV, 64, 0);
    s.a.beta = NULL;
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_ENULL, "A and beta");
    s.a.A = NULL, s.a.beta = &s.beta.t;
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_ENULL, "A and beta");
    /* v_tile 0: kdart picks for the device (which it needs: ENOCUDA here) */
    fwdh_std(&s);
    s.a.v_tile = 0;
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    /* any T (the varlen body at fixed length), a head dim below its tile, V not a multiple of BV */
    fwdh_make(&s, B, 100, 100, 100, 2);
    ck_assert_int_gt(kdart_spec_for(rt, "fwd_h", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,K=128,BV=64,varlen=1,tail=1,uv=0");
    /* the V-first state, K = 256 */
    fwdh_make(&s, B, T, 256, V, T / 64);
    mk(&s.h, kDLBfloat, 16, 5, B, T / 64, HV, V, 256);
    mk(&s.h0, kDLFloat, 32, 4, B, HV, V, 256, 0);
    mk(&s.ht, kDLFloat, 32, 4, B, HV, V, 256, 0);
    s.a.state_v_first = 1;
    ck_assert_int_gt(kdart_spec_for(rt, "fwd_h", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=bf16,K=256,BV=64,varlen=0,tail=0,uv=0");
    s.a.state_v_first = 0; /* the same tensors are now the wrong layout */
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_ESHAPE, "tensor h0");
    /* packed, with fla's index tensors, h with spare rows, fp16 */
    fwdh_make(&s, 1, 300, K, V, 7);
    mk(&s.k, kDLFloat, 16, 4, 1, 300, H, K, 0);
    mk(&s.w, kDLFloat, 16, 4, 1, 300, HV, K, 0);
    mk(&s.u, kDLFloat, 16, 4, 1, 300, HV, V, 0);
    mk(&s.h, kDLFloat, 16, 5, 1, 7, HV, K, V);
    mk(&s.vn, kDLFloat, 16, 4, 1, 300, HV, V, 0);
    mk(&s.h0, kDLFloat, 32, 4, 2, HV, K, V, 0);
    mk(&s.ht, kDLFloat, 32, 4, 2, HV, K, V, 0);
    s.a.cu_seqlens = &s.cu.t, s.a.chunk_indices = &s.ci.t, s.a.chunk_offsets = &s.co.t;
    ck_assert_int_gt(kdart_spec_for(rt, "fwd_h", &s.a, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "io=fp16,K=64,BV=64,varlen=1,tail=0,uv=0");
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_ENOCUDA, NULL);
    mk(&s.h, kDLFloat, 16, 5, 1, 4, HV, K, V); /* fewer rows than chunk_indices */
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_ESHAPE, "chunk_indices");
    mk(&s.h0, kDLFloat, 32, 4, 1, HV, K, V, 0); /* h0 per sequence: N = 2 */
    mk(&s.h, kDLFloat, 16, 5, 1, 7, HV, K, V);
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_ESHAPE, "tensor h0");
    /* bad arguments, each named */
    fwdh_std(&s);
    EXPECT(kdart_kda_fwd_h(rt, NULL, NULL), KDART_ENULL, "args");
    s.a.struct_size = 8;
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_EINVAL, "struct_size");
    /* each required tensor NULL, named */
    static const struct {
        size_t off;
        const char *word;
    } required[] = {{offsetof(kdart_fwd_h_args, k), "k must be"}, {offsetof(kdart_fwd_h_args, w), "tensor w"},
                    {offsetof(kdart_fwd_h_args, gk), "tensor gk"}, {offsetof(kdart_fwd_h_args, h), "tensor h"}};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        const DLTensor *none = NULL;
        fwdh_std(&s);
        memcpy((char *)&s.a + required[i].off, &none, sizeof none);
        EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_ENULL, required[i].word);
    }
    fwdh_std(&s);
    s.vn.t.data = NULL;
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_ENULL, "v_new");
    fwdh_std(&s);
    mk(&s.k, kDLFloat, 32, 4, B, T, H, K, 0); /* float32 io */
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_EDTYPE, "k");
    fwdh_std(&s);
    mk(&s.u, kDLFloat, 16, 4, B, T, HV, V, 0); /* fp16 beside bf16 k */
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_EDTYPE, "tensor u");
    fwdh_std(&s);
    mk(&s.gk, kDLBfloat, 16, 4, B, T, HV, K, 0); /* the gate is fp32 */
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_EDTYPE, "tensor gk");
    fwdh_std(&s);
    mk(&s.ht, kDLBfloat, 16, 4, B, HV, K, V, 0); /* the final state is fp32 */
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_EDTYPE, "tensor ht");
    fwdh_std(&s);
    mk(&s.w, kDLBfloat, 16, 4, B, T, HV, K + 8, 0);
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_ESHAPE, "tensor w");
    fwdh_std(&s);
    mk(&s.k, kDLBfloat, 16, 4, B, T, 3, K, 0); /* HV = 4 is not a multiple of 3 */
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_ESHAPE, "multiple");
    fwdh_std(&s);
    mk(&s.h, kDLBfloat, 16, 5, B, T / 64 + 1, HV, K, V); /* fixed length: exactly ceil(T/64) rows */
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_ESHAPE, "tensor h");
    fwdh_std(&s);
    mk(&s.vn, kDLBfloat, 16, 3, B, T, HV * V, 0, 0);
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_ESHAPE, "tensor v_new");
    fwdh_make(&s, B, T, 257, V, T / 64);
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_EUNSUPPORTED, "K=257");
    fwdh_make(&s, B, T, K, 513, T / 64);
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_EUNSUPPORTED, "V=513");
    fwdh_make(&s, B, 0, K, V, 1);
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_ESHAPE, "empty");
    fwdh_std(&s);
    s.a.v_tile = 16;
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_EUNSUPPORTED, "v_tile=16");
    fwdh_std(&s);
    int64_t st[4] = {T * HV * V, 1, V, HV}; /* u's last two dims swapped in memory */
    s.u.t.strides = st;
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_ESTRIDE, "tensor u");
    fwdh_std(&s);
    s.w.t.data = (void *)((uintptr_t)s.w.t.data + 8);
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_EALIGN, "tensor w");
    fwdh_std(&s);
    s.h.t.device.device_type = kDLCPU;
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_EDEVICE, "tensor h");
    fwdh_std(&s);
    s.a.v_new = &s.u.t; /* in place */
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_EINVAL, "overlaps");
    fwdh_std(&s);
    s.a.cu_seqlens = &s.cu.t; /* packed needs B == 1 */
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_ESHAPE, "B == 1");
    fwdh_make(&s, 1, T, K, V, T / 64);
    s.a.chunk_offsets = &s.co.t; /* without cu_seqlens */
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_EINVAL, "chunk_offsets");
    fwdh_make(&s, 1, T, K, V, T / 64);
    mk(&s.cu, kDLFloat, 32, 1, 3, 0, 0, 0, 0);
    s.a.cu_seqlens = &s.cu.t;
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_EDTYPE, "cu_seqlens");
    fwdh_make(&s, 1, T, K, V, T / 64);
    mk(&s.co, kDLInt, 32, 1, 5, 0, 0, 0, 0); /* N + 1 = 3 entries */
    s.a.cu_seqlens = &s.cu.t, s.a.chunk_offsets = &s.co.t;
    EXPECT(kdart_kda_fwd_h(rt, &s.a, NULL), KDART_ESHAPE, "chunk_offsets");
    ck_assert_int_eq(kdart_fwd_h_v_tile(rt, 1, 1, 64, 64, NULL), KDART_ENULL);
    int bv = 0;
    ck_assert_int_eq(kdart_fwd_h_v_tile(rt, 1, 1, 64, 513, &bv), KDART_EUNSUPPORTED);
    ck_assert_int_eq(kdart_fwd_h_v_tile(rt, 1, 1, 64, 64, &bv), KDART_ENOCUDA);
}
END_TEST

int main(void) {
    Suite *s = suite_create("ops");
    TCase *tc = tcase_create("validation");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, intra_valid_reaches_launch);
    tcase_add_test(tc, spec_for);
    tcase_add_test(tc, wy_validation);
    tcase_add_test(tc, rwu_validation);
    tcase_add_test(tc, dav_validation);
    tcase_add_test(tc, fwdh_validation);
    tcase_add_test(tc, post_validation);
    tcase_add_test(tc, chunk_bwd_validation);
    tcase_add_test(tc, intra_bad_arguments);
    tcase_add_test(tc, dhu_validation);
    tcase_add_test(tc, dhu_varlen_validation);
    tcase_add_test(tc, old_struct_size);
    tcase_add_test(tc, beyond_32bit_indexing);
    tcase_add_test(tc, intra_varlen_validation);
    tcase_add_test(tc, device_status_and_check);
    tcase_add_test(tc, head_dims);
    suite_add_tcase(s, tc);
    return test_run(s);
}
