/*
 * test_gpu.c: the KDA kernels on a real GPU, through the public API,
 * against the float64 reference (tools/kda_check.c does the running and
 * measuring; this file holds the cases and the tolerances).
 *
 * Exits 77 (ctest's skip code) when there is no CUDA device.  Runs with
 * CK_NOFORK: CUDA does not survive fork(), and one process keeps the
 * loaded kernels across tests.
 *
 * Tolerances, and why:
 *   bwd_intra fp32 outputs (dq, dk, dg, db): rel RMS <= 1e-4.  The cross-
 *     block terms run on tf32 tensor cores (operands rounded to 10-bit
 *     mantissas, 2^-11 relative), as fla's do; the diagonal blocks and all
 *     accumulation are fp32.  Measured errors are 1e-5 or below; fla's own
 *     are 1e-7..2.3e-4 depending on the gate family (peers.md).
 *   bwd_intra emit_bf16 outputs (dq, dk in the io dtype): one rounding to
 *     bf16 (2^-9 relative) or fp16 (2^-12): rel RMS <= 4e-3 and 5e-4.
 *   bwd_dhu, teacher-forced (the reference takes the kernel's own rounded
 *     dH and dv2 as matrix operands, so a rounding flip cannot compound):
 *     dh0 (fp32) <= 1e-5; dh and dv2 (stored in the io dtype, so at most
 *     an occasional one-ulp difference) <= 1e-3.
 *   bwd_dhu against the exact float64 scan: <= 1e-2 on every output: the
 *     bf16 operand rounding that fla's contract prescribes compounds over
 *     the chunks (measured 2e-3..5e-3).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_check.h"
#include "kda_ref.h"
#include "testlib.h"

static kdart_rt *rt;
static uint64_t seed;

static void print_report(const char *what, const kc_report *r) {
    printf("%-58s", what);
    for (int i = 0; i < r->nout; i++) {
        printf(" %s %.2e", r->names[i], r->rel_rms[i]);
        if (!isnan(r->rel_rms_alt[i])) printf(" (exact %.1e)", r->rel_rms_alt[i]);
    }
    printf(" det=%s%s\n", r->deterministic ? "yes" : "NO",
           r->graph_equal < 0 ? "" : r->graph_equal ? " graph=equal" : " graph=DIFFERS");
    fflush(stdout);
}

static void check_intra(const kc_intra_case *c) {
    kc_report r;
    char what[160];
    char spec[128];
    snprintf(spec, sizeof spec, "io=%s,fold_dg=%d,emit_bf16=%d,K=%d", c->io ? "fp16" : "bf16", c->fold_dg,
             c->emit_bf16, c->K);
    snprintf(what, sizeof what, "intra %s %s B%d T%d H%d HV%d", spec, kref_gate_name((kref_gate_family)c->gate), c->B,
             c->T, c->H, c->HV);
    ck_assert_int_eq(kc_run_intra(rt, c, &r), 0);
    ck_assert_msg(r.status == KDART_OK, "%s: %s", what, r.message);
    print_report(what, &r);
    double tol_qk = c->emit_bf16 ? (c->io == 0 ? 4e-3 : 5e-4) : 1e-4;
    for (int i = 0; i < 4; i++) {
        double tol = i < 2 ? tol_qk : 1e-4;
        ck_assert_msg(r.rel_rms[i] <= tol, "%s: %s rel RMS %.3e > %.1e", what, r.names[i], r.rel_rms[i], tol);
    }
    ck_assert_msg(r.deterministic, "%s: two launches differ", what);
    if (c->graph) ck_assert_msg(r.graph_equal == 1, "%s: graph replay differs", what);
}

START_TEST(intra_every_spec) {
    /* Every specialization; gate families rotate; T=1024 for K=128. */
    int n = kdart_spec_count("bwd_intra");
    for (int s = 0; s < n; s++) {
        char spec[128];
        kdart_spec_at("bwd_intra", s, spec, sizeof spec);
        kc_intra_case c = {2, 0, 2, 4, 0, 0, 0, 0, 0, seed + (uint64_t)s, 0, 0};
        c.K = strstr(spec, "K=64") ? 64 : 128;
        c.T = c.K == 128 ? 1024 : 512;
        c.io = strstr(spec, "io=fp16") != NULL;
        c.fold_dg = strstr(spec, "fold_dg=1") != NULL;
        c.emit_bf16 = strstr(spec, "emit_bf16=1") != NULL;
        if (c.emit_bf16) c.HV = c.H; /* emit needs HV == H */
        static const int gates[4] = {KREF_GATE_MILD, KREF_GATE_STRONG, KREF_GATE_CONST5, KREF_GATE_FUSED};
        c.gate = gates[s % 4];
        check_intra(&c);
    }
}
END_TEST

