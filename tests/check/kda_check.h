/*
 * kda_check.h: runs the KDA kernels through kdart's public API on
 * fresh random inputs and measures their error against the float64
 * reference (tests/ref/kda_ref.c).  Shared by the GPU test suite
 * (tests/gpu/test_gpu.c) and `kdart selftest`.
 *
 * It talks to the GPU only for memory and timing, through its own small
 * dlopen of libcuda, so the CLI that links it still uses nothing of kdart
 * but the public header.  Every output buffer is filled with NaN before
 * each launch, so an element the kernel fails to write shows up as an
 * infinite error.
 *
 * Interfaces it uses, and no others (the layering test checks the
 * includes): kdart.h, the public API; kernel_src/kda_params.h, the
 * kernels' launch ABI (a raw launch to time against); tests/ref/kda_ref.h,
 * the float64 reference; the CUDA toolkit's cuda.h, for its libcuda table.
 * The library kdart_check (this and the reference) is linked by the CLI
 * (`kdart selftest`, `kdart bench`) and by the test suites.
 */
#ifndef KDART_KDA_CHECK_H
#define KDART_KDA_CHECK_H

#include <stddef.h>
#include <stdio.h>

#include "kdart.h"

/* Loads libcuda and makes device 0's primary context current.
 * Returns 0, or 77 (ctest's skip code) when there is no GPU, with why. */
int kc_init(char *why, size_t n);

/* A device tensor for a test of one's own (the registry's test-only stage):
 * dtype 0 bf16, 1 fp16, 32 fp32; put converts from doubles (rounding to the
 * dtype), get back; poison fills NaN.  Each returns 0 or -1. */
typedef struct kc_tensor {
    DLTensor t;
    int64_t shape[5];
    unsigned long long p;
    size_t bytes;
} kc_tensor;
int kc_tensor_make(kc_tensor *k, int dtype, int ndim, const int64_t *shape);
int kc_tensor_put(kc_tensor *k, const double *x);
int kc_tensor_get(const kc_tensor *k, double *x);
int kc_tensor_poison(const kc_tensor *k);
void kc_tensor_free(kc_tensor *k);
/* Waits for the current context's work; 0 or -1. */
int kc_sync(void);

/* Sequences of a case.  nseq = 0: fixed length, B rows of any
 * T >= 1 tokens (T % 64 != 0 runs the varlen=1 specialization with no
 * cu_seqlens).  nseq > 0: one packed row (B must be 1) of T storage tokens
 * holding nseq sequences per cu (nseq+1 entries) or, when cu is NULL,
 * lengths drawn uniformly in [len_lo, len_hi] by kref_gen_cu_seqlens (one
 * zero-length with with_empty); T = 0 then means exactly cu[N] tokens.
 * Tokens past cu[N] hold NaN inputs and must keep their NaN outputs. */
typedef struct kc_seqs {
    int nseq;
    const long long *cu;   /* [nseq+1] or NULL: drawn */
    int len_lo, len_hi, with_empty;
    int cu32;              /* pass cu_seqlens (and the index tensors) as int32, else int64 */
    int fla_indices;       /* also pass fla's chunk_indices (and chunk_offsets to bwd_dhu) */
    int spare_rows;        /* bwd_dhu: dh rows beyond the chunk count, which must stay NaN */
    int garbage;           /* 1: cu_seqlens decreasing, 2: cu[N] > T, 3: cu[0] != 0 (after a valid
                              setup), 4: bwd_dhu's dh one row short of the chunk count (no
                              chunk_indices): expect the launch to succeed, write nothing, and
                              set the device status bits (kc_report.devstatus) */
    double hard_gates;     /* fraction of gate entries set to -1000 before the cumsum */
    int keep_status;       /* with garbage: read the device status word without clearing it, so
                              the bits stay for the next reader (the multi-context test) */
} kc_seqs;

typedef struct kc_intra_case {
    int B, T, H, HV, K;
    int io;        /* 0 bf16, 1 fp16 */
    int fold_dg, emit_bf16;
    int gate;      /* kref_gate_family (tests/ref/kda_ref.h) */
    unsigned long long seed;
    int reps;      /* timed launches after the checked one (0: no timing) */
    int graph;     /* also capture the launch in a CUDA graph and compare */
    kc_seqs seqs;  /* zero: fixed length */
    int beta_f32;  /* beta in fp32 (the beta=f32 specialization), else the io dtype */
} kc_intra_case;

