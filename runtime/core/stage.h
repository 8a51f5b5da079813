/*
 * stage.h: a stage of the backward, described in one place.
 *
 * A stage is one kernel of kernel_src/ and, when users call it, the
 * operation around it (kdart_kda_<stage>, kdart_op_run).  Its file under
 * runtime/core/stages/ holds one kdart__kernel (rt.h): the registry row
 * (source, template entry, specialization parameters, launch shape, default
 * prewarm rule) and, here, its operation: the public args struct's tensors
 * and scalars with their dtypes, dims and offsets, and four hooks:
 *   dims    the call's sizes from its anchor tensors and the checks that are
 *           the stage's own (head dims, head ratios, grid limits);
 *   choose  the specialization (and grid) for those sizes;
 *   launch  the params struct, filled from the call, and the launch.
 * Everything else is done from the table by stage.c, the same way for every
 * stage: struct_size, each tensor's dtype, shape, contiguity, device and
 * alignment, cu_seqlens and fla's index tensors, overlaps, KDART_CHECK,
 * preparing the unit, kdart_spec_for, and the description kdart_op_arg gives
 * bindings (the Python package builds its argument structs, fake outputs and
 * spec queries from it) and the CLI.
 *
 * Tests may add a stage of their own with kdart__stage_register (the one
 * declared test interface of the registry): it is then listed, prepared and
 * launched like the built-in ones.
 */
#ifndef KDART_STAGE_H
#define KDART_STAGE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rt.h"

/* The sizes a stage's tensors are written in (kdart__targ.dims). */
enum {
    KDART__D_B,  /* batch rows (1 with cu_seqlens) */
    KDART__D_T,  /* tokens per row */
    KDART__D_H,  /* query/key heads */
    KDART__D_HV, /* value heads (a multiple of H) */
    KDART__D_K,  /* head dim */
    KDART__D_V,  /* value dim */
    KDART__D_N,  /* sequences (B, or cu_seqlens's N) */
    KDART__D_NT, /* chunk rows of a per-chunk state */
    KDART__D_HB, /* the batch dim of a per-chunk state (B; 1 when packed) */
    KDART__D_S1, /* a state's first trailing dim: K, or V with state_v_first */
    KDART__D_S2, /* its second: V, or K */
    KDART__D_64, /* the chunk size */
    KDART__D_W,  /* a workspace's elements */
    KDART__ND
};

/* A tensor's dims, written once as symbols: KDART__DIMS(B, T, HV, K) gives
 * the count, the KDART__D_* array and the text "B, T, HV, K" that
 * kdart_op_arg hands bindings. */
#define KDART__CAT_(a, b) a##b
#define KDART__CAT(a, b) KDART__CAT_(a, b)
#define KDART__NARG_(a, b, c, d, e, n, ...) n
#define KDART__NARG(...) KDART__NARG_(__VA_ARGS__, 5, 4, 3, 2, 1, 0)
#define KDART__SYMS_1(a) KDART__D_##a
#define KDART__SYMS_2(a, b) KDART__D_##a, KDART__D_##b
#define KDART__SYMS_3(a, b, c) KDART__D_##a, KDART__D_##b, KDART__D_##c
#define KDART__SYMS_4(a, b, c, d) KDART__D_##a, KDART__D_##b, KDART__D_##c, KDART__D_##d
#define KDART__SYMS_5(a, b, c, d, e) KDART__D_##a, KDART__D_##b, KDART__D_##c, KDART__D_##d, KDART__D_##e
#define KDART__DIMS(...) \
    KDART__NARG(__VA_ARGS__), {KDART__CAT(KDART__SYMS_, KDART__NARG(__VA_ARGS__))(__VA_ARGS__)}, #__VA_ARGS__

/* What a tensor argument's dtype must be. */
enum {
    KDART__DT_IO,     /* the call's io dtype (bf16 or fp16, from the first tensor) */
    KDART__DT_F32,    /* float32 */
    KDART__DT_IO_F32, /* either (each its own specialization) */
    KDART__DT_FLAG,   /* the io dtype when the int scalar named by flag is nonzero, else float32 */
};

/* Argument flags. */
#define KDART__A_OUT 1u      /* written by the kernel (after every input in the table) */
#define KDART__A_OPTIONAL 2u /* may be NULL */

typedef struct kdart__targ {
    const char *name;  /* as error messages and kdart_op_arg name it: "q", "do" */
    size_t offset;     /* of its `const DLTensor *` in the args struct */
    unsigned char dtype, flags, ndim;
    unsigned char dims[5];  /* KDART__D_* */
    const char *dims_text;  /* "B, T, HV, K" */
    const char *flag;       /* KDART__DT_FLAG: the int scalar that picks the dtype, by name (kdart_op_arg) */
    size_t flag_offset;     /* and where it is in the args struct (the launch path reads it there) */
} kdart__targ;

