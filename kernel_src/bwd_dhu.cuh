/*
 * bwd_dhu.cuh: KDA backward stage 4, the reverse state scan
 * (fla's chunk_gated_delta_rule_bwd_dhu with a per-channel gate gk = g2).
 * Math: docs/kernels.md, "bwd_dhu".
 *
 * Per (b, hv, V tile of BV columns), with dH in R^{K x BV} fp32, starting
 * from dht (or 0):
 *   for c = NT-1 .. 0 (t0 = 64c):
 *     dh[b,c,hv]  = IO(dH)                                   (checkpoint)
 *     dv2[t0+i,:] = IO(dv[t0+i,:] + kg[t0+i,:] . IO(dH))      (fp32 accumulate)
 *     dH          = exp2(g[t0+63,:]) (.) dH + scale * (qg^T do) - w^T IO(dv2)
 *   dh0 = dH (fp32) when p.dh0 != NULL.
 *
 * VARLEN = 1 (the registry's varlen parameter): sequences of any length,
 * packed along T by cu_seqlens (B = 1), or the B rows of T tokens when
 * cu_seqlens is NULL (T % 64 != 0).  The CTA (n, hv, V tile) scans sequence
 * n's ceil(T_n/64) chunks in reverse; the last one may be partial: its rows
 * past the end are zero-filled in shared memory (cp.async with src-size 0),
 * so they add nothing to qg^T do, kg.dH or w^T dv2, its decay is g at its
 * last valid row, and only its valid rows of dv2 are stored.  Checkpoints go
 * to dh row chunk_offsets[n] + c, chunk_offsets derived on the device (see
 * varlen_locate: every CTA validates cu_seqlens first and, when it is bad,
 * writes nothing).  A zero-length sequence writes only dh0 = dht (or 0).
 *
 * ---- Launch contract (the runtime mirrors it; see BwdDhuTraits) ----------
 *   kernel   : kdart_bwd_dhu<IO, K, BV, VARLEN, TAIL>, IO in {kdart::bf16, kdart::fp16},
 *              K (the K tile) in {64, 128, 192, 256}, BV (V tile width) in {16, 32, 64}, VARLEN in
 *              {false, true}, TAIL (the registry's tail parameter) in {0, 1, 2}
 *   block    : BwdDhuTraits<K, BV>::kCtaThreads = 128 threads (4 warps, one warpgroup); 256 (two
 *              warpgroups) at <192, 64> and <256, 64>
 *   grid     : (ceil(V / BV), B * HV, 1); blockIdx.x = V tile, blockIdx.y = b * HV + hv
 *              (VARLEN: (ceil(V / BV), N * HV, 1), blockIdx.y = n * HV + hv; VARLEN at BV 64
 *              with p.v_split != 0, the V split: (ceil(V / 32), N * HV, 1) read as one launch
 *              index, each CTA scanning 32 or 64 columns by its sequence's length or none,
 *              kdart::dhu::split_cta; with p.Aqk and p.dv both given there, the 64-column
 *              scans fuse the dv and the 32-column ones read p.dv)
 *   dyn smem : BwdDhuTraits<K, BV>::kSmemBytes (the asserts below list them);
 *              the host must raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
 *   requires : T % 64 == 0 (VARLEN = 0), 16-byte aligned tensor base pointers, 1 <= p.Kr <= K,
 *              1 <= V.  TAIL 0 (the native path) needs p.Kr == K, V % BV == 0 and
 *              !p.state_v_first; TAIL 2 the same with p.state_v_first (the native copies, the
 *              V-first checkpoint, dht and dh0); TAIL 1 (masked) takes anything (see the masked
 *              path: the same GEMMs, global accesses in 16-, 8-, 4- or 2-byte granules).  The host
 *              picks TAIL from the shapes, so the native specializations carry none of the others' code.
 *   pairs    : VARLEN, K = 256, BV 16 or 32, TAIL 0 on sm_90a with p.pair_heads != 0 (HV even, set by
 *              the host on grids of 8 waves or more): grid (ceil(V / BV), N * HV / 2), each CTA
 *              scanning heads 2j and 2j+1 of one sequence (kdart::dhu::pair_heads)
 *   Which BV to launch is a host decision: the scan is serial over chunks, so
 *   the grid must fill the SMs with as wide a tile as it can (the runtime's
 *   cost model counts waves times the measured time per chunk of each BV).
 *   The one decision the host cannot make, which packed sequence is long
 *   enough to be the critical path, the V split leaves to the CTAs.
 *
 * ---- Numerics ---------------------------------------------------------------
 * fla's rounding contract: IO(dH) is both the checkpoint and the kg.dH operand,
 * IO(dv2) is both the output and the w^T.dv2 operand, scale multiplies the fp32
 * qg^T.do sum after accumulation, dH itself stays fp32.  The decay uses
 * ex2.approx.ftz.f32 (rel. error ~2^-22; 2^g below 2^-126 flushes to 0).
 *
 * ---- Structure --------------------------------------------------------------
 * One CTA = one serial scan, 4 warps (one warpgroup).  dH stays in fp32 MMA
 * accumulator registers, split by rows: warp w owns the 16-row slabs
 * d in 64 mt + 16 w + [0, 16), mt < K/64, which is the row split of both
 * mma.sync m16 tiles and wgmma's m64 blocks.  The K-side tiles (kg, qg, w:
 * 48 KB per chunk at K = 128) are read from shared memory once per CTA; only
 * the narrow V-side operands are shared.  The three GEMMs per chunk:
 *   QD[d,v]  = sum_i qg[i,d] do[i,v]           A = qg^T, B = do
 *   DV[i,v]  = dv + sum_d kg[i,d] IO(dH)[d,v]  A = kg, B = IO(dH) from the S_H
 *              tile; warp w gets rows i in [16w, 16w+16), accumulator
 *              initialised with dv
 *   dH[d,v] -= sum_i w[i,d] dv2[i,v]           A = -w^T, B = dv2, accumulating
 *              straight into dH
 * Per chunk: barrier B1 (stage and S_H visible) -> QD and DV -> dv2 into the
 * stage and out -> decay, dH += scale QD -> barrier B2 (all dv2 rows visible)
 * -> WD -> each warp writes its rows of IO(dH) into S_H (the next chunk's B
 * operand and checkpoint).
 *
 * Two ways to run the GEMMs, chosen per specialization (BwdDhuTraits::kWG):
 * - wgmma (sm_90a, K >= 128): each GEMM is m64nBVk16 warpgroup MMAs with both
 *   operands read from shared memory by descriptor, so each operand byte is
 *   read once per CTA instead of once per warp (the ldmatrix form reads do,
 *   dv2 and S_H four times).  The scan is bound by shared-memory traffic:
 *   about 200 KB per chunk at BV 32 with ldmatrix, 160 KB with wgmma, which
 *   is 5-10% faster.  QD and DV go to the tensor cores together; the next
 *   copies and the checkpoint's stores are issued while they run (at BV 64
 *   the copies wait until WD is issued: see kWgLateLoad).
 * - mma.sync m16n8k16 with ldmatrix (other targets, and K = 64, where the
 *   scan is DRAM-bound and wgmma measured 4-5% slower).  With one
 *   warp per scheduler the chunk is a chain of dependent MMAs, so the order is
 *   chosen for latency: QD does not depend on dH and goes first, where its
 *   MMAs fill the gaps of DV's chain; DV's K reduction runs in two accumulator
 *   sets (even / odd k steps) at BV <= 32, where registers allow; at BV = 64
 *   the next chunk's copies and the global stores of the checkpoint and of
 *   dv2 are issued after the MMAs they do not feed (kLate).
 * Inputs (kg, qg, w, do, dv and g's row 63) come in with cp.async.cg, three
 * stages deep: chunk c-2 is requested while chunk c is computed (two at the
 * K tiles 192 and 256, whose stages are 81 and 100 KB).  Shared tiles
 * use wgmma's canonical swizzled layouts (see BwdDhuTraits), which also keep
 * ldmatrix/stmatrix of 8 rows conflict-free; stages start on 1024-byte
 * boundaries.  No atomics: results are bitwise deterministic.
 *
 * Two warpgroups (the K tiles 192 and 256 at BV 64).  A K = 256 scan of 32 columns
 * fills an SM (two 105 KB stages) with one warp per scheduler, so its chunk
 * is a latency chain that leaves the tensor cores, shared memory and L2
 * mostly idle (ncu: 49% L2, 39% DRAM throughput), while the 8 V-tile CTAs of
 * a head each copy the same 96 KB of K-side tiles per chunk.  The <256, 64>
 * kernel runs two such scans in one CTA, warpgroup g on columns 32 g ..
 * 32 g + 31 with its own dH registers, V-side slab and S_H tile, over one
 * copy of kg, qg and w (each warpgroup copies half of their rows): two
 * chains interleave on one SM, and the K-side bytes per column halve.  At
 * K = 256, two stages of kg and w, both slabs and both S_H tiles leave room
 * for one qg buffer only (kQOne): it is refilled after B2, when both
 * warpgroups' QD products of the chunk are done, while WD runs.  The K tile
 * 192 (three 64-column blocks, 202 KB) does the same with qg in the stages.  The
 * barriers are the CTA's (both warpgroups run the same chunks).
 *
 * History: the first version kept dH transposed with warps splitting V (16
 * columns each), so every warp read all of kg/qg/w from shared memory each
 * chunk; with one 4-warp CTA per SM on small grids that cost ~2 us per
 * chunk (0.72-0.79x fla).  Splitting K rows instead, with narrower tiles on
 * small grids, and then warpgroup MMAs (wgmma, which read each K-side tile
 * from shared memory once per warpgroup instead of once per warp) made it
 * faster than fla's on every row.
 */