typedef struct kc_dhu_case {
    int B, T, HV, K, V;
    int io;
    int with_dht, with_dh0;
    unsigned long long seed;
    int reps;
    int graph;
    int v_tile;  /* 0: kdart picks; 16, 32, 64: that BV specialization */
    kc_seqs seqs;
    int state_v_first; /* dh, dht, dh0 in the V-first layout ([.., V, K]); the harness transposes
                          to and from the reference's K-first one */
    int fused;         /* Aqk instead of dv (fla's dAv fused): the reference's dv is Aqk^T do in
                          float64, from a random Aqk whose upper triangle must not be read */
} kc_dhu_case;

typedef struct kc_wy_case {
    int B, T, H, HV, K, V;
    int io;
    int beta_f32;      /* beta in fp32, else the io dtype */
    int state_v_first; /* h, dh as [.., V, K] */
    int gate;          /* kref_gate_family */
    unsigned long long seed;
    int reps;
    int graph;
    kc_seqs seqs;
    int with_dAqk;     /* also dAqk = scale tril0(do v_new^T) (fla's dAv dA, fused) */
    int with_intra;    /* (with with_dAqk) bwd_intra's terms added in the same launch: dq, dk, dg, db
                          are bwd_intra's outputs with fold_dg over wy_dqkg's (args.intra) */
} kc_wy_case;

typedef struct kc_rwu_case {
    int B, T, H, HV, K, V;
    int io;
    int beta_f32;      /* beta in fp32, else the io dtype */
    int gate;          /* 0: the cumsummed gate in (family below); 1: the raw gate in (the
                          softplus form), its cumsum out; 2: the same with the safe gate */
    int family;        /* gate 0: kref_gate_family */
    int graw_f32;      /* gate 1, 2: the raw gate in fp32, else the io dtype */
    int with_bias;     /* gate 1, 2: dt_bias given */
    double lower_bound; /* gate 2 */
    int with_q;        /* q in, qg out */
    unsigned long long seed;
    int reps;
    int graph;
    kc_seqs seqs;
} kc_rwu_case;

typedef struct kc_dav_case {
    int B, T, HV, V;
    int io;
    unsigned long long seed;
    int reps;
    int graph;
    kc_seqs seqs;
    int bad;           /* 1 dv misaligned, 2 A not [..,64], 3 v in the other io dtype: expect kdart to refuse
                          (report.status) with both outputs untouched (report.untouched) */
} kc_dav_case;

typedef struct kc_fwdh_case {
    int B, T, H, HV, K, V;
    int io;
    int gate;          /* kref_gate_family of the gate behind w, u, kg and gk */
    int state_v_first; /* h, h0 and ht as [.., V, K] */
    int with_h0, with_ht, with_vnew;
    int v_tile;        /* 0: kdart picks, or 32, 64 */
    unsigned long long seed;
    int reps;
    int graph;
    kc_seqs seqs;
    int uv;            /* 1: u made in the scan from v, A (Akk) and beta in the io dtype; 2: beta in float32 */
} kc_fwdh_case;

typedef struct kc_post_case {
    int B, T, H, HV, K;
    int io;
    int l2norm;        /* q, k, q_rstd, k_rstd given: the l2norm backward */
    int gate;          /* 0: no gate in the kernel; 1: the plain gate; 2: the safe gate (lower bound -5) */
    int with_bias;     /* gate 1, 2: dt_bias given */
    int g_f32;         /* the raw gate and dg in fp32, else the io dtype */
    int sigmoid;       /* the beta logits given: the sigmoid backward */
    int beta_f32;      /* the logits and dbeta in fp32, else the io dtype */
    int neg;           /* allow_neg_eigval: beta_scale 2 */
    unsigned long long seed;
    int reps;
    int graph;
} kc_post_case;

/* The BV of a bwd_dhu spec text ("io=bf16,K=128,BV=32" -> 32), 0 if none. */
int kc_spec_bv(const char *spec);
/* The K tile of a spec text ("K=256" -> 256), 0 if none. */
int kc_spec_k(const char *spec);
/* Whether a spec is a tail=1 one (the masked paths). */
int kc_spec_tail(const char *spec);
/* Whether a bwd_intra spec takes beta in fp32 (beta=f32). */
int kc_spec_beta_f32(const char *spec);
/* Whether a bwd_intra spec is one kdart launches: varlen=0,tail=1 is a trap
 * stub (the tail body reads Kr from the varlen params; kdart sends a head
 * dim below its tile to varlen=1 at fixed length too). */
