/*
 * test_gpu.c: the KDA kernels on a real GPU, through the public API,
 * against the float64 reference (tests/check/kda_check.c does the running and
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
 *     are 1e-7..2.3e-4 depending on the gate family.
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
#include "kda_params.h"
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
    printf(" det=%s%s", r->deterministic ? "yes" : "NO",
           r->graph_equal < 0 ? "" : r->graph_equal ? " graph=equal" : " graph=DIFFERS");
    /* KDART_GPU_DIGESTS: each output's digest too, so that two kernel trees' runs of the same cases can be
     * compared bit for bit (the seeds are fixed) */
    if (getenv("KDART_GPU_DIGESTS"))
        for (int i = 0; i < r->nout; i++) printf(" %s#%016llx", r->names[i], r->digest[i]);
    printf("\n");
    fflush(stdout);
}

static void seqs_label(const kc_seqs *q, char *buf, size_t n) {
    if (!q->nseq) {
        snprintf(buf, n, "%s", "");
        return;
    }
    snprintf(buf, n, " N%d%s %s%s%s%s", q->nseq, q->cu ? "" : " drawn", q->cu32 ? "i32" : "i64",
             q->fla_indices ? " +indices" : "", q->hard_gates > 0 ? " -1000s" : "",
             q->garbage ? " GARBAGE" : "");
}

/* The packed case of a varlen=1 specialization in the every-spec loops: 4
 * drawn sequences of 1..300 tokens (one zero-length every third spec), the
 * dtype and fla's index tensors alternating. */
static void every_spec_seqs(kc_seqs *q, int *B, int *T, int s) {
    kc_seqs v = {4, NULL, 1, 300, s % 3 == 0, s & 1, (s >> 1) & 1, 2, 0, 0.0, 0};
    *q = v;
    *B = 1, *T = 0;
}
/* The sanitizer's: 3 short sequences, and every other spec a fixed-length
 * partial chunk instead (T = 65, no cu_seqlens). */
static void small_seqs(kc_seqs *q, int *B, int *T, int s) {
    kc_seqs v = {3, NULL, 1, 100, 1, s & 1, 1, 1, 0, 0.0, 0};
    if (s & 2) {
        *T = 65;
        return;
    }
    *q = v;
    *B = 1, *T = 0;
}

/* Runs c on handle h (in the current context) and checks it against the
 * reference; the report in *out. */
static void check_intra_on(kdart_rt *h, const kc_intra_case *c, kc_report *out) {
    kc_report r;
    char what[256];
    char spec[128];
    snprintf(spec, sizeof spec, "io=%s,fold_dg=%d,emit_bf16=%d,K=%d%s", c->io ? "fp16" : "bf16", c->fold_dg,
             c->emit_bf16, c->K, c->beta_f32 ? ",beta=f32" : "");
    char sq[64];
    seqs_label(&c->seqs, sq, sizeof sq);
    snprintf(what, sizeof what, "intra %s %s B%d T%d H%d HV%d%s", spec, kref_gate_name((kref_gate_family)c->gate),
             c->B, c->T, c->H, c->HV, sq);
    ck_assert_msg(kc_run_intra(h, c, &r) == 0, "%s: harness: %s", what, r.message);
    /* EUNSUPPORTED counts as a failure: a varlen build without the bwd_intra
     * VARLEN body must not pass silently */
    ck_assert_msg(r.status == KDART_OK, "%s: %s", what, r.message);
    print_report(what, &r);
    ck_assert_msg(r.untouched, "%s: an element past cu[N] was written", what);
    double tol_qk = c->emit_bf16 ? (c->io == 0 ? 4e-3 : 5e-4) : 1e-4;
    for (int i = 0; i < 4; i++) {
        double tol = i < 2 ? tol_qk : 1e-4;
        ck_assert_msg(r.rel_rms[i] <= tol, "%s: %s rel RMS %.3e > %.1e", what, r.names[i], r.rel_rms[i], tol);
    }
    ck_assert_msg(r.deterministic, "%s: two launches differ", what);
    if (c->graph) ck_assert_msg(r.graph_equal == 1, "%s: graph replay differs", what);
    if (out) *out = r;
}

static void check_intra(const kc_intra_case *c) { check_intra_on(rt, c, NULL); }

/* Every specialization with beta in the io dtype (beta_f32 = 0) or fp32 (1); gate
 * families rotate; T=1024 for K=128. */
static void intra_every_spec_of(int beta_f32) {
    int n = kdart_spec_count("bwd_intra");
    for (int s = 0; s < n; s++) {
        char spec[128];
        kdart_spec_at("bwd_intra", s, spec, sizeof spec);
        if (!kc_intra_spec_launchable(spec)) continue; /* varlen=0,tail=1: a trap stub, never launched */
        if (kc_spec_beta_f32(spec) != beta_f32) continue;
        kc_intra_case c = {2, 0, 2, 4, 0, 0, 0, 0, 0, seed + (uint64_t)s, 0, 0, {0}, 0};
        c.K = kc_intra_spec_k(spec); /* tail=1: 4 below the tile, so that the tail body runs */
        c.T = kc_spec_k(spec) >= 128 ? 1024 : 512;
        c.io = strstr(spec, "io=fp16") != NULL;
        c.fold_dg = strstr(spec, "fold_dg=1") != NULL;
        c.emit_bf16 = strstr(spec, "emit_bf16=1") != NULL;
        c.beta_f32 = kc_spec_beta_f32(spec);
        if (c.emit_bf16) c.HV = c.H; /* emit needs HV == H */
        static const int gates[4] = {KREF_GATE_MILD, KREF_GATE_STRONG, KREF_GATE_CONST5, KREF_GATE_FUSED};
        c.gate = gates[s % 4];
        /* every other tail spec at fixed length (kdart sends it to the varlen body with B rows) */
        if (strstr(spec, "varlen=1") && !(kc_spec_tail(spec) && ((s >> 2) & 1)))
            every_spec_seqs(&c.seqs, &c.B, &c.T, s);
        check_intra(&c);
    }
}
START_TEST(intra_every_spec) { intra_every_spec_of(0); }
END_TEST
START_TEST(intra_every_spec_beta_f32) { intra_every_spec_of(1); }
END_TEST

/* bwd_intra as kdart.fla calls it when chunk_kda applies the beta sigmoid (fp32 beta,
 * fold_dg): the safe gate's bound (-5 per step), the fused gate and strong gates, packed
 * documents with one-token and partial-chunk ones, grouped value heads, both io dtypes,
 * native and tail head dims. */
START_TEST(intra_beta_f32_production) {
    static const long long cu[] = {0, 1, 65, 200, 1000, 1001, 2100};
    static const int gates[3] = {KREF_GATE_CONST5, KREF_GATE_FUSED, KREF_GATE_STRONG};
    static const int ks[3] = {128, 64, 100};
    for (int v = 0; v < 6; v++) {
        kc_seqs q = {6, cu, 0, 0, 0, v & 1, (v >> 1) & 1, 0, 0, 0.0, 0};
        kc_intra_case c = {1, 2100, 2, 4, ks[v % 3], v & 1, 1, 0, gates[v % 3], seed + 9500 + (uint64_t)v, 0,
                           v == 0, q, 1};
        check_intra(&c);
        kc_intra_case f = {2, 300, 4, 4, ks[v % 3], (v >> 1) & 1, 1, 0, gates[(v + 1) % 3], seed + 9600 + (uint64_t)v,
                           0, 0, {0}, 1};
        check_intra(&f); /* fixed length, a partial last chunk */
    }
}
END_TEST

/* wy_dqkg: against the float64 reference with fla's roundings (and the exact
 * one, printed); every output past cu[N] must keep its poison. */
static void check_wy(const kc_wy_case *c) {
    kc_report r;
    char what[256], sq[64];
    seqs_label(&c->seqs, sq, sizeof sq);
    snprintf(what, sizeof what, "wy %s%s%s %s B%d T%d H%d HV%d K%d V%d%s%s", c->io ? "fp16" : "bf16",
             c->beta_f32 ? " beta=f32" : "", c->state_v_first ? " Vfirst" : "",
             kref_gate_name((kref_gate_family)c->gate), c->B, c->T, c->H, c->HV, c->K, c->V, sq,
             c->with_dAqk ? c->with_intra ? " +dAqk +intra" : " +dAqk" : "");
    ck_assert_msg(kc_run_wy(rt, c, &r) == 0, "%s: harness: %s", what, r.message);
    ck_assert_msg(r.status == KDART_OK, "%s: %s", what, r.message);
    print_report(what, &r);
    ck_assert_msg(r.untouched, "%s: an element past cu[N] was written", what);
    for (int i = 0; i < r.nout; i++)
        ck_assert_msg(r.rel_rms[i] <= 2e-3, "%s: %s rel RMS %.3e > 2e-3", what, r.names[i], r.rel_rms[i]);
    ck_assert_msg(r.deterministic, "%s: two launches differ", what);
    if (c->graph) ck_assert_msg(r.graph_equal == 1, "%s: graph replay differs", what);
}

/* Every wy_dqkg specialization: the tail ones in turn at a head dim 4 below the
 * tile, V = 100, a head dim 8 below the tile with V = 72, and an odd V = 101 (the
 * tail path's three copy granules), the varlen ones on drawn packed sequences or
 * (every other) a fixed length that is not a multiple of 64. */
START_TEST(wy_every_spec) {
    int n = kdart_spec_count("wy_dqkg");
    ck_assert_int_gt(n, 0);
    for (int s = 0; s < n; s++) {
        char spec[128];
        kdart_spec_at("wy_dqkg", s, spec, sizeof spec);
        int K, V;
        kc_wy_spec_dims(spec, s >> 1, &K, &V);
        kc_wy_case c = {2, 256, 2, 4, K, V, strstr(spec, "io=fp16") != NULL, kc_spec_beta_f32(spec),
                        strstr(spec, "svf=1") != NULL, 0, seed + 20000 + (uint64_t)s, 0, 0, {0},
                        strstr(spec, "dAqk=1") != NULL, strstr(spec, "intra=1") != NULL};
        if (!kc_wy_spec_launchable(spec)) continue; /* a trap stub, or post=1 (the whole call's) */
        static const int gates[4] = {KREF_GATE_MILD, KREF_GATE_STRONG, KREF_GATE_CONST5, KREF_GATE_FUSED};
        c.gate = gates[s % 4];
        if (strstr(spec, "varlen=1")) {
            if ((s >> 2) & 1) c.T = 200;
            else every_spec_seqs(&c.seqs, &c.B, &c.T, s);
        }
        check_wy(&c);
    }
}
END_TEST

/* wy_dqkg as chunk_kda's backward hands it over: packed documents with one-token
 * and partial-chunk ones, the safe gate's bound, fused and strong gates, gates of
 * -1000, grouped value heads, both layouts, head dims 128 / 64 / 100 / 256, V up to 512. */