START_TEST(intra_gate_families) {
    /* The strong gates on both dtypes and both head dims, B>1, HV = 2H. */
    static const int gates[5] = {KREF_GATE_MILD, KREF_GATE_LOGSIG, KREF_GATE_STRONG, KREF_GATE_CONST5, KREF_GATE_FUSED};
    for (int gi = 0; gi < 5; gi++)
        for (int io = 0; io < 2; io++) {
            kc_intra_case c = {3, 256, 2, 4, io ? 64 : 128, io, gi & 1, 0, gates[gi], seed + 1000 + (uint64_t)(gi * 2 + io),
                               0, 0};
            check_intra(&c);
        }
}
END_TEST

START_TEST(intra_k64_equal_heads) {
    /* K = 64 with H == HV (even and odd; the other K = 64 cases use HV = 2H except
     * under emit_bf16), both io types, fold_dg off and on. */
    for (int v = 0; v < 4; v++) {
        kc_intra_case c = {2, 512, 4, 4, 64, v & 1, v >> 1, 0, v & 1 ? KREF_GATE_STRONG : KREF_GATE_FUSED,
                           seed + 3000 + (uint64_t)v, 0, 0};
        check_intra(&c);
    }
    kc_intra_case odd = {1, 256, 3, 3, 64, 0, 0, 0, KREF_GATE_MILD, seed + 3010, 0, 0};
    check_intra(&odd);
}
END_TEST

START_TEST(intra_graph_capture) {
    kc_intra_case c = {2, 1024, 4, 8, 128, 0, 1, 0, KREF_GATE_FUSED, seed + 2000, 0, 1};
    check_intra(&c);
}
END_TEST

static void check_dhu(const kc_dhu_case *c) {
    kc_report r;
    char what[160];
    snprintf(what, sizeof what, "dhu io=%s,K=%d,BV=%d%s V%d B%d T%d HV%d dht=%d dh0=%d", c->io ? "fp16" : "bf16", c->K,
             c->v_tile, c->v_tile ? "" : "(auto)", c->V, c->B, c->T, c->HV, c->with_dht, c->with_dh0);
    ck_assert_int_eq(kc_run_dhu(rt, c, &r), 0);
    ck_assert_msg(r.status == KDART_OK, "%s: %s", what, r.message);
    print_report(what, &r);
    for (int i = 0; i < 3; i++) {
        double tol = i == 2 ? 1e-5 : 1e-3;
        ck_assert_msg(r.rel_rms[i] <= tol, "%s: %s teacher-forced rel RMS %.3e > %.1e", what, r.names[i],
                      r.rel_rms[i], tol);
        ck_assert_msg(r.rel_rms_alt[i] <= 1e-2, "%s: %s exact rel RMS %.3e > 1e-2", what, r.names[i],
                      r.rel_rms_alt[i]);
    }
    ck_assert_msg(r.deterministic, "%s: two launches differ", what);
    if (c->graph) ck_assert_msg(r.graph_equal == 1, "%s: graph replay differs", what);
}

START_TEST(dhu_every_spec) {
    static const int vs[3] = {64, 128, 256};
    for (int s = 0; s < kdart_spec_count("bwd_dhu"); s++) {
        char spec[128];
        kdart_spec_at("bwd_dhu", s, spec, sizeof spec);
        for (int variant = 0; variant < 2; variant++) {
            kc_dhu_case c = {2, 1024, 3, strstr(spec, "K=64") ? 64 : 128, vs[(s + variant) % 3],
                             strstr(spec, "io=fp16") != NULL, variant == 0, variant == 0,
                             seed + 3000 + (uint64_t)(s * 2 + variant), 0, 0, kc_spec_bv(spec)};
            check_dhu(&c);
        }
    }
}
END_TEST

START_TEST(dhu_graph_capture_and_mixed) {
    kc_dhu_case c = {3, 256, 2, 128, 128, 0, 1, 0, seed + 4000, 0, 1, 0}; /* dht, no dh0; kdart picks BV */
    check_dhu(&c);
    kc_dhu_case d = {1, 2048, 2, 64, 64, 1, 0, 1, seed + 4001, 0, 0, 32}; /* no dht, dh0; BV 32 */
    check_dhu(&d);
}
END_TEST