#ifndef KDART_BWD_DHU_CUH
#define KDART_BWD_DHU_CUH

#include "kdart_common.cuh"
#include "kdart_varlen.cuh"

/* The sm_90a build can run the three GEMMs as warpgroup MMAs (wgmma) with both
 * operands in shared memory (BwdDhuTraits::kWG: at K = 128); other targets use
 * mma.sync with ldmatrix. */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) && !defined(KDART_DHU_NO_WGMMA)
#define KDART_DHU_WG 1
#else
#define KDART_DHU_WG 0
#endif

template <int K_, int BV_>
struct BwdDhuTraits {
    static constexpr int K = K_;
    static constexpr int kBV = BV_;                 /* the CTA's V tile */
    static constexpr int kBT = KDART_CHUNK;         /* 64 rows per chunk */
    /* Warpgroups per CTA: one, or two at the K tiles 192 and 256 with BV 64, each
     * scanning 32 of the 64 columns (kBVw) over one shared copy of the K-side
     * tiles (see "Two warpgroups" in the structure notes above).  Everything per
     * warpgroup (kThreads, kNB, kUV, kTileV, the V-side swizzle) is of kBVw. */
    static constexpr int kWGs = K >= 192 && BV_ == 64 ? 2 : 1;
    static constexpr int kBVw = BV_ / kWGs;
    /* cp.async ring depth: three stages; two at K = 192 and 256 (a stage is 81 / 100 KB there) */
    static constexpr int kStages = K >= 192 ? 2 : 3;
    static constexpr int kWarps = 4;                /* one warpgroup */
    static constexpr int kThreads = 32 * kWarps;    /* per warpgroup */
    static constexpr int kCtaThreads = kThreads * kWGs;
    static constexpr int kMT = K / 64;              /* 64-row blocks of dH; warp w owns rows 64 mt + 16 w + [0, 16) */
    static constexpr int kDW = 16 * kMT;            /* dH rows per warp */
    static constexpr int kNB = kBVw / 8;            /* n8 tiles along V */
    static constexpr int kUV = kBVw / 8;            /* 16-byte units per V-side row */
    /* K-side tiles ([64 rows][K], 16-bit) are stored as K/64 column blocks of
     * [64 rows][128 bytes], each with the 128-byte swizzle (16-byte unit u of
     * row r at u ^ (r & 7)): the canonical layout of wgmma's 128B mode for both
     * the K-major (kg) and the MN-major (qg^T, w^T) reading. */
    static constexpr int kColBlock = kBT * 128;
    static constexpr int kTileK = kBT * K * 2;
    static constexpr int kTileV = kBT * kBVw * 2;
    /* Two warpgroups at K = 256 need two stages of kg, w and two V-side slabs
     * plus the S_H of each: with qg in every stage too that is 258 KB, so qg has
     * one buffer of its own (kQOne, at kOffQ past the stages), refilled once the
     * chunk's QD products of both warpgroups are done (after B2).  At 192 all
     * of it fits (202 KB). */
    static constexpr bool kQOne = kWGs > 1 && K == 256;
    static constexpr int kOffKg = 0;
    static constexpr int kOffQg = kQOne ? 0 : kTileK;       /* in the stage (kQOne: unused, kOffQ instead) */
    static constexpr int kOffW = kQOne ? kTileK : 2 * kTileK;
    static constexpr int kTilesK = kQOne ? 2 : 3;           /* K-side tiles per stage */
    static constexpr int kVSlab = 2 * kTileV;               /* do and dv of one warpgroup */
    static constexpr int kOffDo = kTilesK * kTileK;         /* + warpgroup * kVSlab */
    static constexpr int kOffDv = kTilesK * kTileK + kTileV;        /* dv2 is written back in place */
    static constexpr int kOffG = kTilesK * kTileK + kWGs * kVSlab;  /* fp32 row t0+63 of g, K floats */
    /* stages start on 1024-byte boundaries, where the swizzle patterns repeat */
    static constexpr int kStageBytes = (kOffG + K * 4 + 1023) / 1024 * 1024;
    static constexpr int kOffQ = kStages * kStageBytes;     /* kQOne: qg [64][K] */
    static constexpr int kOffH = kOffQ + (kQOne ? kTileK : 0);   /* S_H: IO(dH) [K][kBVw] per warpgroup */
    static constexpr int kTileH = K * kBVw * 2;
    static constexpr int kSmemBytes = kOffH + kWGs * kTileH;
    static constexpr int kMinBlocks = (2 * (kSmemBytes + 1024) <= 228 * 1024) ? 2 : 1;
    /* the V-side rows (do, dv, S_H: kBVw 16-bit values) use the wgmma swizzle
     * mode of their width: 128B at 64, 64B at 32, 32B at 16 */
    static constexpr unsigned kSwzV = kBVw == 64 ? 1u : kBVw == 32 ? 2u : 3u;
    /* wgmma where it measured faster on the H200: K = 128, and the
     * wider tiles; at K = 64 the scan is DRAM-bound and mma.sync measured 4-5% faster */
    static constexpr bool kWG = KDART_DHU_WG && K >= 128;
    /* (K, BV) pairs with a real kernel: at K = 192 and 256, dH and the qg^T do
     * sum take 1.5 or 2 kBVw fp32 registers per thread each, so one warpgroup
     * at 64 columns would spill (and its stages would not fit): those tiles
     * take 64 as two warpgroups of 32.  (Every pair is valid now; the trap
     * stub below stays for a tile that is not.) */
    static constexpr bool kValid = K < 192 || kBVw <= 32;
    /* 16-byte units of a K-side row, and whether the 128 threads split a tile's
     * rows evenly by them: not at K = 192 (24 units), whose copies go by
     * 64-column block (8 units) instead */
    static constexpr int kCPR = K / 8;
    static constexpr bool kRowSplit = kThreads % kCPR == 0;