START_TEST(wy_production) {
    static const long long cu[] = {0, 1, 65, 200, 1000, 1001, 2100};
    static const int gates[3] = {KREF_GATE_CONST5, KREF_GATE_FUSED, KREF_GATE_STRONG};
    static const int ks[4] = {128, 64, 100, 256}, vs[4] = {128, 64, 100, 128};
    for (int v = 0; v < 8; v++) {
        kc_seqs q = {6, cu, 0, 0, 0, v & 1, (v >> 1) & 1, 0, 0, v == 5 ? 0.05 : 0.0, 0};
        kc_wy_case c = {1, 2100, 2, 4, ks[v % 4], vs[v % 4], (v >> 2) & 1, 1, (v >> 1) & 1, gates[v % 3],
                        seed + 21000 + (uint64_t)v, 0, v == 0, q, 0, 0};
        check_wy(&c);
    }
    kc_wy_case f = {2, 300, 4, 4, 128, 128, 0, 0, 0, KREF_GATE_FUSED, seed + 21100, 0, 1, {0}, 0, 0};
    check_wy(&f); /* fixed length, a partial last chunk, beta in the io dtype */
    kc_wy_case w = {1, 256, 2, 2, 128, 256, 0, 1, 0, KREF_GATE_CONST5, seed + 21200, 0, 0, {0}, 0, 0};
    check_wy(&w); /* prod8192's K128 V256: four V tiles */
    kc_wy_case x = {1, 128, 1, 2, 256, 512, 1, 1, 1, KREF_GATE_STRONG, seed + 21300, 0, 0, {0}, 0, 0};
    check_wy(&x); /* the largest: K 256, V 512 (eight V tiles), V-first */
    /* storage past cu[N] (NaN in the harness) after a partial last chunk: the native body's copies of that
     * chunk run on into the NaN rows (sm_90a: TMA boxes of 64 rows), which must reach no gradient */
    kc_seqs n = {6, cu, 0, 0, 0, 0, 0, 0, 0, 0.0, 0};
    kc_wy_case p = {1, 2200, 2, 2, 128, 128, 0, 1, 0, KREF_GATE_FUSED, seed + 21400, 0, 0, n, 0, 0};
    check_wy(&p);
}
END_TEST

/* wy_dqkg with bwd_intra's terms in the same launch (args.intra), as chunk_kda_bwd runs it where dAv is
 * fused: against wy_dqkg's float64 reference followed by bwd_intra's (fold_dg), every head dim class (the
 * tail ones force the varlen body), packed documents with one-token and partial-chunk ones, grouped value
 * heads, both layouts, both io dtypes, gates of -1000; deterministic, graph replay equal. */
START_TEST(wy_intra) {
    static const long long cu[] = {0, 1, 65, 200, 1000, 1001, 2100};
    static const int gates[3] = {KREF_GATE_CONST5, KREF_GATE_FUSED, KREF_GATE_STRONG};
    static const int ks[4] = {128, 64, 100, 256};
    for (int v = 0; v < 8; v++) {
        kc_seqs q = {6, cu, 0, 0, 0, v & 1, (v >> 1) & 1, 0, 0, v == 5 ? 0.05 : 0.0, 0};
        kc_wy_case c = {1, 2100, 2, v & 1 ? 4 : 2, ks[v % 4], 128, (v >> 2) & 1, 1, v == 6, gates[v % 3],
                        seed + 23000 + (uint64_t)v, 0, v == 0, q, 1, 1};
        check_wy(&c);
    }
    kc_wy_case f = {2, 256, 4, 4, 128, 128, 0, 1, 0, KREF_GATE_FUSED, seed + 23100, 0, 1, {0}, 1, 1};
    check_wy(&f); /* the production shape's kernel: fixed length, K = V = 128, fp32 beta */
    kc_wy_case t = {2, 300, 2, 2, 100, 64, 1, 0, 0, KREF_GATE_MILD, seed + 23101, 0, 0, {0}, 1, 1};
    check_wy(&t); /* a fixed length with a partial chunk and a tail head dim: the varlen body, B rows */
    kc_seqs n = {6, cu, 0, 0, 0, 0, 0, 0, 0, 0.0, 0};
    kc_wy_case p = {1, 2200, 2, 2, 128, 128, 0, 1, 0, KREF_GATE_FUSED, seed + 23102, 0, 0, n, 1, 1};
    check_wy(&p); /* NaN storage past cu[N] right after a partial chunk (see wy_production) */
}
END_TEST

/* recompute_wu: against the exact float64 outputs (w, u, kg, qg in the io
 * dtype: its rounding and that of kb, vb inside; the gate's cumsum in fp32);
 * every output past cu[N] must keep its poison. */
static void check_rwu(const kc_rwu_case *c) {
    kc_report r;
    char what[256], sq[64];
    seqs_label(&c->seqs, sq, sizeof sq);
    static const char *const gates[3] = {"g in", "raw gate", "raw safe gate"};
    snprintf(what, sizeof what, "rwu %s%s %s%s%s%s B%d T%d H%d HV%d K%d V%d%s", c->io ? "fp16" : "bf16",
             c->beta_f32 ? " beta=f32" : "", gates[c->gate], c->gate && c->graw_f32 ? " f32" : "",
             c->gate && !c->with_bias ? " no-bias" : "", c->with_q ? "" : " no-q", c->B, c->T, c->H, c->HV, c->K,
             c->V, sq);
    ck_assert_msg(kc_run_rwu(rt, c, &r) == 0, "%s: harness: %s", what, r.message);
    ck_assert_msg(r.status == KDART_OK, "%s: %s", what, r.message);
    print_report(what, &r);
    ck_assert_msg(r.untouched, "%s: an element past cu[N] was written", what);
    for (int i = 0; i < r.nout; i++) {
        const double tol = strcmp(r.names[i], "g") == 0 ? 1e-5 : c->io ? 1.5e-3 : 8e-3;
        ck_assert_msg(r.rel_rms[i] <= tol, "%s: %s rel RMS %.3e > %.0e", what, r.names[i], r.rel_rms[i], tol);
    }
    ck_assert_msg(r.deterministic, "%s: two launches differ", what);
    if (c->graph) ck_assert_msg(r.graph_equal == 1, "%s: graph replay differs", what);
}

/* Every recompute_wu specialization: the tail ones at K = 100 / V = 72, K =
 * 60 / V = 101 and K = 18 / V = 64 in turn (each copy granule), the varlen
 * ones on drawn packed sequences or (every other) T = 200 at fixed length;
 * the gate ones with the raw gate in the io dtype and fp32, both forms, with
 * and without dt_bias, in turn; HV = 2H. */
START_TEST(rwu_every_spec) {
    const int n = kdart_spec_count("recompute_wu");
    ck_assert_int_gt(n, 0);
    static const int tk[3] = {100, 60, 18}, tv[3] = {72, 101, 64};
    for (int s = 0; s < n; s++) {
        char spec[128];
        kdart_spec_at("recompute_wu", s, spec, sizeof spec);
        const int tail = kc_spec_tail(spec), gate = strstr(spec, "gate=1") != NULL;
        kc_rwu_case c = {2, 256, 2, 4, tail ? tk[s % 3] : 128, tail ? tv[s % 3] : 128,
                         strstr(spec, "io=fp16") != NULL, kc_spec_beta_f32(spec), gate ? 1 + ((s >> 1) & 1) : 0,
                         KREF_GATE_STRONG, (s >> 2) & 1, !((s >> 3) & 1), -5.0, s % 5 != 0,
                         seed + 60000 + (uint64_t)s, 0, s == 0, {0}};
        if (strstr(spec, "varlen=1")) {
            if ((s >> 2) & 1) c.T = 200;
            else every_spec_seqs(&c.seqs, &c.B, &c.T, s);
        }
        check_rwu(&c);
    }
}
END_TEST

/* recompute_wu as chunk_kda's backward hands it over: packed documents with
 * one-token and partial-chunk ones, the raw gate in both forms (the safe one
 * with its bound -5), the cumsummed gate with gates of -1000, head dims 128,
 * 64, 100, 256 and V up to 512, equal and grouped heads. */
START_TEST(rwu_production) {
    static const long long cu[] = {0, 1, 65, 200, 1000, 1001, 2100};
    static const int ks[4] = {128, 64, 100, 256}, vs[4] = {128, 256, 100, 512};
    for (int v = 0; v < 8; v++) {
        kc_seqs q = {6, cu, 0, 0, 0, v & 1, (v >> 1) & 1, 0, 0, v == 3 ? 0.05 : 0.0, 0};
        kc_rwu_case c = {1, 2100, 2, v & 2 ? 2 : 4, ks[v % 4], vs[v % 4], (v >> 2) & 1, 1, v == 3 ? 0 : 1 + (v & 1),
                         KREF_GATE_STRONG, v & 4 ? 1 : 0, 1, -5.0, 1, seed + 61000 + (uint64_t)v, 0, v == 0, q};
        check_rwu(&c);
    }
    kc_rwu_case f = {1, 4096, 16, 16, 128, 128, 0, 1, 2, 0, 0, 1, -5.0, 1, seed + 61100, 0, 0, {0}};
    check_rwu(&f); /* the production configuration at fixed length: K = V = 128, many CTAs per SM */
}
END_TEST

START_TEST(intra_gate_families) {
    /* The strong gates on both dtypes and both head dims, B>1, HV = 2H. */
    static const int gates[5] = {KREF_GATE_MILD, KREF_GATE_LOGSIG, KREF_GATE_STRONG, KREF_GATE_CONST5, KREF_GATE_FUSED};
    for (int gi = 0; gi < 5; gi++)
        for (int io = 0; io < 2; io++) {
            kc_intra_case c = {3, 256, 2, 4, io ? 64 : 128, io, gi & 1, 0, gates[gi], seed + 1000 + (uint64_t)(gi * 2 + io),
                               0, 0, {0}, 0};
            check_intra(&c);
        }
}
END_TEST

START_TEST(intra_k64_equal_heads) {
    /* K = 64 with H == HV (even and odd; the other K = 64 cases use HV = 2H except
     * under emit_bf16), both io types, fold_dg off and on. */
    for (int v = 0; v < 4; v++) {
        kc_intra_case c = {2, 512, 4, 4, 64, v & 1, v >> 1, 0, v & 1 ? KREF_GATE_STRONG : KREF_GATE_FUSED,
                           seed + 3000 + (uint64_t)v, 0, 0, {0}, 0};
        check_intra(&c);
    }
    kc_intra_case odd = {1, 256, 3, 3, 64, 0, 0, 0, KREF_GATE_MILD, seed + 3010, 0, 0, {0}, 0};
    check_intra(&odd);
}
END_TEST

START_TEST(intra_graph_capture) {
    kc_intra_case c = {2, 1024, 4, 8, 128, 0, 1, 0, KREF_GATE_FUSED, seed + 2000, 0, 1, {0}, 0};
    check_intra(&c);
}
END_TEST

static void check_dhu_on(kdart_rt *h, const kc_dhu_case *c, kc_report *out) {
    kc_report r;
    char what[256];
    snprintf(what, sizeof what, "dhu io=%s,K=%d,BV=%d%s V%d B%d T%d HV%d dht=%d dh0=%d%s%s", c->io ? "fp16" : "bf16",
             c->K, c->v_tile, c->v_tile ? "" : "(auto)", c->V, c->B, c->T, c->HV, c->with_dht, c->with_dh0,
             c->state_v_first ? " v-first" : "", c->fused ? " Aqk (fused dv)" : "");
    seqs_label(&c->seqs, what + strlen(what), sizeof what - strlen(what));
    ck_assert_msg(kc_run_dhu(h, c, &r) == 0, "%s: harness: %s", what, r.message);
    ck_assert_msg(r.status == KDART_OK, "%s: %s", what, r.message);
    print_report(what, &r);
    ck_assert_msg(r.untouched, "%s: a dh row past the chunk count or a dv2 token past cu[N] was written", what);
    for (int i = 0; i < 3; i++) {
        double tol = i == 2 ? 1e-5 : 1e-3;
        ck_assert_msg(r.rel_rms[i] <= tol, "%s: %s teacher-forced rel RMS %.3e > %.1e", what, r.names[i],
                      r.rel_rms[i], tol);
        ck_assert_msg(r.rel_rms_alt[i] <= 1e-2, "%s: %s exact rel RMS %.3e > 1e-2", what, r.names[i],
                      r.rel_rms_alt[i]);
    }
    ck_assert_msg(r.deterministic, "%s: two launches differ", what);
    if (c->graph) ck_assert_msg(r.graph_equal == 1, "%s: graph replay differs", what);
    if (out) *out = r;
}

