/*
 * bwd_dav.cuh: fla's chunk_kda_bwd_dAv as a kernel of its own: the two
 * products of the backward that read do against the forward's Aqk and v_new.
 * kdart.fla fuses them into bwd_dhu and wy_dqkg where those run the shapes
 * that allow it (K 64 or 128, V a multiple of 64, large grids); this kernel
 * serves every other call: any T, packed sequences, any V up to 512.
 *
 * Math (docs/kernels.md, "dAv"), per (b, hv, chunk) of 64 rows t, s:
 *   dA[t,s] = scale sum_v do[t,v] v[s,v]     for s <= t, zero above   (fp32 out)
 *   dv[s,v] = sum_{t >= s} Aqk[t,s] do[t,v]                            (io dtype out)
 * with fla's roundings (fp32 accumulation, dv rounded once when stored), so the
 * two agree to fp32 summation order.  Only Aqk's lower triangle, diagonal
 * included, is read: what lies above may hold anything.
 *
 * LAUNCH CONTRACT (mirrored by runtime/core/stages/bwd_dav.c; BwdDavTraits):
 *   kernel   kdart_bwd_dav<IO, VARLEN, TAIL>; IO in {kdart::bf16, kdart::fp16};
 *            TAIL: V not a multiple of 64 (copies and stores in the granule that V
 *            allows, kdart_tile.cuh).
 *   grid     (T/64, B*HV, 1), or VARLEN (NT, HV, 1) as every chunk kernel
 *            (kdart_varlen.cuh, chunk_of).
 *   block    128 threads (4 warps, each 16 rows of the products).
 *   smem     BwdDavTraits::kSmemBytes of dynamic shared memory; four CTAs per SM.
 *   Requires T % 64 == 0 unless VARLEN; outputs never alias inputs; every tensor
 *   16-byte aligned.  Rows past a sequence's end are neither read nor written.
 *   p.dA NULL: dv alone (v is not read, the do v^T product not computed).
 *   p.long_only (VARLEN, packed): only the chunks of the sequences bwd_dhu's V
 *   split calls long (kdart::split_long) do anything; the rest exit at once.
 *
 * Structure: Aqk's 64 x 64 tile is copied once, and its upper triangle zeroed
 * in shared memory (the dv product's diagonal steps would read it); the V
 * columns are walked in blocks of 64, each block's do and v tiles copied with
 * cp.async while the previous block computes (two stages).  Per block, a warp
 * adds its 16 rows of do v^T to the dA accumulator (registers, over every block;
 * the column tiles right of its diagonal skipped), then, once every warp is done
 * with the v tile, computes its 16 rows of dv = Aqk^T do in two halves of 32
 * columns (the t steps above its rows skipped) into that tile, from which dv goes
 * out in 16-byte stores; after the last block dA goes out the same way, through
 * the free stages (16-byte stores of whole rows: the writes are half of what the
 * CTA moves, and their width counts: on the H200, dv stored from the fragments'
 * 4-byte pieces ran 1.3x slower, dA from its 8-byte ones 3% slower at V = 100).
 * Every reduction runs in a fixed order
 * (deterministic).  The CTA moves its do and v rows once: the kernel is bounded
 * by memory, with four CTAs per SM keeping their next blocks' copies in flight.
 */
#ifndef KDART_BWD_DAV_CUH
#define KDART_BWD_DAV_CUH

#include "kdart_common.cuh"
#include "kdart_tile.cuh"
#include "kdart_varlen.cuh"

struct BwdDavTraits {
    static constexpr int kThreads = 128;
    static constexpr int kMinBlocks = 4;
    static constexpr int kTile = 64 * 64 * 2;         /* one 64 x 64 io tile (bytes) */
    static constexpr int kStages = 2;                 /* the V blocks' copy pipeline */
    static constexpr int kStage = 2 * kTile;          /* do | v of one V block */
    static constexpr int kOffA = kStages * kStage;    /* Aqk, [t][s] as stored, swizzled */
    static constexpr int kOffScr = kOffA + kTile;     /* int [16]: chunk_of's scratch */
    static constexpr int kSmemBytes = kOffScr + 64;
    static_assert(kSmemBytes == 41024, "DAV_SMEM of runtime/core/stages/bwd_dav.c");
    static_assert(kMinBlocks * (kSmemBytes + 1024) <= 228 * 1024, "four CTAs per SM");
    static_assert(2 * kThreads / 32 + 4 + 2 <= 16, "chunk_of's scratch, with the sequence's length");
    static_assert(kThreads / 32 * 16 == 64, "a warp per 16 rows of the chunk");
    static_assert(kStages == 2, "cp_wait<1>: the next block's copies stay in flight");
    static_assert(64 * 64 * 4 <= kStage, "dA's fp32 tile goes out through stage 0, free after the last block");
};