    static_assert(K == 64 || K == 128 || K == 192 || K == 256, "bwd_dhu: K must be 64, 128, 192 or 256");
    static_assert(kBV == 16 || kBV == 32 || kBV == 64, "bwd_dhu: BV must be 16, 32 or 64");
    static_assert(kNB % 2 == 0, "bwd_dhu: n8 tiles in pairs");
    static_assert(kWGs == 1 || (kStages == 2 && kBVw == 32), "bwd_dhu: two warpgroups at the K tiles 192, 256, BV 64 only");
    static_assert(kTileK % 1024 == 0 && kTileV % 512 == 0 && kStageBytes % 1024 == 0, "bwd_dhu: swizzle alignment");
    static_assert(!kValid || kSmemBytes <= 227 * 1024, "bwd_dhu: dynamic smem over the 227 KB opt-in limit");
    /* 16-byte unit of a V-side row after the XOR swizzle (wgmma's swizzle of
     * the row width, so the 8 rows of one ldmatrix land in 8 bank groups) */
    static __device__ __forceinline__ int swzV(int row, int u) {
        return kBVw == 64 ? (u ^ (row & 7)) : kBVw == 32 ? (u ^ ((row >> 1) & 3)) : (u ^ ((row >> 2) & 1));
    }
    /* byte offset of 16-byte unit u (0 .. K/8-1) of K-side row r */
    static __device__ __forceinline__ unsigned offK(int r, int u) {
        return (unsigned)((u >> 3) * kColBlock + r * 128 + (((u & 7) ^ (r & 7)) << 4));
    }
};
/* the runtime's copy of the launch contract (runtime/core/stages/bwd_dhu.c) */
static_assert(BwdDhuTraits<128, 64>::kSmemBytes == 216064 && BwdDhuTraits<128, 32>::kSmemBytes == 183296 &&
              BwdDhuTraits<128, 16>::kSmemBytes == 166912, "contract K=128");
static_assert(BwdDhuTraits<64, 64>::kSmemBytes == 134144 && BwdDhuTraits<64, 32>::kSmemBytes == 105472 &&
              BwdDhuTraits<64, 16>::kSmemBytes == 91136, "contract K=64");
