/*
 * bwd_intra.cuh: KDA backward, intra-chunk stage (fla chunk_kda_bwd_intra).
 *
 * Math: docs/kernels.md, "bwd_intra".  Per (b, hv, chunk c),
 * t0 = 64c, r,s in [0,64), E(r,s,d) = exp2(g[r,d] - g[s,d]) for s <= r:
 *   Aq[r,d] = sum_{s<=r} dAqk[r,s] k[s,d] E(r,s,d)
 *   Ak[r,d] = sum_{s< r} dAkk[r,s] k[s,d] E(r,s,d)
 *   Ct[s,d] = sum_{r>=s} (dAqk[r,s] q[r,d] + dAkk[r,s] beta[r] k[r,d]) E(r,s,d)
 *   dq = dq_in + Aq;  dk = dk_in + beta*Ak + Ct;  db = db_in + sum_d k*Ak
 *   dg = dg_in + q*Aq + (beta*Ak - Ct)*k      (suffix-summed per chunk if FOLD_DG)
 *
 * LAUNCH CONTRACT (mirrored by the runtime; see BwdIntraTraits below):
 *   kernel   kdart_bwd_intra<IO, FOLD_DG, EMIT_IO, K, VARLEN, TAIL, BETA_F32>, IO in
 *            {kdart::bf16, kdart::fp16}, K (the K tile) in {64, 128, 256}, TAIL (the
 *            registry's tail parameter) in {false, true}, BETA_F32 (the registry's beta
 *            parameter: beta in fp32 rather than the io dtype); only parameter kdart_bwd_intra_params
 *            (VARLEN = false: its fixed-length prefix, see FixedParams).  TAIL = true
 *            needs VARLEN (<.., false, true> is a trap stub that is never launched);
 *            see "HEAD DIM" below.
 *   grid     (T/64, B*HV, 1): blockIdx.x = chunk, blockIdx.y = b*HV + hv.
 *            VARLEN: (NT, HV, 1): blockIdx.x = global chunk i of all sequences
 *            (p.NT >= the total), blockIdx.y = hv; see "VARLEN" below.
 *   block    (BwdIntraTraits<K>::kThreads, 1, 1) = 256 threads for every K tile.
 *   smem     BwdIntraTraits<K>::kSmemBytes bytes of DYNAMIC shared memory:
 *            111872 + 512 per 64-column pass (only the db partials grow), so
 *            112384 for K=64, 112896 for K=128, 113920 for K=256 (the stage file's
 *            INTRA_SMEM, runtime/core/stages/bwd_intra.c); the runtime must set
 *            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to it.
 *            __launch_bounds__(256, 2): 128 registers, two CTAs per SM, at
 *            every K tile.
 *   Requires T % 64 == 0 (VARLEN: any T), HV % H == 0; outputs never alias inputs; every
 *   tensor 16-byte aligned (16-byte cp.async copies, vector loads and stores;
 *   the runtime checks it); sm_80 or newer (cp.async, ldmatrix, tf32 mma).
 *   Upper triangles of dAqk (s > r) and dAkk (s >= r) are never used in any
 *   arithmetic (garbage/NaN there is harmless); of those entries only the ones
 *   inside the 16x16 diagonal blocks are even loaded (whole 16-byte vectors).
 *
 * Structure (one CTA per (chunk, b*hv), two CTAs per SM so that one's loads
 * overlap the other's compute).  Everything but db is column-separable, so the
 * CTA walks the K columns in passes of 64 (K=256: four passes, K=128: two,
 * K=64: one).
 * Before the first pass, the lower blocks of dAqk, dAkk are cp.async'd into a
 * compact shared layout (the first phase A waits for them) and beta is loaded.
 * Per pass:
 *   phase A  the pass's columns of q, k (io dtype), g are copied into shared
 *            memory with 16-byte cp.async.cg (L1 bypassed, no register
 *            staging), like the dA blocks in thread maps with compile-time
 *            steps: one base address per thread and array, a fixed offset
 *            per step (generic v += NTH loops cost 600 instructions per warp
 *            before the CTA's last load went out; 4% at K = 64).  A later
 *            pass's q, k and g were already issued during the previous pass's
 *            phase D, so its phase A only waits.  Phase A also prefetches the
 *            next pass's g into L2.
 *            First pass only: the off-diagonal blocks of dAqk/dAkk, which are
 *            only ever phase B's mma A operands, are rounded to tf32 once (to
 *            nearest even on sm_90+, a single F2FP instruction), in place, by
 *            the threads that copied them, instead of by every warp in every
 *            pass.
 *   phase B  cross-block terms (16x16 sub-blocks off the diagonal) as tf32
 *            mma.sync m16n8k8 GEMMs; warp w owns pass columns [8w, 8w+8).  The
 *            row side's A fragments come straight from the rounded dA rows
 *            with ldmatrix (a tf32 8x4 tile read as an 8x8 b16 tile); the
 *            column side needs dA transposed and reads its elements singly.
 *            Phase B starts by prefetching into L2 the pass's 64 x 64 tiles of
 *            dq_in, dk_in, dg_in (read by phase D, after phases B and C have
 *            hidden the latency; issued in phase A, they competed with the
 *            loads it waits for), and the next pass's q, k, g lines.
 *            Gate factorization through block-boundary pivots, every exp2
 *            argument <= 0 for any gate magnitude:
 *              row side, target block i (1..3), pivot e = 16i (first row of i):
 *                X_Aq[r,d] = exp2(g_r - g_e) * sum_{s<16i} dAqk[r,s] (k[s] exp2(g_e - g_s))
 *              column side, source block i (0..2), pivot p = 16i+15 (last row of i):
 *                X_Ct[s,d] = exp2(g_p - g_s) * sum_{r>p} (dAqk[r,s] q[r] + dAkk[r,s] beta[r] k[r]) exp2(g_r - g_p)
 *            Each thread computes its gated B operands once per pass and moves
 *            them from one pivot to the next with a factor exp2(g_e - g_e') <= 1
 *            (the column side runs i = 2, 1, 0 for that), instead of one exp2 and
 *            three shared loads per operand and block; and the column side's
 *            m16 rows are s = 16i + 2 gid (+1), which makes each pair of its
 *            A-fragment registers one 8-byte load of a dA row.  Phase B was
 *            bound by the shared-memory instruction queue (MIO stalls): these
 *            took 120 of its 560 shared loads away, 2-3% of the kernel time.
 *            Results land in shared memory (fp32).
 *   phase C  diagonal 16x16 blocks in SIMT fp32, thread (i = tid/64, d = tid%64)
 *            owns block i, pass column d: one direct exp2 per (r,s,d) pair, shared
 *            by the row side (Aq, Ak) and the column side (Ct).  Rows are
 *            walked from 15 down to 0 so that after step r all three of
 *            Aq[r], Ak[r], Ct[r] are final.  Phase C touches no global memory:
 *            the row's contributions (without the incoming grads) go to
 *            shared-memory slots that the thread has already consumed:
 *            dq' -> sG(R,d), dk' -> sXk row R-16 (block 0: the Dk0 region just
 *            below sXk, so that the address is uniform), dg' -> Xc row R
 *            (blocks 0..2) / Xq row R-16 (block 3).  The db partial k*Ak of
 *            each row is kept in a register until the block is done; then one
 *            transposing butterfly reduces all 16 rows over the warp's 32
 *            columns (16 shuffles, where a per-row reduction needed 80 in
 *            dependent chains of five: 5% of the kernel's time).
 *   phase D  streaming, in a map made for coalescing rather than for phase C:
 *            thread t owns rows 16j + t/16 (j = 0..3) and pass columns
 *            4(t%16)..4(t%16)+3.  All its 16-byte loads of dq_in, dk_in (and
 *            dg_in) are issued before any use; a one-pass CTA (K = 64) issues
 *            them at the end of phase C, before the barrier, so that waiting
 *            for the other warps overlaps their latency (3%; at K = 128 the
 *            same move measured 1% slower); the slots are added with
 *            16-byte shared loads and the results written with 16-byte
 *            st.global.cs.v4.f32 (EMIT_IO: dq, dk as 8-byte stores of four io
 *            values).  The next pass's q, k cp.async copies start right after
 *            the loads (phase D does not read sQ/sK); each thread copies the
 *            next pass's g into its own dq' slots of sG once it has read them
 *            (2% at prod8192, 5% with fold+emit).  FOLD_DG: thread
 *            (i = tid/64, d) instead loads the 16 dg_in of its block's column
 *            d, suffix-sums dg_in + dg' in place in the slots and stores the
 *            block total in sTot; after a barrier every row adds the totals of
 *            the later blocks (summed in the fixed order 3, 2, 1).
 *   No barrier ends a pass: the next phase A's barrier orders this phase D
 *   before the next phase B writes the X tiles, and the only shared memory
 *   written in between (sQ, sK by the early copies, sG by each thread into
 *   its own consumed slots) is not read by any other thread of phase D.
 * After the passes: db (fixed-order sum of the per-(pass, warp) partials).
 *
 * Registers: everything has to fit in 128 per thread without spills.  With
 * two passes, ptxas would otherwise compute tid- and row-derived addresses
 * once, outside the pass loop, and hold them across phase C, which needs all
 * 128 registers.  So threadIdx.x is re-read with a volatile asm in every phase
 * (vtid); the token row bases rowQ0/rowV0 are recomputed from %ctaid (volatile)
 * where phase A needs them and kept in shared memory for phases B..D and db,
 * which read them back after a barrier; phase D adds an opaque zero
 * read from shared memory to its tid and strides.  (Phase C's row steps
 * needed __syncwarp scheduling fences while phase C still read global
 * memory; without them ptxas now overlaps neighbouring rows within the
 * 128 registers, 1% faster.)
 * VARLEN (packed sequences per cu_seqlens, or B rows of any T): before anything
 * else every CTA scans all of cu_seqlens (block-wide prefix sum of ceil(T_n/64),
 * NTH sequences per step), which validates it and finds the CTA's sequence n and
 * chunk c; bad cu_seqlens: CTA (0, 0) atomicOr's KDART_DEVERR_* into *p.status and
 * every CTA returns before any global store.  The chunk at token t0 = bos + 64c has
 * valid = min(64, eos - t0) rows; the rest of the kernel is the fixed-length one
 * with masked memory access only, no change in phases B and C:
 *   - q, k, dAqk, dAkk rows >= valid are zero-filled (cp.async src-size 0), beta,
 *     dq_in, dk_in, dg_in rows read as 0; g rows >= valid are copies of row
 *     valid - 1, so g stays non-increasing down the chunk and every exp2 argument
 *     stays <= 0 as in a full chunk (all factors in [0, 1]: gates of -1000 per
 *     step, g down to -1000 * 63 / ln 2 = -9.1e4 within a chunk, underflow to 0,
 *     never overflow).
 *     Every term that pairs an invalid row with any row then is (finite) x 0 = 0
 *     exactly, so invalid rows add nothing to Ct, db or the fold_dg suffix sums of
 *     valid rows (their own dq', dk', dg' are exact zeros, never stored).
 *   - dA columns >= valid of a valid row r are above its diagonal (s > r): never
 *     used, as in the fixed-length kernel.
 *   - no store (and no L2 prefetch) of a row >= valid; tokens outside the
 *     sequences are never touched.
 *   Offsets are 64-bit in both paths (token bases and strides are long long).
 *
 * HEAD DIM: K is the K tile (64-column passes: 1, 2 or 4); the head dim
 * Kr = p.Kr may be anything in 1..K.  Kr == K runs the TAIL = false bodies, which
 * are the kernels as they were before head dims existed; any other Kr runs the
 * TAIL = true specialization (VARLEN only: FixedParams has no Kr, so the host
 * launches it with cu_seqlens = NULL for fixed-length batches too).  The tail
 * body's token rows are Kr elements long (not 16-byte aligned in general), so its
 * global loads and stores go element by element: columns >= Kr read as 0 (q, k, g,
 * dq_in, dk_in, dg_in) and are never written; passes wholly past Kr are skipped.
 * Zero columns add nothing to any sum over d (db) and have no effect on the other
 * columns, whose terms never mix columns (dg's suffix sum runs down a column).  The
 * tail is a specialization of its own rather than a branch of the native kernel,
 * so that the native kernels keep their registers and their code.  The tail bodies fit
 * the same 128 registers without spills on sm_90a and sm_100a; on sm_90a that took
 * two things (see opaque_ptr and MULTI_TAIL): element addresses that NVVM cannot
 * hoist as loop-invariant pointers, and pass tests against the parameter Kr itself.
 * Outputs are stored with st.global.cs (evict-first).
 * Deterministic: no atomics; every reduction has a fixed order.
 */