namespace kdart {
namespace dav {
using namespace kdart::tile;

/* Aqk's entries above the diagonal (column s > row t) zeroed in the swizzled tile:
 * fla's forward leaves them unwritten, and the dv product's steps on the diagonal
 * read them.  Four 8-column chunks per thread. */
__device__ __forceinline__ void zero_upper(unsigned short *sA, int tid) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int i = tid + BwdDavTraits::kThreads * j, r = i >> 3, c0 = (i & 7) << 3;
        if (c0 + 7 <= r) continue; /* wholly on or below the diagonal */
        uint4 *pt = reinterpret_cast<uint4 *>(sA + swz(r, c0));
        const int keep = r - c0 + 1; /* columns c0..r stay: none when the chunk lies right of the diagonal */
        unsigned w[4] = {pt->x, pt->y, pt->z, pt->w};
#pragma unroll
        for (int e = 0; e < 4; ++e)
            w[e] &= (2 * e < keep ? 0xffffu : 0u) | (2 * e + 1 < keep ? 0xffff0000u : 0u);
        *pt = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

/* mma.sync accumulators (N tiles of 16 x 8 per warp) cleared */
template <int N>
__device__ __forceinline__ void clear(float (&c)[N][4]) {
#pragma unroll
    for (int j = 0; j < N; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) c[j][e] = 0.f;
}

} /* namespace dav */
} /* namespace kdart */

