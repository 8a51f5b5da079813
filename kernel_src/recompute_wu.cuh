/*
 * recompute_wu.cuh: the backward's forward recompute of the WY factors (fla's
 * recompute_w_u_fwd), with the gate's chunk cumsum in front of it when the
 * gate is computed inside chunk_kda (fla's kda_gate_chunk_cumsum): one pass
 * over each chunk where fla runs two kernels and reads the gate twice.
 *
 * Math (docs/kernels.md, "recompute_wu"), per (b, hv, chunk) of 64 rows t, s,
 * A = Akk (the WY inverse the forward saved), b = beta:
 *   GATE:  a   = -exp(A_log) softplus(g_raw + dt_bias)       (the plain gate), or
 *                lower_bound sigmoid(exp(A_log) (g_raw + dt_bias)) (the safe gate)
 *          g   = (sum_{s <= t} a_s) / ln 2     (the chunk-local cumsum in log2 units, written out)
 *   kb  = k b exp2(g)          (rounded to the io dtype)      w  = A kb
 *   vb  = v b                  (rounded to the io dtype)      u  = A vb
 *   qg  = q exp2(g)            kg = k exp2(g_last - g)   (g_last: the chunk's last valid row)
 * with fla's roundings, so the two agree to fp32 summation order.
 *
 * LAUNCH CONTRACT (mirrored by runtime/core/stages/recompute_wu.c; RecomputeWuTraits):
 *   kernel   kdart_recompute_wu<IO, VARLEN, TAIL, BETA_F32, GATE>; IO in {kdart::bf16,
 *            kdart::fp16}; TAIL: head dim Kr or V not a multiple of 64 (copies and
 *            stores in the granule that Kr and V allow, kdart_tile.cuh); BETA_F32: beta
 *            in fp32; GATE: the raw gate is read (p.g_raw, io or fp32 by p.g_raw_f32)
 *            and the cumsummed one written (p.g_out), else the cumsummed one is read
 *            (p.g).  Any head dim: the K and V blocks of 64 columns are walked in turn.
 *   grid     (T/64, B*HV, 1), or VARLEN (NT, HV, 1) as every chunk kernel
 *            (kdart_varlen.cuh, chunk_of).
 *   block    128 threads (4 warps, each 16 rows of the products).
 *   smem     RecomputeWuTraits::kSmemBytes of dynamic shared memory; three CTAs per SM.
 *   Requires T % 64 == 0 unless VARLEN; HV % H == 0; outputs never alias inputs;
 *   every tensor 16-byte aligned.
 *
 * Structure: the steps are the K blocks, then the V blocks; each step's tiles
 * (the gate, k and q of a K block; v of a V block) are copied with cp.async
 * while the previous step computes (two stages).  A K step: the gate's
 * running sums (GATE: one thread per column and half chunk, written over
 * the raw tile); then the elementwise pass, which adds the first half's
 * totals to the second half's rows and writes the cumsum out, writes qg and
 * kg, and puts kb into the k tile in place; then w = A kb by mma.sync,
 * staged through the same tile for 16-byte stores.  A V step: vb in place,
 * u = A vb.  The CTA moves a few hundred kilobytes once: the kernel is
 * bounded by memory (and by the gate's instructions, GATE), with three CTAs
 * per SM keeping their next steps' copies in flight.
 */
#ifndef KDART_RECOMPUTE_WU_CUH
#define KDART_RECOMPUTE_WU_CUH

#include "kdart_common.cuh"
#include "kdart_tile.cuh"
#include "kdart_varlen.cuh"

