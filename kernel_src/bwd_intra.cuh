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
 *   grid     (T/64, B*HV, 1): the (chunk, b, hv) of kdart::chunk_cta (the heads
 *            fastest in launch order, kdart_varlen.cuh).
 *            VARLEN: (NT, HV, 1): the chunk is global chunk i of all sequences
 *            (p.NT >= the total); see "VARLEN" below.
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
#include "kdart_varlen.cuh"
#include "bwd_post.cuh" /* (its gate and sigmoid math, for the fused body's POST part) */

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
     * (r+16)*kDAP + 48, i.e. in the unused columns 48..63 of block 2's rows; the
     * 16-byte chunks of rows with bit 2 of their index in the block set are swapped
     * in pairs (dasw in bwd_intra_body.inc: no bank conflicts in phase B) */
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
/* fp32 loads through the read-only path, or (CG) through L2 with ld.global.cg: the incoming gradients of
 * the fused body (FUSED), written by this CTA earlier in the same launch, which the read-only path need not
 * see and ld.global.cg does */
template <bool CG = false> __device__ __forceinline__ float ldg1(const float *g) { return CG ? __ldcg(g) : __ldg(g); }
template <bool CG = false> __device__ __forceinline__ float4 ldg4(const float *g) {
    const float4 *v = reinterpret_cast<const float4 *>(g);
    return CG ? __ldcg(v) : __ldg(v);
}
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
template <bool CG = false> __device__ __forceinline__ float4 ldg4m(const float *g, int n) {
    g = opaque_ptr(g);
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (n > 0) v.x = ldg1<CG>(g);
    if (n > 1) v.y = ldg1<CG>(g + 1);
    if (n > 2) v.z = ldg1<CG>(g + 2);
    if (n > 3) v.w = ldg1<CG>(g + 3);
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

/* float offset of row 16*blk + rr in the compact dAqk/dAkk layout */
__device__ __forceinline__ int daoff(int blk, int rr) {
    constexpr int DAP = BwdIntraTraits<64>::kDAP;
    return blk == 0 ? (16 + rr) * DAP + 48 : (16 * (blk - 1) + rr) * DAP;
}
/* The compact rows' 16-byte chunks are swizzled: chunk c of a row whose index within its block
 * has bit 2 set is stored at c ^ 1 (dasw: the float column's XOR).  With DAP = 72 (8 banks a row),
 * the 8 rows of an ldmatrix tile fell on 4 bank groups (rows r and r + 4 together: 2-way, a quarter of
 * phase B's shared wavefronts); swizzled they fall on 8.  The column side's 8-byte reads (rows rr and
 * rr + 4, of opposite swizzle) and phase C's broadcasts stay conflict-free; the row index is a
 * compile-time constant wherever a thread's own row is not (phase C, the column side). */
__device__ __forceinline__ int dasw(int rr) { return ((rr >> 2) & 1) << 2; }
/* The fp32 tiles of KP floats a row (sG, sXq, sXk, sDk, sXc) are swizzled too: row R's columns c are
 * stored at c ^ fsw(R), 8 floats (two 16-byte chunks) over where bit 2 of R is set.  KP = 72 puts
 * rows 8 banks apart, so phase B's column side (rows 16i + 2 gid and + 1, pairs of columns) met the same
 * 8 banks in rows r and r + 4: 2-way on each of its 12 accesses a pass; swizzled, a half warp's four
 * rows take four distinct 8-bank windows.  Every other access keeps its banks: the row side's rows are
 * consecutive (offsets 0, 8, 16, 24 either way), phases C and D read whole row segments.  Rows 16 apart
 * swizzle alike, so sXq's row R - 16 and sDk's row R are one cell. */
__device__ __forceinline__ int fsw(int R) { return (R & 4) << 1; }

/* The native (16-byte cp.async) copies of a pass's q, k columns cn .. cn + 63 into the body's sQ, sK: thread t
 * copies 16-byte chunk t % VPR of rows t / VPR + j NTH / VPR, compile-time steps from one base address each
 * (as the dA loader).  VARLEN: rows from nv on are zeros (src-size 0, the address the chunk's row 0).  Used
 * by the body's phase A and phase D and by early_qkg, so that the early copies land where the body reads. */
template <int K, bool VARLEN>
__device__ __forceinline__ void copy_qk16(const void *q, const void *k, unsigned short *sQ, unsigned short *sK, int t,
                                          long long rowQ0, long long strideQ, int cn, int nv) {
    using Tr = BwdIntraTraits<K>;
    constexpr int KP = Tr::kKP, NTH = Tr::kThreads, VPR = Tr::kKH / 8; /* 8 io elements per 16 bytes */
    static_assert(NTH % VPR == 0 && (64 * VPR) % NTH == 0, "q/k copy map");
    const unsigned short *gq = static_cast<const unsigned short *>(q);
    const unsigned short *gk = static_cast<const unsigned short *>(k);
    const int r0 = t / VPR, c = (t % VPR) * 8;
    const long long go = rowQ0 * K + r0 * strideQ + cn + c;
    const unsigned so = kdart::smem_u32(sQ + r0 * KP + c);
    const unsigned sko = kdart::smem_u32(sK + r0 * KP + c);
    if constexpr (VARLEN) {
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
}
/* The native copies of a pass's g columns c0 .. c0 + 63 into the body's sG (swizzled, fsw): 16-byte piece
 * t % FPR of rows t / FPR + j NTH / FPR (all of the same fsw).  VARLEN: rows from nv on get a copy of the last
 * valid row's gates, so g stays non-increasing down the chunk and every exp2 argument of the kernel stays
 * <= 0 (zeros there would give exp2(0 - g_s) = inf for a valid s, and 0 * inf = NaN in a sum over valid
 * rows). */
template <int K, bool VARLEN>
__device__ __forceinline__ void copy_g16(const float *g, float *sG, int t, long long rowV0, long long strideV, int c0,
                                         int nv) {
    using Tr = BwdIntraTraits<K>;
    constexpr int KP = Tr::kKP, NTH = Tr::kThreads, FPR = Tr::kKH / 4; /* 4 floats per 16 bytes */
    static_assert(NTH % FPR == 0 && (64 * FPR) % NTH == 0, "g copy map");
    const int r0 = t / FPR, c = (t % FPR) * 4;
    const float *ag = g + rowV0 * K + r0 * strideV + c0 + c;
    const unsigned so = kdart::smem_u32(sG + r0 * KP + (c ^ fsw(r0)));
    if constexpr (VARLEN) {
#pragma unroll
        for (int j = 0; j < 64 * FPR / NTH; ++j)
            cp16s(so + j * (NTH / FPR) * KP * 4, g + rowV0 * K + min(r0 + j * (NTH / FPR), nv - 1) * strideV + c0 + c);
        return;
    }
#pragma unroll
    for (int j = 0; j < 64 * FPR / NTH; ++j) cp16s(so + j * (NTH / FPR) * KP * 4, ag + j * (NTH / FPR) * strideV);
}

} /* namespace intra */
} /* namespace kdart */

