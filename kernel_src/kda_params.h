/*
 * kda_params.h: the plain parameter structs shared by the host runtime (C11)
 * and the device kernels (CUDA C++ compiled by NVRTC).
 *
 * Each kernel takes exactly one of these structs by value as its only
 * parameter, so the host fills a struct and passes its address to
 * cuLaunchKernel.  The structs hold only pointers and 32-bit integers, with
 * no host or device headers, so that the same bytes mean the same thing to
 * gcc and to NVRTC.  Changing a layout here changes the hash of this file,
 * which is part of every cache key, so stale cubins can never be launched
 * with a new layout.
 *
 * Layouts are fla's contiguous layouts, as listed below (docs/kernels.md has
 * the math of each stage).  BT, the chunk length, is always 64.
 */
#ifndef KDART_KDA_PARAMS_H
#define KDART_KDA_PARAMS_H

#define KDART_CHUNK 64 /* BT: rows per chunk, fixed by the algorithm */

/* Device-side findings of VARLEN launches (bits of *status). */
#define KDART_DEVERR_CU_ORDER 1  /* cu[0] != 0 or cu_seqlens decreasing */
#define KDART_DEVERR_CU_RANGE 2  /* cu[N] > T (the tensors' token count) */
#define KDART_DEVERR_CHUNKS 4    /* more chunks than NT (grid or dh rows) */

/* A TMA tensor map (the driver's CUtensorMap: 128 opaque bytes, 64-byte aligned), encoded on the
 * host by cuTensorMapEncodeTiled and read by the kernel from its parameter. */
#ifdef __cplusplus
#define KDART_ALIGN64 alignas(64)
#else
#define KDART_ALIGN64 _Alignas(64)
#endif
typedef struct kdart_tmap {
    KDART_ALIGN64 unsigned long long opaque[16];
} kdart_tmap;

/* bwd_intra: grid (T/64, B*HV), one CTA per (chunk, batch x value head). */
typedef struct kdart_bwd_intra_params {
    const void *q;      /* [B,T,H,K]   io dtype (bf16 or fp16) */
    const void *k;      /* [B,T,H,K]   io dtype */
    const float *g;     /* [B,T,HV,K]  fp32, chunk-local cumsum, log2 units */
    const void *beta;   /* [B,T,HV]    io dtype */
    const float *dAqk;  /* [B,T,HV,64] fp32, lower triangle incl. diagonal */
    const float *dAkk;  /* [B,T,HV,64] fp32, strictly lower */
    const float *dq_in; /* [B,T,HV,K]  fp32 */
    const float *dk_in; /* [B,T,HV,K]  fp32 */
    const float *dg_in; /* [B,T,HV,K]  fp32 */
    const float *db_in; /* [B,T,HV]    fp32 */
    void *dq;           /* [B,T,HV,K]  fp32, or io dtype when emit_bf16 */
    void *dk;           /* [B,T,HV,K]  fp32, or io dtype when emit_bf16 */
    float *dg;          /* [B,T,HV,K]  fp32; suffix-summed per chunk when fold_dg */
    float *db;          /* [B,T,HV]    fp32, db_in already added */
    int B, T, H, HV;    /* K is a template argument of the kernel */
    /* VARLEN specializations only (ignored otherwise): sequences are cu_seqlens's
     * [cu[n], cu[n+1]) of the one packed row (B == 1) or, when cu_seqlens is NULL,
     * the B rows of T tokens each; the last chunk of a sequence may be partial. */
    const void *cu_seqlens; /* [N+1] int32 or int64 (cu_is64), on the device, or NULL */
    int *status;            /* device word; KDART_DEVERR_* bits are atomicOr'ed in on bad cu_seqlens */
    int N;                  /* sequences (B when cu_seqlens is NULL) */
    int NT;                 /* grid chunks: upper bound of the total chunk count */
    int cu_is64;            /* cu_seqlens holds int64 */
    /* Head dim: the kernel's K template argument is the K tile; Kr is the real
     * head dim, 1 <= Kr <= K tile (columns >= Kr are neither read nor written). */
    int Kr;
} kdart_bwd_intra_params;

