/*
 * bwd_intra.cuh: KDA backward, intra-chunk stage (fla chunk_kda_bwd_intra).
 *
 * Math: ../shared/spec/kda_backward.md section 3.3.  Per (b, hv, chunk c),
 * t0 = 64c, r,s in [0,64), E(r,s,d) = exp2(g[r,d] - g[s,d]) for s <= r:
 *   Aq[r,d] = sum_{s<=r} dAqk[r,s] k[s,d] E(r,s,d)
 *   Ak[r,d] = sum_{s< r} dAkk[r,s] k[s,d] E(r,s,d)
 *   Ct[s,d] = sum_{r>=s} (dAqk[r,s] q[r,d] + dAkk[r,s] beta[r] k[r,d]) E(r,s,d)
 *   dq = dq_in + Aq;  dk = dk_in + beta*Ak + Ct;  db = db_in + sum_d k*Ak
 *   dg = dg_in + q*Aq + (beta*Ak - Ct)*k      (suffix-summed per chunk if FOLD_DG)
 *
 * LAUNCH CONTRACT (mirrored by the runtime; see BwdIntraTraits below):
 *   kernel   kdart_bwd_intra<IO, FOLD_DG, EMIT_IO, K>, IO in {kdart::bf16,
 *            kdart::fp16}, K in {64, 128}; only parameter kdart_bwd_intra_params.
 *   grid     (T/64, B*HV, 1): blockIdx.x = chunk, blockIdx.y = b*HV + hv.
 *   block    (BwdIntraTraits<K>::kThreads, 1, 1) = 4*K threads (512 / 256).
 *   smem     BwdIntraTraits<K>::kSmemBytes bytes of DYNAMIC shared memory
 *            (188160 for K=128, 116992 for K=64); the runtime must set
 *            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to it.
 *   Requires T % 64 == 0, HV % H == 0; outputs never alias inputs.
 *   Upper triangles of dAqk (s > r) and dAkk (s >= r) are never used in any
 *   arithmetic (garbage/NaN there is harmless); of those entries only the ones
 *   inside the 16x16 diagonal blocks are even loaded (whole 16-byte vectors).
 *
 * Structure (one CTA per (chunk, b*hv)):
 *   phase A  the chunk's q, k (io dtype), g, dAqk, dAkk, beta are copied once
 *            into shared memory with 16-byte vector loads.
 *   phase B  cross-block terms (16x16 sub-blocks off the diagonal) as tf32
 *            mma.sync m16n8k8 GEMMs; warp w owns output columns [8w, 8w+8).
 *            Gate factorization through block-boundary pivots, every exp2
 *            argument <= 0 for any gate magnitude:
 *              row side, target block i (1..3), pivot e = 16i (first row of i):
 *                X_Aq[r,d] = exp2(g_r - g_e) * sum_{s<16i} dAqk[r,s] (k[s] exp2(g_e - g_s))
 *              column side, source block i (0..2), pivot p = 16i+15 (last row of i):
 *                X_Ct[s,d] = exp2(g_p - g_s) * sum_{r>p} (dAqk[r,s] q[r] + dAkk[r,s] beta[r] k[r]) exp2(g_r - g_p)
 *            Results land in shared memory (fp32).
 *   phase C  diagonal 16x16 blocks in SIMT fp32, thread (i = tid/K, d = tid%K)
 *            owns block i, column d: one direct exp2 per (r,s,d) pair, shared
 *            by the row side (Aq, Ak) and the column side (Ct).  Rows are
 *            walked from 15 down to 0 so that after step r all three of
 *            Aq[r], Ak[r], Ct[r] are final; the row's dq, dk are written there.
 *   phase D  db (deterministic fixed-order reduction); dg rows written from
 *            shared memory (fold_dg: plus the totals of the later blocks).
 * Deterministic: no atomics; every reduction has a fixed order.
 */
#ifndef KDART_BWD_INTRA_CUH
#define KDART_BWD_INTRA_CUH

#include "kdart_common.cuh"

