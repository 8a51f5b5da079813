/*
 * bwd_dhu.cuh: KDA backward stage 4, the reverse state scan
 * (fla's chunk_gated_delta_rule_bwd_dhu with a per-channel gate gk = g2).
 * Spec: shared/spec/kda_backward.md sections 4 and 5.2.
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
 *   kernel   : kdart_bwd_dhu<IO, K, BV, VARLEN, MASKED>, IO in {kdart::bf16, kdart::fp16},
 *              K (the K tile) in {64, 128, 256}, BV (V tile width) in {16, 32, 64} (16, 32 at
 *              K = 256: <256, 64> is a trap stub), VARLEN in {false, true}, MASKED (the
 *              registry's tail parameter) in {false, true}
 *   block    : BwdDhuTraits<K, BV>::kThreads = 128 threads (4 warps, one warpgroup)
 *   grid     : (ceil(V / BV), B * HV, 1); blockIdx.x = V tile, blockIdx.y = b * HV + hv
 *              (VARLEN: (ceil(V / BV), N * HV, 1), blockIdx.y = n * HV + hv)
 *   dyn smem : BwdDhuTraits<K, BV>::kSmemBytes (the asserts below list them);
 *              the host must raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
 *   requires : T % 64 == 0 (VARLEN = 0), 16-byte aligned tensor base pointers, 1 <= p.Kr <= K,
 *              1 <= V.  MASKED = false (the native path) needs p.Kr == K, V % BV == 0 and
 *              !p.state_v_first; MASKED = true takes anything else (see the masked path: the same GEMMs,
 *              element-wise global accesses).  The host picks MASKED from the shapes, so the
 *              native specializations carry none of the masked path's code.
 *   Which BV to launch is a host decision: the scan is serial over chunks, so
 *   the grid must fill the SMs with as wide a tile as it can (the runtime
 *   takes the widest BV whose grid still covers 7/8 of the SMs).
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
 * - wgmma (sm_90a, K = 128): each GEMM is m64nBVk16 warpgroup MMAs with both
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
 * stages deep: chunk c-2 is requested while chunk c is computed.  Shared tiles
 * use wgmma's canonical swizzled layouts (see BwdDhuTraits), which also keep
 * ldmatrix/stmatrix of 8 rows conflict-free; stages start on 1024-byte
 * boundaries.  No atomics: results are bitwise deterministic.
 *
 * History: the first version kept dH transposed with warps splitting V (16
 * columns each), so every warp read all of kg/qg/w from shared memory each
 * chunk; with one 4-warp CTA per SM on small grids that cost ~2 us per
 * chunk (0.72-0.79x fla).  Splitting K rows instead, with narrower tiles on
 * small grids, is docs/perf.md's "bwd_dhu v2"; the wgmma path is "bwd_dhu v4".
 */
#ifndef KDART_BWD_DHU_CUH
#define KDART_BWD_DHU_CUH