template <typename IO, bool VARLEN, bool TAIL>
__global__ __launch_bounds__(BwdDavTraits::kThreads, BwdDavTraits::kMinBlocks) void kdart_bwd_dav(
    const kdart_bwd_dav_params p) {
    using Tr = BwdDavTraits;
    using namespace kdart;
    using namespace kdart::dav;
    extern __shared__ __align__(1024) unsigned char smem[];
    unsigned short *sA = reinterpret_cast<unsigned short *>(smem + Tr::kOffA);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int m0 = 16 * warp, gid = lane >> 2, tq = lane & 3;
    const int HV = p.HV, V = p.V;

    long long t0, hrow, len = 0;
    int hv;
    const bool long_only = VARLEN && p.long_only != 0 && p.cu_seqlens != nullptr;
    const int nv = chunk_of<Tr::kThreads, VARLEN>(p.T, HV, p.cu_seqlens, p.cu_is64, p.N, p.NT, p.status,
                                                  reinterpret_cast<int *>(smem + Tr::kOffScr), &t0, &hrow, &hv,
                                                  VARLEN ? &len : nullptr);
    if (nv <= 0) return; /* bad cu_seqlens (reported), or beyond the last chunk */
    (void)hrow;
    /* long_only: the sequences bwd_dhu's V split scans 32 columns at a time, the only ones whose dv it reads */
    if (long_only && !split_long(len, ld_cu(p.cu_seqlens, p.cu_is64, p.N), HV, V, p.long_only)) return;
    const int nvb = (V + 63) >> 6;
    const int gran = TAIL ? granule(V, V) : 8;
    const long long strV = (long long)HV * V, strA = (long long)HV * 64;
    const long long oV = (t0 * HV + hv) * V, oA = (t0 * HV + hv) * 64;
    const bool want_dA = p.dA != nullptr; /* (else dv alone: the v tiles are never copied) */
    auto io = [](const void *b) { return static_cast<const unsigned short *>(b); };
    auto stage = [&](int s) { return reinterpret_cast<unsigned short *>(smem + (s & 1) * Tr::kStage); };

    /* V block s's do and v tiles into stage (s & 1) (rows past the chunk's end and columns past V zero) */
    auto issue = [&](int s) {
        unsigned short *st = stage(s);
        const int nc = V - 64 * s;
        load_tile<TAIL, Tr::kThreads>(st, io(p.dout) + oV + 64 * s, strV, nv, nc, tid, gran);
        if (want_dA) load_tile<TAIL, Tr::kThreads>(st + 64 * 64, io(p.v) + oV + 64 * s, strV, nv, nc, tid, gran);
    };

    load_tile<false, Tr::kThreads>(sA, io(p.A) + oA, strA, nv, 64, tid);
    issue(0);
    cp_commit();

    /* dA: this warp's 16 rows, all 64 columns (those right of its diagonal block stay zero) */
    float acc[8][4];
    clear(acc);
    const unsigned sAu = smem_u32(sA);
#pragma unroll 1
    for (int s = 0; s < nvb; ++s) {
        if (s + 1 < nvb) issue(s + 1);
        cp_commit();
        cp_wait<1>();
        __syncthreads();
        if (s == 0) { /* Aqk has landed with the first block */
            zero_upper(sA, tid);
            __syncthreads();
        }
        unsigned short *sV = stage(s) + 64 * 64;
        const unsigned uDo = smem_u32(stage(s)), uV = smem_u32(sV);
        /* dA += do v^T: rows t of this warp against columns s <= t, pairs of 8-column tiles up to the diagonal */
        if (want_dA) {
#pragma unroll
            for (int k0 = 0; k0 < 64; k0 += 16) {
                unsigned a[4];
                ldsm4(a_n(uDo, m0, k0, lane), a);
#pragma unroll
                for (int np = 0; np < 4; ++np) {
                    if (np > warp) break;
                    unsigned b[4];
                    ldsm4(b_n(uV, 16 * np, k0, lane), b);
                    mma<IO>(acc[2 * np], a, b[0], b[1]);
                    mma<IO>(acc[2 * np + 1], a, b[2], b[3]);
                }
            }
        }
        __syncthreads(); /* every warp has read the v tile: dv goes there */
        /* dv = Aqk^T do: rows s of this warp over t >= s (the t steps from its own rows on), in two halves of
         * 32 columns (the dA accumulator stays live beside one half: 48 registers, not 64) */
#pragma unroll 1
        for (int h = 0; h < 2; ++h) {
            float dv[4][4];
            clear(dv);
#pragma unroll
            for (int k0 = 0; k0 < 64; k0 += 16) {
                if (k0 < m0) continue;
                unsigned a[4];
                ldsm4t(a_t(sAu, m0, k0, lane), a);
#pragma unroll
                for (int np = 0; np < 2; ++np) {
                    unsigned b[4];
                    ldsm4t(b_t(uDo, 32 * h + 16 * np, k0, lane), b);
                    mma<IO>(dv[2 * np], a, b[0], b[1]);
                    mma<IO>(dv[2 * np + 1], a, b[2], b[3]);
                }
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int c = 32 * h + 8 * j + 2 * tq, r0 = m0 + gid;
                *reinterpret_cast<unsigned *>(sV + swz(r0, c)) = pack2<IO>(dv[j][0], dv[j][1]);
                *reinterpret_cast<unsigned *>(sV + swz(r0 + 8, c)) = pack2<IO>(dv[j][2], dv[j][3]);
            }
        }
        __syncthreads();
        unsigned short *gdv = static_cast<unsigned short *>(p.dv) + oV + 64 * s;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int i = tid + Tr::kThreads * j, r = i >> 3, c0 = (i & 7) << 3;
            if (r < nv)
                st8<TAIL>(gdv + r * strV + c0, *reinterpret_cast<const uint4 *>(sV + swz(r, c0)), 64 * s + c0, V,
                          gran);
        }
        __syncthreads(); /* the stage is free for block s + 2's copies */
    }

    if (!want_dA) return;
    /* dA out through shared memory (the stages are free after the loop's last barrier): scaled, zeros above
     * the diagonal, fp32 rows of 64 whose 16-byte chunks are XOR-swizzled by the row (the fragments' float2
     * writes without bank conflicts), then whole rows in 16-byte stores, the chunk's valid rows only */
    float *sD = reinterpret_cast<float *>(smem);
    const float scale = p.scale;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int c = 8 * j + 2 * tq;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = m0 + gid + 8 * h;
            *reinterpret_cast<float2 *>(sD + r * 64 + ((((c >> 2) ^ (r & 7)) << 2) | (c & 3))) =
                make_float2(c <= r ? scale * acc[j][2 * h] : 0.f, c + 1 <= r ? scale * acc[j][2 * h + 1] : 0.f);
        }
    }
    __syncthreads();
    float *gA = p.dA + oA;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int i = tid + Tr::kThreads * j, r = i >> 4, q = i & 15;
        if (r < nv)
            *reinterpret_cast<float4 *>(gA + r * strA + 4 * q) =
                *reinterpret_cast<const float4 *>(sD + r * 64 + 4 * (q ^ (r & 7)));
    }
}

#endif /* KDART_BWD_DAV_CUH */