struct RecomputeWuTraits {
    static constexpr int kThreads = 128;
    static constexpr int kMinBlocks = 3;
    static constexpr int kTile = 64 * 64 * 2;          /* one 64 x 64 io tile (bytes) */
    static constexpr int kSlotG = 64 * 64 * 4;         /* the gate of a K block, fp32 (or raw io) */
    static constexpr int kStage = kSlotG + 2 * kTile;  /* gate | k or v | q */
    static constexpr int kOffA = 2 * kStage;           /* A, [t][s] as stored, swizzled */
    static constexpr int kOffBeta = kOffA + kTile;     /* f32 [64] */
    static constexpr int kOffTot = kOffBeta + 256;     /* f32 [64]: the first half chunk's gate sums (16-byte aligned) */
    static constexpr int kOffScr = kOffTot + 256;      /* int [16]: chunk_of's scratch */
    static constexpr int kSmemBytes = kOffScr + 64;
    static_assert(kSmemBytes == 74304, "RWU_SMEM of runtime/core/stages/recompute_wu.c");
    static_assert(kMinBlocks * (kSmemBytes + 1024) <= 228 * 1024, "three CTAs per SM");
    static_assert(kThreads == 2 * 64, "the gate's cumsum: one thread per column and half chunk");
};

namespace kdart {
namespace rwu {
using namespace kdart::tile;

/* 8 fp32 from shared memory (16-byte aligned) */
__device__ __forceinline__ void ld8(const float *s, float (&x)[8]) {
    const float4 a = *reinterpret_cast<const float4 *>(s), b = *reinterpret_cast<const float4 *>(s + 4);
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}
/* 8 fp32 (columns c..c+7 of n valid) stored at g: 16-byte stores where the granule allows (n a multiple
 * of 4: each 4-column half wholly in or out), else one by one */
template <bool TAIL>
__device__ __forceinline__ void st8f(float *g, const float (&x)[8], int c, int n, int gran) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        if (!TAIL || (gran >= 4 && c + 4 * h < n)) {
            *reinterpret_cast<float4 *>(g + 4 * h) = make_float4(x[4 * h], x[4 * h + 1], x[4 * h + 2], x[4 * h + 3]);
        } else if (TAIL && gran < 4) {
#pragma unroll
            for (int e = 0; e < 4; ++e)
                if (c + 4 * h + e < n) g[4 * h + e] = x[4 * h + e];
        }
    }
}

/* A 64 x 64 gate tile into shared memory, row-major without swizzle (the
 * cumsum reads it by column): fp32 (F32) or io values, rows < nr and columns
 * < nc, zeros elsewhere; 16-byte copies where the granule allows. */
template <bool TAIL, bool F32>
__device__ __forceinline__ void load_rows(void *s, const void *g, long long stride, int nr, int nc, int tid,
                                          int gran) {
    constexpr int EPC = F32 ? 4 : 8; /* elements per 16-byte chunk */
    constexpr int CPR = 64 / EPC;    /* chunks per row */
    constexpr int ESZ = F32 ? 4 : 2;
#pragma unroll 2
    for (int i = tid; i < 64 * CPR; i += RecomputeWuTraits::kThreads) {
        const int row = i / CPR, c0 = (i - row * CPR) * EPC;
        unsigned char *d = static_cast<unsigned char *>(s) + (row * 64 + c0) * ESZ;
        const unsigned char *src = static_cast<const unsigned char *>(g) + (row * stride + c0) * ESZ;
        if (!TAIL || (F32 ? gran >= 4 : gran == 8)) {
            const bool ok = row < nr && (!TAIL || c0 < nc);
            cp16z(smem_u32(d), ok ? src : g, ok);
        } else if (!F32 && gran == 4) {
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                const bool ok = row < nr && c0 + 4 * q < nc;
                cp8z(smem_u32(d + 8 * q), ok ? src + 8 * q : g, ok);
            }
        } else {
#pragma unroll
            for (int e = 0; e < EPC; ++e) {
                const bool ok = row < nr && c0 + e < nc;
                if constexpr (F32) reinterpret_cast<float *>(d)[e] = ok ? reinterpret_cast<const float *>(src)[e] : 0.f;
                else reinterpret_cast<unsigned short *>(d)[e] = ok ? reinterpret_cast<const unsigned short *>(src)[e] : 0;
            }
        }
    }
}

