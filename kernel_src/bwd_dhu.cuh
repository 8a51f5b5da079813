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
 * ---- Launch contract (the runtime mirrors it; see BwdDhuTraits) ----------
 *   kernel   : kdart_bwd_dhu<IO, K, BV>, IO in {kdart::bf16, kdart::fp16},
 *              K in {64, 128}, BV (V tile width) in {16, 32, 64}
 *   block    : BwdDhuTraits<K, BV>::kThreads = 128 threads (4 warps)
 *   grid     : (V / BV, B * HV, 1); blockIdx.x = V tile, blockIdx.y = b * HV + hv
 *   dyn smem : BwdDhuTraits<K, BV>::kSmemBytes (the asserts below list them);
 *              the host must raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
 *   requires : T % 64 == 0, V % BV == 0, 16-byte aligned tensor base pointers.
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
 * One CTA = one serial scan, 4 warps.  Warp w owns the K/4 rows
 * d in [w K/4, (w+1) K/4) of dH (fp32, in mma.sync accumulator registers), so
 * the K-side tiles (kg, qg, w: 48 KB per chunk at K = 128) are read from
 * shared memory once per CTA, split among the warps, and only the narrow
 * V-side operands are shared.  All GEMMs are mma.sync.m16n8k16 (bf16 or fp16
 * operands, fp32 accumulate):
 *   DV[i,v]  = dv + sum_d kg[i,d] IO(dH)[d,v]  warp w: rows i in [16w,16w+16);
 *              A = kg (ldmatrix), B = IO(dH) from the S_H tile (ldmatrix.trans),
 *              accumulator initialised with dv (ldmatrix)
 *   QD[d,v]  = sum_i qg[i,d] do[i,v]           A = qg^T (ldmatrix.trans), B = do
 *   dH[d,v] -= sum_i w[i,d] dv2[i,v]           A = -w^T (sign flip is exact),
 *              B = dv2 (ldmatrix.trans), accumulating straight into dH
 * Per chunk: barrier B1 (stage and S_H visible) -> QD -> DV -> dv2 into the
 * stage and out -> decay, dH += scale QD -> barrier B2 (all dv2 rows visible)
 * -> WD -> each warp writes its rows of IO(dH) into S_H and out as the next
 * checkpoint.  With one warp per scheduler the chunk is a chain of dependent
 * MMAs, so the order is chosen for latency: QD does not depend on dH and goes
 * first, where its MMAs fill the gaps of DV's chain; DV's K reduction runs in
 * two accumulator sets (even / odd k steps) at BV <= 32, where registers allow;
 * at BV = 64 the next chunk's copies and the global stores of the checkpoint
 * and of dv2 are issued after the MMAs they do not feed (kLate).
 * Inputs (kg, qg, w, do, dv and g's row 63) come in with cp.async.cg, three
 * stages deep: chunk c-2 is requested while chunk c is computed.  Shared
 * tiles are XOR-swizzled in 16-byte units so ldmatrix/stmatrix of 8 rows are
 * conflict-free.  No atomics: results are bitwise deterministic.
 *
 * History: the first version kept dH transposed with warps splitting V (16
 * columns each), so every warp read all of kg/qg/w from shared memory each
 * chunk; with one 4-warp CTA per SM on small grids that cost ~2 us per
 * chunk (0.72-0.79x fla).  Splitting K rows instead, with narrower tiles on
 * small grids, is docs/perf.md's "bwd_dhu v2".
 */
#ifndef KDART_BWD_DHU_CUH
#define KDART_BWD_DHU_CUH

#include "kdart_common.cuh"

template <int K_, int BV_>
struct BwdDhuTraits {
    static constexpr int K = K_;
    static constexpr int kBV = BV_;
    static constexpr int kBT = KDART_CHUNK;         /* 64 rows per chunk */
    static constexpr int kStages = 3;               /* cp.async ring depth */
    static constexpr int kWarps = 4;
    static constexpr int kThreads = 32 * kWarps;
    static constexpr int kDW = K / kWarps;          /* dH rows per warp */
    static constexpr int kMT = kDW / 16;            /* m16 tiles per warp (QD, WD) */
    static constexpr int kNB = kBV / 8;             /* n8 tiles along V */
    static constexpr int kUV = kBV / 8;             /* 16-byte units per V-side row */
    /* one stage (bytes): three [64][K] io tiles, two [64][BV] io tiles, g row 63 */
    static constexpr int kTileK = kBT * K * 2;
    static constexpr int kTileV = kBT * kBV * 2;
    static constexpr int kOffKg = 0;
    static constexpr int kOffQg = kTileK;
    static constexpr int kOffW = 2 * kTileK;
    static constexpr int kOffDo = 3 * kTileK;
    static constexpr int kOffDv = 3 * kTileK + kTileV;      /* dv2 is written back in place */
    static constexpr int kOffG = 3 * kTileK + 2 * kTileV;   /* fp32 row t0+63 of g, K floats */
    static constexpr int kStageBytes = kOffG + K * 4;
    static constexpr int kOffH = kStages * kStageBytes;     /* S_H: IO(dH) [K][BV] */
    static constexpr int kSmemBytes = kOffH + K * kBV * 2;
    /* CTAs per SM that shared memory allows (228 KB per SM, 1 KB reserved per CTA) */
    static constexpr int kMinBlocks = (2 * (kSmemBytes + 1024) <= 228 * 1024) ? 2 : 1;

    static_assert(K == 64 || K == 128, "bwd_dhu: K must be 64 or 128");
    static_assert(kBV == 16 || kBV == 32 || kBV == 64, "bwd_dhu: BV must be 16, 32 or 64");
    static_assert(kDW % 16 == 0 && kNB % 2 == 0, "bwd_dhu: whole m16 tiles per warp, n8 tiles in pairs");
    static_assert(kStageBytes % 128 == 0, "bwd_dhu: stage alignment");
    static_assert(kSmemBytes <= 227 * 1024, "bwd_dhu: dynamic smem over the 227 KB opt-in limit");
    /* 16-byte unit of a V-side row (do, dv, S_H) after the XOR swizzle: the 8
     * rows of one ldmatrix/stmatrix land in 8 distinct bank groups */
    static __device__ __forceinline__ int swzV(int row, int u) {
        return kBV == 64 ? (u ^ (row & 7)) : kBV == 32 ? (u ^ ((row >> 1) & 3)) : (u ^ ((row >> 2) & 1));
    }
};
/* the runtime's copy of the launch contract (runtime/registry.c) */
static_assert(BwdDhuTraits<128, 64>::kSmemBytes == 214528 && BwdDhuTraits<128, 32>::kSmemBytes == 181760 &&
              BwdDhuTraits<128, 16>::kSmemBytes == 165376, "contract K=128");
static_assert(BwdDhuTraits<64, 64>::kSmemBytes == 131840 && BwdDhuTraits<64, 32>::kSmemBytes == 103168 &&
              BwdDhuTraits<64, 16>::kSmemBytes == 88832, "contract K=64");

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
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));   /* 2^x <= 2^-126 flushes to 0 */
    return y;
}