namespace kdart {
namespace intra {
/* Where the fused body's chunk is (wy_dqkg's kernel located and validated it): the [B,T,H] and [B,T,HV] rows
 * of its first token and its valid rows.  The body at variable length takes them instead of scanning
 * cu_seqlens again.  (The kernel of its own ignores it.) */
struct Loc {
    long long rowQ0, rowV0;
    int nv;
};
} /* namespace intra */
} /* namespace kdart */

/* One kernel per specialization (see "HEAD DIM"): TAIL = false is the native body
 * (Kr == K), TAIL = true the column-tail body, which needs VARLEN's parameter (Kr);
 * <VARLEN = false, TAIL = true> is the stub below, which the host never launches (kdart
 * picks varlen = 1 with the tail).  (The body is the text of bwd_intra_body.inc, pasted
 * into the __global__ function itself: as a __forceinline__ function called from a
 * wrapper kernel, the native specializations' SASS changed on sm_100a.  The same text is
 * kdart::intra::fused below, for wy_dqkg's intra kernels.) */
template <typename IO, bool FOLD_DG, bool EMIT_IO, int K, bool VARLEN, bool TAIL, bool BETA_F32>
__global__ kdart::enable_if_t<VARLEN || !TAIL> __launch_bounds__(BwdIntraTraits<K>::kThreads,
                                                                BwdIntraTraits<K>::kMinBlocks)