/* The gate in log2 units (the cumsum's units: a / ln 2), from the hardware's approximate ex2, lg2 and
 * rcp (a few ulp, as fla's Triton kernel computes them), in few instructions: the gate is 4096
 * evaluations per chunk and K block, and in the accurate library forms (log1pf, a true division) its
 * instructions, not the copies, bounded the kernel.  With the plain gate, a / ln 2 = -exp(A_log)
 * log2(1 + 2^(z log2 e)) (z past 20: -exp(A_log) z / ln 2); with the safe one, lower_bound / ln 2 /
 * (1 + 2^(-exp(A_log) z log2 e)).  k: the per-head constants of gate_consts. */
__device__ __forceinline__ float lg2f(float x) {
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float rcpf(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
constexpr float kLog2e = 1.4426950408889634f;
/* (c0, c1): plain gate (log2 e, -exp(A_log)); safe gate (-exp(A_log) log2 e, lower_bound log2 e) */
__device__ __forceinline__ float2 gate_consts(float A_log, int safe, float lower_bound) {
    const float ea = __expf(A_log);
    return safe ? make_float2(-ea * kLog2e, lower_bound * kLog2e) : make_float2(kLog2e, -ea);
}
__device__ __forceinline__ float gate2(float z, float2 k, int safe) {
    if (safe) return k.y * rcpf(1.f + ex2(z * k.x));
    return k.y * (z < 20.f ? lg2f(1.f + ex2(z * k.x)) : z * k.x);
}

} /* namespace rwu */
} /* namespace kdart */