static_assert(BwdDhuTraits<256, 32>::kSmemBytes == 231424 && BwdDhuTraits<256, 16>::kSmemBytes == 215040 &&
              BwdDhuTraits<256, 64>::kSmemBytes == 231424 && BwdDhuTraits<256, 64>::kCtaThreads == 256,
              "contract K=256");
static_assert(BwdDhuTraits<192, 32>::kSmemBytes == 178176 && BwdDhuTraits<192, 16>::kSmemBytes == 163840 &&
              BwdDhuTraits<192, 64>::kSmemBytes == 206848 && BwdDhuTraits<192, 64>::kCtaThreads == 256,
              "contract K=192");

namespace kdart {
namespace dhu {

/* kdart::smem_u32, but never rematerialised by ptxas from another register: with a
 * value computed once before the chunk loop, ptxas 13.0 once recomputed it
 * inside the loop from the base register that the loop had since advanced
 * (stage pointer strength reduction), sending stmatrix out of bounds. */
__device__ __forceinline__ unsigned smem_u32_fresh(const void *p) {
    unsigned r;
    asm volatile("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
    return r;
}
__device__ __forceinline__ void cp_async16(unsigned dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(src) : "memory");
}
/* the same with zero fill: when !valid nothing is read (src-size 0: src is not
 * accessed, as CUTLASS's predicated zfill copies rely on) and the 16 bytes at
 * dst become zero */
__device__ __forceinline__ void cp_async16_zfill(unsigned dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}
/* cp.async of G = 4, 8 or 16 bytes with zero fill (the masked path's
 * granules: the widest that divides a row of Kr or V elements); 16 bytes
 * past L1 as the native copies (.cg), the others through it (.ca, the only
 * form those sizes have) */
template <int G>
__device__ __forceinline__ void cp_async_zfill(unsigned dst, const void *src, bool valid) {
    static_assert(G == 4 || G == 8 || G == 16, "the masked path's cp.async sizes");
    if constexpr (G == 16)
        cp_async16_zfill(dst, src, valid);
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" :: "r"(dst), "l"(src), "n"(G),
                     "r"(valid ? G : 0) : "memory");
}
template <int G> struct granule { static constexpr int value = G; };
/* which K-side tiles a copy takes (bwd_dhu_scan.inc, gen_k) */
template <int P> struct kpart { static constexpr int value = P; };
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}
__device__ __forceinline__ void ldsm_x4(unsigned addr, unsigned (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(unsigned addr, unsigned (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
__device__ __forceinline__ void stsm_x4(unsigned addr, const unsigned (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};"
                 :: "r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}
__device__ __forceinline__ void lds128(unsigned addr, unsigned (&r)[4]) {
    asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
__device__ __forceinline__ void stg128(void *p, const unsigned (&r)[4]) {
    asm volatile("st.global.v4.b32 [%0], {%1,%2,%3,%4};"
                 :: "l"(p), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}
/* p, as a value the compiler cannot derive from another: the masked copies'
 * per-chunk pointers, which ptxas would otherwise strength-reduce across the
 * chunk loop into one live register pair per unrolled copy */
template <typename T>
__device__ __forceinline__ T *opaque(T *p) {
    asm("" : "+l"(p));
    return p;
}
/* G = 4, 8 or 16 bytes from shared memory into registers / from registers to
 * global memory: the masked path's store granules */
template <int G>
__device__ __forceinline__ void lds_g(unsigned addr, unsigned (&r)[G / 4]) {
    static_assert(G == 4 || G == 8 || G == 16, "the masked path's store sizes");
    if constexpr (G == 16)
        asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr) : "memory");
    else if constexpr (G == 8)
        asm volatile("ld.shared.v2.b32 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr) : "memory");
    else
        asm volatile("ld.shared.b32 %0, [%1];" : "=r"(r[0]) : "r"(addr) : "memory");
}
template <int G>
__device__ __forceinline__ void stg_g(void *p, const unsigned (&r)[G / 4]) {
    if constexpr (G == 16)
        asm volatile("st.global.v4.b32 [%0], {%1,%2,%3,%4};" :: "l"(p), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                     : "memory");
    else if constexpr (G == 8)
        asm volatile("st.global.v2.b32 [%0], {%1,%2};" :: "l"(p), "r"(r[0]), "r"(r[1]) : "memory");
    else
        asm volatile("st.global.b32 [%0], %1;" :: "l"(p), "r"(r[0]) : "memory");
}
/* The 4x4 transpose of 32-bit words within each lane quad (lane tq of the
 * quad holds row tq; afterwards it holds column tq), in two shuffle rounds:
 * the V-first checkpoint's stores (st_vfirst), where word j of lane tq is the
 * d pair 2 tq, 2 tq + 1 of matrix j and lane tq then holds all 8 d of matrix tq */
__device__ __forceinline__ void quad_transpose(unsigned (&r)[4], int tq) {
    {   /* round 1, lanes tq ^ 1: the even lane keeps words 0, 2, the odd one 1, 3 */
        const bool o = tq & 1;
        const unsigned x0 = __shfl_xor_sync(0xffffffffu, o ? r[0] : r[1], 1);
        const unsigned x1 = __shfl_xor_sync(0xffffffffu, o ? r[2] : r[3], 1);
        if (o) r[0] = x0, r[2] = x1;
        else r[1] = x0, r[3] = x1;
    }
    {   /* round 2, lanes tq ^ 2: the low pair keeps words 0, 1, the high pair 2, 3 */
        const bool o = tq & 2;
        const unsigned x0 = __shfl_xor_sync(0xffffffffu, o ? r[0] : r[2], 2);
        const unsigned x1 = __shfl_xor_sync(0xffffffffu, o ? r[1] : r[3], 2);
        if (o) r[0] = x0, r[1] = x1;
        else r[2] = x0, r[3] = x1;
    }
}
/* 16-bit shared-memory accesses of the masked path's element loops */
__device__ __forceinline__ void sts16(unsigned addr, unsigned short v) {
    asm volatile("st.shared.u16 [%0], %1;" :: "r"(addr), "h"(v) : "memory");
}
__device__ __forceinline__ unsigned short lds16(unsigned addr) {
    unsigned short v;
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));   /* 2^x <= 2^-126 flushes to 0 */
    return y;
}

/* D += A * B, m16n8k16, fp32 accumulate. */
template <typename IO>
__device__ __forceinline__ void mma16816(float *d, const unsigned (&a)[4], unsigned b0, unsigned b1);
template <>
__device__ __forceinline__ void mma16816<bf16>(float *d, const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<fp16>(float *d, const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#if KDART_DHU_WG
/* wgmma.mma_async m64nNk16 (N = BV: 16, 32 or 64), fp32 accumulators d[N/2] (the
 * mma.sync C layout per n8 tile: warp w rows 16w + gq (+8)), A and B by
 * shared-memory descriptor; SA = +-1 scales A; TA = 1 reads A MN-major
 * (transposed); B is always read N-major; acc = 0 overwrites d. */
#define KDART_WG_R8 "%0, %1, %2, %3, %4, %5, %6, %7"
#define KDART_WG_R16 KDART_WG_R8 ", %8, %9, %10, %11, %12, %13, %14, %15"
#define KDART_WG_D8 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define KDART_WG_D16 KDART_WG_D8, "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), \
                     "+f"(d[14]), "+f"(d[15])
#define KDART_WG_R32 KDART_WG_R16 ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define KDART_WG_D32 KDART_WG_D16, "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), \
                     "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),    \
                     "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
/* one wrapper per (io type, N); operands after the R accumulators: %R = A
 * descriptor, %R+1 = B descriptor, %R+2 = accumulate flag, %R+3 = SA, %R+4 = TA */
#define KDART_WG_DEF(IOT, TY, N, R, REGS, OPS, A, B, P, SA, TA)                                               \
    template <int SA_, int TA_>                                                                              \
    __device__ __forceinline__ void wgmma(kdart::IOT, float (&d)[R], unsigned long long da,                  \
                                          unsigned long long db, int acc) {                                  \
        asm volatile("{ .reg .pred p; setp.ne.b32 p, %" P ", 0;\n"                                           \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" REGS "}, %" A ", %" B \
                     ", p, %" SA ", 1, %" TA ", 1; }"                                                         \
                     : OPS : "l"(da), "l"(db), "r"(acc), "n"(SA_), "n"(TA_) : "memory");                       \
    }
KDART_WG_DEF(bf16, "bf16", 16, 8, KDART_WG_R8, KDART_WG_D8, "8", "9", "10", "11", "12")
KDART_WG_DEF(fp16, "f16", 16, 8, KDART_WG_R8, KDART_WG_D8, "8", "9", "10", "11", "12")
KDART_WG_DEF(bf16, "bf16", 32, 16, KDART_WG_R16, KDART_WG_D16, "16", "17", "18", "19", "20")
KDART_WG_DEF(fp16, "f16", 32, 16, KDART_WG_R16, KDART_WG_D16, "16", "17", "18", "19", "20")
KDART_WG_DEF(bf16, "bf16", 64, 32, KDART_WG_R32, KDART_WG_D32, "32", "33", "34", "35", "36")
KDART_WG_DEF(fp16, "f16", 64, 32, KDART_WG_R32, KDART_WG_D32, "32", "33", "34", "35", "36")
#undef KDART_WG_DEF

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }
/* generic-proxy shared writes (cp.async, stmatrix) made visible to wgmma */
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
#else
/* other targets never take the wgmma path (BwdDhuTraits::kWG is false there) */
__device__ __forceinline__ void wg_fence() {}
__device__ __forceinline__ void wg_commit() {}
template <int N> __device__ __forceinline__ void wg_wait() {}
__device__ __forceinline__ void fence_async_smem() {}
template <int SA, int TA, typename IO, int R>
__device__ __forceinline__ void wgmma(IO, float (&)[R], unsigned long long, unsigned long long, int) {}
#endif

/* wgmma matrix descriptors: the fields other than the start address (leading
 * and stride byte offsets, swizzle mode), and that with a start address */
__device__ __forceinline__ unsigned long long desc(unsigned lbo, unsigned sbo, unsigned swz) {
    return ((unsigned long long)(lbo >> 4) << 16) | ((unsigned long long)(sbo >> 4) << 32) |
           ((unsigned long long)swz << 62);
}
__device__ __forceinline__ unsigned long long desc_at(unsigned long long d, unsigned addr) {
    return d | ((addr & 0x3FFFFu) >> 4);
}
/* C[mt] = (acc ? C[mt] : 0) + SA * T^T . U over one chunk (64 rows i) by wgmma:
 * T a K-side tile (qg or w) read MN-major, 64-row block mt from column block
 * mt; U a V-side tile (do or dv2) read N-major; dT / dU their descriptors
 * without the start address, ROWT / ROWU the bytes of one row. */
template <typename IO, int SA, int MT, int R, unsigned COLB, unsigned ROWT, unsigned ROWU>
__device__ __forceinline__ void wg_kt_v(float (&c)[MT][R], unsigned long long dT, unsigned tT, unsigned long long dU,
                                        unsigned tU, bool acc) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int ki = 0; ki < KDART_CHUNK / 16; ++ki)
            wgmma<SA, 1>(IO{}, c[mt], desc_at(dT, tT + mt * COLB + ki * 16 * ROWT), desc_at(dU, tU + ki * 16 * ROWU),
                         acc || ki > 0);
}

template <typename IO>
__device__ __forceinline__ float lo_f(unsigned x) { IO h; h.bits = (unsigned short)(x & 0xffffu); return to_float(h); }
template <typename IO>
__device__ __forceinline__ float hi_f(unsigned x) { IO h; h.bits = (unsigned short)(x >> 16); return to_float(h); }

/* C fragments of two n8 tiles (8 floats from c) as the 4 registers of one x4
 * stmatrix/ldmatrix (matrices: rows 0-7 / rows 8-15 of tile n, then of tile n+1) */
template <typename IO>
__device__ __forceinline__ void pack_pair(const float *c, unsigned (&r)[4]) {
    r[0] = kdart::pack2<IO>(c[0], c[1]);
    r[1] = kdart::pack2<IO>(c[2], c[3]);
    r[2] = kdart::pack2<IO>(c[4], c[5]);
    r[3] = kdart::pack2<IO>(c[6], c[7]);
}

/* C[mt] += (+-)T^T . U over one chunk (64 rows i), mma.sync: T a K-side tile
 * (qg or w, A operand by ldmatrix.trans at this warp's m tiles, lane offsets
 * oA), U a V-side tile (do or dv2, B operand by ldmatrix.trans, lane offsets oB). */
template <typename IO, bool NEG, int MT, int NB, unsigned KROW16, unsigned VROW16>
__device__ __forceinline__ void gemm_kt_v(float (&c)[MT][NB * 4], unsigned tA, const unsigned (&oA)[MT], unsigned tB,
                                          const unsigned (&oB)[NB / 2]) {
#pragma unroll
    for (int ki = 0; ki < KDART_CHUNK / 16; ++ki) {
        unsigned bo[NB / 2][4];
#pragma unroll
        for (int np = 0; np < NB / 2; ++np) ldsm_x4_t(tB + oB[np] + ki * VROW16, bo[np]);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            unsigned a[4];
            ldsm_x4_t(tA + oA[mt] + ki * KROW16, a);
            if (NEG) {
#pragma unroll
                for (int q = 0; q < 4; ++q) a[q] ^= 0x80008000u;
            }
#pragma unroll
            for (int np = 0; np < NB / 2; ++np) {
                mma16816<IO>(&c[mt][8 * np], a, bo[np][0], bo[np][1]);
                mma16816<IO>(&c[mt][8 * np + 4], a, bo[np][2], bo[np][3]);
            }
        }
    }
}

/* cu_seqlens[i], int32 or int64, as a 64-bit value */
__device__ __forceinline__ long long cu_at(const void *cu, int is64, int i) {
    return is64 ? static_cast<const long long *>(cu)[i] : (long long)static_cast<const int *>(cu)[i];
}
/* Where sequence n of a VARLEN launch is: its first tensor row bos, its length
 * len and its first dh row co.  With cu_seqlens, every CTA checks all of it in
 * one block-wide pass (cu[0] == 0, non-decreasing, cu[N] <= T, at most NT chunks
 * in all: chunk_offsets[n] is the prefix of the same pass), and on a bad array
 * the CTA of linear id 0 ORs the KDART_DEVERR_* bits into *status and every CTA
 * returns false, before any store.  A value is used as an index only after the
 * whole array passed; a length beyond T adds no chunks (it is flagged anyway:
 * with cu[0] == 0, order and cu[N] <= T no length exceeds T), so no sum
 * overflows.  All threads of the CTA must call it; scratch is 20 * NTHR / 32
 * bytes of shared memory. */
template <int NTHR>
__device__ __forceinline__ bool varlen_locate(const void *cu, int is64, int N, int T, int NT, int *status, int n,
                                              long long &bos, int &len, long long &co, unsigned char *scratch) {
    if (cu == nullptr) {
        bos = (long long)n * T;
        len = T;
        co = (long long)n * NT;
        return true;
    }
    /* the warps' partial sums, in shared memory the caller does not touch until
     * after its next barrier */
    long long (*red)[NTHR / 32] = reinterpret_cast<long long (*)[NTHR / 32]>(scratch);
    int *redbad = reinterpret_cast<int *>(scratch + 2 * (NTHR / 32) * sizeof(long long));
    int bad = 0;
    long long before = 0, total = 0;
    for (int i = threadIdx.x; i < N; i += NTHR) {
        const long long a = cu_at(cu, is64, i), b = cu_at(cu, is64, i + 1);
        if (b < a || (i == 0 && a != 0)) bad |= KDART_DEVERR_CU_ORDER;
        if (i == N - 1 && b > T) bad |= KDART_DEVERR_CU_RANGE;
        const long long nc = (b >= a && b - a <= T) ? (b - a + KDART_CHUNK - 1) / KDART_CHUNK : 0;
        total += nc;
        if (i < n) before += nc;
    }
    bad = __reduce_or_sync(0xffffffffu, bad);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        before += __shfl_xor_sync(0xffffffffu, before, o);
        total += __shfl_xor_sync(0xffffffffu, total, o);
    }
    const int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) red[0][warp] = before, red[1][warp] = total, redbad[warp] = bad;
    __syncthreads();
    before = 0, total = 0, bad = 0;
#pragma unroll
    for (int w = 0; w < NTHR / 32; ++w) before += red[0][w], total += red[1][w], bad |= redbad[w];
    if (total > NT) bad |= KDART_DEVERR_CHUNKS;
    if (bad) {
        if (status != nullptr && threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0) atomicOr(status, bad);
        return false;
    }
    bos = cu_at(cu, is64, n);
    len = (int)(cu_at(cu, is64, n + 1) - bos);
    co = before;
    return true;
}

} /* namespace dhu */
} /* namespace kdart */