static void check_dhu(const kc_dhu_case *c) { check_dhu_on(rt, c, NULL); }

/* fla's chunk_kda_bwd_dAv fused into the two stages that already hold its operands: wy_dqkg's dAqk
 * (do, v_new) and bwd_dhu's dv_intra from Aqk (do), each against its float64 reference (bwd_dhu's
 * whole scan fed with the exact dv_intra; an Aqk random above its diagonal, which must not be read),
 * poisoned outputs, packed documents with one-token and partial chunks, both io dtypes, both state
 * layouts, K 64 and 128, V up to 256, graph replay. */
START_TEST(dav_fused) {
    static const long long cu[] = {0, 1, 65, 200, 1000, 1001, 2100};
    for (int v = 0; v < 6; v++) {
        kc_seqs q = {6, cu, 0, 0, 0, v & 1, (v >> 1) & 1, 0, 0, 0, 0};
        const int K = v == 3 ? 64 : 128, V = v == 3 ? 64 : v == 4 ? 256 : 128;
        kc_dhu_case c = {1, 2100, 3, K, V, v == 3, v != 2, v != 1, seed + 22000 + (uint64_t)v, 0, v == 0, 64,
                         v < 2 ? q : (kc_seqs){0}, v == 5, 1};
        if (v >= 2) c.B = 2, c.T = v == 2 ? 300 : 1024; /* fixed length (300: a partial last chunk) */
        if (v == 2) c.v_tile = 0;                      /* kdart picks 64 for the fused dv */
        check_dhu(&c);
        kc_wy_case w = {1, 2100, 2, 4, K, V, v == 3, 1, v == 5, v & 1 ? KREF_GATE_STRONG : KREF_GATE_FUSED,
                        seed + 22100 + (uint64_t)v, 0, v == 0, v < 2 ? q : (kc_seqs){0}, 1, 0};
        if (v >= 2) w.B = 2, w.T = v == 2 ? 300 : 1024;
        check_wy(&w);
    }
    /* dAqk from every wy K tile and the tail: 256 (four K blocks), 100 */
    kc_wy_case x = {1, 256, 1, 2, 256, 128, 0, 1, 1, KREF_GATE_CONST5, seed + 22200, 0, 0, {0}, 1, 0};
    check_wy(&x);
    kc_wy_case y = {2, 200, 2, 2, 100, 100, 1, 0, 0, KREF_GATE_MILD, seed + 22201, 0, 0, {0}, 1, 0};
    check_wy(&y);
}
END_TEST

/* every bwd_dhu spec of one io dtype (two tests: the float64 scans of all 144
 * specs, two shapes each, take longer than one process's share of a lent GPU's time) */
static void dhu_every_spec_io(int fp16) {
    static const int vs[3] = {64, 128, 256};
    for (int s = 0; s < kdart_spec_count("bwd_dhu"); s++) {
        char spec[128];
        kdart_spec_at("bwd_dhu", s, spec, sizeof spec);
        if ((strstr(spec, "io=fp16") != NULL) != fp16) continue;
        for (int variant = 0; variant < 2; variant++) {
            /* tail=1: K below the tile, a partial V tile or the V-first state (two of them per spec) */
            int K, V = vs[(s + variant) % 3], svf;
            kc_dhu_spec_dims(spec, (s >> 1) + variant, &K, &V, &svf);
            kc_dhu_case c = {2, 1024, 3, K, V, strstr(spec, "io=fp16") != NULL, variant == 0, variant == 0,
                             seed + 3000 + (uint64_t)(s * 2 + variant), 0, 0, kc_spec_bv(spec), {0}, svf, 0};
            if (strstr(spec, "varlen=1")) every_spec_seqs(&c.seqs, &c.B, &c.T, s + variant);
            check_dhu(&c);
        }
    }
}

START_TEST(dhu_every_spec) { dhu_every_spec_io(0); }
END_TEST

START_TEST(dhu_every_spec_fp16) { dhu_every_spec_io(1); }
END_TEST

START_TEST(dhu_graph_capture_and_mixed) {
    kc_dhu_case c = {3, 256, 2, 128, 128, 0, 1, 0, seed + 4000, 0, 1, 0, {0}, 0, 0}; /* dht, no dh0; kdart picks BV */
    check_dhu(&c);
    kc_dhu_case d = {1, 2048, 2, 64, 64, 1, 0, 1, seed + 4001, 0, 0, 32, {0}, 0, 0}; /* no dht, dh0; BV 32 */
    check_dhu(&d);
}
END_TEST