#ifndef KDART_BWD_INTRA_CUH
#define KDART_BWD_INTRA_CUH

#include "kdart_common.cuh"

template <int K>
struct BwdIntraTraits {
    /* K is the K tile; the real head dim Kr (1..K, run time) is served by the VARLEN
     * specializations, see "HEAD DIM" in the header */
    static_assert(K == 64 || K == 128 || K == 256, "bwd_intra supports K tiles {64, 128, 256}");
    static constexpr int kBT = 64;             /* chunk rows */
    static constexpr int kBC = 16;             /* diagonal block rows */
    static constexpr int kKH = 64;             /* columns per pass */
    static constexpr int kPasses = K / kKH;    /* column passes per CTA (4 / 2 / 1) */
    static constexpr int kThreads = 4 * kKH;   /* (block i, column d) of one pass in phase C: 256 */
    static constexpr int kWarps = kThreads / 32;
    static_assert(kWarps * 8 == kKH, "phase B: one 8-column n-tile per warp");
    static constexpr int kKP = kKH + 8;        /* padded row stride of q/k/g/X (elements) */
    static constexpr int kWPB = kKH / 32;      /* warps per diagonal block in phase C */
    static constexpr int kDbSlots = kWPB * kPasses; /* db partials per row */
    /* dAqk/dAkk are stored compactly in [48][kDAP]: row r of block 1..3 (columns
     * 0..16*blk+15 used) at (r-16)*kDAP; row r of block 0 (columns 0..15) at
     * (r+16)*kDAP + 48, i.e. in the unused columns 48..63 of block 2's rows */
    static constexpr int kDAP = 72;
    static constexpr int kDAFloats = 48 * kDAP;
    /* byte offsets inside dynamic shared memory */
    static constexpr int kOffQ = 0;                                  /* io  [64][KP] */
    static constexpr int kOffK = kOffQ + kBT * kKP * 2;              /* io  [64][KP] */
    static constexpr int kOffG = kOffK + kBT * kKP * 2;              /* f32 [64][KP] */
    static constexpr int kOffAqk = kOffG + kBT * kKP * 4;            /* f32 compact */
    static constexpr int kOffAkk = kOffAqk + kDAFloats * 4;          /* f32 compact */
    static constexpr int kOffXq = kOffAkk + kDAFloats * 4;           /* f32 [48][KP] rows 16..63 */
    static constexpr int kOffDk0 = kOffXq + 48 * kKP * 4;            /* f32 [16][KP] dk' of rows 0..15 */
    static constexpr int kOffXk = kOffDk0 + 16 * kKP * 4;            /* f32 [48][KP] rows 16..63 */
    static constexpr int kOffXc = kOffXk + 48 * kKP * 4;             /* f32 [48][KP] rows 0..47 */
    static constexpr int kOffBeta = kOffXc + 48 * kKP * 4;           /* f32 [64] */
    static constexpr int kOffDbp = kOffBeta + kBT * 4;               /* f32 [64][kDbSlots] */
    static constexpr int kOffTot = kOffDbp + kBT * kDbSlots * 4;     /* f32 [4][kKH] */
    static constexpr int kSmemBytes = kOffTot + 4 * kKH * 4;
    /* CTAs per SM asked of ptxas (__launch_bounds__): 2 = 128 registers per thread */
    static constexpr int kMinBlocks = 2;
    /* two CTAs per SM: 2 x (smem + 1 KB reserved) <= 228 KB */
    static_assert(kSmemBytes <= 113 * 1024, "smem budget: two CTAs per SM");
    static_assert(kOffK % 16 == 0 && kOffG % 16 == 0 && kOffAqk % 16 == 0 && kOffAkk % 16 == 0 &&
                  kOffXq % 16 == 0 && kOffDk0 % 16 == 0 && kOffXk % 16 == 0 &&
                  kOffXc % 16 == 0 && kOffBeta % 16 == 0 && kOffTot % 16 == 0,
                  "16-byte aligned regions");
    static_assert((kKP * 2) % 16 == 0 && (kDAP * 4) % 16 == 0,
                  "16-byte aligned rows");
};
static_assert(BwdIntraTraits<128>::kThreads == 256 && BwdIntraTraits<128>::kSmemBytes == 112896,
              "contract K=128");
static_assert(BwdIntraTraits<64>::kThreads == 256 && BwdIntraTraits<64>::kSmemBytes == 112384,
              "contract K=64");
/* K = 256: the K = 128 kernel with four passes; only the db partials grow (8 per row) */
static_assert(BwdIntraTraits<256>::kThreads == 256 && BwdIntraTraits<256>::kSmemBytes == 113920,
              "contract K=256");

namespace kdart {
namespace intra {

/* exp2 of an argument that is always <= 0 here; ftz: denormal results -> 0 */
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned r;
#if __CUDA_ARCH__ >= 900
    /* round to nearest even: one F2FP instruction on sm_90+ (cvt.rna is emulated
     * there with three) */
    asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
#else
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
#endif
    return r;
}
/* D = A(16x8, row) * B(8x8, col) + D, tf32 inputs, fp32 accumulate */
__device__ __forceinline__ void mma_tf32(float (&c)[4], unsigned a0, unsigned a1, unsigned a2,
                                         unsigned a3, unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
template <typename IO>
__device__ __forceinline__ float ld_io(const unsigned short *s, int idx) {
    IO x;
    x.bits = s[idx];
    return to_float(x);
}
/* one io value from a register holding two (hi = 0: low half) */
template <typename IO>
__device__ __forceinline__ float unpack_io(unsigned x, int hi) {
    IO v;
    v.bits = (unsigned short)(hi ? (x >> 16) : (x & 0xffffu));
    return kdart::to_float(v);
}
__device__ __forceinline__ unsigned fbits(float x) { return __float_as_uint(x); }
/* four 8x4 tf32 tiles (as 8x8 b16) = one m16n8k8 A fragment, rows from this lane's address */
__device__ __forceinline__ void ldsm_x4_u32(unsigned addr, unsigned &a0, unsigned &a1, unsigned &a2, unsigned &a3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3) : "r"(addr) : "memory");
}
/* stores of write-once outputs: evict-first (st.global.cs), so that they do not
 * push the prefetched input lines out of L2 */