namespace kdart {
namespace dhu {

/* One CTA's scan as a device function (the kernel's own text, bwd_dhu_scan.inc),
 * its V tile bx and row by from the caller: the V split's two widths. */
template <typename IO, int K, int BV, bool VARLEN, int TAIL, int NWG_ = 1>
__device__ __forceinline__ void scan(const kdart_bwd_dhu_params p, const int dhu_bx, const int dhu_by)
{
#define KDART_DHU_BX dhu_bx
#define KDART_DHU_BY dhu_by
#define KDART_DHU_PAIR 0
#define KDART_DHU_NWG NWG_
#include "bwd_dhu_scan.inc"
#undef KDART_DHU_BX
#undef KDART_DHU_BY
#undef KDART_DHU_PAIR
#undef KDART_DHU_NWG
}

/* Head pairs (VARLEN, the K tile 256, native, HV even: p.pair_heads).  A
 * 256-row scan needs two 105 KB stages, so one CTA fills an SM, and each CTA
 * starts by waiting for its first chunk with nothing else on the SM to run:
 * on packed batches of short sequences (the documents of the varlen table)
 * that wait is paid once per (sequence, head, V tile), about one chunk's time
 * each.  A pair CTA scans heads 2j and 2j+1 of one sequence (same length, same
 * chunks) at one V tile, one after the other, and the first scan's last
 * iteration, where two stages leave a free one, already copies the second
 * head's first chunk (KDART_DHU_PAIR 1: load_next; 2: no prologue copy, the
 * stage parity where it went).  The sequence is located once (Loc). */
struct Loc {
    long long bos, co;
    int len, ok;
};
template <typename IO, int K, int BV>
__device__ __forceinline__ void scan_pair1(const kdart_bwd_dhu_params p, const int dhu_bx, const int dhu_by,
                                           Loc &dhu_loc)
{
    constexpr bool VARLEN = true;
    constexpr int TAIL = 0;
#define KDART_DHU_BX dhu_bx
#define KDART_DHU_BY dhu_by
#define KDART_DHU_PAIR 1
#define KDART_DHU_NWG 1
#include "bwd_dhu_scan.inc"
#undef KDART_DHU_BX
#undef KDART_DHU_BY
#undef KDART_DHU_PAIR
#undef KDART_DHU_NWG
}
template <typename IO, int K, int BV>
__device__ __forceinline__ void scan_pair2(const kdart_bwd_dhu_params p, const int dhu_bx, const int dhu_by,
                                           const Loc &dhu_loc)
{
    constexpr bool VARLEN = true;
    constexpr int TAIL = 0;
#define KDART_DHU_BX dhu_bx
#define KDART_DHU_BY dhu_by
#define KDART_DHU_PAIR 2
#define KDART_DHU_NWG 1
#include "bwd_dhu_scan.inc"
#undef KDART_DHU_BX
#undef KDART_DHU_BY
#undef KDART_DHU_PAIR
#undef KDART_DHU_NWG
}
template <typename IO, int K, int BV>
__device__ __forceinline__ void pair_heads(const kdart_bwd_dhu_params p)
{
    static_assert(BwdDhuTraits<K, BV>::kStages == 2, "head pairs hand over through the second of two stages");
    const int h2 = p.HV / 2, n = blockIdx.y / h2, hv = 2 * (blockIdx.y - n * h2);
    Loc loc;
    scan_pair1<IO, K, BV>(p, blockIdx.x, n * p.HV + hv, loc);
    scan_pair2<IO, K, BV>(p, blockIdx.x, n * p.HV + hv + 1, loc);
}

/* The V split's CTAs.  A scan is serial over its sequence's chunks, so one
 * sequence much longer than the others is the critical path of the whole
 * grid: its CTAs must start first, and the hardware starts CTAs in grid
 * order.  A sequence is long when its 64-column scan alone would outlast the
 * balanced per-SM share of all scans (kdart::split_long); its value heads are
 * scanned 32 columns a CTA, the others' 64.  Of the grid (ceil(V / 32),
 * N * HV), the first L * HV rows are the L long sequences' heads (x: their
 * 32-column tiles); the rest, read as one launch index
 * i = x + X (y - L HV), are the short sequences' CTAs (HV * ceil(V / 64) of
 * each), each group longest first (lpt_row; beyond its reach, cu_seqlens's
 * order), and last the CTAs left over (a short sequence needs half its share
 * of the grid), which exit when the SMs are draining anyway rather than
 * between the scans.  Returns -1 for those; else tile << 33 |
 * (n * HV + hv) << 1 | long: the 64-column tile of a short sequence (long:
 * 0, the caller's blockIdx.x is the tile), the grid row of sequence n's head
 * hv, and which width.
 * (It takes the few parameters it reads by value: given p, it changed the
 * scans' register allocation, a 4-byte spill at 255 registers on sm_100a's
 * mma.sync path.)  Every CTA computes the same map from the same
 * cu_seqlens, so each (sequence, head, tile) is scanned exactly once.
 * Garbage cu_seqlens only permute the scans: they validate it (varlen_locate)
 * and write nothing then.  All threads must call it; it uses the first
 * max(ceil(N / 32), NTHR + 1) words of shared memory and ends with a barrier,
 * after which the scan may overwrite them. */
template <int NTHR>
__device__ __forceinline__ long long split_cta(const void *cu, int is64, int N, int HV, int V, int sms, unsigned *bits) {
    static_assert(NTHR % 32 == 0, "whole warps");
    const int nw = (N + 31) / 32;
    const long long tokens = cu_at(cu, is64, N);
    for (int base = 0; base < N; base += NTHR) {
        const int i = base + threadIdx.x;
        const bool f = i < N && split_long(cu_at(cu, is64, i + 1) - cu_at(cu, is64, i), tokens, HV, V, sms);
        const unsigned b = __ballot_sync(0xffffffffu, f);
        if ((threadIdx.x & 31) == 0 && (i >> 5) < nw) bits[i >> 5] = b;
    }
    __syncthreads();
    int L = 0;
    for (int w = 0; w < nw; ++w) L += __popc(bits[w]);
    /* (uniform over the CTA from here: every branch below is taken by all of its threads; 32 bits: the
     * grid has fewer than 2^31 CTAs, the host's limit for a grid's y) */
    const unsigned t64 = (V + 63) / 64, y = blockIdx.y, ly = (unsigned)L * HV; /* the long sequences' rows */
    const bool is_long = y < ly;
    int r, hv, tile;
    if (is_long) { /* row y: rank y / HV, head y % HV, the tile blockIdx.x (the caller's own) */
        r = (int)(y / HV), hv = (int)(y - r * HV), tile = 0;
    } else {       /* the rest of the grid as one index: HV * t64 CTAs a short sequence */
        const unsigned i = blockIdx.x + gridDim.x * (y - ly), per = HV * t64, q = i / per, rem = i - q * per;
        r = L + (int)min(q, (unsigned)N), hv = (int)(rem / t64), tile = (int)(rem - hv * t64);
    }
    if (r >= N) {
        __syncthreads();
        return -1;
    }
    int n;
    if (N <= NTHR) { /* every sequence by length, longest first: the long ones are the first L */
        __syncthreads(); /* (every thread has read bits) */
        n = lpt_row<NTHR>(cu, is64, N, r, reinterpret_cast<int *>(bits));
    } else {
        if (r < L) { /* the r-th long sequence: the r-th set bit */
            int k = r, w = 0;
            while (k >= __popc(bits[w])) k -= __popc(bits[w++]);
            unsigned x = bits[w];
            for (; k > 0; --k) x &= x - 1;
            n = 32 * w + __ffs(x) - 1;
        } else { /* the (r - L)-th short one: each long index at or below it moves it up by one */
            n = r - L;
            for (int w = 0; w < nw && 32 * w <= n; ++w)
                for (unsigned x = bits[w]; x != 0u && 32 * w + __ffs(x) - 1 <= n; x &= x - 1) ++n;
        }
        __syncthreads();
    }
    return (long long)tile << 33 | (long long)(n * HV + hv) << 1 | (is_long ? 1 : 0);
}

/* The variable-length kernel at BV 64, with the V split.  With p.v_split != 0
 * (the host's SM count; set only for grids of a few waves, where one long
 * sequence can outlast all the others, and the host, which never reads
 * cu_seqlens, cannot see it coming) the grid is (ceil(V / 32), N * HV),
 * mapped by split_cta: a long sequence's CTAs scan 32-column tiles (twice
 * the CTAs, each 0.63 of the time per chunk), the others 64-column ones, and
 * the grid's leftover CTAs, last in launch order, exit.
 * With both p.Aqk and p.dv given (kdart_kda_chunk_bwd's packed calls) the
 * 64-column scans take fla's dAv fused (dv from Aqk^T do) and the 32-column
 * ones read dv, which bwd_dav's long_only mode wrote for their sequences
 * alone.
 * With p.v_split == 0 the grid is (ceil(V / 64), N * HV) and every CTA scans
 * 64 columns of its own row. */
template <typename IO, int K, int TAIL>
__device__ __forceinline__ void varlen64(const kdart_bwd_dhu_params p)
{
    int bx = blockIdx.x, by = blockIdx.y;
    if (p.v_split != 0) {
        extern __shared__ __align__(1024) unsigned char smem[];
        const long long m = split_cta<BwdDhuTraits<K, 64>::kThreads>(p.cu_seqlens, p.cu_is64, p.N, p.HV, p.V,
                                                                      p.v_split, reinterpret_cast<unsigned *>(smem));
        if (m < 0) return;
        by = (int)(m >> 1) & 0x7fffffff;
        if (m & 1) {
            scan<IO, K, 32, true, TAIL>(p, blockIdx.x, by);
            return;
        }
        bx = (int)(m >> 33);
    } else if (p.cu_seqlens != nullptr) { /* larger grids: longest sequence first (kdart_varlen.cuh) */
        extern __shared__ __align__(1024) unsigned char smem[];
        by = lpt_row<BwdDhuTraits<K, 64>::kThreads>(p.cu_seqlens, p.cu_is64, p.N, (int)(blockIdx.y / p.HV),
                                                    reinterpret_cast<int *>(smem)) * p.HV + (int)(blockIdx.y % p.HV);
    }
    scan<IO, K, 64, true, TAIL>(p, bx, by);   /* one call site: the 64-column scan inlined once */
}

} /* namespace dhu */
} /* namespace kdart */