/* One row of a stage's tensor table: the argument's name, the args struct's
 * type and field, its dtype (KDART__DT_*), flags and dims. */
#define KDART__TARG(nm, TYPE, field, dt, fl, ...) {nm, offsetof(TYPE, field), dt, fl, KDART__DIMS(__VA_ARGS__), NULL, 0}
/* A tensor whose dtype the int field flag of the args struct picks (KDART__DT_FLAG). */
#define KDART__TARG_FLAG(nm, TYPE, field, flag, fl, ...) \
    {nm, offsetof(TYPE, field), KDART__DT_FLAG, fl, KDART__DIMS(__VA_ARGS__), #flag, offsetof(TYPE, flag)}

typedef struct kdart__sarg {
    const char *name; /* "scale" */
    size_t offset;
    char type; /* 'i' int, 'f' float */
} kdart__sarg;
#define KDART__SARG(nm, TYPE, field, type) {nm, offsetof(TYPE, field), type}

#define KDART__MAX_TARGS 20
#define KDART__MAX_SARGS 6

/* How a call's tokens split into sequences. */
typedef struct kdart__seqs {
    const DLTensor *cu; /* cu_seqlens, or NULL: B rows of T tokens */
    int64_t N;          /* sequences */
    int is64;           /* cu_seqlens is int64 */
    int64_t ci_rows;    /* rows of chunk_indices, -1 when not given */
    int varlen;         /* the varlen=1 specialization (cu_seqlens, or T % 64 != 0) */
} kdart__seqs;

/* One call of an operation, as the hooks see it. */
typedef struct kdart__call {
    const struct kdart__op *op;
    const void *args;
    uint32_t size;  /* the caller's struct_size */
    int plan;       /* kdart_spec_for: layouts only, no memory is looked at */
    int io;         /* 0 bf16, 1 fp16 (set by dims from its first tensor) */
    int64_t d[KDART__ND];
    kdart__seqs sq;
    int64_t max_chunks; /* KDART_CHECK: the most chunks the call has room for */
    int vals[KDART__MAX_PARAMS];
    unsigned grid[2];
    int aux[6]; /* the stage's own, from dims and choose to launch */
    void *extra; /* kdart__op_call_ex's: what one stage's call takes from another's (NULL: nothing) */
} kdart__call;

typedef struct kdart__op {
    size_t args_size;      /* sizeof the args struct */
    size_t args_first_new; /* the end of its oldest accepted form (== args_size: none older) */
    const char *args_type; /* "kdart_wy_dqkg_args", for messages */
    int ntargs, nsargs;
    kdart__targ targs[KDART__MAX_TARGS];
    kdart__sarg sargs[KDART__MAX_SARGS];
    /* offsets of cu_seqlens, chunk_indices, chunk_offsets (0: not taken) */
    size_t cu_off, ci_off, co_off;
    int (*dims)(kdart_rt *rt, kdart__call *c);
    int (*choose)(kdart_rt *rt, kdart__call *c);
    int (*launch)(kdart_rt *rt, const kdart__call *c, const kdart__unit *u, void *fn, int *status, void *stream);
} kdart__op;

/* BwdIntraTraits<K>::kSmemBytes (kernel_src/bwd_intra.cuh): bwd_intra's dynamic
 * shared memory, which wy_dqkg's intra kernels take too: 64-column passes, so
 * only the db partials ([64][2 * K/64] fp32) grow with the K tile. */
#define KDART__INTRA_SMEM(K) (111872 + 64 * 4 * 2 * ((K) / 64))

/* Parameters several stages share (kdart__param rows). */
#define KDART__IO_PARAM {"io", 2, {"bf16", "fp16"}, {"kdart::bf16", "kdart::fp16"}, 0}
#define KDART__K_PARAM {"K", 3, {"64", "128", "256"}, {"64", "128", "256"}, 1}
#define KDART__FLAG_PARAM(n) {n, 2, {"0", "1"}, {"false", "true"}, 0}
/* beta in the io dtype, or fp32 (what fla hands the stages when chunk_kda
 * applies the beta sigmoid itself, the configuration most models train with) */
#define KDART__BETA_PARAM {"beta", 2, {"io", "f32"}, {"false", "true"}, 0}

/* ------------------------------------------------ helpers for the hooks */

/* The tensor at offset off of the call's args (NULL past the caller's struct_size). */
const DLTensor *kdart__arg(const kdart__call *c, size_t off);
/* A tensor's data address (data + byte_offset). */
static inline const void *kdart__ptr(const DLTensor *t) {
    return t ? (const void *)((uintptr_t)t->data + (uintptr_t)t->byte_offset) : NULL;
}
/* 0 bf16, 1 fp16, 32 fp32, -100 anything else; and its name. */
int kdart__dtype_of(const DLTensor *t);
const char *kdart__dtype_name(int d);
/* The call's io dtype from tensor t (named name): ENULL/ESHAPE unless it is
 * ndim-dimensional, EDTYPE unless bf16/fp16. */
int kdart__call_io(kdart_rt *rt, kdart__call *c, const DLTensor *t, const char *name, int ndim);
/* K in 1..256, V in 1..512. */
int kdart__check_head_dim(kdart_rt *rt, int64_t K);
int kdart__check_value_dim(kdart_rt *rt, int64_t V);
/* B, T, H, HV >= 1 and HV a multiple of H (hv_from: the tensor HV was read
 * from, for the message). */
int kdart__check_heads(kdart_rt *rt, int64_t B, int64_t T, int64_t H, int64_t HV, const char *hv_from);
/* cu_seqlens and fla's index tensors of the op (offsets in kdart__op): shapes
 * and dtypes, on the host; fills c->sq. */
int kdart__call_seqs(kdart_rt *rt, kdart__call *c, int64_t B, int64_t T);
/* Packed sequences: the chunk rows of a per-chunk state ([1,NT,HV,..]),
 * which only the device can count: any NT >= 1 (>= chunk_indices's rows). */
int kdart__packed_chunk_rows(kdart_rt *rt, const kdart__call *c, const DLTensor *t, const char *name, int svf,
                             int64_t *NT);
/* The grid of a stage with one CTA per (chunk, value head), and its
 * specialization's varlen (forced by varlen, by B*HV past the grid's 65535
 * in y, or already set by kdart__call_seqs): fixed length (T/64, B*HV);
 * the varlen body (T/64 + N, HV) packed, (B*ceil(T/64), HV) per row.  Sets
 * c->grid and c->max_chunks; EUNSUPPORTED past 32-bit sizes. */
int kdart__chunk_grid(kdart_rt *rt, kdart__call *c, int64_t B, int64_t T, int64_t HV, int varlen);
/* The int field at offset off of the call's args (0 past the caller's struct_size: a field an older
 * caller's struct does not have). */
int kdart__arg_int(const kdart__call *c, size_t off);

/* ----------------------------------------------------------- the engine */

/* Checks, chooses and launches one call of kernel k's operation; so != NULL:
 * kdart_spec_for (the canonical spec written into so_buf, its length returned). */
int kdart__op_call(kdart_rt *rt, const kdart__kernel *k, const void *args, void *stream, char *so_buf,
                   size_t so_n);
/* The same launch with extra in the call (the stage's choose and launch read it as they document).
 * kdart_kda_chunk_bwd's packed calls on bwd_dhu's V split (the dAv fused in its 64-column scans) pass the
 * split's dv (a DLTensor) to two: bwd_dav writes it for the sequences the split scans 32 columns wide
 * alone (its long_only mode), and bwd_dhu reads it there, beside its Aqk. */
int kdart__op_call_ex(kdart_rt *rt, const kdart__kernel *k, const void *args, void *stream, void *extra);

/* kdart_kda_chunk_bwd's split of the backward's last step between wy_dqkg's launch and bwd_post's.
 * wy_dqkg (extra of its call) takes the gate's and beta's part where its kernel can (intra, a native K
 * tile, dg in the io dtype, part large enough), and at level 2 dq's and dk's too where HV == H, and sets
 * fused to what it took (0, 1: the gate's part, 2: everything); bwd_post (extra of its call) then does the
 * rest: dq and dk (fused 1), and dA_log / ddt_bias summed from part's rows. */
typedef struct kdart__post_split {
    const kdart_bwd_post_args *post; /* the last step's args (checked) */
    const DLTensor *part;            /* fp32, kdart__post_part_floats(rows, HV, K) elements (with the gate) */
    int64_t rows;                    /* wy_dqkg's grid rows (B * NT; packed T / 64 + N) */
    int level;                       /* 1: the gate's part at most, 2: dq and dk too */
    int fused;
} kdart__post_split;
/* The partial rows' floats: a row of K + 4 per chunk row and value head. */
int64_t kdart__post_part_floats(int64_t rows, int64_t HV, int64_t K);

/* The declared test interface: adds a stage (its kdart__kernel, with or
 * without an operation) to the registry, before any handle is opened;
 * KDART_EINVAL when the registry is full, the name is taken or the stage
 * has more specializations than a kernel may (KDART__MAX_SPECS). */
int kdart__stage_register(const kdart__kernel *k);

#endif /* KDART_STAGE_H */