__device__ __forceinline__ void st_out4(float *a, float4 v) {
    asm volatile("st.global.cs.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(a), "f"(v.x), "f"(v.y), "f"(v.z),
                 "f"(v.w)
                 : "memory");
}
/* four io values (8 bytes) */
template <typename IO>
__device__ __forceinline__ void st_out4io(unsigned short *a, float4 v) {
    const unsigned lo = kdart::pack2<IO>(v.x, v.y), hi = kdart::pack2<IO>(v.z, v.w);
    asm volatile("st.global.cs.v2.b32 [%0], {%1, %2};" ::"l"(a), "r"(lo), "r"(hi) : "memory");
}
__device__ __forceinline__ float4 add4(float4 a, float4 b) {
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}
__device__ __forceinline__ float4 lds4(const float *s) { return *reinterpret_cast<const float4 *>(s); }
__device__ __forceinline__ float4 ldg4(const float *g) { return __ldg(reinterpret_cast<const float4 *>(g)); }
/* 16-byte global -> shared copy, L1 bypassed */
__device__ __forceinline__ void cp16s(unsigned s, const void *gsrc) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gsrc) : "memory");
}
__device__ __forceinline__ void cp_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
/* VARLEN: the same copy, or 16 zero bytes when !ok (src-size 0: nothing is read;
 * the caller still passes an address inside the sequence) */
__device__ __forceinline__ void cp16z(unsigned s, const void *gsrc, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gsrc), "r"(ok ? 16 : 0)
                 : "memory");
}
/* The kernel's parameter.  VARLEN specializations take kdart_bwd_intra_params; the
 * others take its fixed-length prefix, the 128-byte struct it was before the VARLEN
 * fields were appended (cuLaunchKernel copies as many bytes of the host's struct as
 * the kernel's parameter has, so the host passes the one struct to both).  Why: NVVM
 * lowers a byval kernel parameter whose address the lambdas take differently above
 * 128 bytes (loads through a parameter pointer at each use instead of all fields at
 * entry), which moved registers and instructions all through the fixed-length
 * kernels; with the prefix their SASS is what it was, byte for byte. */
struct FixedParams {
    const void *q, *k;
    const float *g;
    const void *beta;
    const float *dAqk, *dAkk, *dq_in, *dk_in, *dg_in, *db_in;
    void *dq, *dk;
    float *dg, *db;
    int B, T, H, HV;
};
/* (NVRTC has no offsetof: the sizes pin the layouts, the field list is kda_params.h's) */
static_assert(sizeof(FixedParams) == 14 * 8 + 4 * 4 && sizeof(kdart_bwd_intra_params) == 14 * 8 + 4 * 4 + 2 * 8 + 4 * 4,
              "FixedParams: the fixed-length prefix of kdart_bwd_intra_params");
template <bool VARLEN> struct ParamsOf { using type = kdart_bwd_intra_params; };
template <> struct ParamsOf<false> { using type = FixedParams; };
/* cu_seqlens[j], int32 or int64 */
__device__ __forceinline__ long long ld_cu(const void *cu, int is64, int j) {
    return is64 ? __ldg(static_cast<const long long *>(cu) + j) : (long long)__ldg(static_cast<const int *>(cu) + j);
}

/* Column tails (TAIL bodies only, see "HEAD DIM"): with Kr not a multiple of 8 the
 * token rows are not 16-byte aligned, so these move single elements.  n = how many of
 * the group's elements are columns < Kr (of a valid row; <= 0: none); the rest read as
 * 0 and are not written. */
__device__ __forceinline__ int ncols(int kr, int col, int w) { return min(kr - col, w); }
/* The element address g + e is formed from g after this empty asm, which NVVM cannot see
 * through: without it NVVM reassociates (base + row offset) + e into (base + e) + row
 * offset and hoists the three or seven base + e pointers out of the pass loop, 64-bit
 * registers held across phase C, which spilled on sm_90a. */
template <typename T>
__device__ __forceinline__ T *opaque_ptr(T *g) {
    asm("" : "+l"(g));
    return g;
}
__device__ __forceinline__ float4 ldg4m(const float *g, int n) {
    g = opaque_ptr(g);
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (n > 0) v.x = __ldg(g);
    if (n > 1) v.y = __ldg(g + 1);
    if (n > 2) v.z = __ldg(g + 2);
    if (n > 3) v.w = __ldg(g + 3);
    return v;
}
/* eight io values (raw bits) as one 16-byte shared-memory row chunk */
__device__ __forceinline__ uint4 ldg8m_io(const unsigned short *g, int n) {
    g = opaque_ptr(g);
    unsigned w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int e = 0; e < 8; ++e)
        if (e < n) w[e >> 1] |= (unsigned)__ldg(g + e) << (16 * (e & 1));
    return make_uint4(w[0], w[1], w[2], w[3]);
}
__device__ __forceinline__ void st_out1(float *a, float v) {
    asm volatile("st.global.cs.f32 [%0], %1;" ::"l"(a), "f"(v) : "memory");
}
__device__ __forceinline__ void st_out4m(float *a, float4 v, int n) {
    a = opaque_ptr(a);
    if (n > 0) st_out1(a, v.x);
    if (n > 1) st_out1(a + 1, v.y);
    if (n > 2) st_out1(a + 2, v.z);
    if (n > 3) st_out1(a + 3, v.w);
}
template <typename IO>
__device__ __forceinline__ void st_out4io_m(unsigned short *a, float4 v, int n) {
    const unsigned lo = kdart::pack2<IO>(v.x, v.y), hi = kdart::pack2<IO>(v.z, v.w);
    const unsigned short h[4] = {(unsigned short)lo, (unsigned short)(lo >> 16), (unsigned short)hi,
                                 (unsigned short)(hi >> 16)};
    a = opaque_ptr(a);
#pragma unroll
    for (int e = 0; e < 4; ++e)
        if (e < n) asm volatile("st.global.cs.b16 [%0], %1;" ::"l"(a + e), "h"(h[e]) : "memory");
}

} /* namespace intra */
} /* namespace kdart */

/* One kernel per specialization (see "HEAD DIM"): TAIL = false is the native body
 * (Kr == K), TAIL = true the column-tail body, which needs VARLEN's parameter (Kr);
 * <VARLEN = false, TAIL = true> is the stub below, which the host never launches (kdart
 * picks varlen = 1 with the tail).  (The body is the __global__ function itself: as a
 * __forceinline__ function called from a wrapper kernel, the native specializations'
 * SASS changed on sm_100a.) */
template <typename IO, bool FOLD_DG, bool EMIT_IO, int K, bool VARLEN, bool TAIL, bool BETA_F32>
__global__ kdart::enable_if_t<VARLEN || !TAIL> __launch_bounds__(BwdIntraTraits<K>::kThreads,
                                                                BwdIntraTraits<K>::kMinBlocks)