/* bwd_dhu: one serial reverse scan per (batch, value head, V tile). */
typedef struct kdart_bwd_dhu_params {
    const void *qg;    /* [B,T,HV,K]    io dtype */
    const void *kg;    /* [B,T,HV,K]    io dtype */
    const void *w;     /* [B,T,HV,K]    io dtype */
    const float *g;    /* [B,T,HV,K]    fp32; only row 64c+63 of chunk c is read */
    const void *dout;  /* [B,T,HV,V]    io dtype ("do" in the spec) */
    const void *dv;    /* [B,T,HV,V]    io dtype */
    const float *dht;  /* [B,HV,K,V]    fp32, or NULL: the scan starts from zero */
    void *dh;          /* [B,NT,HV,K,V] io dtype, NT = T/64 */
    void *dv2;         /* [B,T,HV,V]    io dtype */
    float *dh0;        /* [B,HV,K,V]    fp32, or NULL: not produced */
    float scale;       /* applied after the qg^T do accumulation, as fla does */
    int B, T, HV, V;   /* K is a template argument of the kernel */
    /* VARLEN specializations only (ignored otherwise); sequences as for bwd_intra.
     * dh rows: chunk_offsets[n] + c, chunk_offsets the exclusive prefix sum of
     * ceil(T_n / 64), derived on the device. */
    const void *cu_seqlens; /* [N+1] int32 or int64 (cu_is64), on the device, or NULL */
    int *status;            /* device word, as for bwd_intra */
    int N;                  /* sequences (B when cu_seqlens is NULL); dht/dh0 are [N,HV,K,V] */
    int NT;                 /* dh's chunk rows (its second dimension) */
    int cu_is64;
    /* Head dims: Kr <= the K tile, V any (the last V tile masked).
     * state_v_first: dh is [.., V, K] and dht/dh0 [N, HV, V, K] (fla's transposed layout). */
    int Kr;
    int state_v_first;
    /* VARLEN at BV 64 only: 0, or the SM count for the V split (bwd_dhu.cuh,
     * kdart::dhu::varlen64; the grid is then ceil(V/32) wide) */
    int v_split;
    /* VARLEN at the K tile 256 (native) only: 0, or 1 for head pairs (bwd_dhu.cuh,
     * kdart::dhu::pair_heads; HV even, the grid is (ceil(V/BV), N*HV/2)) */
    int pair_heads;
    /* NULL, or [B,T,HV,64] io dtype, chunk_kda's Aqk (row = token; its lower
     * triangle, diagonal included, is read): dv is then NULL and the scan
     * starts each chunk's DV from Aqk^T do instead of dv (fla's
     * chunk_kda_bwd_dAv dv, fused).  Native specializations at BV 64 with
     * K tile 64 or 128 only, without the V split. */
    const void *Aqk;
} kdart_bwd_dhu_params;

/* chunk_rcumsum: the fold_dg suffix sum as a standalone kernel.
 * x[t0+r, d] = sum_{r'=r..63} x[t0+r', d] in place, per chunk. */
typedef struct kdart_rcumsum_params {
    float *x;          /* [N, T, K] fp32, N = B*HV rows interleaved as [B,T,HV,K] */
    int B, T, HV;      /* K is a template argument */
} kdart_rcumsum_params;

/* wy_dqkg: grid (T/64, B*HV), one CTA per (chunk, batch x value head); VARLEN
 * as bwd_intra (grid (NT, HV)).  The WY backward fused with the state-gradient
 * products (fla chunk_kda_bwd_wy_dqkg_fused). */
typedef struct kdart_wy_dqkg_params {
    const void *q;      /* [B,T,H,K]   io dtype */
    const void *k;      /* [B,T,H,K]   io dtype */
    const void *v;      /* [B,T,HV,V]  io dtype */
    const void *v_new;  /* [B,T,HV,V]  io dtype */
    const float *g;     /* [B,T,HV,K]  fp32, chunk-local cumsum, log2 units */
    const void *beta;   /* [B,T,HV]    io dtype or fp32 (the beta parameter) */
    const void *A;      /* [B,T,HV,64] io dtype, the WY inverse (row = token) */
    const void *h;      /* [B*NT or NT,HV,K,V] io dtype ([..,V,K] when state_v_first) */
    const void *dh;     /* as h */
    const void *dout;   /* [B,T,HV,V]  io dtype ("do") */
    const void *dv;     /* [B,T,HV,V]  io dtype (bwd_dhu's dv2) */
    float *dq;          /* [B,T,HV,K]  fp32 */
    float *dk;          /* [B,T,HV,K]  fp32 */
    void *dv2;          /* [B,T,HV,V]  io dtype */
    float *dg;          /* [B,T,HV,K]  fp32 */
    float *db;          /* [B,T,HV]    fp32 */
    float *dA;          /* [B,T,HV,64] fp32, strictly lower (zeros above) */
    float scale;
    int B, T, H, HV, V; /* K: the kernel's K tile; Kr below */
    const void *cu_seqlens; /* as bwd_intra */
    int *status;
    int N;
    int NT;                 /* grid chunks (VARLEN), h's chunk rows */
    int cu_is64;
    int Kr;                 /* the head dim, 1..K tile */
    /* NULL, or [B,T,HV,64] fp32: scale * do v_new^T on and below the diagonal,
     * zeros above (fla's chunk_kda_bwd_dAv dA, fused); rows past a sequence's
     * end are not written */
    float *dAqk;
    /* The step's tiles by TMA (sm_90a, native fixed-length specializations: T % 64 == 0, Kr == K, V % 64
     * == 0, h and dh [.., K, V]): do, dv, v_new, v as (V, HV, B*T) with 64 x 1 x 64 boxes, h and dh as
     * (V, rows) with 64 x 64 boxes, both in the 128-byte swizzle; zero (unused) elsewhere */
    kdart_tmap tm[6];
} kdart_wy_dqkg_params;