kdart_bwd_intra(const typename kdart::intra::ParamsOf<VARLEN>::type p) {
    constexpr bool FUSED = false, EARLY = false, POST = false;
    [[maybe_unused]] const kdart_intra_post_params pp{};
    [[maybe_unused]] const kdart::intra::Loc loc{};
#include "bwd_intra_body.inc"
}

template <typename IO, bool FOLD_DG, bool EMIT_IO, int K, bool VARLEN, bool TAIL, bool BETA_F32>
__global__ kdart::enable_if_t<!VARLEN && TAIL> kdart_bwd_intra(const typename kdart::intra::ParamsOf<VARLEN>::type) {
    __trap(); /* never launched */
}

namespace kdart {
namespace intra {
/* The same body as a device function, for wy_dqkg's intra = 1 kernels: run by a
 * CTA of the same grid (one per chunk and value head) after wy_dqkg's body, with
 * dq_in, dk_in, dg_in, db_in the wy outputs it has just written (and dq, dk, dg,
 * db the same tensors), dAqk and dAkk its dAqk and dA, which the caller has already written
 * into this body's shared memory (wy_dqkg.cuh, da_stash: the body does not load them).  The caller's dynamic
 * shared memory is at least BwdIntraTraits<K>::kSmemBytes and its launch bounds
 * are this kernel's. */
template <typename IO, bool FOLD_DG, bool EMIT_IO, int K, bool VARLEN, bool TAIL, bool BETA_F32, bool EARLY, bool POST>
__device__ __forceinline__ void fused(const kdart_bwd_intra_params &p, const kdart_intra_post_params &pp,
                                      const Loc loc) {
    static_assert(VARLEN || !TAIL, "the tail body takes the varlen parameters");
    static_assert(!POST || (FOLD_DG && !EMIT_IO && !TAIL), "the last step's gate part: fold_dg, native K tiles");
    static_assert(!EARLY || !TAIL, "early copies: the native (16-byte) maps only");
    constexpr bool FUSED = true;
#include "bwd_intra_body.inc"
}
/* The fused body's first-pass copies of q, k and g (its columns 0 .. kKH - 1), issued by the caller before
 * its own last phase so that they land while it runs (fused with EARLY): the body's phase A copies
 * (copy_qk16, copy_g16) into its sQ, sK and sG (bytes 0 .. kOffAqk of the shared memory, which the caller
 * leaves alone from here on); rowQ0, rowV0: the [B,T,H] and [B,T,HV] rows of the chunk's first token, nv
 * its valid rows (VARLEN: q, k rows past them zeros, g rows the last valid one's, as the body's).  The
 * body's phase A then only waits for them (cp.async.wait_all).  Every thread calls it. */
template <int K, bool VARLEN>
__device__ __forceinline__ void early_qkg(const kdart_bwd_intra_params &p, long long rowQ0, long long rowV0, int nv) {
    using Tr = BwdIntraTraits<K>;
    extern __shared__ __align__(16) unsigned char smem[];
    const int tid = threadIdx.x;
    copy_qk16<K, VARLEN>(p.q, p.k, reinterpret_cast<unsigned short *>(smem + Tr::kOffQ),
                         reinterpret_cast<unsigned short *>(smem + Tr::kOffK), tid, rowQ0, (long long)p.H * K, 0, nv);
    copy_g16<K, VARLEN>(p.g, reinterpret_cast<float *>(smem + Tr::kOffG), tid, rowV0, (long long)p.HV * K, 0, nv);
}
} /* namespace intra */
} /* namespace kdart */

#endif /* KDART_BWD_INTRA_CUH */