/* D += A * B, m16n8k16, fp32 accumulate. */
template <typename IO>
__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1);
template <>
__device__ __forceinline__ void mma16816<bf16>(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<fp16>(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <typename IO>
__device__ __forceinline__ float lo_f(unsigned x) { IO h; h.bits = (unsigned short)(x & 0xffffu); return to_float(h); }
template <typename IO>
__device__ __forceinline__ float hi_f(unsigned x) { IO h; h.bits = (unsigned short)(x >> 16); return to_float(h); }

/* C fragments of two n8 tiles as the 4 registers of one x4 stmatrix/ldmatrix
 * (matrices: rows 0-7 / rows 8-15 of tile n, then of tile n+1) */
template <typename IO>
__device__ __forceinline__ void pack_pair(const float (&c0)[4], const float (&c1)[4], unsigned (&r)[4]) {
    r[0] = kdart::pack2<IO>(c0[0], c0[1]);
    r[1] = kdart::pack2<IO>(c0[2], c0[3]);
    r[2] = kdart::pack2<IO>(c1[0], c1[1]);
    r[3] = kdart::pack2<IO>(c1[2], c1[3]);
}

/* C[mt][n] += (+-)T^T . U over one chunk (64 rows i): T a K-side tile (qg or
 * w, A operand by ldmatrix.trans at this warp's m tiles, lane offsets oA),
 * U a V-side tile (do or dv2, B operand by ldmatrix.trans, lane offsets oB).
 * NEG negates the A fragments (an exact sign flip of the 16-bit values). */
template <typename IO, bool NEG, int MT, int NB, unsigned KROW16, unsigned VROW16>
__device__ __forceinline__ void gemm_kt_v(float (&c)[MT][NB][4], unsigned tA, const unsigned (&oA)[MT], unsigned tB,
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
                mma16816<IO>(c[mt][2 * np], a, bo[np][0], bo[np][1]);
                mma16816<IO>(c[mt][2 * np + 1], a, bo[np][2], bo[np][3]);
            }
        }
    }
}

} /* namespace dhu */
} /* namespace kdart */