/* The gate's and beta's part of the backward's last step, done where the
 * intra terms finish dg and db (wy_dqkg's post = 1 kernels; native K tiles,
 * fold_dg): dg and db leave in their final dtypes instead of fp32, and the
 * A_log / dt_bias reductions leave as one partial row per CTA, which bwd_post's
 * launch sums in a fixed order (kdart_bwd_post_params.rows).  Math as
 * bwd_post's (kernel_src/bwd_post.cuh), element for element. */
typedef struct kdart_intra_post_params {
    const void *g_raw;     /* [B,T,HV,K] io dtype, or NULL: dg is the sum, rounded once */
    const float *A_log;    /* [HV] fp32 (with g_raw) */
    const float *dt_bias;  /* [HV,K] fp32, or NULL */
    const void *beta_raw;  /* [B,T,HV] io dtype or fp32 (db_io), or NULL: db is the sum, rounded once */
    void *dg;              /* [B,T,HV,K] io dtype, or fp32 (dg_f32) */
    void *db;              /* [B,T,HV] io dtype or fp32 (db_io) */
    float *part;           /* with g_raw: [rows][HV][K + 4] fp32, row = the CTA's chunk row (h's), then
                            * dt_bias's K partial sums and dA_log's, one per 64-column pass */
    /* qk (HV == H): dq and dk finished here too, with the l2norm backward where q_rstd / k_rstd are given
     * (q and k: the intra part's own); the row sums over K need every 64-column pass, so the earlier
     * passes store their columns' fp32 values and the last pass finishes every column of its rows: its
     * own from registers and shared memory, the earlier ones' from the fp32 values (which the same
     * thread wrote) and q, k.  Set by kdart_kda_chunk_bwd alone, whose fp32 dq, dk, dg are its
     * scratch: each CTA ends by dropping its rows of them from L2 (discard.global.L2), so they are never
     * written back */
    void *dq;              /* [B,T,H,K] io dtype */
    void *dk;              /* [B,T,H,K] io dtype */
    const float *q_rstd;   /* [B,T,H] fp32, or NULL: dq is the sum, rounded once */
    const float *k_rstd;   /* [B,T,H] fp32, or NULL */
    float lower_bound;     /* the safe gate's bound */
    float beta_scale;      /* 1, or 2 with allow_neg_eigval */
    int safe_gate;         /* as bwd_post's */
    int db_io;             /* beta_raw and db in the io dtype (else fp32) */
    int qk;                /* 1: dq and dk finished here (above) */
    int dg_f32;            /* dg in fp32 (only without g_raw: the log-space gate's own dtype) */
} kdart_intra_post_params;

/* wy_dqkg's intra = 1 kernels: wy_dqkg's parameter, then bwd_intra's for the
 * intra-chunk terms the same CTA adds after wy_dqkg's body (its dq_in .. db_in
 * and dq .. db are wy_dqkg's dq, dk, dg, db: updated in place; its dAqk and dAkk
 * wy_dqkg's dAqk and dA), then the last step's gate part (read by the post = 1
 * kernels alone). */
typedef struct kdart_wy_intra_params {
    kdart_wy_dqkg_params wy;
    kdart_bwd_intra_params in;
    kdart_intra_post_params post;
} kdart_wy_intra_params;