START_TEST(bad_arguments_write_nothing) {
    /* case 5 (q alone at T = 100): any T is valid now, so the other tensors' T = 128 disagrees */
    static const int want[KC_NBAD] = {KDART_OK,     KDART_EALIGN,       KDART_EDTYPE,  KDART_ESHAPE,
                                      KDART_EUNSUPPORTED, KDART_ESHAPE, KDART_ESHAPE, KDART_EUNSUPPORTED,
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

/* ------------------------------------------------ variable length, partial */

static const int partial_ts[] = {1, 63, 64, 65, 127, 1000, 4160};
#define NPARTIAL ((int)(sizeof partial_ts / sizeof partial_ts[0]))

/* Fixed length, any T: T % 64 != 0 goes to varlen=1 without cu_seqlens. */
START_TEST(intra_fixed_any_t) {
    for (int i = 0; i < NPARTIAL; i++) {
        kc_intra_case c = {2, partial_ts[i], 2, 4, i & 1 ? 64 : 128, i & 1, (i >> 1) & 1, 0, KREF_GATE_FUSED,
                           seed + 5000 + (uint64_t)i, 0, 0, {0}, 0};
        if (i % 3 == 2) c.emit_bf16 = 1, c.HV = c.H;
        check_intra(&c);
    }
}
END_TEST

START_TEST(dhu_fixed_any_t) {
    for (int i = 0; i < NPARTIAL; i++) {
        kc_dhu_case c = {2, partial_ts[i], 3, i & 1 ? 64 : 128, 128, i & 1, i & 1, !(i & 2), seed + 5100 + (uint64_t)i,
                         0, 0, 0, {0}, 0, 0};
        check_dhu(&c);
    }
}
END_TEST

/* Sample cu_seqlens lists (fla's varlen test lists among them), the last with zero-length sequences. */
static const long long cu_a[] = {0, 15}, cu_b[] = {0, 256, 500, 1000}, cu_c[] = {0, 15, 100, 300, 1200, 2000},
                       cu_d[] = {0, 100, 300, 1200, 3000, 4096}, cu_e[] = {0, 100, 100, 357, 357, 421};
static const struct {
    const long long *cu;
    int n, T; /* T: storage tokens (>= cu[N]: the rest must stay untouched) */
} cu_lists[] = {{cu_a, 1, 15}, {cu_b, 3, 1000}, {cu_c, 5, 2100}, {cu_d, 5, 4096}, {cu_e, 5, 430}};
#define NLISTS ((int)(sizeof cu_lists / sizeof cu_lists[0]))

/* Variant v of list i: dtype of cu_seqlens, fla's indices, -1000 gates,
 * dht/dh0 and the io dtype rotate. */
static kc_seqs list_seqs(int i, int v) {
    kc_seqs q = {cu_lists[i].n, cu_lists[i].cu, 0, 0, 0, v & 1, (v >> 1) & 1, 3, 0, (v & 2) ? 0.1 : 0.0, 0};
    return q;
}

START_TEST(intra_varlen_lists) {
    for (int i = 0; i < NLISTS; i++)
        for (int v = 0; v < 4; v++) {
            kc_intra_case c = {1, cu_lists[i].T, 2, 4, v & 1 ? 64 : 128, (i + v) & 1, v >> 1, 0, KREF_GATE_FUSED,
                               seed + 6000 + (uint64_t)(i * 4 + v), 0, v == 3, list_seqs(i, v), 0};
            if (v == 2) c.emit_bf16 = 1, c.HV = c.H;
            check_intra(&c);
        }
}
END_TEST

START_TEST(dhu_varlen_lists) {
    for (int i = 0; i < NLISTS; i++)
        for (int v = 0; v < 4; v++) {
            kc_dhu_case c = {1, cu_lists[i].T, 4, v & 1 ? 64 : 128, v & 2 ? 64 : 128, (i + v) & 1, v != 1, v != 2,
                             seed + 6100 + (uint64_t)(i * 4 + v), 0, v == 3, v == 0 ? 0 : 16 << (v - 1),
                             list_seqs(i, v), 0, 0};
            check_dhu(&c);
        }
}
END_TEST

/* bwd_dhu's V split (kernel_src/bwd_dhu.cuh, kdart::dhu::varlen64): packed
 * sequences with kdart's V tile, BV 64 in a grid of a few waves (checked
 * below through kdart_dhu_v_tile), a few sequences much longer than the rest.
 * Of these 40 (one zero-length), the long ones (1500, 260 and in one case
 * 400 tokens, each more than a quarter past the balanced share on 114 to
 * 148 SMs) scan in 32-column tiles, the others in 64-column ones, in the
 * same launch, and the grid's CTAs go long sequences first (split_cta): the
 * long ones sit first, last, in the middle and spread out, so the order is a
 * different permutation in each case; K 64 and 128, V 128 and the
 * masked 100, the V-first state, fp16 and bf16, a CUDA-graph replay,
 * determinism. */
START_TEST(dhu_varlen_v_split) {
    enum { N = 40, HV = 4 };
    static const int at[4][3] = {{0, 1, -1}, {38, 39, -1}, {17, 29, -1}, {5, 20, 39}};
    static const int longlen[3] = {1500, 260, 400};
    for (int v = 0; v < 4; v++) {
        static long long cu[N + 1];
        cu[0] = 0;
        for (int n = 0; n < N; n++) {
            long long len = n == 2 ? 0 : 1 + (7 * n) % 37; /* the third sequence is empty */
            for (int j = 0; j < 3; j++)
                if (at[v][j] == n) len = longlen[j];
            cu[n + 1] = cu[n] + len;
        }
        kc_seqs q = {N, cu, 0, 0, 0, v & 1, (v >> 1) & 1, 1, 0, v == 2 ? 0.05 : 0.0, 0};
        kc_dhu_case c = {1, 0, HV, v & 1 ? 64 : 128, v & 2 ? 100 : 128, v & 1, v != 1, v != 2,
                         seed + 7200 + (uint64_t)v, 0, v == 0, 0, q, v == 3, 0};
        int bv = 0;
        ck_assert_int_eq(kdart_dhu_v_tile(rt, N, HV, c.K, c.V, &bv), KDART_OK);
        ck_assert_msg(bv == 64, "dhu_varlen_v_split: kdart picks BV %d for K=%d V=%d (the split needs 64)", bv, c.K, c.V);
        check_dhu(&c);
    }
    /* more sequences than a CTA has threads (lpt_row's reach): the long ones first in index order, then the
     * short ones; 400 scans of 64 columns, so the split on up to 132 SMs */
    enum { N2 = 200, HV2 = 2 };
    static long long cu2[N2 + 1];
    cu2[0] = 0;
    for (int n = 0; n < N2; n++)
        cu2[n + 1] = cu2[n] + (n == 3 ? 600 : n == 150 ? 300 : n == 199 ? 900 : n == 77 ? 0 : 1 + (13 * n) % 29);
    kc_seqs q2 = {N2, cu2, 0, 0, 0, 0, 1, 1, 0, 0.0, 0};
    kc_dhu_case c2 = {1, 0, HV2, 64, 64, 0, 1, 1, seed + 7300, 0, 0, 0, q2, 0, 0};
    int bv2 = 0;
    ck_assert_int_eq(kdart_dhu_v_tile(rt, N2, HV2, c2.K, c2.V, &bv2), KDART_OK);
    ck_assert_msg(bv2 == 64, "dhu_varlen_v_split: kdart picks BV %d for 200 sequences (the split needs 64)", bv2);
    check_dhu(&c2);
}
END_TEST

/* Head pairs (bwd_dhu.cuh, kdart::dhu::pair_heads: packed sequences at the
 * native K tile 256, HV even, a grid of 8 waves or more on up to 192 SMs):
 * each CTA scans two heads of one sequence, the second's first chunk copied
 * during the first's last chunk; at BV 32 and 16 (one warpgroup; BV 64, two
 * warpgroups, runs without pairs: the same packed batch as its control).
 * Lengths of 1..300 with empty sequences, exact multiples of 64, both io
 * dtypes, with and without dht / dh0 and fla's index tensors. */
START_TEST(dhu_varlen_head_pairs) {
    enum { N = 24, HV = 8 };
    static const int bvs[4] = {32, 32, 16, 64};
    for (int v = 0; v < 4; v++) {
        const int bv = bvs[v], o = v & 1;
        static long long cu[N + 1];
        cu[0] = 0;
        for (int n = 0; n < N; n++) {
            long long len = n % 7 == 3 ? 0 : n % 5 == 1 ? 64 * (1 + n % 3) : 1 + (37 * n + 11 * v) % 300;
            cu[n + 1] = cu[n] + len;
        }
        kc_seqs q = {N, cu, 0, 0, 0, o, o, o, 0, o ? 0.05 : 0.0, 0};
        kc_dhu_case c = {1, 0, HV, 256, 256, o, !o, 1, seed + 7300 + (uint64_t)v, 0, 0, bv, q, 0, 0};
        ck_assert_msg(bv == 64 || N * HV * (256 / bv) >= 8 * 192, "dhu_varlen_head_pairs: BV %d grid", bv);
        check_dhu(&c);
    }
}
END_TEST

/* 1000 sequences of 1..200 tokens (K = V = 64 keeps the float64 scan short). */
START_TEST(varlen_thousand_sequences) {
    kc_seqs q = {1000, NULL, 1, 200, 1, 0, 1, 1, 0, 0.05, 0};
    kc_intra_case a = {1, 0, 2, 4, 64, 0, 1, 0, KREF_GATE_FUSED, seed + 7000, 0, 1, q, 0};
    check_intra(&a);
    q.cu32 = 1;
    kc_dhu_case b = {1, 0, 4, 64, 64, 1, 1, 1, seed + 7001, 0, 1, 0, q, 0, 0};
    check_dhu(&b);
}
END_TEST

/* 600 sequences of 1..17 tokens: nearly every chunk is one 16-row block (17: two),
 * so bwd_intra's VARLEN body skips the work of the three or two dead blocks of almost
 * every CTA (phases A-D); both K, fold_dg, emit_bf16 and the io dtype rotate, -1000
 * gates in two of the four, one zero-length sequence in every other. */
START_TEST(intra_varlen_short_sequences) {
    for (int v = 0; v < 4; v++) {
        kc_seqs q = {600, NULL, 1, 17, !(v & 1), v & 1, (v >> 1) & 1, 1, 0, v & 2 ? 0.05 : 0.0, 0};
        kc_intra_case c = {1, 0, 2, 4, v & 1 ? 64 : 128, (v >> 1) & 1, v == 1 || v == 2, v >= 2,
                           v & 1 ? KREF_GATE_STRONG : KREF_GATE_FUSED, seed + 7100 + (uint64_t)v, 0, v == 0, q, 0};
        if (c.emit_bf16) c.HV = c.H;
        check_intra(&c);
    }
}
END_TEST

/* A garbage case's verdict: the launch succeeded, wrote nothing, set bit. */
static void expect_garbage(const char *what, int gk, int ran, const kc_report *r, int bit) {
    ck_assert_int_eq(ran, 0);
    printf("%s garbage %d: status %s, device bits %d, outputs %s\n", what, gk, kdart_errname(r->status), r->devstatus,
           r->untouched ? "untouched" : "WRITTEN");
    ck_assert_msg(r->status == KDART_OK, "%s garbage %d: %s", what, gk, r->message);
    ck_assert_int_eq(r->devstatus & bit, bit);
    ck_assert_msg(r->untouched, "%s garbage %d: outputs written", what, gk);
}

/* Bad cu_seqlens that only the device can see: the launch succeeds, the
 * kernels write nothing (poison intact) and the status word says why
 * (garbage 1: decreasing, 2: cu[N] > T, 3: cu[0] != 0, 4: dh one row short). */
/* The device status bits each seqs.garbage kind sets (1, 3: order; 2: range; 4: chunks), and the status
 * word cleared of what earlier tests left. */
static const int garbage_bits[5] = {0, KDART_DEVERR_CU_ORDER, KDART_DEVERR_CU_RANGE, KDART_DEVERR_CU_ORDER,
                                    KDART_DEVERR_CHUNKS};
static void clear_device_status(void) {
    int before = -1;
    ck_assert_int_eq(kdart_device_status(rt, &before, 1), KDART_OK);
}

START_TEST(varlen_garbage_writes_nothing) {
    const int *bits = garbage_bits;
    clear_device_status();
    for (int gk = 1; gk <= 4; gk++) {
        kc_seqs q = {5, cu_c, 0, 0, 0, gk & 1, gk != 4, 2, gk, 0.0, 0};
        kc_dhu_case d = {1, 2100, 2, 128, 128, 0, 1, 1, seed + 8000 + (uint64_t)gk, 0, 0, 0, q, 0, 0};
        kc_report r;
        expect_garbage("dhu", gk, kc_run_dhu(rt, &d, &r), &r, bits[gk]);
        if (gk == 4) break; /* bwd_intra has no dh */
        kc_intra_case c = {1, 2100, 2, 4, 128, 1, 0, 0, KREF_GATE_FUSED, seed + 8100 + (uint64_t)gk, 0, 0, q, 0};
        expect_garbage("intra", gk, kc_run_intra(rt, &c, &r), &r, bits[gk]);
    }
    int after = -1;
    ck_assert_int_eq(kdart_device_status(rt, &after, 0), KDART_OK);
    ck_assert_int_eq(after, 0); /* each verdict cleared the word */
}
END_TEST

/* bwd_dav: against the exact float64 outputs (dA in fp32: products of io values summed in fp32; dv in
 * the io dtype: its one rounding, as the tolerances of bwd_intra's emit_bf16 outputs), from an Aqk with
 * garbage above its diagonal; every output past cu[N] keeps its poison; two launches bitwise equal. */
static void check_dav(const kc_dav_case *c, kc_report *out) {
    kc_report r;
    char what[256], sq[64];
    seqs_label(&c->seqs, sq, sizeof sq);
    snprintf(what, sizeof what, "dav %s B%d T%d HV%d V%d%s", c->io ? "fp16" : "bf16", c->B, c->T, c->HV, c->V, sq);
    ck_assert_msg(kc_run_dav(rt, c, &r) == 0, "%s: harness: %s", what, r.message);
    ck_assert_msg(r.status == KDART_OK, "%s: %s", what, r.message);
    print_report(what, &r);
    ck_assert_msg(r.untouched, "%s: an element past cu[N] was written", what);
    const double tol[2] = {1e-5, c->io ? 5e-4 : 4e-3};
    for (int i = 0; i < r.nout; i++)
        ck_assert_msg(r.rel_rms[i] <= tol[i], "%s: %s rel RMS %.3e > %.0e", what, r.names[i], r.rel_rms[i], tol[i]);
    ck_assert_msg(r.deterministic, "%s: two launches differ", what);
    if (c->graph) ck_assert_msg(r.graph_equal == 1, "%s: graph replay differs", what);
    if (out) *out = r;
}

/* fla's chunk_kda_bwd_dAv as a kernel of its own (kdart.fla's calls that bwd_dhu and wy_dqkg cannot take
 * fused): every specialization (V 128 native; the tails at V = 100, 72, 101 in turn, each copy granule;
 * varlen on drawn packed sequences or at a fixed T = 200), the packed documents of chunk_kda's backward
 * with one-token and partial-chunk ones (V up to 512, int32 and int64 cu_seqlens, with and without fla's
 * chunk_indices, HV 2 and 32), fixed lengths with a partial last chunk and a wide grid; one
 * case run twice from fresh launches (bitwise equal digests); broken arguments (refused, nothing written)
 * and garbage cu_seqlens (nothing written, the device status says why). */
START_TEST(dav_standalone) {
    static const int tv[3] = {100, 72, 101};
    for (int s = 0; s < kdart_spec_count("bwd_dav"); s++) {
        char spec[128];
        kdart_spec_at("bwd_dav", s, spec, sizeof spec);
        const int tail = kc_spec_tail(spec);
        kc_dav_case c = {2, 256, 3, tail ? tv[s % 3] : 128, strstr(spec, "io=fp16") != NULL,
                         seed + 70000 + (uint64_t)s, 0, s == 0, {0}, 0};
        if (strstr(spec, "varlen=1")) {
            if (((s >> 2) ^ s) & 1) c.T = 200;
            else every_spec_seqs(&c.seqs, &c.B, &c.T, s);
        }
        check_dav(&c, NULL);
    }
    static const long long cu[] = {0, 1, 65, 200, 1000, 1001, 2100};
    static const int vs[4] = {128, 256, 100, 512};
    for (int v = 0; v < 6; v++) {
        kc_seqs q = {6, cu, 0, 0, 0, v & 1, (v >> 1) & 1, 0, 0, 0.0, 0};
        kc_dav_case c = {1, 2100, v & 2 ? 2 : 32, vs[v % 4], (v >> 2) & 1, seed + 71000 + (uint64_t)v, 0, v == 0, q, 0};
        check_dav(&c, NULL);
    }
    kc_dav_case f = {2, 300, 4, 64, 0, seed + 71100, 0, 0, {0}, 0};
    check_dav(&f, NULL); /* fixed length, a partial last chunk */
    kc_dav_case w = {2, 1024, 16, 256, 1, seed + 71101, 0, 0, {0}, 0};
    check_dav(&w, NULL); /* a wide grid: K = V = 256's dAv at fixed length */
    kc_report r1, r2;
    kc_dav_case d = {1, 2100, 4, 192, 0, seed + 71200, 0, 0, {6, cu, 0, 0, 0, 0, 1, 0, 0, 0.0, 0}, 0};
    check_dav(&d, &r1);
    check_dav(&d, &r2);
    for (int i = 0; i < r1.nout; i++)
        ck_assert_msg(r1.digest[i] == r2.digest[i], "dav: %s differs between two runs of one case", r1.names[i]);
    static const int refused[4] = {0, KDART_EALIGN, KDART_ESHAPE, KDART_EDTYPE};
    for (int bad = 1; bad <= 3; bad++) {
        kc_dav_case b = {1, 128, 2, 128, bad & 1, seed + 71300 + (uint64_t)bad, 0, 0, {0}, bad};
        kc_report r;
        ck_assert_msg(kc_run_dav(rt, &b, &r) == 0, "dav bad %d: harness: %s", bad, r.message);
        printf("dav bad argument %d: %s (%s), outputs %s\n", bad, kdart_errname(r.status), r.message,
               r.untouched ? "untouched" : "WRITTEN");
        ck_assert_int_eq(r.status, refused[bad]);
        ck_assert_msg(r.untouched, "dav bad argument %d: outputs written", bad);
    }
    static const int bits[4] = {0, KDART_DEVERR_CU_ORDER, KDART_DEVERR_CU_RANGE, KDART_DEVERR_CU_ORDER};
    int before = -1;
    ck_assert_int_eq(kdart_device_status(rt, &before, 1), KDART_OK); /* clear what earlier tests left */
    for (int gk = 1; gk <= 3; gk++) {
        kc_seqs q = {5, cu_c, 0, 0, 0, gk & 1, 1, 0, gk, 0.0, 0};
        kc_dav_case c = {1, 2100, 2, 128, 0, seed + 71400 + (uint64_t)gk, 0, 0, q, 0};
        kc_report r;
        expect_garbage("dav", gk, kc_run_dav(rt, &c, &r), &r, bits[gk]);
    }
}
END_TEST

/* fwd_h: against the float64 scan with fla's roundings (rel_rms) and the exact one (rel_rms_alt, a
 * looser bound: the io roundings of the state and of v_new compound over the chunks). */
static void check_fwdh(const kc_fwdh_case *c, kc_report *out) {
    kc_report r;
    char what[256], sq[64];
    seqs_label(&c->seqs, sq, sizeof sq);
    snprintf(what, sizeof what, "fwdh %s%s%s%s%s%s B%d T%d H%d HV%d K%d V%d BV%d%s", c->io ? "fp16" : "bf16",
             c->uv ? (c->uv == 2 ? " uv beta-f32" : " uv") : "",
             c->state_v_first ? " v-first" : "", c->with_h0 ? " h0" : "", c->with_ht ? " ht" : "",
             c->with_vnew ? "" : " no-v_new", c->B, c->T, c->H, c->HV, c->K, c->V, c->v_tile, sq);
    ck_assert_msg(kc_run_fwdh(rt, c, &r) == 0, "%s: harness: %s", what, r.message);
    ck_assert_msg(r.status == KDART_OK, "%s: %s", what, r.message);
    print_report(what, &r);
    ck_assert_msg(r.untouched, "%s: an element past cu[N] or a spare h row was written", what);
    const double tol = c->io ? 3e-3 : 1e-2, tol_exact = c->io ? 2e-2 : 6e-2;
    for (int i = 0; i < r.nout; i++) {
        ck_assert_msg(r.rel_rms[i] <= tol, "%s: %s rel RMS %.3e > %.0e", what, r.names[i], r.rel_rms[i], tol);
        ck_assert_msg(r.rel_rms_alt[i] <= tol_exact, "%s: %s rel RMS (exact) %.3e > %.0e", what, r.names[i],
                      r.rel_rms_alt[i], tol_exact);
    }
    ck_assert_msg(r.deterministic, "%s: two launches differ", what);
    if (c->graph) ck_assert_msg(r.graph_equal == 1, "%s: graph replay differs", what);
    if (out) *out = r;
}

/* Every fwd_h specialization (the spec's BV passed as v_tile): native dims, or the tails at K = tile - 4,
 * V = 100 and K = tile - 8 with V = 72 and V = 101 in turn (each copy granule); varlen on drawn packed
 * sequences or (every other) a fixed T = 200; the V-first state, h0, ht, v_new and grouped heads (HV = 2H)
 * in turn. */
START_TEST(fwdh_every_spec) {
    const int n = kdart_spec_count("fwd_h");
    ck_assert_int_gt(n, 0);
    for (int s = 0; s < n; s++) {
        char spec[128];
        kdart_spec_at("fwd_h", s, spec, sizeof spec);
        int K = kc_spec_k(spec), V = 128;
        if (kc_spec_tail(spec)) switch ((s >> 1) % 3) {
            case 0: K -= 4, V = 100; break;
            case 1: K -= 8, V = 72; break;
            default: V = 101; break;
            }
        kc_fwdh_case c = {2, 256, s & 4 ? 2 : 4, 4, K, V, strstr(spec, "io=fp16") != NULL, KREF_GATE_STRONG,
                          (s >> 1) & 1, (s >> 2) & 1, (s >> 3) & 1, s % 5 != 0, kc_spec_bv(spec),
                          seed + 80000 + (uint64_t)s, 0, s == 0, {0}, 0};
        if (strstr(spec, "varlen=1")) {
            if ((s >> 2) & 1) c.T = 200;
            else every_spec_seqs(&c.seqs, &c.B, &c.T, s);
        }
        if (strstr(spec, "uv=1")) c.uv = 1 + ((s >> 4) & 1); /* beta in the io dtype or float32 */
        check_fwdh(&c, NULL);
    }
}
END_TEST

/* fwd_h as chunk_kda's backward hands it over: packed documents with one-token and partial-chunk ones,
 * int32 and int64 cu_seqlens, with and without fla's index tensors, gates of -1000 (strong decays), h0
 * and the final state, both state layouts, head dims 128, 64, 100, 256 and V up to 512, equal and grouped
 * heads, kdart's V tile choice; a long fixed-length scan of the production shape; one case run twice
 * from fresh launches (bitwise equal digests); garbage cu_seqlens (nothing written, the device status
 * says why). */
START_TEST(fwdh_production) {
    static const long long cu[] = {0, 1, 65, 200, 1000, 1001, 2100};
    static const int ks[4] = {128, 64, 100, 256}, vs[4] = {128, 256, 100, 512};
    for (int v = 0; v < 8; v++) {
        kc_seqs q = {6, cu, 0, 0, 0, v & 1, (v >> 1) & 1, v == 2 ? 3 : 0, 0, v == 3 || v == 5 ? 0.05 : 0.0, 0};
        kc_fwdh_case c = {1, 2100, v & 2 ? 2 : 4, 4, ks[v % 4], vs[v % 4], (v >> 2) & 1, KREF_GATE_STRONG,
                          (v >> 2) & 1, 1, 1, 1, 0, seed + 81000 + (uint64_t)v, 0, v == 0, q, 0};
        check_fwdh(&c, NULL);
    }
    kc_fwdh_case f = {2, 4096, 16, 16, 128, 128, 0, KREF_GATE_FUSED, 0, 1, 1, 1, 0, seed + 81100, 0, 0, {0}, 0};
    check_fwdh(&f, NULL); /* the production configuration at fixed length: 64 chunks a scan */
    kc_fwdh_case p = {1, 333, 1, 2, 128, 64, 1, KREF_GATE_STRONG, 1, 0, 1, 1, 32, seed + 81101, 0, 0, {0}, 0};
    check_fwdh(&p, NULL); /* fixed length with a partial last chunk (the varlen body without cu_seqlens) */
    /* u made in the scan from v, A and beta (kdart_kda_chunk_bwd's form): the packed documents above at
     * each head dim, beta in the io dtype and in float32; the production shape at fixed length */
    for (int v = 0; v < 4; v++) {
        kc_seqs q = {6, cu, 0, 0, 0, v & 1, 1, 0, 0, 0.0, 0};
        kc_fwdh_case c = {1, 2100, v & 2 ? 2 : 4, 4, ks[v], vs[v], v == 1, KREF_GATE_STRONG, v == 2, 1, 1, 1, 0,
                          seed + 81500 + (uint64_t)v, 0, 0, q, 1 + (v & 1)};
        check_fwdh(&c, NULL);
    }
    kc_fwdh_case fu = {2, 4096, 16, 16, 128, 128, 0, KREF_GATE_FUSED, 0, 1, 1, 1, 0, seed + 81600, 0, 0, {0}, 1};
    check_fwdh(&fu, NULL);
    kc_report r1, r2;
    kc_fwdh_case d = {1, 2100, 4, 4, 128, 192, 0, KREF_GATE_STRONG, 0, 1, 1, 1, 0, seed + 81200, 0, 0,
                      {6, cu, 0, 0, 0, 0, 1, 0, 0, 0.0, 0}, 0};
    check_fwdh(&d, &r1);
    check_fwdh(&d, &r2);
    for (int i = 0; i < r1.nout; i++)
        ck_assert_msg(r1.digest[i] == r2.digest[i], "fwdh: %s differs between two runs of one case", r1.names[i]);
    /* more packed documents than a CTA has threads (the grid rows keep index order there), one long
     * document late among short ones */
    static long long cu_many[301];
    for (int i = 0; i < 300; i++) cu_many[i + 1] = cu_many[i] + (i == 250 ? 1500 : 1 + (i * 37) % 97);
    kc_fwdh_case m = {1, (int)cu_many[300], 4, 4, 128, 128, 0, KREF_GATE_STRONG, 0, 1, 1, 1, 0, seed + 81300, 0, 0,
                      {300, cu_many, 0, 0, 0, 0, 1, 0, 0, 0.0, 0}, 0};
    check_fwdh(&m, NULL);
    clear_device_status();
    for (int gk = 1; gk <= 4; gk++) { /* (4: h one row short of the chunk count) */
        kc_seqs q = {5, cu_c, 0, 0, 0, gk & 1, gk != 4, 0, gk, 0.0, 0};
        kc_fwdh_case c = {1, 2100, 2, 2, 128, 128, 0, KREF_GATE_STRONG, 0, 1, 1, 1, 0, seed + 81400 + (uint64_t)gk,
                          0, 0, q, 0};
        kc_report r;
        expect_garbage("fwdh", gk, kc_run_fwdh(rt, &c, &r), &r, garbage_bits[gk]);
    }
}
END_TEST

/* ---------------------------------------------------- a second context
 *
 * kdart binds each cubin per CUDA context and launches in the calling
 * thread's current one.  A second, non-primary context on device 0
 * (cuCtxCreate) stands in for a second device on a one-GPU machine: the
 * same cases launched while it is current get functions of their own
 * (bound once per context), give outputs bitwise equal to the primary
 * context's, and a device-side error (garbage cu_seqlens) in one context
 * sets only that context's status word.  The test uses a handle of its
 * own, closed before the context is destroyed: kdart keys its per-context
 * state by the CUcontext handle, which the driver may hand to a later
 * context. */

static const char *const ctx_specs[4][2] = {
    {"bwd_intra", "io=bf16,fold_dg=1,emit_bf16=0,K=128,varlen=1"},
    {"bwd_intra", "io=fp16,fold_dg=0,emit_bf16=0,K=64,varlen=0"},
    {"bwd_dhu", "io=bf16,K=128,BV=32,varlen=1"},
    {"bwd_dhu", "io=fp16,K=64,BV=64,varlen=0"},
};

/* Both kernels, variable and fixed length (the specs above), on h in the
 * current context: each checked against the reference, its output digests
 * in dig[case], the function kdart launched in fn[case]. */
static void ctx_cases(kdart_rt *h, unsigned long long dig[4][4], void *fn[4]) {
    const kc_seqs q = {3, cu_b, 0, 0, 0, 0, 1, 2, 0, 0.0, 0};
    const kc_intra_case a = {1, 1000, 2, 4, 128, 0, 1, 0, KREF_GATE_FUSED, seed + 9000, 0, 0, q, 0};
    const kc_intra_case b = {2, 512, 2, 4, 64, 1, 0, 0, KREF_GATE_STRONG, seed + 9001, 0, 0, {0}, 0};
    const kc_dhu_case c = {1, 1000, 2, 128, 128, 0, 1, 1, seed + 9002, 0, 0, 32, q, 0, 0};
    const kc_dhu_case d = {2, 1024, 2, 64, 64, 1, 1, 1, seed + 9003, 0, 0, 64, {0}, 0, 0};
    kc_report r[4];
    check_intra_on(h, &a, &r[0]);
    check_intra_on(h, &b, &r[1]);
    check_dhu_on(h, &c, &r[2]);
    check_dhu_on(h, &d, &r[3]);
    for (int i = 0; i < 4; i++) {
        memcpy(dig[i], r[i].digest, sizeof r[i].digest);
        kdart_launch_info li;
        ck_assert_int_eq(kdart_get_function(h, ctx_specs[i][0], ctx_specs[i][1], &li), KDART_OK);
        fn[i] = li.function;
    }
}

static void expect_same(const char *when, unsigned long long want[4][4], unsigned long long got[4][4]) {
    for (int i = 0; i < 4; i++)
        for (int o = 0; o < 4; o++)
            ck_assert_msg(got[i][o] == want[i][o], "%s: %s %s output %d differs from the primary context's", when,
                          ctx_specs[i][0], ctx_specs[i][1], o);
}

START_TEST(second_context) {
    kdart_rt *h;
    ck_assert_int_eq(kdart_open(&h, NULL), KDART_OK);
    unsigned long long d0[4][4], d1[4][4], again[4][4];
    void *f0[4], *f1[4], *f[4];
    ck_assert_int_eq(kc_ctx_use(NULL), 0);
    ctx_cases(h, d0, f0);
    void *ctx2;
    char why[256];
    ck_assert_msg(kc_ctx_create(&ctx2, why, sizeof why) == 0, "%s", why);
    ctx_cases(h, d1, f1);
    expect_same("second context", d0, d1);
    for (int i = 0; i < 4; i++)
        ck_assert_msg(f1[i] && f1[i] != f0[i], "%s %s: the second context launched the primary context's function",
                      ctx_specs[i][0], ctx_specs[i][1]);

    /* An error in the primary context, left in its word (keep_status), then
     * one of another kind in the second: each word holds its own bits. */
    const kc_seqs past_t = {5, cu_c, 0, 0, 0, 0, 1, 2, 2, 0.0, 1};   /* cu[N] > T */
    const kc_seqs decreasing = {5, cu_c, 0, 0, 0, 1, 1, 2, 1, 0.0, 0}; /* cu decreasing */
    int bits = -1;
    kc_report r;
    ck_assert_int_eq(kc_ctx_use(NULL), 0);
    ck_assert_int_eq(kdart_device_status(h, &bits, 1), KDART_OK);
    ck_assert_int_eq(bits, 0);
    const kc_intra_case gi = {1, 2100, 2, 4, 128, 1, 0, 0, KREF_GATE_FUSED, seed + 9100, 0, 0, past_t, 0};
    expect_garbage("intra, primary context,", 2, kc_run_intra(h, &gi, &r), &r, KDART_DEVERR_CU_RANGE);
    const int primary_bits = r.devstatus;
    ck_assert_int_eq(primary_bits & KDART_DEVERR_CU_ORDER, 0);
    ck_assert_int_eq(kc_ctx_use(ctx2), 0);
    const kc_dhu_case gd = {1, 2100, 2, 128, 128, 0, 1, 1, seed + 9101, 0, 0, 0, decreasing, 0, 0};
    expect_garbage("dhu, second context,", 1, kc_run_dhu(h, &gd, &r), &r, KDART_DEVERR_CU_ORDER);
    const int second_bits = r.devstatus;
    ck_assert_msg((second_bits & KDART_DEVERR_CU_RANGE) == 0,
                  "the primary context's error shows in the second context's status (%d)", second_bits);
    ck_assert_int_eq(kdart_device_status(h, &bits, 0), KDART_OK);
    ck_assert_int_eq(bits, 0); /* the verdict cleared it */
    ck_assert_int_eq(kc_ctx_use(NULL), 0);
    ck_assert_int_eq(kdart_device_status(h, &bits, 1), KDART_OK);
    ck_assert_msg(bits == primary_bits, "primary context status %d after the second's error, want its own %d", bits,
                  primary_bits);

    /* After the errors, interleaved: the same outputs, the same functions
     * (each context bound once). */
    ctx_cases(h, again, f);
    expect_same("primary context after the errors", d0, again);
    for (int i = 0; i < 4; i++) ck_assert_ptr_eq(f[i], f0[i]);
    ck_assert_int_eq(kc_ctx_use(ctx2), 0);
    ctx_cases(h, again, f);
    expect_same("second context after the errors", d0, again);
    for (int i = 0; i < 4; i++) ck_assert_ptr_eq(f[i], f1[i]);
    ck_assert_int_eq(kc_ctx_use(NULL), 0);
    kdart_close(h);
    kc_ctx_destroy(ctx2);
    printf("second context on device 0: 4 cases (both kernels, fixed and varlen) bitwise equal to the primary "
           "context's, own functions in each context (bound once); device status: primary %d, second %d, "
           "neither saw the other's\n",
           primary_bits, second_bits);
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

/* name is one of the comma-separated entries of list */
static int name_listed(const char *list, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

static void check_post(const kc_post_case *c) {
    kc_report r;
    char what[256];
    static const char *const gates[3] = {"no gate", "gate", "safe gate"};
    snprintf(what, sizeof what, "post %s%s %s%s%s%s%s%s B%d T%d H%d HV%d K%d", c->io ? "fp16" : "bf16",
             c->l2norm ? " l2norm" : "", gates[c->gate], c->gate && c->with_bias ? "+bias" : "",
             c->g_f32 ? " g=f32" : "", c->sigmoid ? " sigmoid" : "", c->beta_f32 ? " beta=f32" : "",
             c->neg ? " neg" : "", c->B, c->T, c->H, c->HV, c->K);
    ck_assert_msg(kc_run_post(rt, c, &r) == 0, "%s: harness: %s", what, r.message);
    ck_assert_msg(r.status == KDART_OK, "%s: %s", what, r.message);
    print_report(what, &r);
    for (int i = 0; i < r.nout; i++) {
        /* fp32 outputs (dA_log and ddt_bias: sums over every token of fp32 partials whose signs differ, so their
         * relative error grows with the cancellation: measured up to 1.04e-5 at T 300), and the io ones: one
         * rounding */
        const double tol = i >= 4 ? 5e-5 : (i == 2 && c->g_f32) || (i == 3 && c->beta_f32) ? 1e-5
                           : c->io ? 1e-3 : 8e-3;
        ck_assert_msg(r.rel_rms[i] <= tol, "%s: %s rel RMS %.3e > %.0e", what, r.names[i], r.rel_rms[i], tol);
    }
    ck_assert_msg(r.deterministic, "%s: two launches differ", what);
    if (c->graph) ck_assert_msg(r.graph_equal == 1, "%s: graph replay differs", what);
}

/* Every bwd_post specialization (the tail ones at K = 63, 100 - 1 and 255 in turn), with the l2norm, both
 * gate forms with and without dt_bias, the sigmoid with and without allow_neg_eigval in turn; grouped heads
 * (HV = 2H), T not a multiple of 64; then the production shape's grid (many CTAs a head: the last-CTA
 * reduction over 256 partial rows) and a head dim of 256, and the parts one at a time (no l2norm, no gate,
 * no sigmoid). */
START_TEST(post_every_spec) {
    static const int tk[3] = {63, 99, 255};
    for (int s = 0; s < kdart_spec_count("bwd_post"); s++) {
        char spec[128];
        kdart_spec_at("bwd_post", s, spec, sizeof spec);
        kc_post_case c = {2, 300, 2, 4, kc_spec_tail(spec) ? tk[s % 3] : 128, strstr(spec, "io=fp16") != NULL, 1,
                          1 + ((s >> 1) & 1), s % 3 != 0, strstr(spec, "g_io=0") != NULL, 1,
                          strstr(spec, "beta_io=0") != NULL, (s >> 2) & 1, seed + 90000 + (uint64_t)s, 0, s == 0};
        check_post(&c);
    }
    kc_post_case big = {2, 8192, 8, 8, 128, 0, 1, 2, 1, 0, 1, 0, 0, seed + 90100, 0, 0};
    check_post(&big); /* 16384 tokens: 256 CTAs of 64 tokens a head */
    kc_post_case wide = {1, 1000, 2, 2, 256, 1, 1, 1, 1, 1, 1, 1, 1, seed + 90101, 0, 0};
    check_post(&wide);
    for (int part = 0; part < 3; part++) {
        kc_post_case c = {1, 257, 2, 6, 64, 0, part != 0, part != 1 ? 2 : 0, 1, 0, part != 2, 0, 0,
                          seed + 90200 + (uint64_t)part, 0, 0};
        check_post(&c);
    }
}
END_TEST

/* The whole backward (kdart_kda_chunk_bwd) in the production configuration, against the same call on a
 * second handle opened with KDART_FUSE_POST=0: the switch that keeps bwd_post a launch of its own in a build
 * that can run its work inside wy_dqkg's launch (and KDART_FUSE_U=0: u made in the recompute).  There the two
 * may differ only in dA_log and ddt_bias (sums over every token in another order, within 1e-5) and by one
 * rounding in a few elements of dq and dk; a build without the switch gives bitwise equal results.
 * Also: every gradient of a live token written, two calls bitwise equal.  Production
 * flags, both gate forms, allow_neg_eigval, fp16, T not a multiple of 64, packed sequences (K 64 and 128),
 * grouped value heads (never fused), a head dim below its tile, the K tile 256, and two rows of a batch. */
static void check_chunk(kdart_rt *rt2, const kc_chunk_case *c, double tol_all) {
    kc_report r;
    char what[256];
    snprintf(what, sizeof what, "chunk_bwd %s %s%s B%d T%d H%d HV%d K%d V%d%s", c->io ? "fp16" : "bf16",
             c->plain ? "plain" : c->safe ? "safe gate" : "gate", c->neg ? " neg" : "", c->B, c->T, c->H, c->HV, c->K, c->V,
             c->seqs.nseq ? " packed" : "");
    ck_assert_msg(kc_run_chunk_bwd(rt, rt2, c, &r) == 0, "%s: harness: %s", what, r.message);
    ck_assert_msg(r.status == KDART_OK, "%s: %s", what, r.message);
    printf("%-44s", what);
    for (int i = 0; i < r.nout; i++) printf(" %s %.2e", r.names[i], r.rel_rms[i]);
    printf(" dq,dk differ %.1e,%.1e det=%s\n", r.frac_diff[0], r.frac_diff[1], r.deterministic ? "yes" : "NO");
    for (int i = 0; i < r.nout; i++) {
        if (i < 2 && tol_all == 0) {
            /* dq and dk: the l2norm's row sums in another order (the launch's last pass) round to the io
             * dtype on the other side of its boundary now and then: each element within one rounding of
             * the other handle's, few of them moved.  (Not a relative RMS: one flip of an element ten
             * times the RMS moves a small case's by 2.6e-4.) */
            ck_assert_msg(r.n_far[i] == 0, "%s: %zu elements of %s differ between the handles by more than one "
                          "rounding", what, r.n_far[i], r.names[i]);
            ck_assert_msg(r.frac_diff[i] <= 1e-2, "%s: %.2f%% of %s differs between the handles (> 1%%)", what,
                          100 * r.frac_diff[i], r.names[i]);
            continue;
        }
        /* dA_log and ddt_bias: summed from a partial row per chunk (wy_dqkg's launch) or per block of
         * tokens (bwd_post's) */
        const double tol = tol_all > 0 ? tol_all : i == 5 || i == 6 ? 1e-5 : 0.0;
        ck_assert_msg(r.rel_rms[i] <= tol, "%s: %s differs between the handles: rel RMS %.3e > %.0e", what,
                      r.names[i], r.rel_rms[i], tol);
    }
    ck_assert_msg(r.untouched, "%s: an output element of a live token was not written", what);
    ck_assert_msg(r.deterministic, "%s: two calls differ", what);
}

/* the second handle of check_chunk: opened with var=0 and var2=0 (KDART_FUSE_POST, KDART_FUSE_DAV,
 * KDART_FUSE_U; var2 may be NULL) */
static kdart_rt *open_unfused(const char *var, const char *var2) {
    kdart_rt *rt2 = NULL;
    setenv(var, "0", 1);
    if (var2) setenv(var2, "0", 1);
    const int orc = kdart_open(&rt2, NULL);
    unsetenv(var);
    if (var2) unsetenv(var2);
    ck_assert_int_eq(orc, KDART_OK);
    return rt2;
}

START_TEST(chunk_bwd_whole) {
    /* the second handle makes u in the recompute too: fwd_h's u must be its bits */
    kdart_rt *rt2 = open_unfused("KDART_FUSE_POST", "KDART_FUSE_U"), *rt3 = open_unfused("KDART_FUSE_DAV", NULL);
    static const long long cu[5] = {0, 1, 65, 200, 300};
    static const long long cu7[8] = {0, 94, 257, 283, 533, 752, 940, 1024};
    /* 33 documents: bwd_dhu's grid of 132 scans of 64 columns, where the V tile 64 wins and the V split
     * runs on 132 SMs (8 long documents of 80 to 300 tokens, a quarter past the balanced share of 62, among
     * short ones of 1 to 70) */
    static const long long cu33[34] = {0,    1,    301,  306,  370,  387,  517,  519,  559,  759,  768,  831,
                                       832,  922,  955,  1025, 1037, 1187, 1190, 1251, 1259, 1359, 1384, 1432,
                                       1439, 1519, 1549, 1569, 1635, 1639, 1689, 1700, 1762, 2048};
    const kc_chunk_case cases[] = {
        {2, 128, 2, 2, 64, 64, 0, 1, 0, seed + 95000, {0}, 0},
        {1, 200, 2, 2, 128, 128, 0, 0, 1, seed + 95001, {0}, 0},
        {1, 128, 2, 2, 128, 64, 1, 1, 0, seed + 95002, {0}, 0},
        {1, 300, 2, 2, 64, 64, 0, 1, 0, seed + 95003, {4, cu, 0, 0, 0, 0, 1, 0, 0, 0, 0}, 0},
        {1, 128, 1, 2, 64, 64, 0, 1, 0, seed + 95004, {0}, 0},
        {1, 130, 2, 2, 100, 64, 0, 1, 1, seed + 95005, {0}, 0},
        {1, 128, 2, 2, 256, 128, 0, 1, 0, seed + 95006, {0}, 0},
        {1, 300, 2, 2, 128, 64, 0, 0, 1, seed + 95007, {4, cu, 0, 0, 0, 0, 1, 0, 0, 0, 0}, 0},
        {2, 256, 2, 2, 128, 128, 1, 1, 0, seed + 95008, {0}, 0},
        /* the production layout: K = V = 128, seven documents of a packed row, the gate in the kernel */
        {1, 1024, 2, 2, 128, 128, 0, 1, 0, seed + 95009, {7, cu7, 0, 0, 0, 0, 1, 0, 0, 0, 0}, 0},
        {1, 2048, 2, 2, 128, 128, 0, 1, 0, seed + 95010, {33, cu33, 0, 0, 0, 0, 1, 0, 0, 0, 0}, 0},
        /* cuDNN frontend's configuration (no epilogue in the kernel, the fp32 log-space gate): the last
         * step's part in the fused launch writes dg in fp32; fixed length and packed, HV == H and GVA */
        {2, 256, 2, 2, 128, 128, 0, 0, 0, seed + 95011, {0}, 1},
        {1, 1024, 2, 2, 128, 128, 0, 0, 0, seed + 95012, {7, cu7, 0, 0, 0, 0, 1, 0, 0, 0, 0}, 1},
        {1, 1024, 1, 2, 128, 128, 1, 0, 0, seed + 95013, {7, cu7, 0, 0, 0, 0, 1, 0, 0, 0, 0}, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_chunk(rt2, &cases[i], 0.0);
    /* fla's dAv inside bwd_dhu against bwd_dav's launch (KDART_FUSE_DAV=0), on the 33 documents: the V
     * split's mixed form on 132 SMs (the short documents scanned 64 columns wide with the dv fused, the long
     * ones 32 wide from bwd_dav's long_only rows).  The fused dv is rounded once, bwd_dav's twice: within
     * 1e-2, where a row read from the wrong place would be off by far more. */
    check_chunk(rt3, &cases[sizeof cases / sizeof cases[0] - 1], 1e-2);
    kdart_close(rt2);
    kdart_close(rt3);
}
END_TEST

/* Small shapes for compute-sanitizer (KDART_GPU_SMALL=1, or a list of
 * kernels: KDART_GPU_SMALL=wy_dqkg): every specialization once, B=1, two
 * chunks. */
static int small_wants(const char *kernel) {
    const char *small = getenv("KDART_GPU_SMALL");
    return small && (strcmp(small, "1") == 0 || name_listed(small, kernel));
}

START_TEST(small_for_sanitizers) {
    for (int s = 0; small_wants("bwd_intra") && s < kdart_spec_count("bwd_intra"); s++) {
        char spec[128];
        kdart_spec_at("bwd_intra", s, spec, sizeof spec);
        if (!kc_intra_spec_launchable(spec)) continue;
        kc_intra_case c = {1, 128, 1, 2, kc_intra_spec_k(spec), strstr(spec, "io=fp16") != NULL,
                           strstr(spec, "fold_dg=1") != NULL, strstr(spec, "emit_bf16=1") != NULL, KREF_GATE_FUSED,
                           seed + (uint64_t)s, 0, 0, {0}, kc_spec_beta_f32(spec)};
        if (c.emit_bf16 || !(s & 1)) c.H = c.HV; /* every other spec with H == HV = 2 */
        if (strstr(spec, "varlen=1")) small_seqs(&c.seqs, &c.B, &c.T, kc_spec_tail(spec) ? s >> 1 : s);
        check_intra(&c); /* tail specs: packed and fixed length (T = 65) in turn */
    }
    for (int s = 0; small_wants("bwd_dhu") && s < kdart_spec_count("bwd_dhu"); s++) {
        char spec[128];
        kdart_spec_at("bwd_dhu", s, spec, sizeof spec);
        int K, V = 128, svf;
        kc_dhu_spec_dims(spec, s >> 1, &K, &V, &svf);
        kc_dhu_case c = {1, 128, 2, K, V, strstr(spec, "io=fp16") != NULL, s & 1, !(s & 1), seed + 50 + (uint64_t)s,
                         0, 0, kc_spec_bv(spec), {0}, svf, 0};
        if (strstr(spec, "varlen=1")) small_seqs(&c.seqs, &c.B, &c.T, s);
        check_dhu(&c);
        /* the fused dv (Aqk) where it runs: BV 64 at the K tiles 64 and 128, native dims */
        if (strstr(spec, "BV=64") && (strstr(spec, "K=64,") || strstr(spec, "K=128,")) && kc_spec_tail(spec) != 1) {
            c.fused = 1, c.K = strstr(spec, "K=64,") ? 64 : 128, c.V = 128;
            check_dhu(&c);
        }
    }
    for (int s = 0; small_wants("wy_dqkg") && s < kdart_spec_count("wy_dqkg"); s++) {
        char spec[128];
        kdart_spec_at("wy_dqkg", s, spec, sizeof spec);
        kc_wy_case c = {1, 128, 1, 2, kc_spec_k(spec), 64, strstr(spec, "io=fp16") != NULL, kc_spec_beta_f32(spec),
                        strstr(spec, "svf=1") != NULL, KREF_GATE_FUSED, seed + 90 + (uint64_t)s, 0, 0, {0},
                        strstr(spec, "dAqk=1") != NULL, strstr(spec, "intra=1") != NULL};
        if (!kc_wy_spec_launchable(spec)) continue; /* a trap stub, or post=1 (the whole call's) */
        if (kc_spec_tail(spec)) { /* the head dim or V below its tile, in turn */
            if (s & 2) c.V = 60;
            else c.K -= 4;
        }
        if (strstr(spec, "varlen=1")) small_seqs(&c.seqs, &c.B, &c.T, s >> 1);
        check_wy(&c);
    }
    for (int s = 0; small_wants("recompute_wu") && s < kdart_spec_count("recompute_wu"); s++) {
        char spec[128];
        kdart_spec_at("recompute_wu", s, spec, sizeof spec);
        const int tail = kc_spec_tail(spec), gate = strstr(spec, "gate=1") != NULL;
        kc_rwu_case c = {1, 128, 1, 2, tail ? 60 : 64, tail ? 100 : 64, strstr(spec, "io=fp16") != NULL,
                         kc_spec_beta_f32(spec), gate ? 1 + (s & 1) : 0, KREF_GATE_FUSED, (s >> 1) & 1, 1, -5.0, 1,
                         seed + 95 + (uint64_t)s, 0, 0, {0}};
        if (strstr(spec, "varlen=1")) small_seqs(&c.seqs, &c.B, &c.T, s >> 1);
        check_rwu(&c);
    }
    for (int s = 0; small_wants("bwd_dav") && s < kdart_spec_count("bwd_dav"); s++) {
        char spec[128];
        kdart_spec_at("bwd_dav", s, spec, sizeof spec);
        kc_dav_case c = {1, 128, 2, kc_spec_tail(spec) ? (s & 4 ? 101 : 100) : 128, strstr(spec, "io=fp16") != NULL,
                         seed + 99 + (uint64_t)s, 0, 0, {0}, 0};
        if (strstr(spec, "varlen=1")) small_seqs(&c.seqs, &c.B, &c.T, s >> 1);
        check_dav(&c, NULL); /* V 128: two V blocks through the copy pipeline */
    }
    for (int s = 0; small_wants("fwd_h") && s < kdart_spec_count("fwd_h"); s++) {
        char spec[128];
        kdart_spec_at("fwd_h", s, spec, sizeof spec);
        const int tail = kc_spec_tail(spec);
        kc_fwdh_case c = {1, 192, s & 2 ? 1 : 2, 2, kc_spec_k(spec) - (tail && (s & 4) ? 4 : 0),
                          tail && !(s & 4) ? 100 : 64, strstr(spec, "io=fp16") != NULL, KREF_GATE_FUSED, (s >> 1) & 1,
                          1, 1, 1, kc_spec_bv(spec), seed + 97 + (uint64_t)s, 0, 0, {0}, strstr(spec, "uv=1") != NULL};
        if (strstr(spec, "varlen=1")) small_seqs(&c.seqs, &c.B, &c.T, s >> 1);
        check_fwdh(&c, NULL); /* three chunks: every stage of the copy pipeline */
    }
    for (int s = 0; small_wants("bwd_post") && s < kdart_spec_count("bwd_post"); s++) {
        char spec[128];
        kdart_spec_at("bwd_post", s, spec, sizeof spec);
        kc_post_case c = {1, 100, 2, 4, kc_spec_tail(spec) ? 63 : 64, strstr(spec, "io=fp16") != NULL, 1,
                          1 + (s & 1), 1, strstr(spec, "g_io=0") != NULL, 1, strstr(spec, "beta_io=0") != NULL, 0,
                          seed + 98 + (uint64_t)s, 0, 0};
        check_post(&c);
    }
    if (small_wants("chunk_bwd")) {
        kdart_rt *rt2 = open_unfused("KDART_FUSE_POST", NULL);
        const kc_chunk_case c = {1, 128, 2, 2, 64, 64, 0, 1, 0, seed + 95100, {0}, 0};
        check_chunk(rt2, &c, 0.0);
        kdart_close(rt2);
    }
}
END_TEST


/* ------------------------------------------------------------ head dims */

/* Head dims of the masked path and the K tile 256: outputs NaN-poisoned, against the float64 reference,
 * twice for determinism. */
/* the masked bwd_dhu copies rows in 16-byte granules where Kr (V) % 8 == 0
 * (16, 160, 200, the V-first state at native dims), 8-byte ones where it is
 * 4 mod 8 (60, 100), 4-byte ones where it is 2 mod 4 (18, 190), and by
 * element where it is odd (1); the V-first checkpoint goes out in the same
 * granules of Kr.  bwd_dhu's K tile 192 takes 160 and 190 (masked) and 192
 * (native: its copies by 64-column block) */
static const int head_ks[] = {1, 16, 18, 60, 64, 100, 128, 160, 190, 192, 256};
static const int head_vs[] = {1, 18, 60, 64, 100, 128, 190, 200, 256, 512};
#define NHK ((int)(sizeof head_ks / sizeof head_ks[0]))
#define NHV ((int)(sizeof head_vs / sizeof head_vs[0]))

START_TEST(intra_head_dims) {
    /* every K, fixed length and packed sequences, bf16 and fp16, HV = 2H */
    for (int i = 0; i < NHK; i++)
        for (int v = 0; v < 2; v++) {
            kc_intra_case c = {2, 200, 2, 4, head_ks[i], (i + v) & 1, v, 0, KREF_GATE_FUSED,
                               seed + 9000 + (uint64_t)(2 * i + v), 0, 0, {0}, 0};
            if (v) {
                kc_seqs q = {3, NULL, 1, 150, 1, i & 1, 1, 1, 0, 0.0, 0};
                c.seqs = q, c.B = 1, c.T = 0;
            }
            check_intra(&c);
        }
}
END_TEST

START_TEST(dhu_head_dims) {
    /* every (K, V) pair once, rotating fixed / packed, bf16 / fp16, dht / dh0,
     * K-first / V-first state, auto / explicit BV */
    int n = 0;
    for (int i = 0; i < NHK; i++)
        for (int j = 0; j < NHV; j++, n++) {
            const int K = head_ks[i], V = head_vs[j];
            static const int bvs[4] = {0, 16, 32, 64};
            int bv = bvs[n % 4];
            kc_dhu_case c = {2, 130, 2, K, V, n & 1, (n >> 1) & 1 || !(n & 1), !((n >> 1) & 1) || (n & 1),
                             seed + 9100 + (uint64_t)n, 0, 0, bv, {0}, (n / 3) & 1, 0};
            if (n % 3 == 2) {
                kc_seqs q = {3, NULL, 1, 150, n & 1, n & 1, 1, 1, 0, 0.0, 0};
                c.seqs = q, c.B = 1, c.T = 0;
            }
            check_dhu(&c);
        }
    /* the native shapes with the V-first state (the masked path at K = 64, 128) */
    for (int v = 0; v < 4; v++) {
        kc_dhu_case c = {2, 256, 3, v & 1 ? 64 : 128, 128, v >> 1, 1, 1, seed + 9300 + (uint64_t)v, 0, v == 0, 0, {0},
                         1, 0};
        check_dhu(&c);
    }
}
END_TEST

/* -------------------------------------------- the specialization kdart picks
 *
 * Each case runs (checked against the reference) on a handle of its own over
 * a fresh cache file, which then holds exactly what the call compiled: one
 * entry of the kernel, whose spec must be the expected one (the K tile,
 * varlen from T % 64 / cu_seqlens / a head dim below its tile, BV, tail). */

typedef struct spec_list {
    const char *kernel;
    int n;          /* entries of kernel in the writable cache */
    char spec[128]; /* the first one's spec */
} spec_list;

static int collect_spec(void *user, const kdart_entry *e) {
    spec_list *l = user;
    if (e->tier == 0 && !e->failed && strcmp(e->kernel, l->kernel) == 0 && l->n++ == 0)
        snprintf(l->spec, sizeof l->spec, "%s", e->spec);
    return 0;
}

/* A handle on a fresh cache in a directory of its own (env rules as rt's). */
static kdart_rt *fresh_handle(char *dir, size_t n) {
    test_tmpdir(dir, n);
    char path[512];
    snprintf(path, sizeof path, "%s/kdart.db", dir);
    kdart_options o;
    kdart_options_init(&o);
    o.cache_path = path;
    kdart_rt *h = NULL;
    ck_assert_int_eq(kdart_open(&h, &o), KDART_OK);
    return h;
}

static void expect_launched(kdart_rt *h, char *dir, const char *kernel, const char *want, const char *what) {
    char canon[128];
    ck_assert_int_gt(kdart_spec_canonical(kernel, want, canon, sizeof canon), 0);
    spec_list l = {kernel, 0, ""};
    ck_assert_int_eq(kdart_cache_list(h, collect_spec, &l), KDART_OK);
    kdart_close(h);
    test_rmtree(dir);
    ck_assert_msg(l.n == 1, "%s: %d %s entries compiled, want 1 (%s)", what, l.n, kernel, canon);
    ck_assert_msg(strcmp(l.spec, canon) == 0, "%s: kdart launched %s [%s], want [%s]", what, kernel, l.spec, canon);
    printf("%-40s -> %s [%s]\n", what, kernel, l.spec);
}

START_TEST(spec_choice) {
    const kc_seqs packed = {3, NULL, 1, 150, 1, 0, 1, 1, 0, 0.0, 0};
    static const struct {
        int B, T, K, io, packed;
        const char *want, *what;
    } intra[] = {
        {2, 512, 64, 0, 0, "io=bf16,fold_dg=1,K=64,varlen=0,tail=0", "intra K=64 T=512"},
        {2, 200, 128, 1, 0, "io=fp16,fold_dg=1,K=128,varlen=1,tail=0", "intra K=128 T=200 (T % 64)"},
        {1, 0, 64, 0, 1, "io=bf16,fold_dg=1,K=64,varlen=1,tail=0", "intra K=64 packed"},
        {2, 256, 256, 0, 0, "io=bf16,fold_dg=1,K=256,varlen=0,tail=0", "intra K=256 T=256"},
        {2, 256, 60, 0, 0, "io=bf16,fold_dg=1,K=64,varlen=1,tail=1", "intra K=60 T=256 (fixed, below the tile)"},
        {1, 0, 100, 1, 1, "io=fp16,fold_dg=1,K=128,varlen=1,tail=1", "intra K=100 packed"},
        {2, 130, 252, 0, 0, "io=bf16,fold_dg=1,K=256,varlen=1,tail=1", "intra K=252 T=130"},
    };
    for (int i = 0; i < (int)(sizeof intra / sizeof intra[0]); i++) {
        char dir[256];
        kdart_rt *h = fresh_handle(dir, sizeof dir);
        kc_intra_case c = {intra[i].B, intra[i].T, 2, 4, intra[i].K, intra[i].io, 1, 0, KREF_GATE_FUSED,
                           seed + 9500 + (uint64_t)i, 0, 0, {0}, 0};
        if (intra[i].packed) c.seqs = packed;
        check_intra_on(h, &c, NULL);
        expect_launched(h, dir, "bwd_intra", intra[i].want, intra[i].what);
    }
    /* bwd_dhu, BV given (0: kdart's choice, kdart_dhu_v_tile's, with tail when V % BV != 0) */
    static const struct {
        int B, T, K, V, bv, svf, packed;
        const char *what;
    } dhu[] = {
        {2, 256, 128, 128, 32, 0, 0, "dhu K=128 V=128 BV=32"},
        {2, 256, 124, 128, 32, 0, 0, "dhu K=124 (below the tile)"},
        {2, 256, 128, 100, 32, 0, 0, "dhu V=100 BV=32 (partial V tile)"},
        {2, 256, 128, 96, 32, 0, 0, "dhu V=96 BV=32 (whole tiles: native)"},
        {2, 256, 128, 128, 32, 1, 0, "dhu K=V=128 V-first"},
        {1, 0, 64, 128, 64, 0, 1, "dhu K=64 V=128 packed"},
        {2, 256, 200, 256, 16, 0, 0, "dhu K=200 V=256 BV=16"},
        {2, 256, 192, 128, 32, 0, 0, "dhu K=192 V=128 (the K tile 192)"},
        {2, 256, 160, 160, 64, 0, 0, "dhu K=V=160 BV=64 (two warpgroups in the K tile 192, masked)"},
        {2, 256, 256, 256, 64, 0, 0, "dhu K=V=256 BV=64 (two warpgroups)"},
        {1, 0, 250, 256, 64, 1, 1, "dhu K=250 V=256 BV=64 V-first packed (two warpgroups, masked)"},
        {1, 0, 160, 160, 0, 1, 1, "dhu K=V=160 V-first packed (below 192)"},
        {2, 256, 64, 192, 0, 0, 0, "dhu K=64 V=192 BV auto"},
        {1, 0, 100, 100, 0, 0, 1, "dhu K=V=100 packed BV auto"},
    };
    for (int i = 0; i < (int)(sizeof dhu / sizeof dhu[0]); i++) {
        char dir[256];
        kdart_rt *h = fresh_handle(dir, sizeof dir);
        kc_dhu_case c = {dhu[i].B, dhu[i].T, 2, dhu[i].K, dhu[i].V, 0, 1, 1, seed + 9600 + (uint64_t)i, 0, 0,
                         dhu[i].bv, {0}, dhu[i].svf, 0};
        if (dhu[i].packed) c.seqs = packed;
        int bv = dhu[i].bv;
        if (!bv) ck_assert_int_eq(kdart_dhu_v_tile(h, dhu[i].packed ? packed.nseq : dhu[i].B, 2, dhu[i].K, dhu[i].V,
                                                   &bv), KDART_OK);
        const int kt = dhu[i].K <= 64 ? 64 : dhu[i].K <= 128 ? 128 : dhu[i].K <= 192 ? 192 : 256;
        const int tail = dhu[i].K != kt || dhu[i].V % bv != 0 ? 1 : dhu[i].svf ? 2 : 0;
        char want[128];
        snprintf(want, sizeof want, "io=bf16,K=%d,BV=%d,varlen=%d,tail=%d", kt, bv, dhu[i].packed, tail);
        check_dhu_on(h, &c, NULL);
        expect_launched(h, dir, "bwd_dhu", want, dhu[i].what);
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
    if (small && small[0]) {
        tcase_add_test(tc, small_for_sanitizers);
        goto run;
    }
    {
        /* KDART_GPU_TESTS=name,name,...: only those tests; KDART_GPU_PART=i/n: the tests whose index
         * is i mod n (a lent GPU's time split over n processes, every test in exactly one) */
        const TTest *all[] = {warm_load_times, intra_every_spec, intra_every_spec_beta_f32, intra_beta_f32_production, intra_gate_families, intra_k64_equal_heads, intra_graph_capture, dhu_every_spec, dhu_every_spec_fp16, dhu_graph_capture_and_mixed, bad_arguments_write_nothing, intra_fixed_any_t, dhu_fixed_any_t, intra_varlen_lists, dhu_varlen_lists, varlen_thousand_sequences, dhu_varlen_v_split, dhu_varlen_head_pairs, intra_varlen_short_sequences, varlen_garbage_writes_nothing, second_context, intra_head_dims, dhu_head_dims, spec_choice, wy_every_spec, wy_production, wy_intra, dav_fused, rwu_every_spec, rwu_production, dav_standalone, fwdh_every_spec, fwdh_production, post_every_spec, chunk_bwd_whole};
        const char *only = getenv("KDART_GPU_TESTS"), *part = getenv("KDART_GPU_PART");
        unsigned pi = 0, pn = 1;
        if (part && (sscanf(part, "%u/%u", &pi, &pn) != 2 || pn == 0 || pi >= pn)) {
            printf("test_gpu: KDART_GPU_PART=%s is not i/n with i < n\n", part);
            return 1;
        }
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            if ((!only || !only[0] || name_listed(only, all[i]->name)) && i % pn == pi) tcase_add_test(tc, all[i]);
    }
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