int kc_intra_spec_launchable(const char *spec);
/* 0 for wy_dqkg's intra=1 specs without dAqk (stubs: the intra part reads dAqk). */
int kc_wy_spec_launchable(const char *spec);
/* The head dim K for which kdart launches a bwd_intra spec: the K tile, or
 * tile - 4 for a tail=1 spec (so that the tail body itself runs). */
int kc_intra_spec_k(const char *spec);
/* The shape for which kdart launches a bwd_dhu spec with v_tile = the
 * spec's BV: *K = the K tile, *V as given (a multiple of 64), *svf = 0 for
 * tail=0; for tail=1, variant % 3 picks what selects the masked path:
 * 0 K = tile - 4, 1 V - 4 (a partial last V tile), 2 the V-first state. */
void kc_dhu_spec_dims(const char *spec, int variant, int *K, int *V, int *svf);
/* wy_dqkg's K and V for a spec: the tile and V 128, or for tail=1 (by variant,
 * rotating) K - 4, V 100, K - 8 with V 72, or V 101: each copy granule. */
void kc_wy_spec_dims(const char *spec, int variant, int *K, int *V);

typedef struct kc_report {
    int status;            /* kdart status of the launch (KDART_OK expected) */
    char message[512];     /* kdart_last_error on failure, or a harness error */
    int nout;
    const char *names[8];
    double rel_rms[8];     /* ||out-ref|| / ||ref|| in float64 */
    double rel_rms_alt[8]; /* dhu: against the exact float64 scan (rel_rms is
                              teacher-forced: the reference takes the kernel's
                              own rounded dH and dv2 as its matrix operands) */
    double max_abs[8];
    double frac_diff[8];   /* whole backward, two handles: the share of elements that differ */
    size_t n_far[8];       /* whole backward, two handles: elements apart by more than one rounding */
    int deterministic;     /* a second launch gave bitwise-equal outputs */
    int graph_equal;       /* the graph replay gave bitwise-equal outputs (-1 not run) */
    double ms;             /* median time per call over reps (0 if reps == 0) */
    int untouched;         /* every element the call must not write still holds NaN (tokens past
                              cu[N], spare dh rows, dh0 when not asked for; with seqs.garbage:
                              every output element) */
    int devstatus;         /* kdart_device_status bits read (and cleared) after the launch */
    int nseq, tokens;      /* the sequences and cu[N] the case ran */
    unsigned long long digest[8]; /* FNV-1a 64 of each output's bytes after the checked launch:
                                     equal digests of two runs of one case (same seed) mean
                                     bitwise-equal outputs, up to a 2^-64 collision */
} kc_report;

/* Runs one case.  Returns 0 when the case ran (see report.status and the
 * errors), or -1 on a harness failure (message says why). */
int kc_run_intra(kdart_rt *rt, const kc_intra_case *c, kc_report *r);
int kc_run_dhu(kdart_rt *rt, const kc_dhu_case *c, kc_report *r);
/* wy_dqkg: rel_rms against the float64 reference with fla's roundings,
 * rel_rms_alt against the exact one; outputs dq, dk, dv2, dg, db, dA */
int kc_run_wy(kdart_rt *rt, const kc_wy_case *c, kc_report *r);
/* recompute_wu: rel_rms against the exact float64 outputs; outputs w, u, kg,
 * then qg (with_q) and the cumsummed gate (gate != 0) */
int kc_run_rwu(kdart_rt *rt, const kc_rwu_case *c, kc_report *r);
/* bwd_dav: rel_rms against the exact float64 outputs dA (fp32) and dv (the io
 * dtype: its one rounding), from an Aqk with garbage above its diagonal */
int kc_run_dav(kdart_rt *rt, const kc_dav_case *c, kc_report *r);
/* fwd_h: outputs h, v_new, ht; rel_rms against the float64 scan with fla's roundings (IO(S) stored and
 * multiplied, v_new rounded before kg^T v_new), rel_rms_alt against the exact one */
int kc_run_fwdh(kdart_rt *rt, const kc_fwdh_case *c, kc_report *r);
/* bwd_post: outputs dq, dk, dg, dbeta, then dA_log and ddt_bias with the gate (the latter with dt_bias),
 * against the float64 composition of the value heads' sum, kref_l2norm_bwd, kref_gate_act_bwd and
 * kref_beta_sigmoid_bwd; every token is written (no sequences) */