#include "kdart_common.cuh"

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
    static constexpr int kBV = BV_;
    static constexpr int kBT = KDART_CHUNK;         /* 64 rows per chunk */
    /* cp.async ring depth: three stages; two at K = 256 (a stage is 100 KB there) */
    static constexpr int kStages = K == 256 ? 2 : 3;
    static constexpr int kWarps = 4;                /* one warpgroup */
    static constexpr int kThreads = 32 * kWarps;
    static constexpr int kMT = K / 64;              /* 64-row blocks of dH; warp w owns rows 64 mt + 16 w + [0, 16) */
    static constexpr int kDW = 16 * kMT;            /* dH rows per warp */
    static constexpr int kNB = kBV / 8;             /* n8 tiles along V */
    static constexpr int kUV = kBV / 8;             /* 16-byte units per V-side row */
    /* K-side tiles ([64 rows][K], 16-bit) are stored as K/64 column blocks of
     * [64 rows][128 bytes], each with the 128-byte swizzle (16-byte unit u of
     * row r at u ^ (r & 7)): the canonical layout of wgmma's 128B mode for both
     * the K-major (kg) and the MN-major (qg^T, w^T) reading. */
    static constexpr int kColBlock = kBT * 128;
    static constexpr int kTileK = kBT * K * 2;
    static constexpr int kTileV = kBT * kBV * 2;
    static constexpr int kOffKg = 0;
    static constexpr int kOffQg = kTileK;
    static constexpr int kOffW = 2 * kTileK;
    static constexpr int kOffDo = 3 * kTileK;
    static constexpr int kOffDv = 3 * kTileK + kTileV;      /* dv2 is written back in place */
    static constexpr int kOffG = 3 * kTileK + 2 * kTileV;   /* fp32 row t0+63 of g, K floats */
    /* stages start on 1024-byte boundaries, where the swizzle patterns repeat */
    static constexpr int kStageBytes = (kOffG + K * 4 + 1023) / 1024 * 1024;
    static constexpr int kOffH = kStages * kStageBytes;     /* S_H: IO(dH) [K][BV] */
    static constexpr int kSmemBytes = kOffH + K * kBV * 2;
    static constexpr int kMinBlocks = (2 * (kSmemBytes + 1024) <= 228 * 1024) ? 2 : 1;
    /* the V-side rows (do, dv, S_H: kBV 16-bit values) use the wgmma swizzle
     * mode of their width: 128B at BV 64, 64B at BV 32, 32B at BV 16 */
    static constexpr unsigned kSwzV = kBV == 64 ? 1u : kBV == 32 ? 2u : 3u;
    /* wgmma where it measured faster: K = 128 (docs/perf.md, "bwd_dhu v4");
     * at K = 64 the scan is DRAM-bound and mma.sync measured 4-5% faster */
    static constexpr bool kWG = KDART_DHU_WG && (K == 128 || K == 256);
    /* (K, BV) pairs with a real kernel: at K = 256, dH and the qg^T do sum take
     * 2 BV fp32 registers per thread each, so BV 64 would spill (and its stages
     * would not fit); the registry's BV 64 x K 256 specialization is a stub that
     * the runtime never launches (kdart__dhu_max_bv) */
    static constexpr bool kValid = K < 256 || kBV <= 32;

    static_assert(K == 64 || K == 128 || K == 256, "bwd_dhu: K must be 64, 128 or 256");
    static_assert(kBV == 16 || kBV == 32 || kBV == 64, "bwd_dhu: BV must be 16, 32 or 64");
    static_assert(kNB % 2 == 0, "bwd_dhu: n8 tiles in pairs");
    static_assert(kTileK % 1024 == 0 && kTileV % 512 == 0 && kStageBytes % 1024 == 0, "bwd_dhu: swizzle alignment");
    static_assert(!kValid || kSmemBytes <= 227 * 1024, "bwd_dhu: dynamic smem over the 227 KB opt-in limit");
    /* 16-byte unit of a V-side row after the XOR swizzle (wgmma's swizzle of
     * the row width, so the 8 rows of one ldmatrix land in 8 bank groups) */
    static __device__ __forceinline__ int swzV(int row, int u) {
        return kBV == 64 ? (u ^ (row & 7)) : kBV == 32 ? (u ^ ((row >> 1) & 3)) : (u ^ ((row >> 2) & 1));
    }
    /* byte offset of 16-byte unit u (0 .. K/8-1) of K-side row r */
    static __device__ __forceinline__ unsigned offK(int r, int u) {
        return (unsigned)((u >> 3) * kColBlock + r * 128 + (((u & 7) ^ (r & 7)) << 4));
    }
};
/* the runtime's copy of the launch contract (runtime/registry.c) */
static_assert(BwdDhuTraits<128, 64>::kSmemBytes == 216064 && BwdDhuTraits<128, 32>::kSmemBytes == 183296 &&
              BwdDhuTraits<128, 16>::kSmemBytes == 166912, "contract K=128");
static_assert(BwdDhuTraits<64, 64>::kSmemBytes == 134144 && BwdDhuTraits<64, 32>::kSmemBytes == 105472 &&
              BwdDhuTraits<64, 16>::kSmemBytes == 91136, "contract K=64");