/* recompute_wu: grid (T/64, B*HV), one CTA per (chunk, batch x value head);
 * VARLEN as bwd_intra (grid (NT, HV)).  fla's recompute_w_u_fwd, with its
 * kda_gate_chunk_cumsum in front when the raw gate is given (GATE). */
typedef struct kdart_recompute_wu_params {
    const void *q;        /* [B,T,H,K]   io dtype, or NULL: qg is not written */
    const void *k;        /* [B,T,H,K]   io dtype */
    const void *v;        /* [B,T,HV,V]  io dtype */
    const void *beta;     /* [B,T,HV]    io dtype or fp32 (the beta parameter) */
    const void *A;        /* [B,T,HV,64] io dtype, Akk (the WY inverse, row = token) */
    const float *g;       /* [B,T,HV,K]  fp32, chunk-local cumsum, log2 units (read unless GATE) */
    const void *g_raw;    /* [B,T,HV,K]  io dtype or fp32 (g_raw_f32): the raw gate (GATE) */
    const float *A_log;   /* [HV]        fp32 (GATE) */
    const float *dt_bias; /* [HV,K]      fp32, or NULL (GATE) */
    float *g_out;         /* [B,T,HV,K]  fp32: the gate's chunk-local cumsum, log2 units (GATE) */
    void *w;              /* [B,T,HV,K]  io dtype */
    void *u;              /* [B,T,HV,V]  io dtype */
    void *qg;             /* [B,T,HV,K]  io dtype, or NULL */
    void *kg;             /* [B,T,HV,K]  io dtype */
    float lower_bound;    /* the safe gate's bound (safe_gate) */
    int safe_gate;        /* GATE: lower_bound sigmoid(exp(A_log)(g + dt_bias)), else -exp(A_log) softplus(..) */
    int g_raw_f32;        /* GATE: g_raw is fp32 (else the io dtype) */
    int B, T, H, HV, V;
    const void *cu_seqlens; /* as bwd_intra */
    int *status;
    int N;
    int NT;                 /* grid chunks (VARLEN) */
    int cu_is64;
    int Kr;                 /* the head dim, 1..256 */
} kdart_recompute_wu_params;

/* bwd_dav: grid (T/64, B*HV), one CTA per (chunk, batch x value head); VARLEN
 * as bwd_intra (grid (NT, HV)).  fla's chunk_kda_bwd_dAv as a kernel of its
 * own (where kdart.fla cannot fuse it into bwd_dhu and wy_dqkg). */
typedef struct kdart_bwd_dav_params {
    const void *v;      /* [B,T,HV,V]  io dtype (v_new) */
    const void *dout;   /* [B,T,HV,V]  io dtype ("do") */
    const void *A;      /* [B,T,HV,64] io dtype, chunk_kda's Aqk (row = token; its lower
                           triangle, diagonal included, is read: the rest may hold anything) */
    float *dA;          /* [B,T,HV,64] fp32: scale * do v^T on and below the diagonal, zeros
                           above; rows past a sequence's end are not written */
    void *dv;           /* [B,T,HV,V]  io dtype: Aqk^T do per chunk */
    float scale;
    int B, T, HV, V;
    const void *cu_seqlens; /* as bwd_intra */
    int *status;
    int N;
    int NT;                 /* grid chunks (VARLEN) */
    int cu_is64;
    int long_only;          /* VARLEN with cu_seqlens: 0, or the SM count bwd_dhu's V split runs
                               on: dv is written only for the sequences that split scans 32
                               columns at a time (kdart::split_long), the others' rows untouched */
} kdart_bwd_dav_params;

/* fwd_h: grid (ceil(V/BV), N*HV), one serial scan per (sequence, value head, V
 * tile).  fla's chunk_gated_delta_rule_fwd_h as chunk_kda_bwd calls it (the
 * backward's recompute of the states and v_new; chunk_kda's forward calls it
 * the same way), with the per-channel gate gk. */