template <typename IO, bool VARLEN, bool TAIL, bool BETA_F32, bool GATE>
__global__ __launch_bounds__(RecomputeWuTraits::kThreads, RecomputeWuTraits::kMinBlocks) void kdart_recompute_wu(
    const kdart_recompute_wu_params p) {
    using Tr = RecomputeWuTraits;
    using namespace kdart;
    using namespace kdart::rwu;
    extern __shared__ __align__(1024) unsigned char smem[];
    unsigned short *sA = reinterpret_cast<unsigned short *>(smem + Tr::kOffA);
    float *sBeta = reinterpret_cast<float *>(smem + Tr::kOffBeta);
    float *sTot = reinterpret_cast<float *>(smem + Tr::kOffTot);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int m0 = 16 * warp, gid = lane >> 2, tq = lane & 3;
    const int T = p.T, H = p.H, HV = p.HV, V = p.V, Kr = p.Kr;

    long long t0, hrow;
    int hv;
    const int nv = chunk_of<Tr::kThreads, VARLEN>(T, HV, p.cu_seqlens, p.cu_is64, p.N, p.NT, p.status,
                                                  reinterpret_cast<int *>(smem + Tr::kOffScr), &t0, &hrow, &hv);
    if (nv <= 0) return; /* bad cu_seqlens (reported), or beyond the last chunk */
    (void)hrow;
    const int hq = hv / (HV / H);
    const int nkb = (Kr + 63) >> 6, nvb = (V + 63) >> 6, nsteps = nkb + (p.u != nullptr ? nvb : 0); /* no u: fwd_h makes it */
    const int gran = TAIL ? granule(Kr, V) : 8;
    const long long strQ = (long long)H * Kr, strG = (long long)HV * Kr, strV = (long long)HV * V;
    const long long oQ = (t0 * H + hq) * Kr, oG = (t0 * HV + hv) * Kr, oV = (t0 * HV + hv) * V;
    auto io = [](const void *b) { return static_cast<const unsigned short *>(b); };
    auto stage = [&](int s) { return smem + (s & 1) * Tr::kStage; };

    /* step s's tiles into stage (s & 1): the gate, k and q of K block s, or v of V block s - nkb */
    auto issue = [&](int s) {
        unsigned char *st = stage(s);
        unsigned short *s1 = reinterpret_cast<unsigned short *>(st + Tr::kSlotG);
        if (s < nkb) {
            const int kc = Kr - 64 * s;
            if constexpr (!GATE)
                load_rows<TAIL, true>(st, p.g + oG + 64 * s, strG, nv, kc, tid, gran);
            else if (p.g_raw_f32)
                load_rows<TAIL, true>(st, static_cast<const float *>(p.g_raw) + oG + 64 * s, strG, nv, kc, tid, gran);
            else
                load_rows<TAIL, false>(st, io(p.g_raw) + oG + 64 * s, strG, nv, kc, tid, gran);
            load_tile<TAIL, Tr::kThreads>(s1, io(p.k) + oQ + 64 * s, strQ, nv, kc, tid, gran);
            if (p.q != nullptr) load_tile<TAIL, Tr::kThreads>(s1 + 4096, io(p.q) + oQ + 64 * s, strQ, nv, kc, tid, gran);
        } else {
            const int vb = s - nkb;
            load_tile<TAIL, Tr::kThreads>(s1, io(p.v) + oV + 64 * vb, strV, nv, V - 64 * vb, tid, gran);
        }
    };

    load_tile<false, Tr::kThreads>(sA, io(p.A) + (t0 * HV + hv) * 64, (long long)HV * 64, nv, 64, tid);
    if (tid < 64) {
        float b = 0.f;
        if (tid < nv) {
            if constexpr (BETA_F32) b = static_cast<const float *>(p.beta)[(t0 + tid) * HV + hv];
            else b = ldf<IO>(io(p.beta) + (t0 + tid) * HV + hv);
        }
        sBeta[tid] = b;
    }
    issue(0);
    cp_commit();

    const unsigned sAu = smem_u32(sA);
    const int last = nv - 1;
#pragma unroll 1
    for (int s = 0; s < nsteps; ++s) {
        if (s + 1 < nsteps) issue(s + 1);
        cp_commit();
        cp_wait<1>();
        __syncthreads();
        unsigned char *st = stage(s);
        float *sG = reinterpret_cast<float *>(st);
        unsigned short *sT = reinterpret_cast<unsigned short *>(st + Tr::kSlotG); /* k (kb) or v (vb) */
        const unsigned short *sQ = sT + 4096;
        const bool kstep = s < nkb;
        const int cb = 64 * (kstep ? s : s - nkb);       /* the block's first column */
        const int ncol = kstep ? Kr : V;                 /* the block's tensor width */
        if (kstep && GATE) {
            /* the gate of column c over the rows of half hf, its running sum (log2 units) written over
             * the raw tile in place (an io tile is first read into registers, two rows a register: its
             * fp32 sums overwrite other threads' raw values); half 0's totals go to sTot, and the
             * elementwise pass adds them to half 1's rows and writes the cumsum out */
            const int c = tid & 63, hf = tid >> 6, cg = cb + c;
            const float bias = p.dt_bias != nullptr && cg < Kr ? p.dt_bias[(long long)hv * Kr + cg] : 0.f;
            const float2 gk = gate_consts(p.A_log[hv], p.safe_gate, p.lower_bound);
            const int safe = p.safe_gate;
            float acc = 0.f;
            if (p.g_raw_f32) {
#pragma unroll 8
                for (int i = 0; i < 32; ++i) {
                    float *e = sG + (32 * hf + i) * 64 + c;
                    acc += gate2(*e + bias, gk, safe);
                    *e = acc;
                }
            } else {
                const unsigned short *sR = reinterpret_cast<const unsigned short *>(sG);
                unsigned pk[16];
#pragma unroll
                for (int i = 0; i < 16; ++i)
                    pk[i] = sR[(32 * hf + 2 * i) * 64 + c] | ((unsigned)sR[(32 * hf + 2 * i + 1) * 64 + c] << 16);
                __syncthreads();
#pragma unroll /* (whole: with pk indexed at run time, the array would live in local memory) */
                for (int i = 0; i < 16; ++i) {
                    const float2 raw = unpack2<IO>(pk[i]);
                    float *e = sG + (32 * hf + 2 * i) * 64 + c;
                    acc += gate2(raw.x + bias, gk, safe);
                    e[0] = acc;
                    acc += gate2(raw.y + bias, gk, safe);
                    e[64] = acc;
                }
            }
            if (hf == 0) sTot[c] = acc;
            __syncthreads();
        }
        /* the elementwise pass: four 8-column chunks per thread */
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int i = tid + Tr::kThreads * j, r = i >> 3, c0 = (i & 7) << 3, cg = cb + c0;
            unsigned short *pt = sT + swz(r, c0);
            uint4 t = *reinterpret_cast<const uint4 *>(pt);
            const float be = sBeta[r];
            unsigned tv[4] = {t.x, t.y, t.z, t.w}, ob[4];
            if (!kstep) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float2 v2 = unpack2<IO>(tv[e]);
                    ob[e] = pack2<IO>(v2.x * be, v2.y * be);
                }
            } else {
                float gv[8], gn[8];
                ld8(sG + r * 64 + c0, gv);
                ld8(sG + last * 64 + c0, gn);
                if (GATE) { /* rows of the second half: half 0's totals added; the cumsum written out */
                    float t8[8];
                    ld8(sTot + c0, t8);
#pragma unroll
                    for (int e = 0; e < 8; ++e) {
                        gv[e] += r >= 32 ? t8[e] : 0.f;
                        gn[e] += last >= 32 ? t8[e] : 0.f;
                    }
                    if (r < nv) st8f<TAIL>(p.g_out + oG + r * strG + cg, gv, cg, Kr, gran);
                }
                const uint4 qu = *reinterpret_cast<const uint4 *>(sQ + swz(r, c0));
                const unsigned qv[4] = {qu.x, qu.y, qu.z, qu.w};
                unsigned oq[4], ok[4];
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float2 k2 = unpack2<IO>(tv[e]), q2 = unpack2<IO>(qv[e]);
                    const float ge0 = ex2(gv[2 * e]), ge1 = ex2(gv[2 * e + 1]);
                    ob[e] = pack2<IO>(k2.x * be * ge0, k2.y * be * ge1);
                    oq[e] = pack2<IO>(q2.x * ge0, q2.y * ge1);
                    ok[e] = pack2<IO>(k2.x * ex2(gn[2 * e] - gv[2 * e]), k2.y * ex2(gn[2 * e + 1] - gv[2 * e + 1]));
                }
                if (r >= nv) { /* (GATE: the cumsum runs on past the chunk's end; kb is zero there) */
                    ob[0] = ob[1] = ob[2] = ob[3] = 0u;
                } else {
                    const long long o = oG + r * strG + cg;
                    if (p.qg != nullptr)
                        st8<TAIL>(static_cast<unsigned short *>(p.qg) + o, make_uint4(oq[0], oq[1], oq[2], oq[3]), cg,
                                  Kr, gran);
                    st8<TAIL>(static_cast<unsigned short *>(p.kg) + o, make_uint4(ok[0], ok[1], ok[2], ok[3]), cg, Kr,
                              gran);
                }
            }
            *reinterpret_cast<uint4 *>(pt) = make_uint4(ob[0], ob[1], ob[2], ob[3]);
        }
        __syncthreads();
        /* w = A kb (or u = A vb): this warp's 16 rows, all 64 columns */
        float acc[8][4];
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
        gemm<IO, false, true, 4>(acc, sAu, smem_u32(sT), m0, 0, lane);
        __syncthreads(); /* every warp has read the tile: the product goes there */
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int c = 8 * j + 2 * tq, r0 = m0 + gid;
            *reinterpret_cast<unsigned *>(sT + swz(r0, c)) = pack2<IO>(acc[j][0], acc[j][1]);
            *reinterpret_cast<unsigned *>(sT + swz(r0 + 8, c)) = pack2<IO>(acc[j][2], acc[j][3]);
        }
        __syncthreads();
        unsigned short *gout = static_cast<unsigned short *>(kstep ? p.w : p.u) + (kstep ? oG : oV);
        const long long str = kstep ? strG : strV;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int i = tid + Tr::kThreads * j, r = i >> 3, c0 = (i & 7) << 3;
            if (r < nv)
                st8<TAIL>(gout + r * str + cb + c0, *reinterpret_cast<const uint4 *>(sT + swz(r, c0)), cb + c0, ncol,
                          gran);
        }
        __syncthreads(); /* the stage is free for step s + 2's copies */
    }
}

#endif /* KDART_RECOMPUTE_WU_CUH */