static_assert(BwdDhuTraits<256, 32>::kSmemBytes == 231424 && BwdDhuTraits<256, 16>::kSmemBytes == 215040 &&
              !BwdDhuTraits<256, 64>::kValid, "contract K=256");

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
/* 16-bit and fp32 shared-memory accesses of the masked (generic) path */
__device__ __forceinline__ void sts16(unsigned addr, unsigned short v) {
    asm volatile("st.shared.u16 [%0], %1;" :: "r"(addr), "h"(v) : "memory");
}
__device__ __forceinline__ unsigned short lds16(unsigned addr) {
    unsigned short v;
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ void sts32f(unsigned addr, float v) {
    asm volatile("st.shared.f32 [%0], %1;" :: "r"(addr), "f"(v) : "memory");
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

/* The scan of one CTA, for the (K, BV) pairs with a real kernel (kValid); the
 * others are the trap stub below.  (The body stays the __global__ function
 * itself: moved into a __forceinline__ function, the native specializations'
 * SASS changed.) */
template <typename IO, int K, int BV, bool VARLEN, bool MASKED>
__global__ kdart::enable_if_t<BwdDhuTraits<K, BV>::kValid> __launch_bounds__(BwdDhuTraits<K, BV>::kThreads,
                                                                             BwdDhuTraits<K, BV>::kMinBlocks)
kdart_bwd_dhu(const kdart_bwd_dhu_params p)
{
    using namespace kdart::dhu;
    using Tr = BwdDhuTraits<K, BV>;
    constexpr int CPR = K / 8;          /* 16-byte units per K-side row */
    constexpr int UV = Tr::kUV;
    constexpr int MT = Tr::kMT, NB = Tr::kNB, DW = Tr::kDW;
    constexpr int NS = Tr::kStages;
    constexpr int NA = NB * 4;          /* accumulator floats per 16-row slab */
    constexpr bool WG = Tr::kWG;
    /* mma.sync at BV = 64: the next chunk's copies, the checkpoint's and dv2's
     * global stores are issued after the MMAs they do not feed (4% at
     * prod8192); on the narrower tiles the early order measured faster.  The
     * wgmma path issues them while its MMAs run. */
    constexpr bool kLate = !WG && BV == 64;
    /* wgmma at BV = 64, where the scan is closest to DRAM-bound: the next copies
     * go out after WD is issued (early, they cost 9% on 2-wave grids); at
     * BV <= 32 they go out after DV is issued (7% faster than after WD) */
    constexpr bool kWgLateLoad = WG && BV == 64;

    extern __shared__ __align__(1024) unsigned char smem[];
    const unsigned sbase = kdart::smem_u32(smem);

    /* Masked (generic) path, a specialization of its own (MASKED, chosen by
     * the host): a head dim Kr below the K tile, a V that the tiles do not
     * divide (the last tile partial; rows of HV*V elements need not be 16-byte
     * aligned either) or the V-first state layout.  Only the global loads and
     * stores change: they go element by element, rows d >= Kr and columns
     * v >= V are zero in shared memory (so they add nothing to any GEMM and dH
     * stays zero there) and are never read or written in global memory.  The
     * shared-memory GEMMs are the native ones.  As a compile-time constant,
     * gen removes every masked branch from the native specializations (their
     * code is the one verified before head dims existed). */
    constexpr bool gen = MASKED;
    const int Kr = MASKED ? p.Kr : K;
    const bool svf = MASKED && p.state_v_first != 0;

    const int tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31;
    const int gq = lane >> 2, tq = lane & 3;      /* mma fragment row group / thread-in-group */
    const int lm = lane >> 3, lr = lane & 7;      /* ldmatrix: matrix index / row within it */

    const int HV = p.HV, V = p.V, T = p.T;
    int NT = T / Tr::kBT;   /* chunks of the scan (VARLEN: of sequence b, set below) */
    const int bh = blockIdx.y;
    const int b = bh / HV, hv = bh - b * HV;   /* VARLEN: b is the sequence n */
    const int v0 = blockIdx.x * BV;
    /* VARLEN: sequence b's first tensor row, length and first dh row */
    long long bos = 0, co = 0;
    int len = 0;
    if constexpr (VARLEN) {
        /* scratch: the last stage, first written after the chunk loop's first barrier */
        if (!varlen_locate<Tr::kThreads>(p.cu_seqlens, p.cu_is64, p.N, T, p.NT, p.status, b, bos, len, co,
                                         smem + (NS - 1) * Tr::kStageBytes))
            return;
        if (len == 0) {   /* zero-length sequence: dh0 = dht (or 0), nothing else */
            if (p.dh0 != nullptr)
                for (int e = tid; e < K * BV; e += Tr::kThreads) {
                    const int d = e / BV, vg = v0 + e % BV;
                    if (gen && (d >= Kr || vg >= V)) continue;
                    const size_t o = gen ? (size_t)bh * Kr * V + (svf ? (size_t)vg * Kr + d : (size_t)d * V + vg)
                                         : (size_t)bh * K * V + (size_t)(e / BV) * V + v0 + e % BV;
                    p.dh0[o] = p.dht != nullptr ? p.dht[o] : 0.f;
                }
            return;
        }
    }
    if constexpr (VARLEN) NT = (len + Tr::kBT - 1) / Tr::kBT;   /* the last one has nvalid(NT - 1) rows */
    auto nvalid = [&](int c) { return VARLEN ? min(Tr::kBT, len - c * Tr::kBT) : Tr::kBT; };
    /* this warp's dH rows: slab mt is rows 64 mt + 16 warp + [0, 16) */
    auto drow = [&](int mt) { return 64 * mt + 16 * warp; };

    const size_t rowK = (size_t)HV * K;           /* element stride between t and t+1 */
    const size_t rowV = (size_t)HV * V;
    const size_t baseK = VARLEN ? ((size_t)bos * HV + hv) * K : ((size_t)b * T * HV + hv) * K;   /* (b, t=0, hv, 0) */
    const size_t baseV = VARLEN ? ((size_t)bos * HV + hv) * V : ((size_t)b * T * HV + hv) * V;
    const IO *qg = static_cast<const IO *>(p.qg) + baseK;
    const IO *kg = static_cast<const IO *>(p.kg) + baseK;
    const IO *wp = static_cast<const IO *>(p.w) + baseK;
    const float *gp = p.g + baseK;
    const IO *dop = static_cast<const IO *>(p.dout) + baseV + v0;
    const IO *dvp = static_cast<const IO *>(p.dv) + baseV + v0;
    /* the masked path's bases: rows of HV*Kr elements */
    const size_t growK = (size_t)HV * Kr;
    const size_t gbaseK = (VARLEN ? (size_t)bos * HV + hv : (size_t)b * T * HV + hv) * Kr;
    /* offset of state element (d, column vg) in a [K][V] or (svf) [V][K] block */
    auto sidx = [&](int d, int vg) { return svf ? (size_t)vg * Kr + d : (size_t)d * V + vg; };
    auto load_stage_gen = [&](int c, int s, int nv) {
        const unsigned st = sbase + s * Tr::kStageBytes;
        const size_t t0 = (size_t)c * Tr::kBT;
        const unsigned short *gk = static_cast<const unsigned short *>(p.kg) + gbaseK;
        const unsigned short *gqq = static_cast<const unsigned short *>(p.qg) + gbaseK;
        const unsigned short *gw = static_cast<const unsigned short *>(p.w) + gbaseK;
#pragma unroll 1
        for (int e = tid; e < Tr::kBT * K; e += Tr::kThreads) {
            const int r = e / K, d = e % K;
            unsigned short xk = 0, xq = 0, xw = 0;
            if (r < nv && d < Kr) {
                const size_t o = (t0 + r) * growK + d;
                xk = gk[o], xq = gqq[o], xw = gw[o];
            }
            const unsigned so = Tr::offK(r, d >> 3) + (d & 7) * 2;
            sts16(st + Tr::kOffKg + so, xk);
            sts16(st + Tr::kOffQg + so, xq);
            sts16(st + Tr::kOffW + so, xw);
        }
        const unsigned short *go = static_cast<const unsigned short *>(p.dout) + baseV;
        const unsigned short *gv = static_cast<const unsigned short *>(p.dv) + baseV;
#pragma unroll 1
        for (int e = tid; e < Tr::kBT * BV; e += Tr::kThreads) {
            const int r = e / BV, v = e % BV;
            unsigned short xo = 0, xv = 0;
            if (r < nv && v0 + v < V) {
                const size_t o = (t0 + r) * rowV + v0 + v;
                xo = go[o], xv = gv[o];
            }
            const unsigned so = (unsigned)(r * UV + Tr::swzV(r, v >> 3)) * 16u + (v & 7) * 2;
            sts16(st + Tr::kOffDo + so, xo);
            sts16(st + Tr::kOffDv + so, xv);
        }
        for (int d = tid; d < K; d += Tr::kThreads)   /* the decay row (1 past Kr: those rows stay 0) */
            sts32f(st + Tr::kOffG + d * 4, d < Kr ? p.g[gbaseK + (t0 + nv - 1) * growK + d] : 0.f);
    };

    /* cp.async of chunk c into stage s.  Each thread's column unit is fixed and
     * its rows advance by a constant step. */
    constexpr int RPJ_K = Tr::kThreads / CPR;
    constexpr int RPJ_V = Tr::kThreads / UV;
    static_assert(Tr::kBT % RPJ_K == 0 && Tr::kBT % RPJ_V == 0 && K / 4 <= Tr::kThreads, "load split");
    const int rK0 = tid / CPR, cK = tid % CPR;
    const int rV0 = tid / UV, cV = tid % UV;
    /* VARLEN: rows from nv on are zero-filled, never read; only the prologue's
     * first chunk (the sequence's last) can be partial, so the loop's copies
     * pass nv = 64 and compile to the unmasked form */
    auto load_stage = [&](int c, int s, int nv) {
        if constexpr (gen) {
            load_stage_gen(c, s, nv);
            return;
        }
        const unsigned st = sbase + s * Tr::kStageBytes;
        const size_t t0 = (size_t)c * Tr::kBT;
        {
            const size_t o0 = (t0 + rK0) * rowK + cK * 8;
            const IO *pk = kg + o0, *pq = qg + o0, *pw = wp + o0;
            const size_t step = (size_t)RPJ_K * rowK;
#pragma unroll
            for (int j = 0; j < Tr::kBT / RPJ_K; ++j) {
                const unsigned so = Tr::offK(rK0 + j * RPJ_K, cK);
                if (VARLEN && nv < Tr::kBT) {
                    const bool ok = rK0 + j * RPJ_K < nv;
                    cp_async16_zfill(st + Tr::kOffKg + so, pk, ok);
                    cp_async16_zfill(st + Tr::kOffQg + so, pq, ok);
                    cp_async16_zfill(st + Tr::kOffW + so, pw, ok);
                } else {
                    cp_async16(st + Tr::kOffKg + so, pk);
                    cp_async16(st + Tr::kOffQg + so, pq);
                    cp_async16(st + Tr::kOffW + so, pw);
                }
                pk += step; pq += step; pw += step;
            }
        }
        {
            const size_t o0 = (t0 + rV0) * rowV + cV * 8;
            const IO *po = dop + o0, *pv = dvp + o0;
            const size_t step = (size_t)RPJ_V * rowV;
#pragma unroll
            for (int j = 0; j < Tr::kBT / RPJ_V; ++j) {
                const int r = rV0 + j * RPJ_V;
                const unsigned so = (unsigned)(r * UV + Tr::swzV(r, cV)) * 16u;
                if (VARLEN && nv < Tr::kBT) {
                    const bool ok = r < nv;
                    cp_async16_zfill(st + Tr::kOffDo + so, po, ok);
                    cp_async16_zfill(st + Tr::kOffDv + so, pv, ok);
                } else {
                    cp_async16(st + Tr::kOffDo + so, po);
                    cp_async16(st + Tr::kOffDv + so, pv);
                }
                po += step; pv += step;
            }
        }
        if (tid < K / 4)   /* the decay row: the chunk's last valid row */
            cp_async16(st + Tr::kOffG + tid * 16, gp + (t0 + nv - 1) * rowK + tid * 4);
    };

    /* dH accumulators: acc[mt][4n + 0..1] = (d = drow(mt)+gq,   v = 8n+2tq, +1)
     *                  acc[mt][4n + 2..3] = (d = drow(mt)+gq+8, v = 8n+2tq, +1) */
    float acc[MT][NA];
    /* the masked path moves the fp32 state tile [K][BV] through the start of
     * the shared window (free before the prologue's copies and after the
     * loop): element-wise global accesses in a loop, register moves by LDS/STS */
    float *const sst = reinterpret_cast<float *>(smem);
    static_assert(K * BV * 4 <= Tr::kStageBytes, "state tile in one stage");
    /* sst's element of accumulator acc[mt][4n + e] (the layout above) */
    auto sfrag = [&](int mt, int n, int e) {
        return (drow(mt) + gq + 8 * (e >> 1)) * BV + 8 * n + 2 * tq + (e & 1);
    };
    if constexpr (gen) {
        const float *src = p.dht;
#pragma unroll 1
        for (int e = tid; e < K * BV; e += Tr::kThreads) {
            const int d = svf ? e % K : e / BV, v = svf ? e / K : e % BV;
            sst[d * BV + v] = src != nullptr && d < Kr && v0 + v < V ? src[(size_t)bh * Kr * V + sidx(d, v0 + v)] : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int n = 0; n < NB; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    acc[mt][4 * n + e] = sst[sfrag(mt, n, e)];
        __syncthreads();   /* before the prologue's copies into stage 0 */
    } else if (p.dht != nullptr) {
        const float *src = p.dht + (size_t)bh * K * V + v0;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int n = 0; n < NB; ++n) {
                const int d = drow(mt) + gq, v = 8 * n + 2 * tq;
                const float2 x = *reinterpret_cast<const float2 *>(src + (size_t)d * V + v);
                const float2 y = *reinterpret_cast<const float2 *>(src + (size_t)(d + 8) * V + v);
                acc[mt][4 * n] = x.x; acc[mt][4 * n + 1] = x.y; acc[mt][4 * n + 2] = y.x; acc[mt][4 * n + 3] = y.y;
            }
    } else {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int e = 0; e < NA; ++e) acc[mt][e] = 0.f;
    }
    const float scale = p.scale;

    /* Lane roles in x4 ldmatrix/stmatrix: matrix lm covers rows +8*(lm&1) and
     * 16-byte unit +(lm>>1) of a 16x16 block (C/B-operand order); for the
     * transposed A operand (qg^T, w^T) matrix lm covers k rows +8*(lm>>1) and
     * m unit +(lm&1). */
    const int rj = 8 * (lm & 1) + lr, uj = lm >> 1;
    auto offV = [](int row, int u) { return (unsigned)(row * UV + Tr::swzV(row, u)) * 16u; };
    constexpr unsigned VROW16 = 16u * UV * 16u;     /* bytes of 16 V-side rows */
    unsigned oV[NB / 2];                            /* V-side rows 16x + rj, unit 2np + uj */
#pragma unroll
    for (int np = 0; np < NB / 2; ++np) oV[np] = offV(rj, 2 * np + uj);
    const unsigned oWarpV = 16u * warp * UV * 16u;  /* this warp's 16 rows of dv / dv2 */
    const int rA = 8 * (lm >> 1) + lr, uA = lm & 1;
    constexpr unsigned KROW16 = 16u * 128u;         /* bytes of 16 K-side rows (in one column block) */
    unsigned oKA[4];                                /* kg rows 16 warp + rj, unit 2kk + uj, kk & 3 */
#pragma unroll
    for (int q = 0; q < 4; ++q) oKA[q] = Tr::offK(16 * warp + rj, 2 * q + uj);
    unsigned oQA[MT];                               /* qg, w rows 16ki + rA, this warp's slab mt */
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) oQA[mt] = Tr::offK(rA, drow(mt) / 8 + uA);
    /* descriptors: K-side tiles in the 128B mode (kg K-major: 8-row groups
     * 1024 bytes apart; qg / w MN-major: column blocks kColBlock apart, 8-row
     * groups 1024 apart); V-side tiles N-major in their own mode, 8-row groups
     * 8 rows apart.  Only the start address changes from use to use. */
    constexpr unsigned VROW8 = 8u * UV * 16u;
    const unsigned long long dK0 = desc(16, 1024, 1), dMN0 = desc(Tr::kColBlock, 1024, 1);
    const unsigned long long dV0 = desc(Tr::kTileV, VROW8, Tr::kSwzV);

    const size_t ckStep = (size_t)HV * K * V;     /* one chunk of dh for fixed (b, hv) */
    IO *dhbase = static_cast<IO *>(p.dh) + (VARLEN ? ((size_t)co * HV + hv) : ((size_t)b * NT * HV + hv)) * K * V + v0;
    IO *dv2base = static_cast<IO *>(p.dv2) + baseV + v0;

    /* this warp's 16 rows of dv2 from the stage to global memory */
    auto store_dv2 = [&](int c, unsigned st) {
        IO *dst = dv2base + ((size_t)c * Tr::kBT + 16 * warp) * rowV;
        constexpr int UNITS = 16 * UV;
        const int nvw = nvalid(c) - 16 * warp;   /* VARLEN: this warp's valid rows */
        if constexpr (gen) {
            unsigned short *gd = reinterpret_cast<unsigned short *>(dst);
#pragma unroll 1
            for (int e = lane; e < 16 * BV; e += 32) {
                const int row = e / BV, v = e % BV;
                if (row < nvw && v0 + v < V)
                    gd[(size_t)row * rowV + v] =
                        lds16(st + Tr::kOffDv + offV(16 * warp + row, v >> 3) + (v & 7) * 2);
            }
            return;
        }
#pragma unroll
        for (int j = 0; j < (UNITS + 31) / 32; ++j) {
            const int q = 32 * j + lane;
            if ((UNITS % 32 == 0 || q < UNITS) && (!VARLEN || q / UV < nvw)) {
                const int row = q / UV, u = q % UV;
                unsigned r[4];
                lds128(st + Tr::kOffDv + offV(16 * warp + row, u), r);
                stg128(dst + (size_t)row * rowV + 8 * u, r);
            }
        }
    };
    /* the checkpoint of chunk c from S_H (this warp's rows) to global memory */
    auto flush_h = [&](int c, unsigned sH) {
        if constexpr (gen) {
            unsigned short *gd = static_cast<unsigned short *>(p.dh) +
                                 ((VARLEN ? (size_t)co * HV + hv : (size_t)b * NT * HV + hv) + (size_t)c * HV) * Kr * V;
#pragma unroll 1
            for (int e = lane; e < DW * BV; e += 32) {
                const int row = drow(e / (16 * BV)) + (e % (16 * BV)) / BV, v = e % BV;
                if (row < Kr && v0 + v < V) gd[sidx(row, v0 + v)] = lds16(sH + offV(row, v >> 3) + (v & 7) * 2);
            }
            return;
        }
        IO *dst = dhbase + (size_t)c * ckStep;
        constexpr int UNITS = DW * UV;
#pragma unroll
        for (int j = 0; j < (UNITS + 31) / 32; ++j) {
            const int q = 32 * j + lane;
            if (UNITS % 32 == 0 || q < UNITS) {
                const int row = drow(q / (16 * UV)) + (q % (16 * UV)) / UV, u = q % UV;
                unsigned r[4];
                lds128(sH + offV(row, u), r);
                stg128(dst + (size_t)row * V + 8 * u, r);
            }
        }
    };
    /* IO(dH) of this warp's rows into S_H (each warp later reads back only its
     * own rows for the checkpoint: __syncwarp suffices for that) */
    auto write_h = [&](int c, unsigned sH) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int np = 0; np < NB / 2; ++np) {
                unsigned r[4];
                pack_pair<IO>(&acc[mt][8 * np], r);
                stsm_x4(sH + (unsigned)drow(mt) * UV * 16u + oV[np], r);
            }
        __syncwarp();
        if (!WG && !kLate) flush_h(c, sH);
    };

    /* the swizzles assume 1024-byte aligned stages; the dynamic window is declared
     * __align__(1024), so this only catches a toolchain that does not honour it */
    if ((sbase & 1023u) != 0) __trap();
    load_stage(NT - 1, 0, nvalid(NT - 1));
    cp_async_commit();
    /* the stage ahead: one with three stages, none with two (K = 256).  (Written
     * as before K = 256 existed: as a loop over NS - 2 stages, ptxas scheduled the
     * native kernels differently.) */
    static_assert(NS == 2 || NS == 3, "bwd_dhu: two or three stages");
    if constexpr (NS == 3) {
        if (NT >= 2) load_stage(NT - 2, 1, Tr::kBT);
        cp_async_commit();
    }
    write_h(NT - 1, sbase + Tr::kOffH);

    /* the copies of chunk c-(NS-1) into stage sl, as one commit group (an empty
     * group at the tail keeps the count uniform); where in the chunk they are
     * issued depends on the GEMM path and the tile (kLate, kWgLateLoad) */
    auto load_next = [&](int c, int sl) {
        if (c >= NS - 1) load_stage(c - (NS - 1), sl, Tr::kBT);
        cp_async_commit();
    };
    int s = 0, sl = NS - 1;        /* stage of chunk c, stage that chunk c-(NS-1) goes to */
    for (int it = 0; it < NT; ++it) {
        const int c = NT - 1 - it;
        cp_async_wait<NS - 2>();   /* chunk c's group is complete (the newest may not be) */
        if (WG) fence_async_smem();   /* this thread's copies and S_H rows, visible to wgmma */
        __syncthreads();           /* B1: stage s and all of S_H visible; stage (it-1)%NS free */
        /* the shared base is re-read every chunk (see smem_u32_fresh) */
        const unsigned base = smem_u32_fresh(smem);
        const unsigned st = base + s * Tr::kStageBytes, sH = base + Tr::kOffH;
        if (!WG && !kLate) load_next(c, sl);

        float qd[MT][NA];
        float dva[NA];
        /* dv for this warp's 16 rows i: the DV accumulator's initial value */
#pragma unroll
        for (int np = 0; np < NB / 2; ++np) {
            unsigned r[4];
            ldsm_x4(st + Tr::kOffDv + oWarpV + oV[np], r);
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                dva[8 * np + 2 * q] = lo_f<IO>(r[q]);
                dva[8 * np + 2 * q + 1] = hi_f<IO>(r[q]);
            }
        }
        if constexpr (WG) {
            /* QD = qg^T do (independent of dH) and DV = dv + kg IO(dH), both on the
             * tensor cores at once; the copies of chunk c-2 and the checkpoint of
             * chunk c are issued while they run */
            wg_fence();
            wg_kt_v<IO, 1, MT, NA, Tr::kColBlock, 128, UV * 16>(qd, dMN0, st + Tr::kOffQg, dV0, st + Tr::kOffDo, false);
            wg_commit();
#pragma unroll
            for (int kk = 0; kk < K / 16; ++kk)
                wgmma<1, 0>(IO{}, dva, desc_at(dK0, st + Tr::kOffKg + (kk >> 2) * Tr::kColBlock + (kk & 3) * 32),
                            desc_at(dV0, sH + kk * 2 * VROW8), 1);
            wg_commit();
            if (!kWgLateLoad) load_next(c, sl);
            flush_h(c, sH);
            wg_wait<1>();              /* QD done */
        } else {
            /* QD first: it does not depend on dH, so its MMAs fill the gaps of the DV chain */
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int e = 0; e < NA; ++e) qd[mt][e] = 0.f;
            gemm_kt_v<IO, false, MT, NB, KROW16, VROW16>(qd, st + Tr::kOffQg, oQA, st + Tr::kOffDo, oV);
            {
                float dvb[NA];
#pragma unroll
                for (int e = 0; e < NA; ++e) dvb[e] = 0.f;
#pragma unroll
                for (int kk = 0; kk < K / 16; ++kk) {
                    unsigned a[4];
                    ldsm_x4(st + Tr::kOffKg + oKA[kk & 3] + (kk >> 2) * Tr::kColBlock, a);
#pragma unroll
                    for (int np = 0; np < NB / 2; ++np) {
                        unsigned bb[4];
                        ldsm_x4_t(sH + oV[np] + kk * VROW16, bb);
                        float *t = (BV <= 32 && (kk & 1)) ? dvb : dva;   /* two chains where registers allow */
                        mma16816<IO>(t + 8 * np, a, bb[0], bb[1]);
                        mma16816<IO>(t + 8 * np + 4, a, bb[2], bb[3]);
                    }
                }
#pragma unroll
                for (int e = 0; e < NA; ++e) dva[e] += dvb[e];
            }
            if (kLate) {
                load_next(c, sl);
                flush_h(c, sH);
            }
        }
        /* decay, then dH += scale * QD (scale after the accumulation, as fla) */
        {
            const float *sg = reinterpret_cast<const float *>(smem + s * Tr::kStageBytes + Tr::kOffG);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const float ga = ex2(sg[drow(mt) + gq]);
                const float gb = ex2(sg[drow(mt) + gq + 8]);
#pragma unroll
                for (int n = 0; n < NB; ++n) {
                    acc[mt][4 * n] = fmaf(scale, qd[mt][4 * n], acc[mt][4 * n] * ga);
                    acc[mt][4 * n + 1] = fmaf(scale, qd[mt][4 * n + 1], acc[mt][4 * n + 1] * ga);
                    acc[mt][4 * n + 2] = fmaf(scale, qd[mt][4 * n + 2], acc[mt][4 * n + 2] * gb);
                    acc[mt][4 * n + 3] = fmaf(scale, qd[mt][4 * n + 3], acc[mt][4 * n + 3] * gb);
                }
            }
        }
        if (WG) wg_wait<0>();      /* DV done */
        /* dv2 = IO(DV): in place of dv (only this warp reads these rows before
         * B2), then out with 16-byte stores */