typedef struct kdart_fwd_h_params {
    const void *k;      /* [B,T,H,K]    io dtype: chunk_kda's kg (already decayed to each chunk's end) */
    const void *w;      /* [B,T,HV,K]   io dtype */
    const void *u;      /* [B,T,HV,V]   io dtype */
    const float *gk;    /* [B,T,HV,K]   fp32, chunk-local cumsum, log2 units; only each chunk's
                           last valid row is read */
    const float *h0;    /* [N,HV,K,V]   fp32, or NULL: the scan starts from zero */
    void *h;            /* [B,NT,HV,K,V] io dtype: the state entering each chunk */
    void *v_new;        /* [B,T,HV,V]   io dtype, or NULL: not written */
    float *ht;          /* [N,HV,K,V]   fp32, or NULL: the final state is not written */
    int B, T, H, HV, V; /* K: the kernel's K tile; Kr below */
    /* VARLEN specializations only (ignored otherwise); sequences as for bwd_intra.
     * h's rows: chunk_offsets[n] + c, derived on the device. */
    const void *cu_seqlens; /* [N+1] int32 or int64 (cu_is64), on the device, or NULL */
    int *status;            /* device word, as for bwd_intra */
    int N;                  /* sequences (B when cu_seqlens is NULL) */
    int NT;                 /* h's chunk rows (its second dimension) */
    int cu_is64;
    int Kr;                 /* the head dim, 1..K tile */
    /* h is [.., V, K] and h0/ht [N, HV, V, K] (fla's transposed layout) */
    int state_v_first;
} kdart_fwd_h_params;

/* fwd_h's u-from-v specializations (uv=1): u is made in the scan, u = IO(A IO(v beta)), as recompute_wu
 * makes it (bitwise: the same products in the same order), and base.u holds v [B,T,HV,V].  A struct of
 * their own, so that the other specializations' parameters stay as they were (128 bytes: ptxas allocates
 * their registers differently past that, and spilled). */
typedef struct kdart_fwd_h_uv_params {
    kdart_fwd_h_params base;
    const void *A;    /* [B,T,HV,64] io dtype: chunk_kda's Akk */
    const void *beta; /* [B,T,HV] io dtype, or fp32 (beta_f32) */
    int beta_f32;
} kdart_fwd_h_uv_params;

/* bwd_post: grid (nblk, H), CTA (b, h) takes tokens [b TB, b TB + TB) of head h
 * and its HV/H value heads (tokens: the B*T rows, sequences do not matter). */
typedef struct kdart_bwd_post_params {
    const float *dq_in;   /* [N,HV,K] fp32, summed over each head's value heads */
    const float *dk_in;   /* [N,HV,K] fp32 */
    const void *q;        /* [N,H,K]  io dtype, the l2-normalized q (read with q_rstd) */
    const void *k;        /* [N,H,K]  io dtype (read with k_rstd) */
    const float *q_rstd;  /* [N,H]    fp32, or NULL: no l2norm backward for q */
    const float *k_rstd;  /* [N,H]    fp32, or NULL */
    const float *dg_in;   /* [N,HV,K] fp32, the gate gradient after the reverse cumsum */
    const void *g_raw;    /* [N,HV,K] io dtype or fp32 (G_IO), or NULL: no gate backward */
    const float *A_log;   /* [HV]     fp32 (with g_raw) */
    const float *dt_bias; /* [HV,K]   fp32, or NULL */
    const float *db_in;   /* [N,HV]   fp32 */
    const void *beta_raw; /* [N,HV]   io dtype or fp32 (BETA_IO): logits, or NULL: no sigmoid */
    float *workspace;     /* [256 * HV * (K+1) + H] fp32: partials, then H zeroed counters */
    void *dq;             /* [N,H,K]  io dtype */
    void *dk;             /* [N,H,K]  io dtype */
    void *dg;             /* [N,HV,K] io dtype or fp32 (G_IO) */
    void *db;             /* [N,HV]   io dtype or fp32 (BETA_IO) */
    float *dA_log;        /* [HV]     fp32 (with g_raw) */
    float *ddt_bias;      /* [HV,K]   fp32, or NULL */
    float lower_bound;    /* the safe gate's bound */
    int safe_gate;        /* 1: lower_bound * sigmoid(exp(A_log) x); 0: -exp(A_log) softplus(x) */
    float beta_scale;     /* 1, or 2 with allow_neg_eigval */
    int N, H, HV, K;
    int TB;               /* tokens per CTA */
    /* 1: wy_dqkg's launch wrote dg and db (kdart_intra_post_params): the grid's z = 0 CTAs sum its
     * partial rows (rows of them, [rows][HV][K + 4] at workspace, where g_raw is given) into dA_log and
     * ddt_bias, z = 1 and 2 take dq and dk; 2: it wrote dq and dk too, the grid is z = 0 alone */
    int fused;
    int rows;
} kdart_bwd_post_params;

#endif /* KDART_KDA_PARAMS_H */