template <typename IO, int K, int BV>
__global__ void __launch_bounds__(BwdDhuTraits<K, BV>::kThreads, BwdDhuTraits<K, BV>::kMinBlocks)
kdart_bwd_dhu(const kdart_bwd_dhu_params p)
{
    using namespace kdart::dhu;
    using Tr = BwdDhuTraits<K, BV>;
    constexpr int CPR = K / 8;          /* 16-byte units per K-side row */
    constexpr int UV = Tr::kUV;
    constexpr int MT = Tr::kMT, NB = Tr::kNB, DW = Tr::kDW;
    constexpr int NS = Tr::kStages;
    /* BV = 64 (large grids): the next chunk's copies, the checkpoint's and dv2's
     * global stores are issued after the MMAs they do not feed (4% at prod8192);
     * on the narrower tiles the early order measured as fast or faster */
    constexpr bool kLate = BV == 64;

    extern __shared__ __align__(128) unsigned char smem[];
    const unsigned sbase = kdart::smem_u32(smem);

    const int tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31;
    const int gq = lane >> 2, tq = lane & 3;      /* mma fragment row group / thread-in-group */
    const int lm = lane >> 3, lr = lane & 7;      /* ldmatrix: matrix index / row within it */

    const int HV = p.HV, V = p.V, T = p.T;
    const int NT = T / Tr::kBT;
    const int bh = blockIdx.y;
    const int b = bh / HV, hv = bh - b * HV;
    const int v0 = blockIdx.x * BV;
    const int d0 = warp * DW;                     /* first dH row of this warp */

    const size_t rowK = (size_t)HV * K;           /* element stride between t and t+1 */
    const size_t rowV = (size_t)HV * V;
    const size_t baseK = ((size_t)b * T * HV + hv) * K;   /* (b, t=0, hv, 0) */
    const size_t baseV = ((size_t)b * T * HV + hv) * V;
    const IO *qg = static_cast<const IO *>(p.qg) + baseK;
    const IO *kg = static_cast<const IO *>(p.kg) + baseK;
    const IO *wp = static_cast<const IO *>(p.w) + baseK;
    const float *gp = p.g + baseK;
    const IO *dop = static_cast<const IO *>(p.dout) + baseV + v0;
    const IO *dvp = static_cast<const IO *>(p.dv) + baseV + v0;

    /* cp.async of chunk c into stage s.  Each thread's column unit is fixed and
     * its rows advance by a constant step. */
    constexpr int RPJ_K = Tr::kThreads / CPR;
    constexpr int RPJ_V = Tr::kThreads / UV;
    static_assert(Tr::kBT % RPJ_K == 0 && Tr::kBT % RPJ_V == 0 && K / 4 <= Tr::kThreads, "load split");
    const int rK0 = tid / CPR, cK = tid % CPR;
    const int rV0 = tid / UV, cV = tid % UV;
    auto load_stage = [&](int c, int s) {
        const unsigned st = sbase + s * Tr::kStageBytes;
        const size_t t0 = (size_t)c * Tr::kBT;
        {
            const size_t o0 = (t0 + rK0) * rowK + cK * 8;
            const IO *pk = kg + o0, *pq = qg + o0, *pw = wp + o0;
            const size_t step = (size_t)RPJ_K * rowK;
#pragma unroll
            for (int j = 0; j < Tr::kBT / RPJ_K; ++j) {
                const int r = rK0 + j * RPJ_K;
                const unsigned so = (unsigned)(r * CPR + (cK ^ (r & 7))) * 16u;
                cp_async16(st + Tr::kOffKg + so, pk);
                cp_async16(st + Tr::kOffQg + so, pq);
                cp_async16(st + Tr::kOffW + so, pw);
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
                cp_async16(st + Tr::kOffDo + so, po);
                cp_async16(st + Tr::kOffDv + so, pv);
                po += step; pv += step;
            }
        }
        if (tid < K / 4)
            cp_async16(st + Tr::kOffG + tid * 16, gp + (t0 + Tr::kBT - 1) * rowK + tid * 4);
    };

    /* dH accumulators: acc[mt][n][0..1] = (d = d0+16mt+gq,   v = 8n+2tq, +1)
     *                  acc[mt][n][2..3] = (d = d0+16mt+gq+8, v = 8n+2tq, +1) */
    float acc[MT][NB][4];
    if (p.dht != nullptr) {
        const float *src = p.dht + (size_t)bh * K * V + v0;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int n = 0; n < NB; ++n) {
                const int d = d0 + 16 * mt + gq, v = 8 * n + 2 * tq;
                const float2 x = *reinterpret_cast<const float2 *>(src + (size_t)d * V + v);
                const float2 y = *reinterpret_cast<const float2 *>(src + (size_t)(d + 8) * V + v);
                acc[mt][n][0] = x.x; acc[mt][n][1] = x.y; acc[mt][n][2] = y.x; acc[mt][n][3] = y.y;
            }
    } else {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int n = 0; n < NB; ++n) acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.f;
    }
    const float scale = p.scale;

    /* Lane roles in x4 ldmatrix/stmatrix: matrix lm covers rows +8*(lm&1) and
     * 16-byte unit +(lm>>1) of a 16x16 block (C/B-operand order); for the
     * transposed A operand (qg^T, w^T) matrix lm covers k rows +8*(lm>>1) and
     * m unit +(lm&1). */
    const int rj = 8 * (lm & 1) + lr, uj = lm >> 1;
    const int rA = 8 * (lm >> 1) + lr, uA = lm & 1;
    auto offV = [](int row, int u) { return (unsigned)(row * UV + Tr::swzV(row, u)) * 16u; };
    auto offK = [](int row, int u) { return (unsigned)(row * CPR + (u ^ (row & 7))) * 16u; };
    /* Every ldmatrix/stmatrix address in the chunk loop is a stage base plus one
     * of these per-lane offsets plus a compile-time immediate: the swizzles only
     * involve a row's low bits, which 16-row steps leave alone, and a unit's low
     * 3 bits, so the steps of 8 units along K are immediates too.  (Computing
     * them in the loop was about a third of its instructions.) */
    constexpr unsigned VROW16 = 16u * UV * 16u;     /* bytes of 16 V-side rows */
    constexpr unsigned KROW16 = 16u * CPR * 16u;    /* bytes of 16 K-side rows */
    unsigned oV[NB / 2];                            /* V-side rows 16x + rj, unit 2np + uj */