/* The scan of one CTA, for the (K, BV) pairs with a real kernel (kValid); the
 * others are the trap stub below.  (The body stays the __global__ function
 * itself: moved into a __forceinline__ function, the native specializations'
 * SASS changed.) */
template <typename IO, int K, int BV, bool VARLEN, int TAIL>
__global__ kdart::enable_if_t<BwdDhuTraits<K, BV>::kValid> __launch_bounds__(BwdDhuTraits<K, BV>::kCtaThreads,
                                                                             BwdDhuTraits<K, BV>::kMinBlocks)
kdart_bwd_dhu(const kdart_bwd_dhu_params p)
{
    constexpr int kNWG = BwdDhuTraits<K, BV>::kWGs;
    if constexpr (kNWG > 1) {   /* two warpgroups of BV / 2 columns (the K tiles 192 and 256 at BV 64; no
                                   head pairs: measured slower there, 1.298 against 1.254 ms on the H200) */
        kdart::dhu::scan<IO, K, BV / kNWG, VARLEN, TAIL, kNWG>(p, blockIdx.x, blockIdx.y);
    } else if constexpr (VARLEN && BV == 64 && K <= 128) {
        kdart::dhu::varlen64<IO, K, TAIL>(p);   /* the V split (below): its own text, two scans */
    } else {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)   /* measured there only; the host sets pair_heads for sm_90a alone */
        if constexpr (VARLEN && K == 256 && TAIL == 0)
            if (p.pair_heads != 0) {   /* head pairs (above) */
                kdart::dhu::pair_heads<IO, K, BV>(p);
                return;
            }
#endif
#define KDART_DHU_BX blockIdx.x
#define KDART_DHU_BY blockIdx.y
#define KDART_DHU_PAIR 0
#define KDART_DHU_NWG 1
#include "bwd_dhu_scan.inc"
#undef KDART_DHU_BX
#undef KDART_DHU_BY
#undef KDART_DHU_PAIR
#undef KDART_DHU_NWG
    }
}

template <typename IO, int K, int BV, bool VARLEN, int TAIL>
__global__ kdart::enable_if_t<!BwdDhuTraits<K, BV>::kValid> kdart_bwd_dhu(const kdart_bwd_dhu_params)
{
    __trap();   /* never launched (see BwdDhuTraits::kValid) */
}

#endif /* KDART_BWD_DHU_CUH */