#pragma unroll
        for (int np = 0; np < NB / 2; ++np) {
            unsigned r[4];
            pack_pair<IO>(&dva[8 * np], r);
            stsm_x4(st + Tr::kOffDv + oWarpV + oV[np], r);
        }
        if (!WG && !kLate) { __syncwarp(); store_dv2(c, st); }
        if (WG) fence_async_smem();
        __syncthreads();   /* B2: every dv2 row is in the stage; all reads of S_H are done */

        /* dH -= w^T dv2 */
        if constexpr (WG) {
            wg_fence();
            wg_kt_v<IO, -1, MT, NA, Tr::kColBlock, 128, UV * 16>(acc, dMN0, st + Tr::kOffW, dV0, st + Tr::kOffDv, true);
            wg_commit();
            if (kWgLateLoad) load_next(c, sl);
            store_dv2(c, st);
            wg_wait<0>();
        } else {
            gemm_kt_v<IO, true, MT, NB, KROW16, VROW16>(acc, st + Tr::kOffW, oQA, st + Tr::kOffDv, oV);
            if (kLate) store_dv2(c, st);
        }
        if (c > 0) write_h(c - 1, sH);
        s = s == NS - 1 ? 0 : s + 1;
        sl = sl == NS - 1 ? 0 : sl + 1;
    }

    if constexpr (gen) {
        if (p.dh0 != nullptr) {
            __syncthreads();   /* every warp is done with the stages (no copy is in flight) */
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int n = 0; n < NB; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        sst[sfrag(mt, n, e)] = acc[mt][4 * n + e];
            __syncthreads();
#pragma unroll 1
            for (int e = tid; e < K * BV; e += Tr::kThreads) {
                const int d = svf ? e % K : e / BV, v = svf ? e / K : e % BV;
                if (d < Kr && v0 + v < V) p.dh0[(size_t)bh * Kr * V + sidx(d, v0 + v)] = sst[d * BV + v];
            }
        }
    } else if (p.dh0 != nullptr) {
        float *dst = p.dh0 + (size_t)bh * K * V + v0;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int n = 0; n < NB; ++n) {
                const int d = drow(mt) + gq, v = 8 * n + 2 * tq;
                *reinterpret_cast<float2 *>(dst + (size_t)d * V + v) =
                    make_float2(acc[mt][4 * n], acc[mt][4 * n + 1]);
                *reinterpret_cast<float2 *>(dst + (size_t)(d + 8) * V + v) =
                    make_float2(acc[mt][4 * n + 2], acc[mt][4 * n + 3]);
            }
    }
}

template <typename IO, int K, int BV, bool VARLEN, bool MASKED>
__global__ kdart::enable_if_t<!BwdDhuTraits<K, BV>::kValid> kdart_bwd_dhu(const kdart_bwd_dhu_params)
{
    __trap();   /* never launched (see BwdDhuTraits::kValid) */
}

#endif /* KDART_BWD_DHU_CUH */