kdart_bwd_intra(const typename kdart::intra::ParamsOf<VARLEN>::type p) {
    using Tr = BwdIntraTraits<K>;
    using namespace kdart::intra;
    constexpr int KH = Tr::kKH;
    constexpr int KP = Tr::kKP;
    constexpr int NTH = Tr::kThreads;
    constexpr int DAP = Tr::kDAP;
    constexpr int NDB = Tr::kDbSlots;
    /* float offset of row 16*blk + rr in the compact dAqk/dAkk layout */
    auto daoff = [](int blk, int rr) {
        return blk == 0 ? (16 + rr) * DAP + 48 : (16 * (blk - 1) + rr) * DAP;
    };

    extern __shared__ __align__(16) unsigned char smem[];
    unsigned short *sQ = reinterpret_cast<unsigned short *>(smem + Tr::kOffQ);
    unsigned short *sK = reinterpret_cast<unsigned short *>(smem + Tr::kOffK);
    float *sG = reinterpret_cast<float *>(smem + Tr::kOffG);
    float *sAqk = reinterpret_cast<float *>(smem + Tr::kOffAqk);
    float *sAkk = reinterpret_cast<float *>(smem + Tr::kOffAkk);
    float *sXq = reinterpret_cast<float *>(smem + Tr::kOffXq); /* row R at (R-16)*KP */
    float *sXk = reinterpret_cast<float *>(smem + Tr::kOffXk); /* row R at (R-16)*KP */
    /* dk' slots: row R at R*KP (rows 0..15 in Dk0, rows 16..63 are sXk's rows) */
    float *sDk = reinterpret_cast<float *>(smem + Tr::kOffDk0);
    float *sXc = reinterpret_cast<float *>(smem + Tr::kOffXc); /* row R at R*KP */
    float *sBeta = reinterpret_cast<float *>(smem + Tr::kOffBeta);
    float *sDbp = reinterpret_cast<float *>(smem + Tr::kOffDbp);
    float *sTot = reinterpret_cast<float *>(smem + Tr::kOffTot);

    /* threadIdx.x through a volatile read in every phase: nothing derived from it is
     * hoisted out of the pass loop and held in registers across phase C */
    auto vtid = []() {
        if (Tr::kPasses == 1) return (int)threadIdx.x; /* no loop: nothing to hoist */
        unsigned t;
        asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
        return (int)t;
    };
    const int tid = vtid();
    const int T = p.T, H = p.H, HV = p.HV;
    /* KS: the token rows' length (elements; K, or Kr in a TAIL body), NP: the passes that
     * have columns < KS (the last one may be partial, later ones are skipped) */
    int KS = K;
    if constexpr (TAIL) KS = p.Kr;
    /* Tail bodies of a multi-pass tile (MULTI_TAIL) test "pass c0 has columns < Kr" as
     * c0 < KS and c0 + KH < KS, a compare with the parameter itself, instead of holding
     * NP and pass + 1 in registers across phase C (with those, and the pointers that
     * opaque_ptr keeps in the loop, the K = 128 tails spilled 24..48 bytes on sm_90a).
     * One-pass tiles have NP = 1 as a constant, since Kr <= K, so that the K = 64 tail
     * body has no pass loop either: with a run-time trip count it kept loop state and the
     * never taken next-pass copies across phase C and spilled up to 104 bytes. */
    constexpr bool MULTI_TAIL = TAIL && Tr::kPasses > 1;
    const int NP = MULTI_TAIL ? (KS + Tr::kKH - 1) / Tr::kKH : Tr::kPasses;
    /* row (token) base indices: [B,T,H] row of t0 (rowQ0) and [B,T,HV] row of t0 (rowV0),
     * computed from %ctaid where the one-time loads and phase A need them.  The reads
     * are volatile (for K=64 too), so that nothing is computed once and held in
     * registers across phase C. */
    auto row0 = [&](long long &rq, long long &rv) {
        if constexpr (VARLEN) { /* located once, before the first load (sRow below) */
            const long long *sr = reinterpret_cast<const long long *>(smem + Tr::kOffAqk + 64 * 4);
            rq = sr[0];
            rv = sr[1];
            return;
        }
        unsigned cx, cy;
        asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(cx));
        asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(cy));
        const int bb = (int)cy / HV;
        const int hvv = (int)cy - bb * HV;
        const long long tt = (long long)bb * T + (long long)cx * 64;
        rq = tt * H + hvv / (HV / H);
        rv = tt * HV + hvv;
    };
    /* rowQ0, rowV0 kept in shared memory (padding columns 64..71 of compact dA row 0,
     * never loaded): phases B..D and db read them back after a barrier, so ptxas cannot
     * compute them (or addresses derived from them) early and hold them across phase C.
     * sRow[2] holds a zero that phase D reads as an opaque value. */
    long long *sRow = reinterpret_cast<long long *>(smem + Tr::kOffAqk + 64 * 4);
    auto row0s = [&](long long &rq, long long &rv) {
        rq = sRow[0];
        rv = sRow[1];
    };
    /* VARLEN: the chunk's valid row count (1..64) in sRow[3]'s low word, written by the
     * locating pass before a barrier and read back (like sRow) where a phase needs it */
    const int *sNv = reinterpret_cast<const int *>(sRow) + 6;
    const long long strideQ = (long long)H * KS; /* elements between tokens */
    const long long strideV = (long long)HV * KS;
    const long long strideA = (long long)HV * 64;
    /* q, k columns cn..cn+KH-1 -> sQ, sK (phase A of the first pass; phase D for the
     * next pass): thread t copies 16-byte chunk t % VPR of rows t / VPR + j NTH / VPR,
     * compile-time steps from one base address each, as in the dA loader */
    constexpr int VPR = KH / 8; /* 8 io elements per 16 bytes */
    static_assert(NTH % VPR == 0 && (64 * VPR) % NTH == 0, "q/k copy map");
    auto copy_qk = [&](int t, long long rowQ0, long long strideQ, int cn) {
        const unsigned short *gq = static_cast<const unsigned short *>(p.q);
        const unsigned short *gk = static_cast<const unsigned short *>(p.k);
        const int r0 = t / VPR, c = (t % VPR) * 8;
        /* (K, not KS, outside the TAIL branch: a lambda that names KS captures it by
         * reference, and the native kernels' code changed with that capture on sm_100a) */
        const long long go = rowQ0 * K + r0 * strideQ + cn + c;
        const unsigned so = kdart::smem_u32(sQ + r0 * KP + c);
        const unsigned sko = kdart::smem_u32(sK + r0 * KP + c);
        if constexpr (TAIL) { /* element loads, columns >= Kr and rows past the end zeros */
            const int nv = *sNv, n = ncols(KS, cn + c, 8);
            const long long gt = rowQ0 * KS + r0 * strideQ + cn + c;
#pragma unroll
            for (int j = 0; j < 64 * VPR / NTH; ++j) {
                const int r = r0 + j * (NTH / VPR);
                const long long o = gt + j * (NTH / VPR) * strideQ;
                *reinterpret_cast<uint4 *>(sQ + r * KP + c) = ldg8m_io(gq + o, r < nv ? n : 0);
                *reinterpret_cast<uint4 *>(sK + r * KP + c) = ldg8m_io(gk + o, r < nv ? n : 0);
            }
            return;
        }
        if constexpr (VARLEN) { /* rows past the end: zeros (address: the chunk's row 0) */
            const int nv = *sNv;
#pragma unroll
            for (int j = 0; j < 64 * VPR / NTH; ++j) {
                const bool ok = r0 + j * (NTH / VPR) < nv;
                const long long o = ok ? go + j * (NTH / VPR) * strideQ : rowQ0 * K + cn + c;
                cp16z(so + j * (NTH / VPR) * KP * 2, gq + o, ok);
                cp16z(sko + j * (NTH / VPR) * KP * 2, gk + o, ok);
            }
            return;
        }
#pragma unroll
        for (int j = 0; j < 64 * VPR / NTH; ++j) {
            cp16s(so + j * (NTH / VPR) * KP * 2, gq + go + j * (NTH / VPR) * strideQ);
            cp16s(sko + j * (NTH / VPR) * KP * 2, gk + go + j * (NTH / VPR) * strideQ);
        }
    };

    /* ---------------- VARLEN: validate cu_seqlens, locate the chunk ---------------- */
    /* Chunk i = blockIdx.x of the grid's NT is sequence n's chunk c, where chunk_offsets[n]
     * <= i < chunk_offsets[n+1] (chunk_offsets: exclusive prefix sum of ceil(T_n / 64)).
     * Every CTA scans ALL of cu_seqlens in blocks of NTH sequences (one barrier per block,
     * the warp totals double-buffered by block parity), and the scan is also the
     * validation: any finding makes every CTA return before its first global store (and
     * before any load indexed by cu_seqlens), and CTA (0, 0) reports it in *status.
     * Lengths enter the sum only where they are in range, so no unvalidated value ever
     * becomes an index; the unsigned sum can only wrap when a finding is made anyway.
     * Output: sRow[0], sRow[1] (rowQ0, rowV0 of token t0 = bos + 64c) and *sNv =
     * min(64, eos - t0) >= 1, or *sNv = 0 when i >= the total chunk count. */
    if constexpr (VARLEN) {
        int *sLoc = reinterpret_cast<int *>(sRow); /* [6]: valid rows, [7]: thread 0's findings */
        const int ci = blockIdx.x, hv = blockIdx.y;
        const int hq = hv / (HV / H);
        if (p.cu_seqlens == nullptr) { /* the B rows of T tokens, ceil(T / 64) chunks each */
            const int nct = (T + 63) >> 6;
            if (nct == 0) return;
            const int n = ci / nct, c = ci - n * nct;
            if (n >= p.N) return;
            if (tid == 0) {
                const long long t0 = (long long)n * T + 64 * c;
                sRow[0] = t0 * H + hq;
                sRow[1] = t0 * HV + hv;
                sLoc[6] = min(64, T - 64 * c);
            }
            __syncthreads();
        } else {
            const int N = max(p.N, 0);
            const int lane = tid & 31, warp = tid >> 5;
            int *sScan = reinterpret_cast<int *>(sTot); /* [2][kWarps] warp totals (sTot: phase D only) */
            if (tid == 0) {
                int f = 0;
                if (ld_cu(p.cu_seqlens, p.cu_is64, 0) != 0) f |= KDART_DEVERR_CU_ORDER;
                if (ld_cu(p.cu_seqlens, p.cu_is64, N) > T) f |= KDART_DEVERR_CU_RANGE;
                sLoc[7] = f;
                sLoc[6] = 0;
            }
            int bad = 0;        /* this thread saw cu[j + 1] < cu[j] */
            unsigned carry = 0; /* chunks of the sequences before this block */
#pragma unroll 1
            for (int base = 0, par = 0; base < N; base += NTH, par ^= Tr::kWarps) {
                const int j = base + tid;
                long long lo = 0, hi = 0;
                unsigned cnt = 0;
                if (j < N) {
                    lo = ld_cu(p.cu_seqlens, p.cu_is64, j);
                    hi = ld_cu(p.cu_seqlens, p.cu_is64, j + 1);
                    if (hi < lo) bad = 1;
                    if (lo >= 0 && lo <= hi && hi <= T) cnt = (unsigned)((hi - lo + 63) >> 6);
                }
                unsigned inc = cnt; /* warp-inclusive scan */
#pragma unroll
                for (int o = 1; o < 32; o <<= 1) {
                    const unsigned x = __shfl_up_sync(0xffffffffu, inc, o);
                    if (lane >= o) inc += x;
                }
                if (lane == 31) sScan[par + warp] = (int)inc;
                __syncthreads();
                unsigned pre = 0, tot = 0;
#pragma unroll
                for (int w = 0; w < Tr::kWarps; ++w) {
                    const unsigned v = (unsigned)sScan[par + w];
                    pre += w < warp ? v : 0u;
                    tot += v;
                }
                const unsigned ex = carry + pre + inc - cnt; /* chunk_offsets[j] */
                if ((unsigned)ci - ex < cnt) {                 /* ex <= ci < ex + cnt: one thread */
                    const long long t0 = lo + 64 * (long long)((unsigned)ci - ex);
                    sRow[0] = t0 * H + hq;
                    sRow[1] = t0 * HV + hv;
                    sLoc[6] = (int)min(64ll, hi - t0);
                }
                carry += tot;
            }
            /* (also publishes sLoc and sRow) */
            const int f = (__syncthreads_or(bad) ? KDART_DEVERR_CU_ORDER : 0) | sLoc[7] |
                          (carry > (unsigned)max(p.NT, 0) ? KDART_DEVERR_CHUNKS : 0);
            if (f != 0) {
                if (ci == 0 && hv == 0 && tid == 0 && p.status != nullptr) atomicOr(p.status, f);
                return;
            }
        }
        if (*sNv == 0) return; /* beyond the last chunk */
    }

    /* ---------------- dAqk, dAkk (lower blocks only, compact) and beta: once ---------------- */
    {
        long long rowQ0, rowV0;
        row0(rowQ0, rowV0);
        /* thread map with compile-time steps: thread (rr = tid/16, cq = tid%16) copies
         * the 16-byte chunk cq of row 16j + rr of each block j.  Written out, the loop
         * keeps one base address per matrix; a loop over v = tid, tid + NTH, ...
         * (trip count unknown to the compiler) cost 3-4 times the instructions, on
         * the path to the first load of every CTA. */
        static_assert(NTH == 256, "dA loader: 16 rows x 16 chunks per step");
        const int rr = tid >> 4, cq = tid & 15;
        const long long go = rowV0 * 64 + rr * strideA + cq * 4;
        const unsigned sq = kdart::smem_u32(sAqk + rr * DAP + cq * 4);
        const unsigned sk = kdart::smem_u32(sAkk + rr * DAP + cq * 4);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            /* columns right of block j's diagonal block are never used: not loaded
             * (the 16x16 diagonal block itself is loaded whole; its upper part is
             * never used either) */
            if (cq >= 4 * (j + 1)) continue;
            const int so = j == 0 ? 16 * DAP + 48 : 16 * (j - 1) * DAP; /* see daoff */
            /* asynchronous: the first pass's phase A waits for these with its own */
            if constexpr (VARLEN) {
                /* rows past the sequence's end: zeros (from the chunk's row 0, never read).
                 * Zero dA rows, with zero q, k, beta rows and finite gates, make every
                 * term of an invalid row an exact 0; columns >= valid of a valid row r
                 * are above its diagonal (s > r), never used */
                const bool ok = 16 * j + rr < *sNv;
                const long long o = ok ? go + j * 16 * strideA : rowV0 * 64 + cq * 4;
                cp16z(sq + so * 4, p.dAqk + o, ok);
                cp16z(sk + so * 4, p.dAkk + o, ok);
            } else {
                cp16s(sq + so * 4, p.dAqk + go + j * 16 * strideA);
                cp16s(sk + so * 4, p.dAkk + go + j * 16 * strideA);
            }
        }
        if (tid == 0) {
            if constexpr (!VARLEN) { /* (VARLEN: written by the locating pass) */
                sRow[0] = rowQ0;
                sRow[1] = rowV0;
            }
            sRow[2] = 0; /* opaque zero */
        }
        if (tid < 64) {
            /* beta in the io dtype, or fp32 (BETA_F32: what fla hands this stage when
             * chunk_kda applies the beta sigmoid itself); read once per row either way */
            using BetaT = kdart::conditional_t<BETA_F32, float, IO>;
            const BetaT *gb = static_cast<const BetaT *>(p.beta);
            if constexpr (VARLEN)
                sBeta[tid] = tid < *sNv ? kdart::to_float(gb[rowV0 + (long long)tid * HV]) : 0.f;
            else
                sBeta[tid] = kdart::to_float(gb[rowV0 + (long long)tid * HV]);
        }
    }