int kc_run_post(kdart_rt *rt, const kc_post_case *c, kc_report *r);

/* The whole backward (kdart_kda_chunk_bwd) in the production configuration (l2norm, the gate with A_log
 * and dt_bias, beta's sigmoid) on random saved tensors: chunk_kda's forward is not run, so Aqk and Akk are
 * noise and there is no float64 reference.  The call runs on rt twice (report.deterministic: the same bits)
 * and on rt2, a handle whose environment made other choices (KDART_FUSE_POST=0, say): rel_rms[i] is rt's
 * output i against rt2's (0 when bitwise equal; infinite where one holds NaN the other does not), and
 * untouched says every output element of a live token was written (no poison left) on both.  Outputs dq,
 * dk, dv, dg, dbeta, dA_log, ddt_bias, dh0. */
typedef struct kc_chunk_case {
    int B, T, H, HV, K, V;
    int io;
    int safe;          /* the safe gate (lower bound -5), else the plain one */
    int neg;           /* allow_neg_eigval */
    unsigned long long seed;
    kc_seqs seqs;      /* zero: fixed length */
    int plain;         /* cuDNN frontend's configuration instead: no l2norm, no gate or beta sigmoid in the
                          kernel (g NULL, g_cumsum an fp32 chunk-local cumsum of log2 decays, beta fp32
                          after its sigmoid); dg and dbeta fp32, dA_log and ddt_bias not produced */
} kc_chunk_case;
int kc_run_chunk_bwd(kdart_rt *rt, kdart_rt *rt2, const kc_chunk_case *c, kc_report *r);

/* A second CUDA context on device 0 (cuCtxCreate, not the primary one): a
 * stand-in for a second device on a one-GPU machine.  kc_ctx_create makes
 * it current on the calling thread (0, or -1 with why: the driver lacks
 * cuCtxCreate_v4, CUDA 12.5+, or creation failed); kc_ctx_use makes ctx
 * current (NULL: device 0's primary context, as after kc_init); and
 * kc_ctx_destroy destroys it and makes the primary current.  The kc_run_*
 * calls allocate their tensors in whichever context is current. */
int kc_ctx_create(void **ctx, char *why, size_t n);
int kc_ctx_use(void *ctx);
void kc_ctx_destroy(void *ctx);

/* Calls bwd_intra with one argument broken in the way `which` names, on
 * real device buffers whose outputs hold a sentinel pattern; returns the
 * status and sets *untouched to whether every output still holds the
 * pattern afterwards.  which: 0 valid (sanity), 1 misaligned dq, 2 wrong
 * dtype g, 3 shape mismatch dAkk, 4 K=257, 5 T=100, 6 HV not multiple of H,
 * 7 emit with HV>H, 8 transposed strides q, 9 host tensor, 10 null dk. */
int kc_intra_bad_arg(kdart_rt *rt, int which, int *untouched, char *msg, size_t n);
#define KC_NBAD 11

/* The selftest of `kdart selftest`: every specialization of every kernel
 * with an operation (only, when not NULL, names one: "wy_dqkg") once, with
 * errors and time per call, printed to out.  Returns the number of failures. */
int kc_selftest(kdart_rt *rt, FILE *out, const char *only);

/* ---- benchmark (kdart bench) ---- */

typedef struct kc_shape {
    const char *name;
    int B, T, H, HV, K, V;
    int fold_dg, emit_bf16; /* bwd_intra options; rows with either set skip bwd_dhu */
} kc_shape;

/* The standard table (the shapes fla's users run) plus prod8192 with fold_dg and emit_bf16 on. */
extern const kc_shape kc_standard_shapes[];
extern const int kc_n_standard;

/* Measured device-to-device copy bandwidth (read + write bytes / s), GB/s. */
double kc_copy_ceiling(void);
/* Times both kernels on each shape (CUDA events, median over reps launches
 * after warm-up, rotating input sets when a set is small against L2) and
 * prints ms, the bytes each stage must move, GB/s and the share of
 * ceiling_gbs.  io: 0 bf16, 1 fp16.  Returns 0 or -1 (message printed). */
int kc_bench(kdart_rt *rt, const kc_shape *shapes, int n, int io, int reps, double ceiling_gbs, FILE *out);
/* Host time per call of kdart_kda_bwd_intra against a raw cuLaunchKernel
 * of the same function, in microseconds. */
int kc_launch_overhead(kdart_rt *rt, double *kdart_us, double *raw_us);

#endif /* KDART_KDA_CHECK_H */