START_TEST(bad_arguments_write_nothing) {
    static const int want[KC_NBAD] = {KDART_OK,     KDART_EALIGN,       KDART_EDTYPE,  KDART_ESHAPE,
                                      KDART_EUNSUPPORTED, KDART_EUNSUPPORTED, KDART_ESHAPE, KDART_EUNSUPPORTED,
                                      KDART_ESTRIDE, KDART_EDEVICE,     KDART_ENULL};
    for (int w = 0; w < KC_NBAD; w++) {
        int untouched;
        char msg[512];
        int st = kc_intra_bad_arg(rt, w, &untouched, msg, sizeof msg);
        printf("bad argument %2d: %-18s outputs %s  (%s)\n", w, kdart_errname(st),
               untouched ? "untouched" : "written", msg);
        ck_assert_msg(st == want[w], "case %d: got %s, want %s: %s", w, kdart_errname(st), kdart_errname(want[w]), msg);
        /* A valid call writes its outputs; every refused call writes none. */
        ck_assert_int_eq(untouched, w == 0 ? 0 : 1);
    }
}
END_TEST

START_TEST(warm_load_times) {
    /* A fresh handle on the (prewarmed) cache: lookup + load per spec. */
    kdart_rt *fresh;
    ck_assert_int_eq(kdart_open(&fresh, NULL), KDART_OK);
    for (int k = 0; k < kdart_kernel_count(); k++) {
        const char *name = kdart_kernel_name(k);
        for (int s = 0; s < kdart_spec_count(name); s++) {
            char spec[128];
            kdart_spec_at(name, s, spec, sizeof spec);
            kdart_prepared p;
            ck_assert_int_eq(kdart_prepare(fresh, name, spec, NULL, 0, &p), KDART_OK);
            printf("prepare %-14s %-36s source=%s lookup %.3f ms load %.3f ms compile %.1f ms\n", name, spec,
                   p.source == KDART_FROM_CACHE ? "cache" : p.source == KDART_FROM_COMPILE ? "compile" : "other",
                   p.lookup_ms, p.load_ms, p.compile_ms);
            ck_assert_int_eq(p.loaded, 1);
        }
    }
    kdart_close(fresh);
}
END_TEST

/* Small shapes for compute-sanitizer (KDART_GPU_SMALL=1): every
 * specialization once, B=1, two chunks. */
START_TEST(small_for_sanitizers) {
    for (int s = 0; s < kdart_spec_count("bwd_intra"); s++) {
        char spec[128];
        kdart_spec_at("bwd_intra", s, spec, sizeof spec);
        kc_intra_case c = {1, 128, 1, 2, strstr(spec, "K=64") ? 64 : 128, strstr(spec, "io=fp16") != NULL,
                           strstr(spec, "fold_dg=1") != NULL, strstr(spec, "emit_bf16=1") != NULL, KREF_GATE_FUSED,
                           seed + (uint64_t)s, 0, 0};
        if (c.emit_bf16 || !(s & 1)) c.H = c.HV; /* every other spec with H == HV = 2 */
        check_intra(&c);
    }
    for (int s = 0; s < kdart_spec_count("bwd_dhu"); s++) {
        char spec[128];
        kdart_spec_at("bwd_dhu", s, spec, sizeof spec);
        kc_dhu_case c = {1, 128, 2, strstr(spec, "K=64") ? 64 : 128, 128, strstr(spec, "io=fp16") != NULL, s & 1,
                         !(s & 1), seed + 50 + (uint64_t)s, 0, 0, kc_spec_bv(spec)};
        check_dhu(&c);
    }
}
END_TEST

int main(void) {
    char why[256];
    int rc = kc_init(why, sizeof why);
    if (rc != 0) {
        printf("test_gpu: skipped: %s\n", why);
        return TEST_SKIP;
    }
    seed = kref_pick_seed();
    printf("test_gpu: seed %llu (set KREF_SEED to replay)\n", (unsigned long long)seed);
    if (kdart_open(&rt, NULL) != KDART_OK) {
        printf("test_gpu: kdart_open failed\n");
        return 1;
    }
    Suite *s = suite_create("gpu");
    TCase *tc = tcase_create("kernels");
    tcase_set_timeout(tc, 1200);
    const char *small = getenv("KDART_GPU_SMALL");
    if (small && small[0] == '1') {
        tcase_add_test(tc, small_for_sanitizers);
        goto run;
    }
    tcase_add_test(tc, warm_load_times);
    tcase_add_test(tc, intra_every_spec);
    tcase_add_test(tc, intra_gate_families);
    tcase_add_test(tc, intra_k64_equal_heads);
    tcase_add_test(tc, intra_graph_capture);
    tcase_add_test(tc, dhu_every_spec);
    tcase_add_test(tc, dhu_graph_capture_and_mixed);
    tcase_add_test(tc, bad_arguments_write_nothing);
run:
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    kdart_close(rt);
    return failed ? 1 : 0;
}