template <int K>
struct BwdIntraTraits {
    static_assert(K == 64 || K == 128, "bwd_intra supports K in {64, 128}");
    static constexpr int kBT = 64;             /* chunk rows */
    static constexpr int kBC = 16;             /* diagonal block rows */
    static constexpr int kThreads = 4 * K;     /* (block i, column d) in phase C */
    static constexpr int kWarps = kThreads / 32;
    static_assert(kWarps * 8 == K, "phase B: one 8-column n-tile per warp");
    static constexpr int kKP = K + 8;          /* padded row stride of q/k/g/X (elements) */
    static constexpr int kDAP = 72;            /* padded row stride of dAqk/dAkk */
    static constexpr int kWPB = K / 32;        /* warps per diagonal block in phase C */
    /* byte offsets inside dynamic shared memory */
    static constexpr int kOffQ = 0;                                  /* io  [64][KP] */
    static constexpr int kOffK = kOffQ + kBT * kKP * 2;              /* io  [64][KP] */
    static constexpr int kOffG = kOffK + kBT * kKP * 2;              /* f32 [64][KP] */
    static constexpr int kOffAqk = kOffG + kBT * kKP * 4;            /* f32 [64][72] */
    static constexpr int kOffAkk = kOffAqk + kBT * kDAP * 4;         /* f32 [64][72] */
    static constexpr int kOffXq = kOffAkk + kBT * kDAP * 4;          /* f32 [48][KP] rows 16..63 */
    static constexpr int kOffXk = kOffXq + 48 * kKP * 4;             /* f32 [48][KP] rows 16..63 */
    static constexpr int kOffXc = kOffXk + 48 * kKP * 4;             /* f32 [48][KP] rows 0..47 */
    static constexpr int kOffBeta = kOffXc + 48 * kKP * 4;           /* f32 [64] */
    static constexpr int kOffDbp = kOffBeta + kBT * 4;               /* f32 [64][WPB] */
    static constexpr int kOffTot = kOffDbp + kBT * kWPB * 4;         /* f32 [4][K] */
    static constexpr int kSmemBytes = kOffTot + 4 * K * 4;
    static_assert(kSmemBytes <= 200 * 1024, "smem budget");
    static_assert(kOffK % 16 == 0 && kOffG % 16 == 0 && kOffAqk % 16 == 0 &&
                  kOffXq % 16 == 0 && kOffXc % 16 == 0 && kOffBeta % 16 == 0,
                  "16-byte aligned regions");
    static_assert((kKP * 2) % 16 == 0 && (kDAP * 4) % 16 == 0, "16-byte aligned rows");
};
static_assert(BwdIntraTraits<128>::kThreads == 512 && BwdIntraTraits<128>::kSmemBytes == 188160,
              "contract K=128");
static_assert(BwdIntraTraits<64>::kThreads == 256 && BwdIntraTraits<64>::kSmemBytes == 116992,
              "contract K=64");

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
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
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

} /* namespace intra */
} /* namespace kdart */