#pragma unroll
    for (int np = 0; np < NB / 2; ++np) oV[np] = offV(rj, 2 * np + uj);
    unsigned oKA[4];                                /* kg rows 16 warp + rj, unit 2kk + uj, kk & 3 */
#pragma unroll
    for (int q = 0; q < 4; ++q) oKA[q] = offK(16 * warp + rj, 2 * q + uj);
    unsigned oQA[MT];                               /* qg, w rows 16ki + rA, this warp's m tile mt */
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) oQA[mt] = offK(rA, (d0 + 16 * mt) / 8 + uA);
    const unsigned oWarpV = 16u * warp * UV * 16u;  /* this warp's 16 rows of dv / dv2 */
    const unsigned oWarpH = (unsigned)d0 * UV * 16u;   /* this warp's rows of S_H */

    const size_t ckStep = (size_t)HV * K * V;     /* one chunk of dh for fixed (b, hv) */
    IO *dhbase = static_cast<IO *>(p.dh) + ((size_t)b * NT * HV + hv) * K * V + v0;
    IO *dv2base = static_cast<IO *>(p.dv2) + baseV + v0;

    /* IO(dH) of this warp's rows into S_H, then out as the checkpoint of chunk c
     * (each warp reads back only its own rows: __syncwarp suffices) */
    /* this warp's 16 rows of dv2 from the stage to global memory */
    auto store_dv2 = [&](int c, unsigned st) {
        IO *dst = dv2base + ((size_t)c * Tr::kBT + 16 * warp) * rowV;
        constexpr int UNITS = 16 * UV;
#pragma unroll
        for (int j = 0; j < (UNITS + 31) / 32; ++j) {
            const int q = 32 * j + lane;
            if (UNITS % 32 == 0 || q < UNITS) {
                const int row = q / UV, u = q % UV;
                unsigned r[4];
                lds128(st + Tr::kOffDv + offV(16 * warp + row, u), r);
                stg128(dst + (size_t)row * rowV + 8 * u, r);
            }
        }
    };
    /* the checkpoint of chunk c from S_H (this warp's rows) to global memory */
    auto flush_h = [&](int c, unsigned sH) {
        IO *dst = dhbase + (size_t)c * ckStep;
        constexpr int UNITS = DW * UV;
#pragma unroll
        for (int j = 0; j < (UNITS + 31) / 32; ++j) {
            const int q = 32 * j + lane;
            if (UNITS % 32 == 0 || q < UNITS) {
                const int row = d0 + q / UV, u = q % UV;
                unsigned r[4];
                lds128(sH + offV(row, u), r);
                stg128(dst + (size_t)row * V + 8 * u, r);
            }
        }
    };
    auto write_h = [&](int c, unsigned sH) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int np = 0; np < NB / 2; ++np) {
                unsigned r[4];
                pack_pair<IO>(acc[mt][2 * np], acc[mt][2 * np + 1], r);
                stsm_x4(sH + oWarpH + oV[np] + mt * VROW16, r);
            }
        __syncwarp();
        if (!kLate) flush_h(c, sH);
    };

    load_stage(NT - 1, 0);
    cp_async_commit();
    if (NT >= 2) load_stage(NT - 2, 1);
    cp_async_commit();
    write_h(NT - 1, sbase + Tr::kOffH);

    int s = 0, sl = NS - 1;        /* stage of chunk c, stage that chunk c-(NS-1) goes to */
    for (int it = 0; it < NT; ++it) {
        const int c = NT - 1 - it;
        cp_async_wait<NS - 2>();   /* chunk c's group is complete (the newest may not be) */
        __syncthreads();           /* B1: stage s and all of S_H visible; stage (it-1)%NS free */
        if (!kLate) {
            if (c >= NS - 1) load_stage(c - (NS - 1), sl);
            cp_async_commit();     /* (an empty group at the tail keeps the count uniform) */
        }
        /* the shared base is re-read every chunk (see smem_u32_fresh) */
        const unsigned base = smem_u32_fresh(smem);
        const unsigned st = base + s * Tr::kStageBytes, sH = base + Tr::kOffH;

        /* QD = qg^T do first: it does not depend on dH, so its MMAs fill the gaps of
         * the DV chain, which does */
        float qd[MT][NB][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int n = 0; n < NB; ++n) qd[mt][n][0] = qd[mt][n][1] = qd[mt][n][2] = qd[mt][n][3] = 0.f;
        gemm_kt_v<IO, false, MT, NB, KROW16, VROW16>(qd, st + Tr::kOffQg, oQA, st + Tr::kOffDo, oV);
        /* DV for this warp's 16 rows i: dv + kg[i, :] . IO(dH) */
        {
            float dva[NB][4];
#pragma unroll
            for (int np = 0; np < NB / 2; ++np) {
                unsigned r[4];
                ldsm_x4(st + Tr::kOffDv + oWarpV + oV[np], r);
                dva[2 * np][0] = lo_f<IO>(r[0]);     dva[2 * np][1] = hi_f<IO>(r[0]);
                dva[2 * np][2] = lo_f<IO>(r[1]);     dva[2 * np][3] = hi_f<IO>(r[1]);
                dva[2 * np + 1][0] = lo_f<IO>(r[2]); dva[2 * np + 1][1] = hi_f<IO>(r[2]);
                dva[2 * np + 1][2] = lo_f<IO>(r[3]); dva[2 * np + 1][3] = hi_f<IO>(r[3]);
            }
            /* two accumulator sets (odd kk into a zeroed one): half the dependent chain
             * (not at BV = 64: 255 registers would not hold them) */
            constexpr bool kSplitDV = BV <= 32;
            float dvb[NB][4];
#pragma unroll
            for (int n = 0; n < NB; ++n) dvb[n][0] = dvb[n][1] = dvb[n][2] = dvb[n][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < K / 16; ++kk) {
                unsigned a[4];
                ldsm_x4(st + Tr::kOffKg + oKA[kk & 3] + (kk >> 2) * 128u, a);
#pragma unroll
                for (int np = 0; np < NB / 2; ++np) {
                    unsigned bb[4];
                    ldsm_x4_t(sH + oV[np] + kk * VROW16, bb);
                    if (kSplitDV && (kk & 1)) {
                        mma16816<IO>(dvb[2 * np], a, bb[0], bb[1]);
                        mma16816<IO>(dvb[2 * np + 1], a, bb[2], bb[3]);
                    } else {
                        mma16816<IO>(dva[2 * np], a, bb[0], bb[1]);
                        mma16816<IO>(dva[2 * np + 1], a, bb[2], bb[3]);
                    }
                }
            }
            if (kSplitDV)
#pragma unroll
                for (int n = 0; n < NB; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) dva[n][e] += dvb[n][e];
            /* dv2 = IO(DV): in place of dv (only this warp reads these rows
             * before B2), then out with 16-byte stores */
            __syncwarp();
#pragma unroll
            for (int np = 0; np < NB / 2; ++np) {
                unsigned r[4];
                pack_pair<IO>(dva[2 * np], dva[2 * np + 1], r);
                stsm_x4(st + Tr::kOffDv + oWarpV + oV[np], r);
            }
            __syncwarp();
            if (!kLate) store_dv2(c, st);
        }
        if (kLate) {
            /* off the dependent chain: the next load, the checkpoint of chunk c */
            if (c >= NS - 1) load_stage(c - (NS - 1), sl);
            cp_async_commit();
            flush_h(c, sH);
        }

        /* decay, then dH += scale * QD with QD = qg^T do in a fresh accumulator
         * (scale after the accumulation, as fla) */
        {
            const float *sg = reinterpret_cast<const float *>(smem + s * Tr::kStageBytes + Tr::kOffG);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const float ga = ex2(sg[d0 + 16 * mt + gq]);
                const float gb = ex2(sg[d0 + 16 * mt + gq + 8]);
#pragma unroll
                for (int n = 0; n < NB; ++n) {
                    acc[mt][n][0] *= ga; acc[mt][n][1] *= ga;
                    acc[mt][n][2] *= gb; acc[mt][n][3] *= gb;
                }
            }
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int n = 0; n < NB; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[mt][n][e] = fmaf(scale, qd[mt][n][e], acc[mt][n][e]);
        }

        __syncthreads();   /* B2: every dv2 row is in the stage; all reads of S_H are done */

        /* dH -= w^T dv2 */
        gemm_kt_v<IO, true, MT, NB, KROW16, VROW16>(acc, st + Tr::kOffW, oQA, st + Tr::kOffDv, oV);
        if (kLate) store_dv2(c, st);
        if (c > 0) write_h(c - 1, sH);
        s = s == NS - 1 ? 0 : s + 1;
        sl = sl == NS - 1 ? 0 : sl + 1;
    }

    if (p.dh0 != nullptr) {
        float *dst = p.dh0 + (size_t)bh * K * V + v0;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int n = 0; n < NB; ++n) {
                const int d = d0 + 16 * mt + gq, v = 8 * n + 2 * tq;
                *reinterpret_cast<float2 *>(dst + (size_t)d * V + v) = make_float2(acc[mt][n][0], acc[mt][n][1]);
                *reinterpret_cast<float2 *>(dst + (size_t)(d + 8) * V + v) = make_float2(acc[mt][n][2], acc[mt][n][3]);
            }
    }
}

#endif /* KDART_BWD_DHU_CUH */