#pragma unroll 1
    for (int pass = 0; MULTI_TAIL ? pass * KH < KS : pass < NP; ++pass) {
        const int c0 = pass * KH; /* first global column of this pass */

        /* ---------------- phase A: this pass's columns of q, k, g -> shared memory ---------------- */
        /* (the previous pass's last readers of sG, its phase D, end with a barrier) */
        {
            long long rowQ0, rowV0;
            row0(rowQ0, rowV0);
            const int tid = vtid();
            /* a later pass's q, k were issued during the previous pass's phase D
             * (the test is spelled as in the measured build: "pass == 0" makes
             * NVVM emit a different, if equivalent, predicate and branch) */
            if (!(pass > 0)) copy_qk(tid, rowQ0, strideQ, c0);
            constexpr int FPR = KH / 4;
            static_assert(NTH % FPR == 0 && (64 * FPR) % NTH == 0, "phase A g map");
            /* (a later pass's g was issued at the end of the previous phase D) */
            if (!(pass > 0)) {
                const int r0 = tid / FPR, c = (tid % FPR) * 4;
                const float *ag = p.g + rowV0 * KS + r0 * strideV + c0 + c;
                const unsigned so = kdart::smem_u32(sG + r0 * KP + c);
                if constexpr (TAIL) { /* element loads; columns >= Kr are 0 (see HEAD DIM) */
                    const int last = *sNv - 1, n = ncols(KS, c0 + c, 4);
#pragma unroll
                    for (int j = 0; j < 64 * FPR / NTH; ++j) {
                        const int r = r0 + j * (NTH / FPR);
                        *reinterpret_cast<float4 *>(sG + r * KP + c) =
                            ldg4m(p.g + rowV0 * KS + min(r, last) * strideV + c0 + c, n);
                    }
                } else if constexpr (VARLEN) {
                    /* rows past the end get a copy of the last valid row's gates: g stays
                     * non-increasing down the chunk, so every exp2 argument of the kernel
                     * stays <= 0 (zeros there would give exp2(0 - g_s) = inf for a valid
                     * s, and 0 * inf = NaN in a sum over valid rows) */
                    const int last = *sNv - 1;
#pragma unroll
                    for (int j = 0; j < 64 * FPR / NTH; ++j)
                        cp16s(so + j * (NTH / FPR) * KP * 4,
                              p.g + rowV0 * KS + min(r0 + j * (NTH / FPR), last) * strideV + c0 + c);
                } else {
#pragma unroll
                    for (int j = 0; j < 64 * FPR / NTH; ++j)
                        cp16s(so + j * (NTH / FPR) * KP * 4, ag + j * (NTH / FPR) * strideV);
                }
            }
            /* and the next pass's g (its phase A copies it after this pass's phase D) */
            if ((MULTI_TAIL ? c0 + KH < KS : pass + 1 < NP) && tid < 128 && (!VARLEN || (tid >> 1) < *sNv) &&
                (!TAIL || c0 + KH + (tid & 1) * 32 < KS))
                asm volatile("prefetch.global.L2 [%0];" ::"l"(p.g + rowV0 * KS + (tid >> 1) * strideV + c0 + KH + (tid & 1) * 32));
            cp_wait_all(); /* (first pass: also the dAqk/dAkk copies) */
            if (pass == 0) {
                /* Round the off-diagonal blocks of dAqk/dAkk to tf32 once, in place:
                 * they are only ever phase B's A operands (phase C reads the diagonal
                 * blocks only), so every warp and pass then uses the stored bits as
                 * they are instead of converting the same values again.  Each thread
                 * rounds the chunks it copied itself (its own cp.async results are
                 * visible to it after the wait), so the barrier below publishes them. */
                const int rr = tid >> 4, cq = tid & 15; /* the dA loader's map */
#pragma unroll
                for (int j = 1; j < 4; ++j) {
                    if (cq < 4 * j) { /* off-diagonal chunks of block j's rows */
                        float4 *pq = reinterpret_cast<float4 *>(sAqk + (16 * (j - 1) + rr) * DAP + 4 * cq);
                        float4 *pk = reinterpret_cast<float4 *>(sAkk + (16 * (j - 1) + rr) * DAP + 4 * cq);
                        float4 x = *pq, y = *pk;
                        x.x = __uint_as_float(to_tf32(x.x)); x.y = __uint_as_float(to_tf32(x.y));
                        x.z = __uint_as_float(to_tf32(x.z)); x.w = __uint_as_float(to_tf32(x.w));
                        y.x = __uint_as_float(to_tf32(y.x)); y.y = __uint_as_float(to_tf32(y.y));
                        y.z = __uint_as_float(to_tf32(y.z)); y.w = __uint_as_float(to_tf32(y.w));
                        *pq = x; *pk = y;
                    }
                }
            }
        }
        __syncthreads();

        /* ---------------- phase B: cross-block terms, tf32 mma.sync ---------------- */
        {
            const int tid = vtid();
            /* this pass's dq_in/dk_in/dg_in lines into L2 while phases B and C run, so
             * that phase D's loads hit L2 (3 x 64 rows x 2 lines of 128 B = 48 KB per
             * CTA per pass).  Issued here, not in phase A, where they competed with
             * the loads phase A waits for: 2.5% at K = 128, 1% at K = 64. */
            {
                long long rowQ0, rowV0;
                row0s(rowQ0, rowV0);
                /* 384 lines: line v is (array v / 128, row v % 128 / 2, half v % 2).
                 * The two spellings issue the same lines; they differ in what ptxas
                 * makes of them (read in the SASS).  At K = 128 the written-out
                 * form (v = tid, and v = tid + 256 for tid < 128) stays at the start
                 * of phase B and ptxas peels the pass loop: 2% faster than the loop.
                 * At K = 64 ptxas sinks that form to the end of phase B, 2% slower
                 * than the loop, which stays at the start. */
                static_assert(NTH == 256, "phase B prefetch map");
                if constexpr (VARLEN) { /* the same lines, rows past the end left out */
                    const int nv = *sNv;
#pragma unroll
                    for (int j = 0; j < 2; ++j) {
                        const int v = tid + j * NTH;
                        const int arr = v >> 7, w = v & 127;
                        const float *base = arr == 0 ? p.dq_in : arr == 1 ? p.dk_in : p.dg_in;
                        if (v < 64 * 2 * 3 && (w >> 1) < nv && (!TAIL || c0 + (w & 1) * 32 < KS))
                            asm volatile("prefetch.global.L2 [%0];" ::"l"(base + rowV0 * KS + (w >> 1) * strideV + c0 + (w & 1) * 32));
                    }
                } else if constexpr (Tr::kPasses == 1) {
                    for (int v = tid; v < 64 * 2 * 3; v += NTH) {
                        const int arr = v >> 7, w = v & 127;
                        const float *base = arr == 0 ? p.dq_in : arr == 1 ? p.dk_in : p.dg_in;
                        const float *a = base + rowV0 * KS + (w >> 1) * strideV + c0 + (w & 1) * 32;
                        asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
                    }
                } else {
                    const long long o = rowV0 * KS + (tid & 127) / 2 * strideV + c0 + (tid & 1) * 32;
                    asm volatile("prefetch.global.L2 [%0];" ::"l"((tid < 128 ? p.dq_in : p.dk_in) + o));
                    if (tid < 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(p.dg_in + o));
                }
            }
            /* pull the next pass's q, k, g lines into L2 (its phase A reads them) */
            if (MULTI_TAIL ? c0 + KH < KS : pass + 1 < NP) {
                long long rowQ0, rowV0;
                row0s(rowQ0, rowV0);
                const int cn = c0 + KH;
                const void *a;
                if (tid < 64)
                    a = static_cast<const unsigned short *>(p.q) + rowQ0 * KS + tid * strideQ + cn;
                else if (tid < 128)
                    a = static_cast<const unsigned short *>(p.k) + rowQ0 * KS + (tid - 64) * strideQ + cn;
                else
                    a = p.g + rowV0 * KS + ((tid - 128) >> 1) * strideV + cn + (tid & 1) * 32;
                /* (VARLEN: rows past the end left out) */
                if ((!VARLEN || (tid < 128 ? tid & 63 : (tid - 128) >> 1) < *sNv) &&
                    (!TAIL || tid < 128 || cn + (tid & 1) * 32 < KS))
                    asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
            }
            const int warp = tid >> 5, lane = tid & 31;
            const int gid = lane >> 2, tig = lane & 3;
            const int n0 = warp * 8;
            const int colb = n0 + gid;     /* B-fragment column */
            const int colc = n0 + 2 * tig; /* C-fragment columns colc, colc+1 */

            /* row side: target block i, sources s < 16i, pivot row e = 16i.  The
             * thread's B operands k[s] exp2(g_e - g_s) (rows s = 8 kk + tig, +4) are
             * computed once per pass: when the pivot moves from e' = 16(i-1) to e,
             * the ones of earlier blocks are rescaled by exp2(g_e - g_e') <= 1 */
            float kbv[12], gprev = 0.f;
#pragma unroll
            for (int i = 1; i < 4; ++i) {
                float cq[4] = {0.f, 0.f, 0.f, 0.f}, ck[4] = {0.f, 0.f, 0.f, 0.f};
                const float gpiv = sG[(16 * i) * KP + colb];
                if (i > 1) {
                    const float sc = ex2(gpiv - gprev);
#pragma unroll
                    for (int j = 0; j < 4 * (i - 1); ++j) kbv[j] *= sc;
                }
                gprev = gpiv;
#pragma unroll
                for (int kk = 2 * (i - 1); kk < 2 * i; ++kk) {
                    const int s0 = 8 * kk + tig, s1 = s0 + 4;
                    kbv[2 * kk] = ld_io<IO>(sK, s0 * KP + colb) * ex2(gpiv - sG[s0 * KP + colb]);
                    kbv[2 * kk + 1] = ld_io<IO>(sK, s1 * KP + colb) * ex2(gpiv - sG[s1 * KP + colb]);
                }
                const int ra = 16 * i + gid, rb = ra + 8;
                /* A fragments by ldmatrix: lane l addresses row 8*((l>>3)&1) + (l&7) of
                 * the block, tf32 columns +4*(l>>4) (already rounded, see above) */
                const int oL = daoff(i, 8 * ((lane >> 3) & 1) + (lane & 7)) + 4 * (lane >> 4);
                const unsigned aqL = kdart::smem_u32(sAqk + oL), akL = kdart::smem_u32(sAkk + oL);
#pragma unroll
                for (int kk = 0; kk < 2 * i; ++kk) {
                    const unsigned b0 = to_tf32(kbv[2 * kk]), b1 = to_tf32(kbv[2 * kk + 1]);
                    unsigned a0, a1, a2, a3;
                    ldsm_x4_u32(aqL + 32 * kk, a0, a1, a2, a3);
                    mma_tf32(cq, a0, a1, a2, a3, b0, b1);
                    ldsm_x4_u32(akL + 32 * kk, a0, a1, a2, a3);
                    mma_tf32(ck, a0, a1, a2, a3, b0, b1);
                }
                const float2 gp = *reinterpret_cast<const float2 *>(sG + (16 * i) * KP + colc);
                const float2 ga = *reinterpret_cast<const float2 *>(sG + ra * KP + colc);
                const float2 gb = *reinterpret_cast<const float2 *>(sG + rb * KP + colc);
                const float fa0 = ex2(ga.x - gp.x), fa1 = ex2(ga.y - gp.y);
                const float fb0 = ex2(gb.x - gp.x), fb1 = ex2(gb.y - gp.y);
                *reinterpret_cast<float2 *>(sXq + (ra - 16) * KP + colc) = make_float2(cq[0] * fa0, cq[1] * fa1);
                *reinterpret_cast<float2 *>(sXq + (rb - 16) * KP + colc) = make_float2(cq[2] * fb0, cq[3] * fb1);
                *reinterpret_cast<float2 *>(sXk + (ra - 16) * KP + colc) = make_float2(ck[0] * fa0, ck[1] * fa1);
                *reinterpret_cast<float2 *>(sXk + (rb - 16) * KP + colc) = make_float2(ck[2] * fb0, ck[3] * fb1);
            }

            /* column side: source block i (rows s), targets r > p = 16i+15, taken
             * i = 2, 1, 0 so that the B operands q[r] exp2(g_r - g_p) and
             * beta[r] k[r] exp2(g_r - g_p) (rows r = 16 + 8 gi + tig, +4; group gi
             * = 2i + kk) are computed once per pass and rescaled by
             * exp2(g_p' - g_p) <= 1 when the pivot moves up from p' = p + 16 */
            float bqv[12], bkv[12], gprevc = 0.f;
#pragma unroll
            for (int ii = 0; ii < 3; ++ii) {
                const int i = 2 - ii;
                float cc[4] = {0.f, 0.f, 0.f, 0.f};
                const int pr = 16 * i + 15;
                const float gpiv = sG[pr * KP + colb];
                if (i < 2) {
                    const float sc = ex2(gprevc - gpiv);
#pragma unroll
                    for (int j = 4 * (i + 1); j < 12; ++j) { bqv[j] *= sc; bkv[j] *= sc; }
                }
                gprevc = gpiv;
#pragma unroll
                for (int kk = 0; kk < 2; ++kk) { /* the rows of block i + 1 join */
                    const int gi = 2 * i + kk;
                    const int rA = 16 + 8 * gi + tig, rB = rA + 4;
                    const float eA = ex2(sG[rA * KP + colb] - gpiv);
                    const float eB = ex2(sG[rB * KP + colb] - gpiv);
                    bqv[2 * gi] = ld_io<IO>(sQ, rA * KP + colb) * eA;
                    bqv[2 * gi + 1] = ld_io<IO>(sQ, rB * KP + colb) * eB;
                    bkv[2 * gi] = sBeta[rA] * ld_io<IO>(sK, rA * KP + colb) * eA;
                    bkv[2 * gi + 1] = sBeta[rB] * ld_io<IO>(sK, rB * KP + colb) * eB;
                }
                /* the tile's m rows gid and gid + 8 are s = 16i + 2 gid and s + 1, so the
                 * A fragment's two pairs (dA^T rows) are adjacent floats of a dA row: one
                 * 8-byte load each instead of two 4-byte ones */
                const int sa = 16 * i + 2 * gid, sb = sa + 1;
#pragma unroll
                for (int kk = 0; kk < 6 - 2 * i; ++kk) {
                    const int blk = i + 1 + (kk >> 1), rr = 8 * (kk & 1) + tig;
                    const int oA = daoff(blk, rr), oB = daoff(blk, rr + 4);
                    const int gi = 2 * i + kk;
                    const unsigned bq0 = to_tf32(bqv[2 * gi]), bq1 = to_tf32(bqv[2 * gi + 1]);
                    const unsigned bk0 = to_tf32(bkv[2 * gi]), bk1 = to_tf32(bkv[2 * gi + 1]);
                    const float2 qA = *reinterpret_cast<const float2 *>(sAqk + oA + sa);
                    const float2 qB = *reinterpret_cast<const float2 *>(sAqk + oB + sa);
                    const float2 kA = *reinterpret_cast<const float2 *>(sAkk + oA + sa);
                    const float2 kB = *reinterpret_cast<const float2 *>(sAkk + oB + sa);
                    mma_tf32(cc, fbits(qA.x), fbits(qA.y), fbits(qB.x), fbits(qB.y), bq0, bq1);
                    mma_tf32(cc, fbits(kA.x), fbits(kA.y), fbits(kB.x), fbits(kB.y), bk0, bk1);
                }
                const float2 gp = *reinterpret_cast<const float2 *>(sG + pr * KP + colc);
                const float2 ga = *reinterpret_cast<const float2 *>(sG + sa * KP + colc);
                const float2 gb = *reinterpret_cast<const float2 *>(sG + sb * KP + colc);
                *reinterpret_cast<float2 *>(sXc + sa * KP + colc) =
                    make_float2(cc[0] * ex2(gp.x - ga.x), cc[1] * ex2(gp.y - ga.y));
                *reinterpret_cast<float2 *>(sXc + sb * KP + colc) =
                    make_float2(cc[2] * ex2(gp.x - gb.x), cc[3] * ex2(gp.y - gb.y));
            }
        }
        __syncthreads();

        /* phase D's incoming grads; one-pass CTAs load them at the end of phase C */
        float4 xq[4], xk[4], xg[4];
        auto load_in = [&](long long gb, long long s16) { /* in phase D's thread map */
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                xq[j] = ldg4(p.dq_in + gb + j * s16);
                xk[j] = ldg4(p.dk_in + gb + j * s16);
                if (!FOLD_DG) xg[j] = ldg4(p.dg_in + gb + j * s16);
            }
        };
        /* VARLEN: the same loads of rows 16j + rr < valid, zeros for the rest */
        auto load_in_v = [&](long long gb, long long s16, int rr, int col) {
            const int nv = *sNv;
            const float4 z4 = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const bool ok = 16 * j + rr < nv;
                if constexpr (TAIL) { /* (col: the thread's first global column) */
                    const int n = ok ? ncols(KS, col, 4) : 0;
                    xq[j] = ldg4m(p.dq_in + gb + j * s16, n);
                    xk[j] = ldg4m(p.dk_in + gb + j * s16, n);
                    if (!FOLD_DG) xg[j] = ldg4m(p.dg_in + gb + j * s16, n);
                    continue;
                }
                xq[j] = ok ? ldg4(p.dq_in + gb + j * s16) : z4;
                xk[j] = ok ? ldg4(p.dk_in + gb + j * s16) : z4;
                if (!FOLD_DG) xg[j] = ok ? ldg4(p.dg_in + gb + j * s16) : z4;
            }
        };
        /* ---------------- phase C: diagonal blocks + per-row outputs ---------------- */
        {
            const int tid = vtid();
            const int i = tid / KH;     /* diagonal block, warp-uniform */
            const int d = tid - i * KH; /* column within the pass */
            const int lane = tid & 31;
            const int R0 = 16 * i;
            long long rowQ0, rowV0;
            row0s(rowQ0, rowV0);
            const int dabase = (i == 0) ? 16 * DAP + 48 : (R0 - 16) * DAP;
            float gs[16], ct[16];
            float pdv[16];
            unsigned ksp[8]; /* k of the block's 16 rows, raw io bits, two per register */
#pragma unroll
            for (int s = 0; s < 16; ++s) {
                gs[s] = sG[(R0 + s) * KP + d];
                const unsigned kbits = sK[(R0 + s) * KP + d];
                if (s & 1) ksp[s >> 1] |= kbits << 16;
                else ksp[s >> 1] = kbits;
                ct[s] = (i < 3) ? sXc[(R0 + s) * KP + d] : 0.f;
            }
            /* the row's contributions go to this thread's own, already consumed
             * slots (phase D adds the incoming grads and writes them):
             *   dq' -> sG(R, d)   (gs[] holds the gates from here on)
             *   dk' -> sDk(R, d)  (= sXk row R-16 for blocks 1..3, read just before)
             *   dg' -> Xc row R for blocks 0..2, Xq row R-16 for block 3 */
            float *slot = (i < 3) ? (sXc + R0 * KP + d) : (sXq + 32 * KP + d);
#pragma unroll
            for (int r = 15; r >= 0; --r) {
                const int R = R0 + r;
                const float gr = gs[r];
                const float qr = ld_io<IO>(sQ, R * KP + d);
                const float kr = unpack_io<IO>(ksp[r >> 1], r & 1);
                const float br = sBeta[R];
                const float bkr = br * kr;
                const float *aqrow = sAqk + dabase + r * DAP + R0;
                const float *akrow = sAkk + dabase + r * DAP + R0;
                float aq = 0.f, ak = 0.f;
#pragma unroll
                for (int s = 0; s < 16; ++s) {
                    if (s < r) {
                        const float e = ex2(gr - gs[s]);
                        const float a1 = aqrow[s] * e;
                        const float a2 = akrow[s] * e;
                        const float kv = unpack_io<IO>(ksp[s >> 1], s & 1);
                        aq = fmaf(a1, kv, aq);
                        ak = fmaf(a2, kv, ak);
                        ct[s] = fmaf(a1, qr, ct[s]);
                        ct[s] = fmaf(a2, bkr, ct[s]);
                    } else if (s == r) { /* E = 1; dAkk diagonal is not read */
                        const float a1 = aqrow[s];
                        aq = fmaf(a1, kr, aq);
                        ct[s] = fmaf(a1, qr, ct[s]);
                    }
                }
                if (i > 0) {
                    aq += sXq[(R - 16) * KP + d];
                    ak += sDk[R * KP + d]; /* = sXk row R-16 */
                }
                const float ctr = ct[r];
                const float bak = br * ak;
                sG[R * KP + d] = aq;
                sDk[R * KP + d] = bak + ctr;
                slot[r * KP] = qr * aq + (bak - ctr) * kr;
                pdv[r] = kr * ak;
            }
            /* db partials of the block's 16 rows over the warp's 32 columns: a transposing
             * butterfly (each step halves the values a lane holds), 16 shuffles instead of 80 */
            {
                const bool b4 = lane & 16, b3 = lane & 8, b2 = lane & 4, b1 = lane & 2;
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const float snd = b4 ? pdv[j] : pdv[j + 8];
                    const float kp = b4 ? pdv[j + 8] : pdv[j];
                    pdv[j] = kp + __shfl_xor_sync(0xffffffffu, snd, 16);
                }
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const float snd = b3 ? pdv[j] : pdv[j + 4];
                    const float kp = b3 ? pdv[j + 4] : pdv[j];
                    pdv[j] = kp + __shfl_xor_sync(0xffffffffu, snd, 8);
                }
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const float snd = b2 ? pdv[j] : pdv[j + 2];
                    const float kp = b2 ? pdv[j + 2] : pdv[j];
                    pdv[j] = kp + __shfl_xor_sync(0xffffffffu, snd, 4);
                }
                {
                    const float snd = b1 ? pdv[0] : pdv[1];
                    const float kp = b1 ? pdv[1] : pdv[0];
                    pdv[0] = kp + __shfl_xor_sync(0xffffffffu, snd, 2);
                }
                pdv[0] += __shfl_xor_sync(0xffffffffu, pdv[0], 1);
                /* lane holds row 8*b4 + 4*b3 + 2*b2 + b1 of the block */
                const int rowi = ((lane >> 4) & 1) * 8 + ((lane >> 3) & 1) * 4 + ((lane >> 2) & 1) * 2 + ((lane >> 1) & 1);
                if (!(lane & 1)) sDbp[(R0 + rowi) * NDB + pass * Tr::kWPB + (d >> 5)] = pdv[0];
            }
            if constexpr (Tr::kPasses == 1) {
                /* phase D's loads (its thread map), issued before the barrier: the
                 * phase C registers are free again, and the wait for the other warps
                 * overlaps their latency */
                /* (phase D's gb, written out: through a shared lambda ptxas schedules
                 * the K = 64 kernel differently) */
                const long long gb = rowV0 * KS + (long long)(tid >> 4) * strideV + c0 + (tid & 15) * 4;
                if constexpr (VARLEN) load_in_v(gb, 16 * strideV, tid >> 4, c0 + (tid & 15) * 4);
                else load_in(gb, 16 * strideV);
            }
        }
        __syncthreads();

        /* ---------------- phase D: stream dq_in/dk_in/dg_in, add the slots, write ---------------- */
        {
            /* + an opaque zero read from shared memory after the barrier: nothing
             * tid-derived of phase D is computed before phase C ends */
            const int z = reinterpret_cast<const int *>(sRow)[4];
            const int tid = vtid() + z;
            /* (the strides too: else the loop-invariant 16 * strideV is hoisted out of the
             * pass loop and held across phase C) */
            const long long strideV = (long long)(HV + z) * KS;
            const long long strideQ = (long long)(H + z) * KS;
            long long rowQ0, rowV0;
            row0s(rowQ0, rowV0);
            /* streaming map: thread owns rows 16j + rr (j = 0..3), pass columns cc..cc+3 */
            const int rr = tid >> 4;
            const int cc = (tid & 15) * 4;
            const long long gb = rowV0 * KS + (long long)rr * strideV + c0 + cc;
            const long long s16 = 16 * strideV;
            /* fold_dg: thread (block i, column d) also suffix-sums its block's column */
            const int i = tid / KH;
            const int d = tid - i * KH;
            float ng[FOLD_DG ? 16 : 1];
            if (FOLD_DG) {
                const long long o = rowV0 * KS + (long long)(16 * i) * strideV + c0 + d;
#pragma unroll
                for (int s = 0; s < 16; ++s) {
                    if constexpr (VARLEN) /* rows past the end add 0 to the suffix sums */
                        ng[s] = 16 * i + s < *sNv && (!TAIL || c0 + d < KS) ? __ldg(p.dg_in + o + s * strideV) : 0.f;
                    else
                        ng[s] = __ldg(p.dg_in + o + s * strideV);
                }
            }
            /* every load of the thread is issued before any use */
            if constexpr (Tr::kPasses > 1) {
                if constexpr (VARLEN) load_in_v(gb, s16, rr, c0 + cc);
                else load_in(gb, s16);
            }
            /* sQ/sK are free since the barrier after phase C (phase D does not read
             * them): start the next pass's q, k copies now; its phase A waits for them */
            if (MULTI_TAIL ? c0 + KH < KS : pass + 1 < NP) copy_qk(tid, rowQ0, strideQ, c0 + KH);
            if (FOLD_DG) {
                float *slot = (i < 3) ? (sXc + 16 * i * KP + d) : (sXq + 32 * KP + d);
                float acc = 0.f;
#pragma unroll
                for (int s = 15; s >= 0; --s) {
                    acc += ng[s] + slot[s * KP];
                    slot[s * KP] = acc;
                }
                sTot[i * KH + d] = acc;
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int R = 16 * j + rr;
                if (VARLEN && R >= *sNv) continue; /* rows past the end: not written */
                const long long go = gb + j * s16;
                const float4 vq = add4(xq[j], lds4(sG + R * KP + cc));
                const float4 vk = add4(xk[j], lds4(sDk + R * KP + cc));
                if constexpr (TAIL) { /* columns >= Kr are not written */
                    const int n = ncols(KS, c0 + cc, 4);
                    if (EMIT_IO) {
                        st_out4io_m<IO>(static_cast<unsigned short *>(p.dq) + go, vq, n);
                        st_out4io_m<IO>(static_cast<unsigned short *>(p.dk) + go, vk, n);
                    } else {
                        st_out4m(static_cast<float *>(p.dq) + go, vq, n);
                        st_out4m(static_cast<float *>(p.dk) + go, vk, n);
                    }
                    if (!FOLD_DG) {
                        const float *sl = (j < 3) ? (sXc + R * KP) : (sXq + (R - 16) * KP);
                        st_out4m(p.dg + go, add4(xg[j], lds4(sl + cc)), n);
                    }
                    continue;
                }
                if (EMIT_IO) {
                    st_out4io<IO>(static_cast<unsigned short *>(p.dq) + go, vq);
                    st_out4io<IO>(static_cast<unsigned short *>(p.dk) + go, vk);
                } else {
                    st_out4(static_cast<float *>(p.dq) + go, vq);
                    st_out4(static_cast<float *>(p.dk) + go, vk);
                }
                if (!FOLD_DG) {
                    const float *sl = (j < 3) ? (sXc + R * KP) : (sXq + (R - 16) * KP);
                    st_out4(p.dg + go, add4(xg[j], lds4(sl + cc)));
                }
            }
            /* the next pass's g straight into the sG slots this thread has just consumed
             * (its dq' slots: rows 16j + rr, columns cc..cc+3; no other thread reads
             * them), so that the next phase A has nothing left to issue */
            if (MULTI_TAIL ? c0 + KH < KS : pass + 1 < NP) {
                const float *ag = p.g + gb + KH;
                const unsigned sg = kdart::smem_u32(sG + rr * KP + cc);
                if constexpr (TAIL) { /* element loads, as in phase A */
                    const int last = *sNv - 1, n = ncols(KS, c0 + KH + cc, 4);
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        *reinterpret_cast<float4 *>(sG + (16 * j + rr) * KP + cc) =
                            ldg4m(p.g + rowV0 * KS + min(16 * j + rr, last) * strideV + c0 + KH + cc, n);
                } else if constexpr (VARLEN) { /* past the end: the last valid row, as in phase A */
                    const int last = *sNv - 1;
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        cp16s(sg + j * 16 * KP * 4,
                              p.g + rowV0 * KS + min(16 * j + rr, last) * strideV + c0 + KH + cc);
                } else {
#pragma unroll
                    for (int j = 0; j < 4; ++j) cp16s(sg + j * 16 * KP * 4, ag + j * s16);
                }
            }
            if (FOLD_DG) {
                __syncthreads(); /* block totals and suffix sums complete */
                const float4 t3 = lds4(sTot + 3 * KH + cc);
                const float4 t2 = lds4(sTot + 2 * KH + cc);
                const float4 t1 = lds4(sTot + 1 * KH + cc);
                /* later-block totals summed 3, 2, 1 (fixed order) */
                const float4 l2 = t3, l1 = add4(t3, t2), l0 = add4(l1, t1);
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int R = 16 * j + rr;
                    const float *sl = (j < 3) ? (sXc + R * KP) : (sXq + (R - 16) * KP);
                    float4 v = lds4(sl + cc);
                    if (j == 0) v = add4(v, l0);
                    if (j == 1) v = add4(v, l1);
                    if (j == 2) v = add4(v, l2);
                    if (VARLEN && R >= *sNv) continue; /* rows past the end: not written */
                    if constexpr (TAIL) st_out4m(p.dg + gb + j * s16, v, ncols(KS, c0 + cc, 4));
                    else st_out4(p.dg + gb + j * s16, v);
                }
            }
        }
        /* (no barrier here: the next phase A only waits for copies into this
         * thread's own consumed slots, and its barrier orders the rest of this
         * phase D before the next phase B writes the X tiles) */
    }

    /* ---------------- db: fixed-order sum of the per-(pass, warp) partials ---------------- */
    if (const int tid = vtid(); tid < 64 && (!VARLEN || tid < *sNv)) {
        long long rowQ0, rowV0;
        row0s(rowQ0, rowV0);
        float acc = p.db_in[rowV0 + (long long)tid * HV];
#pragma unroll
        for (int w = 0; w < NDB; ++w) /* (TAIL: the skipped passes' slots were not written) */
            if (!TAIL || w < NP * Tr::kWPB) acc += sDbp[tid * NDB + w];
        p.db[rowV0 + (long long)tid * HV] = acc;
    }
}

template <typename IO, bool FOLD_DG, bool EMIT_IO, int K, bool VARLEN, bool TAIL, bool BETA_F32>
__global__ kdart::enable_if_t<!VARLEN && TAIL> kdart_bwd_intra(const typename kdart::intra::ParamsOf<VARLEN>::type) {
    __trap(); /* never launched */
}

#endif /* KDART_BWD_INTRA_CUH */