template <typename IO, bool FOLD_DG, bool EMIT_IO, int K>
__global__ void __launch_bounds__(BwdIntraTraits<K>::kThreads, 1)
kdart_bwd_intra(const kdart_bwd_intra_params p) {
    using Tr = BwdIntraTraits<K>;
    using namespace kdart::intra;
    constexpr int KP = Tr::kKP;
    constexpr int DAP = Tr::kDAP;
    constexpr int NTH = Tr::kThreads;

    extern __shared__ __align__(16) unsigned char smem[];
    unsigned short *sQ = reinterpret_cast<unsigned short *>(smem + Tr::kOffQ);
    unsigned short *sK = reinterpret_cast<unsigned short *>(smem + Tr::kOffK);
    float *sG = reinterpret_cast<float *>(smem + Tr::kOffG);
    float *sAqk = reinterpret_cast<float *>(smem + Tr::kOffAqk);
    float *sAkk = reinterpret_cast<float *>(smem + Tr::kOffAkk);
    float *sXq = reinterpret_cast<float *>(smem + Tr::kOffXq); /* row R at (R-16)*KP */
    float *sXk = reinterpret_cast<float *>(smem + Tr::kOffXk); /* row R at (R-16)*KP */
    float *sXc = reinterpret_cast<float *>(smem + Tr::kOffXc); /* row R at R*KP */
    float *sBeta = reinterpret_cast<float *>(smem + Tr::kOffBeta);
    float *sDbp = reinterpret_cast<float *>(smem + Tr::kOffDbp);
    float *sTot = reinterpret_cast<float *>(smem + Tr::kOffTot);

    const int tid = threadIdx.x;
    const int chunk = blockIdx.x;
    const int bh = blockIdx.y;
    const int T = p.T, H = p.H, HV = p.HV;
    const int b = bh / HV;
    const int hv = bh - b * HV;
    const int h = hv / (HV / H);
    const int t0 = chunk * 64;
    /* row (token) base indices */
    const long long rowQ0 = ((long long)b * T + t0) * H + h;  /* [B,T,H] row of t0 */
    const long long rowV0 = ((long long)b * T + t0) * HV + hv; /* [B,T,HV] row of t0 */
    const long long strideQ = (long long)H * K;                /* elements between tokens */
    const long long strideV = (long long)HV * K;
    const long long strideA = (long long)HV * 64;

    /* ---------------- phase A: chunk -> shared memory (16-byte vectors) ---------------- */
    {
        const unsigned short *gq = static_cast<const unsigned short *>(p.q);
        const unsigned short *gk = static_cast<const unsigned short *>(p.k);
        constexpr int VPR = K / 8; /* 8 io elements per 16 bytes */
#pragma unroll
        for (int v = tid; v < 64 * VPR; v += NTH) {
            const int r = v / VPR, c = (v - r * VPR) * 8;
            const long long go = rowQ0 * K + r * strideQ + c;
            const uint4 xq = __ldg(reinterpret_cast<const uint4 *>(gq + go));
            const uint4 xk = __ldg(reinterpret_cast<const uint4 *>(gk + go));
            *reinterpret_cast<uint4 *>(sQ + r * KP + c) = xq;
            *reinterpret_cast<uint4 *>(sK + r * KP + c) = xk;
        }
        constexpr int FPR = K / 4;
#pragma unroll
        for (int v = tid; v < 64 * FPR; v += NTH) {
            const int r = v / FPR, c = (v - r * FPR) * 4;
            const float4 x = __ldg(reinterpret_cast<const float4 *>(p.g + rowV0 * K + r * strideV + c));
            *reinterpret_cast<float4 *>(sG + r * KP + c) = x;
        }
#pragma unroll
        for (int v = tid; v < 64 * 16; v += NTH) {
            const int r = v >> 4, c = (v & 15) * 4;
            /* columns right of row r's diagonal block are never used: not loaded
             * (the 16x16 diagonal block itself is loaded whole; its upper part
             * is never used either) */
            if (c >= 16 * ((r >> 4) + 1)) continue;
            const long long go = rowV0 * 64 + r * strideA + c;
            const float4 x = __ldg(reinterpret_cast<const float4 *>(p.dAqk + go));
            const float4 y = __ldg(reinterpret_cast<const float4 *>(p.dAkk + go));
            *reinterpret_cast<float4 *>(sAqk + r * DAP + c) = x;
            *reinterpret_cast<float4 *>(sAkk + r * DAP + c) = y;
        }
        if (tid < 64) {
            const IO *gb = static_cast<const IO *>(p.beta);
            sBeta[tid] = kdart::to_float(gb[rowV0 + (long long)tid * HV]);
        }
    }
    __syncthreads();

    /* ---------------- phase B: cross-block terms, tf32 mma.sync ---------------- */
    {
        const int warp = tid >> 5, lane = tid & 31;
        const int gid = lane >> 2, tig = lane & 3;
        const int n0 = warp * 8;
        const int colb = n0 + gid;     /* B-fragment column */
        const int colc = n0 + 2 * tig; /* C-fragment columns colc, colc+1 */

        /* row side: target block i, sources s < 16i, pivot row e = 16i */
#pragma unroll
        for (int i = 1; i < 4; ++i) {
            float cq[4] = {0.f, 0.f, 0.f, 0.f}, ck[4] = {0.f, 0.f, 0.f, 0.f};
            const float gpiv = sG[(16 * i) * KP + colb];
            const int ra = 16 * i + gid, rb = ra + 8;
#pragma unroll
            for (int kk = 0; kk < 2 * i; ++kk) {
                const int s0 = 8 * kk + tig, s1 = s0 + 4;
                const float kb0 = ld_io<IO>(sK, s0 * KP + colb) * ex2(gpiv - sG[s0 * KP + colb]);
                const float kb1 = ld_io<IO>(sK, s1 * KP + colb) * ex2(gpiv - sG[s1 * KP + colb]);
                const unsigned b0 = to_tf32(kb0), b1 = to_tf32(kb1);
                mma_tf32(cq, to_tf32(sAqk[ra * DAP + s0]), to_tf32(sAqk[rb * DAP + s0]),
                         to_tf32(sAqk[ra * DAP + s1]), to_tf32(sAqk[rb * DAP + s1]), b0, b1);
                mma_tf32(ck, to_tf32(sAkk[ra * DAP + s0]), to_tf32(sAkk[rb * DAP + s0]),
                         to_tf32(sAkk[ra * DAP + s1]), to_tf32(sAkk[rb * DAP + s1]), b0, b1);
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

        /* column side: source block i (rows s), targets r > p = 16i+15 */
#pragma unroll
        for (int i = 0; i < 3; ++i) {
            float cc[4] = {0.f, 0.f, 0.f, 0.f};
            const int pr = 16 * i + 15;
            const float gpiv = sG[pr * KP + colb];
            const int sa = 16 * i + gid, sb = sa + 8;
#pragma unroll
            for (int kk = 0; kk < 6 - 2 * i; ++kk) {
                const int rA = 16 * (i + 1) + 8 * kk + tig, rB = rA + 4;
                const float eA = ex2(sG[rA * KP + colb] - gpiv);
                const float eB = ex2(sG[rB * KP + colb] - gpiv);
                const unsigned bq0 = to_tf32(ld_io<IO>(sQ, rA * KP + colb) * eA);
                const unsigned bq1 = to_tf32(ld_io<IO>(sQ, rB * KP + colb) * eB);
                const unsigned bk0 = to_tf32(sBeta[rA] * ld_io<IO>(sK, rA * KP + colb) * eA);
                const unsigned bk1 = to_tf32(sBeta[rB] * ld_io<IO>(sK, rB * KP + colb) * eB);
                mma_tf32(cc, to_tf32(sAqk[rA * DAP + sa]), to_tf32(sAqk[rA * DAP + sb]),
                         to_tf32(sAqk[rB * DAP + sa]), to_tf32(sAqk[rB * DAP + sb]), bq0, bq1);
                mma_tf32(cc, to_tf32(sAkk[rA * DAP + sa]), to_tf32(sAkk[rA * DAP + sb]),
                         to_tf32(sAkk[rB * DAP + sa]), to_tf32(sAkk[rB * DAP + sb]), bk0, bk1);
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

    /* ---------------- phase C: diagonal blocks + per-row outputs ---------------- */
    {
        const int i = tid / K;     /* diagonal block, warp-uniform */
        const int d = tid - i * K; /* column */
        const int lane = tid & 31;
        const int R0 = 16 * i;
        float gs[16], ct[16];
        unsigned ksp[8]; /* k of the block's 16 rows, raw io bits, two per register */
#pragma unroll
        for (int s = 0; s < 16; ++s) {
            gs[s] = sG[(R0 + s) * KP + d];
            const unsigned kbits = sK[(R0 + s) * KP + d];
            if (s & 1) ksp[s >> 1] |= kbits << 16;
            else ksp[s >> 1] = kbits;
            ct[s] = (i < 3) ? sXc[(R0 + s) * KP + d] : 0.f;
        }
        /* dg of each row (fold_dg: the within-block suffix sum) goes to this
         * thread's own, already consumed X slot (Xc rows of block i for i < 3,
         * Xq rows for i == 3); phase D adds the later blocks' totals and writes it. */
        float *slot = (i < 3) ? (sXc + R0 * KP + d) : (sXq + 32 * KP + d);
        float dgsuf = 0.f;
        /* element offset of (row 0, column d) of this chunk; rows are 32-bit offsets */
        const long long eb = rowV0 * K + d;
        const int strideVi = HV * K;
        /* the incoming grads of the next row are prefetched one row ahead */
        float nq, nk, ng;
        {
            const long long o = eb + (R0 + 15) * strideVi;
            nq = __ldg(p.dq_in + o); nk = __ldg(p.dk_in + o); ng = __ldg(p.dg_in + o);
        }
#pragma unroll
        for (int r = 15; r >= 0; --r) {
            /* scheduling fence: keeps ptxas/NVVM from overlapping all the unrolled
             * row steps (which spills at the 128-register cap of 512 threads) */
            __syncwarp();
            const int R = R0 + r;
            const long long go = eb + R * strideVi;
            const float din_q = nq, din_k = nk, din_g = ng;
            if (r > 0) {
                const long long on = go - strideVi;
                nq = __ldg(p.dq_in + on); nk = __ldg(p.dk_in + on); ng = __ldg(p.dg_in + on);
            }
            const float gr = gs[r];
            const float qr = ld_io<IO>(sQ, R * KP + d);
            const float kr = unpack_io<IO>(ksp[r >> 1], r & 1);
            const float br = sBeta[R];
            const float bkr = br * kr;
            const float *aqrow = sAqk + R * DAP + R0;
            const float *akrow = sAkk + R * DAP + R0;
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
                ak += sXk[(R - 16) * KP + d];
            }
            const float ctr = ct[r];
            const float bak = br * ak;
            const float vq = din_q + aq;
            const float vk = din_k + bak + ctr;
            const float vg = din_g + qr * aq + (bak - ctr) * kr;
            if (EMIT_IO) {
                static_cast<IO *>(p.dq)[go] = kdart::from_float<IO>(vq);
                static_cast<IO *>(p.dk)[go] = kdart::from_float<IO>(vk);
            } else {
                static_cast<float *>(p.dq)[go] = vq;
                static_cast<float *>(p.dk)[go] = vk;
            }
            /* dg goes through this thread's slot and is written in phase D */
            if (FOLD_DG) {
                dgsuf += vg;
                slot[r * KP] = dgsuf;
            } else {
                slot[r * KP] = vg;
            }
            float pd = kr * ak;
#pragma unroll
            for (int m = 16; m >= 1; m >>= 1) pd += __shfl_xor_sync(0xffffffffu, pd, m);
            if (lane == 0) sDbp[R * Tr::kWPB + (d >> 5)] = pd;
        }
        if (FOLD_DG) sTot[i * K + d] = dgsuf;
    }
    __syncthreads();

    /* ---------------- phase D: db, dg (fold_dg: plus the later blocks' totals) ---------------- */
    if (tid < 64) {
        float acc = p.db_in[rowV0 + (long long)tid * HV];
#pragma unroll
        for (int w = 0; w < Tr::kWPB; ++w) acc += sDbp[tid * Tr::kWPB + w];
        p.db[rowV0 + (long long)tid * HV] = acc;
    }
    {
        const int i = tid / K;
        const int d = tid - i * K;
        const int R0 = 16 * i;
        float later = 0.f;
        if (FOLD_DG) {
#pragma unroll
            for (int j = 3; j > 0; --j)
                if (j > i) later += sTot[j * K + d];
        }
        const float *slot = (i < 3) ? (sXc + R0 * KP + d) : (sXq + 32 * KP + d);
#pragma unroll
        for (int r = 0; r < 16; ++r)
            p.dg[rowV0 * K + (long long)(R0 + r) * strideV + d] = FOLD_DG ? slot[r * KP] + later : slot[r * KP];
    }
}

#endif /* KDART_BWD_INTRA_CUH */
