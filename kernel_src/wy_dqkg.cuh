/*
 * wy_dqkg.cuh: KDA backward, the WY backward fused with the state-gradient
 * products (fla chunk_kda_bwd_wy_dqkg_fused).
 *
 * Math (docs/kernels.md, "wy_dqkg"), per (b, hv, chunk c) of 64 rows t, s, r,
 * h = h_c, dh = dh_c (the chunk's state and state gradient, K x V), gn = g of
 * the chunk's last valid row, ge = exp2(g):
 *   S_q  = do h^T     S_k = v_new dh^T     S_w = dv h^T          (64 x K)
 *   dq   = S_q ge scale
 *   dk0  = S_k exp2(gn - g)
 *   kg   = k ge;   dw = -S_w  (rounded to the io dtype)
 *   dvb  = A^T dv;  dv2 = dvb beta;  dkgb = A^T dw
 *   dA'  = dv v^T + dw kg^T   (kg rounded to the io dtype)
 *   db   = sum_v dvb v + sum_k dkgb kg
 *   dgk  = exp2(gn) sum_v h dh + sum_t k dk0          (per column)
 *   dk   = dk0 + dkgb ge beta
 *   dg   = q dq - k dk0 + kg dkgb beta + [t = last] dgk
 *   dA   = -tril1(A^T (tril1(dA') beta_s) A^T)  (tril1: strictly lower, the
 *          factors rounded to the io dtype between products)
 *   dAqk = scale tril0(do v_new^T)  (when p.dAqk is given: fla's chunk_kda_bwd_dAv
 *          dA, fused here because this kernel already holds do and v_new; tril0:
 *          on and below the diagonal)
 * with the same roundings as fla, so that the two agree to fp32 summation order.
 *
 * LAUNCH CONTRACT (mirrored by the runtime; see WyDqkgTraits below):
 *   kernel   kdart_wy_dqkg<IO, K, VARLEN, TAIL, BETA_F32, SVF, DAQK>; IO in {kdart::bf16,
 *            kdart::fp16}, K (the K tile) in {64, 128, 256}; TAIL: head dim Kr below
 *            the tile or V not a multiple of 64 (cp.async of 16- or 8-byte granules
 *            where Kr and V are multiples of 8 or 4, else element loads; masked
 *            stores); BETA_F32:
 *            beta in fp32 rather than the io dtype; SVF: h, dh are [.., V, K];
 *            DAQK: p.dAqk is written (its accumulator costs registers: a
 *            specialization of its own keeps the others' allocation).
 *   grid     (T/64, B*HV, 1), or VARLEN (NT, HV, 1) as bwd_intra (kdart_varlen.cuh,
 *            chunk_of): VARLEN's chunk is its index among all chunks, which is also its
 *            row of h and dh.
 *   block    256 threads (8 warps: 4 row blocks of 16 x 2 column halves of 32).
 *   smem     WyDqkgTraits<K>::kSmemBytes (108864) of dynamic shared memory, for every
 *            K tile; __launch_bounds__(256, 2).
 *   Requires T % 64 == 0 unless VARLEN; HV % H == 0; outputs never alias inputs;
 *   every tensor 16-byte aligned; native (TAIL = false) specializations need
 *   Kr == K, V % 64 == 0 and, on sm_90a (TMA boxes of 64 token rows), B*T >= 64.
 *
 * Structure: the CTA walks steps (K block of 64 columns, V tile of 64 columns),
 * V tiles inner.  Each step's tiles (do, dv, v_new, and v in the first K block;
 * h and dh) are copied into shared memory (by TMA on sm_90a's native
 * specializations, else 16-byte cp.async) while the previous step computes
 * (two stages), with L2 eviction priorities: the value
 * tiles of a K block that is not the last stay (the next K block reads them
 * again), every tile read for the last time goes first (at K128 V256 this cut
 * the DRAM bytes by a ninth).  Per step, warp (wm, wn) accumulates rows 16
 * wm.., columns 32 wn.. of S_q, S_k, S_w (fp32 accumulators in registers),
 * and in the first K block also dA' += dv v^T and the tile's dvb (dv2 and db's
 * first term in its epilogue).  The products are mma.sync m16n8k16 with
 * ldmatrix operands, or on sm_90a wgmma with both operands read from the
 * swizzled tiles by descriptor (the step's four issued together, sum_v h dh
 * computed while they run): one warpgroup per column half, whose accumulators
 * are the same fragments, so the code around the products is shared.  After a K block's
 * last V tile, the K phase: dw to shared memory (and the K block's q, k, g
 * copied into the stage's free slots meanwhile), dkgb = A^T dw, the elementwise
 * epilogue (dq, dk, dg stored; the last row's dg held until the column sums are
 * in), kg to shared memory, dA' += dw kg^T.  After the last K block, the two
 * 64 x 64 products of dA.  Every reduction has a fixed order: deterministic.
 * Shared tiles are 64 x 64 io with 128-byte rows whose 16-byte chunks are
 * XOR-swizzled by the row (ldmatrix without bank conflicts; wgmma's 128-byte
 * swizzle, with the dynamic shared memory 1024-byte aligned).
 */
#ifndef KDART_WY_DQKG_CUH
#define KDART_WY_DQKG_CUH

#include "kdart_common.cuh"
#include "kdart_tile.cuh"
#include "kdart_varlen.cuh"
#include "bwd_intra.cuh"

template <int K>
struct WyDqkgTraits {
    static_assert(K == 64 || K == 128 || K == 256, "wy_dqkg supports K tiles {64, 128, 256}");
    static constexpr int kBT = 64;                /* chunk rows */
    static constexpr int kKB = 64;                /* columns per K block */
    static constexpr int kBV = 64;                /* columns per V tile */
    static constexpr int kKBlocks = K / kKB;
    static constexpr int kThreads = 256;
    static constexpr int kMinBlocks = 2;          /* two CTAs per SM: one's loads overlap the other's math */
    static constexpr int kTile = kBT * 64 * 2;    /* one 64 x 64 io tile (bytes) */
    static constexpr int kTiles = 6;              /* do, dv, v_new, v, h, dh */
    static constexpr int kStage = kTiles * kTile;
    static constexpr int kOffA = 2 * kStage;      /* A, [s][t] as stored */
    static constexpr int kOffBeta = kOffA + kTile;   /* f32 [64] */
    static constexpr int kOffHdh = kOffBeta + 256;   /* f32 [64]: sum_v h dh of the K block */
    static constexpr int kOffCol = kOffHdh + 256;    /* f32 [4][64]: sum_t k dk0 per row block */
    static constexpr int kOffLast = kOffCol + 1024;  /* f32 [64]: the last row's dg before dgk */
    static constexpr int kOffDb = kOffLast + 256;    /* f32 [2][64]: db per column half */
    static constexpr int kOffLoc = kOffDb + 512;     /* [0..3], [6]: the chunk's rows; [4], [5]: TMA barriers;
                                                      * [7]: the dAqk stash's offset (INTRA) */
    static constexpr int kSmemBytes = kOffLoc + 64;
    static_assert(kSmemBytes == 108864, "WY_SMEM of runtime/core/stages/wy_dqkg.c");
    static_assert(2 * (kSmemBytes + 1024) <= 228 * 1024, "two CTAs per SM");
};

namespace kdart {
namespace wy {
using namespace kdart::tile;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KDART_WY_WG 1
/* sm_90a: the same products by wgmma, one warpgroup (warps 4 wg .. 4 wg + 3,
 * whose rows 16 w.. are the mma.sync path's m0) per column half n0 = 32 wg:
 * wgmma.m64nNk16's accumulators are the mma.sync C fragments of the same rows
 * and columns, so the code around the products is the same on both paths.
 * The operands come straight from the swizzled tiles, which are the 128-byte
 * swizzle wgmma's descriptors name (tiles 1024-byte aligned): K-major ([m][k],
 * [n][k]) advancing 32 bytes per 16 k, MN-major ([k][m], [k][n]) advancing 16
 * rows of 128 bytes. */
#define KDART_WY_D16 "+f"(c[0][0]), "+f"(c[0][1]), "+f"(c[0][2]), "+f"(c[0][3]), "+f"(c[1][0]), "+f"(c[1][1]), \
                     "+f"(c[1][2]), "+f"(c[1][3])
#define KDART_WY_D32 KDART_WY_D16, "+f"(c[2][0]), "+f"(c[2][1]), "+f"(c[2][2]), "+f"(c[2][3]), "+f"(c[3][0]), \
                     "+f"(c[3][1]), "+f"(c[3][2]), "+f"(c[3][3])
#define KDART_WY_WGMMA(NP, N, TY, REGS, OPS, A, B, TA, TB)                                                       \
    static __device__ __forceinline__ void wgmma_##TY(float (&c)[2 * NP][4], unsigned long long da,             \
                                               unsigned long long db) {                                         \
        asm volatile("wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #TY "." #TY " {" REGS "}, %" A ", %" B    \
                     ", 1, 1, 1, %" TA ", %" TB ";"                                                              \
                     : OPS : "l"(da), "l"(db), "n"(AT), "n"(BT) : "memory");                                    \
    }
template <bool AT, bool BT, int NP> struct Wg;
template <bool AT, bool BT> struct Wg<AT, BT, 1> {
    KDART_WY_WGMMA(1, 16, bf16, "%0, %1, %2, %3, %4, %5, %6, %7", KDART_WY_D16, "8", "9", "10", "11")
    KDART_WY_WGMMA(1, 16, f16, "%0, %1, %2, %3, %4, %5, %6, %7", KDART_WY_D16, "8", "9", "10", "11")
};
template <bool AT, bool BT> struct Wg<AT, BT, 2> {
    KDART_WY_WGMMA(2, 32, bf16, "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15",
                   KDART_WY_D32, "16", "17", "18", "19")
    KDART_WY_WGMMA(2, 32, f16, "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15",
                   KDART_WY_D32, "16", "17", "18", "19")
};
#undef KDART_WY_WGMMA
#undef KDART_WY_D16
#undef KDART_WY_D32
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
/* shared writes of the generic proxy (stores, cp.async) made visible to wgmma: by the writing threads,
 * before the barrier after which others' wgmma read them */
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
/* descriptor of a 64-row swizzled tile operand at byte address a: 128-byte swizzle, 8-row groups 1024
 * bytes apart (the leading offset: 16 bytes K-major, one 8 KB tile MN-major; unused at these sizes) */
template <bool MN>
__device__ __forceinline__ unsigned long long wdesc(unsigned a) {
    return ((unsigned long long)(MN ? 8192u >> 4 : 1u) << 16) | ((unsigned long long)(1024u >> 4) << 32) |
           (1ull << 62) | ((a & 0x3FFFFu) >> 4);
}
/* c += A (64-deep) B, issued only (between wg_fence and wg_commit): this warpgroup's 64 rows, columns n0..
 * n0 + 16 NP; A and B as gemm's */
template <typename IO, bool AT, bool BT, int NP = 2>
__device__ __forceinline__ void wg_issue(float (&c)[2 * NP][4], unsigned sa, unsigned sb, int n0) {
    const unsigned b0 = sb + (BT ? 2u * n0 : 128u * n0);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const unsigned long long da = wdesc<AT>(sa + (AT ? 2048u : 32u) * k);
        const unsigned long long db = wdesc<BT>(b0 + (BT ? 2048u : 32u) * k);
        if constexpr (io_traits<IO>::is_bf16) Wg<AT, BT, NP>::wgmma_bf16(c, da, db);
        else Wg<AT, BT, NP>::wgmma_f16(c, da, db);
    }
}
/* The step's tiles by TMA (the native specializations, fixed length and packed): one thread arms a stage's
 * mbarrier with the bytes it expects and issues the tile copies; every thread waits on the barrier's
 * phase.  The maps (kdart_tmap, encoded by the host) are read from the kernel's parameter. */
__device__ __forceinline__ void mbar_init(unsigned bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_expect(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    asm volatile("{\n.reg .pred P1;\nWAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
                 "@P1 bra DONE;\nbra WAIT;\nDONE:\n}" ::"r"(bar), "r"(parity)
                 : "memory");
}
/* box (x, y, z) of a rank-3 map (rank 2: z unused) into shared memory at dst, completing on bar; hint as
 * cp16z's (1 evict first, 2 evict last) */
template <int RANK>
__device__ __forceinline__ void tma_tile(unsigned dst, const kdart_tmap *m, int x, int y, int z, unsigned bar,
                                         int hint) {
    const unsigned long long pol = hint == 2 ? kdart::tile::pol_last() : kdart::tile::pol_first();
    if constexpr (RANK == 3)
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                     " [%0], [%1, {%2, %3, %4}], [%5], %6;" ::"r"(dst), "l"(m), "r"(x), "r"(y), "r"(z), "r"(bar),
                     "l"(pol)
                     : "memory");
    else
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                     " [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst), "l"(m), "r"(x), "r"(y), "r"(bar), "l"(pol)
                     : "memory");
}
#else
#define KDART_WY_WG 0
__device__ __forceinline__ void fence_async_smem() {}
#endif

/* c (16 x 16 NP, this warp's rows m0.., columns n0..) += A (64-deep) B: mma.sync, or on sm_90a the
 * warpgroup's wgmma (all its threads call it with the same n0) */
template <typename IO, bool AT, bool BT, int NP = 2>
__device__ __forceinline__ void gemm_any(float (&c)[2 * NP][4], unsigned sa, unsigned sb, int m0, int n0, int l) {
#if KDART_WY_WG
    wg_fence();
    wg_issue<IO, AT, BT, NP>(c, sa, sb, n0);
    wg_commit();
    wg_wait();
#else
    gemm<IO, AT, BT, NP>(c, sa, sb, m0, n0, l);
#endif
}

/* a.lo b.lo + a.hi b.hi of two packed io pairs */
template <typename IO>
__device__ __forceinline__ float dot2(unsigned a, unsigned b) {
    if constexpr (io_traits<IO>::is_bf16) {
        return __uint_as_float(a << 16) * __uint_as_float(b << 16) +
               __uint_as_float(a & 0xffff0000u) * __uint_as_float(b & 0xffff0000u);
    } else {
        IO a0, a1, b0, b1;
        a0.bits = (unsigned short)(a & 0xffffu), a1.bits = (unsigned short)(a >> 16);
        b0.bits = (unsigned short)(b & 0xffffu), b1.bits = (unsigned short)(b >> 16);
        return to_float(a0) * to_float(b0) + to_float(a1) * to_float(b1);
    }
}

/* element offset of (row, col) in a swizzled 64 x 64 fp32 tile (256-byte rows, 16-byte chunks XOR-ed
 * with the row: a warp's pair loads of 8 rows x 4 column pairs hit 32 distinct banks) */
__device__ __forceinline__ int swz32(int row, int col) {
    return row * 64 + ((((col >> 2) ^ row) & 7) << 2) + (((col >> 2) & 8) << 2) + (col & 3);
}

/* One 64 x 64 fp32 tile into a swizzled shared tile, as load_tile (TAIL with
 * gran >= 4: 16-byte granules of 4 floats). */
template <bool TAIL>
__device__ __forceinline__ void load_tile32(float *s, const float *g, long long stride, int nr, int nc, int tid,
                                            int gran = 8) {
    const int ch = tid & 15;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int row = (tid >> 4) + 16 * j;
        float *d = s + swz32(row, ch * 4);
        if (!TAIL || gran >= 4) {
            const bool ok = row < nr && (!TAIL || ch * 4 < nc);
            cp16z(smem_u32(d), ok ? g + row * stride + ch * 4 : g, ok);
        } else {
            float4 u;
            u.x = row < nr && ch * 4 + 0 < nc ? g[row * stride + ch * 4 + 0] : 0.f;
            u.y = row < nr && ch * 4 + 1 < nc ? g[row * stride + ch * 4 + 1] : 0.f;
            u.z = row < nr && ch * 4 + 2 < nc ? g[row * stride + ch * 4 + 2] : 0.f;
            u.w = row < nr && ch * 4 + 3 < nc ? g[row * stride + ch * 4 + 3] : 0.f;
            *reinterpret_cast<float4 *>(d) = u;
        }
    }
}

/* fp32 pair stores (columns c, c+1 of a row, c even; TAIL: each if < n, as one
 * pair where gran >= 4: n and every row stride are then even, so both columns
 * are in or out together and the pair is 8-byte aligned).  CS: a final output,
 * streamed (evict-first).  Otherwise the INTRA round trip's first write, which
 * the same CTA reads back within microseconds: an L2 evict_last policy keeps the
 * line from being pushed out by the value tiles streaming past (at most about
 * 264 CTAs x 96 KB in flight, half the L2).  The policy is made inside the asm
 * statement: one made outside it stays live in a register across the epilogue
 * and costs spills. */
template <bool TAIL, bool CS = true>
__device__ __forceinline__ void st2(float *a, float x, float y, int c, int n, int gran = 8) {
    if (!TAIL || (gran >= 4 && c < n)) {
        if constexpr (CS) asm volatile("st.global.cs.v2.f32 [%0], {%1, %2};" ::"l"(a), "f"(x), "f"(y) : "memory");
        else
            asm volatile("{ .reg .b64 pol; createpolicy.fractional.L2::evict_last.b64 pol, 1.0;\n\t"
                         "st.global.L2::cache_hint.v2.f32 [%0], {%1, %2}, pol; }" ::"l"(a), "f"(x), "f"(y)
                         : "memory");
    } else if (gran < 4) {
        if (c < n) a[0] = x;
        if (c + 1 < n) a[1] = y;
    }
}
/* The kernel's parameter: wy_dqkg's, and with INTRA bwd_intra's after it (kdart_wy_intra_params, whose
 * wy member is this base class: the body reads p.q, .., p.dAqk as it would without INTRA) */
struct WyIntraParams : kdart_wy_dqkg_params {
    kdart_bwd_intra_params in;
    kdart_intra_post_params post;
};
static_assert(sizeof(WyIntraParams) == sizeof(kdart_wy_intra_params) && sizeof(kdart_wy_dqkg_params) % 8 == 0,
              "WyIntraParams: the layout of kdart_wy_intra_params");
template <bool INTRA> struct ParamsOf { using type = kdart_wy_dqkg_params; };
template <> struct ParamsOf<true> { using type = WyIntraParams; };
} /* namespace wy */
} /* namespace kdart */

/* INTRA: after the body, the same CTA adds the intra-chunk terms (bwd_intra with fold_dg, fp32 outputs) to
 * the dq, dk, dg, db it has just written, in place (their first writes are evict_last stores, st2, which
 * stay in L2 for the few microseconds until the intra part reads them back: the fp32 round trip of the
 * two-launch path need not reach DRAM); dAqk and dA go to it through shared memory (da_stash).  It needs
 * DAQK (the intra part reads dAqk); a tail tile (a head dim below the K tile) needs VARLEN, whose parameters
 * carry Kr (the host picks varlen = 1 then).  POST (with INTRA at a native K tile): the backward's last
 * step's gate and beta part where the intra part finishes dg and db (kdart_intra_post_params).  Other
 * INTRA and POST combinations are never launched and trap. */
template <typename IO, int K, bool VARLEN, bool TAIL, bool BETA_F32, bool SVF, bool DAQK, bool INTRA, bool POST>
__global__ __launch_bounds__(WyDqkgTraits<K>::kThreads, WyDqkgTraits<K>::kMinBlocks) void kdart_wy_dqkg(
    const __grid_constant__ typename kdart::wy::ParamsOf<INTRA>::type p) {
    /* (the registry's stub rule, runtime/core/stages/wy_dqkg.c) */
    constexpr bool kStub = (INTRA && !DAQK) || (POST && (!INTRA || TAIL));
    if constexpr (kStub) {
        __trap(); /* never launched */
        return;
    }
    using Tr = WyDqkgTraits<K>;
    using namespace kdart;
    using namespace kdart::wy;
    extern __shared__ __align__(1024) unsigned char smem[];
    unsigned short *sStage = reinterpret_cast<unsigned short *>(smem);
    unsigned short *sA = reinterpret_cast<unsigned short *>(smem + Tr::kOffA);
    float *sBeta = reinterpret_cast<float *>(smem + Tr::kOffBeta);
    float *sHdh = reinterpret_cast<float *>(smem + Tr::kOffHdh);
    float *sCol = reinterpret_cast<float *>(smem + Tr::kOffCol);
    float *sLast = reinterpret_cast<float *>(smem + Tr::kOffLast);
    float *sDb = reinterpret_cast<float *>(smem + Tr::kOffDb);
    long long *sLoc = reinterpret_cast<long long *>(smem + Tr::kOffLoc);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int m0 = 16 * (warp & 3), n0 = 32 * (warp >> 2);
    const int gid = lane >> 2, tq = lane & 3;
    const int T = p.T, H = p.H, HV = p.HV, V = p.V;

    /* ---------------- the chunk: first token t0, valid rows nv, h row ---------------- */
    long long t0, hrow;
    int hv;
    /* (scratch: sDb, written again only after the helper's last barrier) */
    const int nv = chunk_of<Tr::kThreads, VARLEN>(T, HV, p.cu_seqlens, p.cu_is64, p.N, p.NT, p.status,
                                                  reinterpret_cast<int *>(sDb), &t0, &hrow, &hv);
    if (nv <= 0) return; /* bad cu_seqlens (reported), or beyond the last chunk */
    const int hq = hv / (HV / H);
    const int Kr = TAIL ? p.Kr : K;
    const int nkb = TAIL ? (Kr + 63) >> 6 : Tr::kKBlocks;
    const int gran = TAIL ? granule(Kr, V) : 8; /* (TAIL: the copy granule, load_tile) */
    const int nvt = (V + 63) >> 6;
    const int nsteps = nkb * nvt;
    const long long strQ = (long long)H * Kr, strG = (long long)HV * Kr, strV = (long long)HV * V;
    const long long strA = (long long)HV * 64;
    /* The row offsets live in shared memory and every use reads them back
     * (volatile): the tensors' base addresses come from the parameter bank, so
     * no 64-bit pointer is held in registers across the steps (with ten of them
     * the kernel spilled). */
    volatile long long *vLoc = sLoc;
    /* TMA: the step's tiles by the tensor maps of p.tm, on the mbarriers at sLoc[4], sLoc[5] (one a
     * stage; stage s & 1's use s >> 1 completes phase (s >> 1) & 1).  VARLEN: a partial chunk's boxes
     * run on into the next document's rows (or past the tensor's end: zeros), which the step zeroes
     * before any product reads them (see step) */
    constexpr bool kTma = KDART_WY_WG && !TAIL && !SVF;
    const unsigned sBar = smem_u32(sLoc + 4);
    if (tid == 0) {
        sLoc[0] = t0;                           /* (TMA: the token row of the boxes) */
        sLoc[1] = t0 * H + hq;                  /* q, k row of token t0 */
        sLoc[2] = t0 * HV + hv;                 /* v, g, ... row of token t0 */
        sLoc[3] = (hrow * HV + hv) * Kr * V;    /* h, dh of the chunk */
        sLoc[6] = (hrow * HV + hv) * Kr;        /* (TMA: its first row of the (V, rows) maps) */
        /* (INTRA: the dAqk stash, in the stage the last step does not use; see da_stash) */
        if constexpr (INTRA) sLoc[7] = ((nsteps - 1) & 1) ? BwdIntraTraits<K>::kOffAqk : Tr::kStage + 2 * Tr::kTile;
#if KDART_WY_WG
        if constexpr (kTma) {
            mbar_init(sBar);
            mbar_init(sBar + 8);
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
#endif
    }
    __syncthreads();
    auto rowQ = [&]() { return vLoc[1]; };
    auto rowV = [&]() { return vLoc[2]; };
    auto io = [](const void *b) { return static_cast<const unsigned short *>(b); };

    /* step s's tiles into stage (s & 1) */
    auto issue = [&](int s) {
        const int kb = s / nvt, vt = s - kb * nvt;
        unsigned short *st = sStage + (s & 1) * (Tr::kStage / 2);
#if KDART_WY_WG
        if constexpr (kTma) {
            if (tid == 0) {
                const unsigned bar = sBar + 8 * (s & 1), d0 = smem_u32(st);
                const int again = kb + 1 < nkb ? 2 : 1, x = 64 * vt, y = hv, z = (int)vLoc[0];
                const int hr = (int)vLoc[6] + 64 * kb;
                mbar_expect(bar, (kb == 0 ? 6u : 5u) * Tr::kTile);
                tma_tile<3>(d0 + 0 * Tr::kTile, &p.tm[0], x, y, z, bar, again);
                tma_tile<3>(d0 + 1 * Tr::kTile, &p.tm[1], x, y, z, bar, again);
                tma_tile<3>(d0 + 2 * Tr::kTile, &p.tm[2], x, y, z, bar, again);
                if (kb == 0) tma_tile<3>(d0 + 3 * Tr::kTile, &p.tm[3], x, y, z, bar, 1);
                tma_tile<2>(d0 + 4 * Tr::kTile, &p.tm[4], x, hr, 0, bar, 1);
                tma_tile<2>(d0 + 5 * Tr::kTile, &p.tm[5], x, hr, 0, bar, 1);
            }
            return;
        }
#endif
        const int vc = V - 64 * vt, kc = Kr - 64 * kb;
        const long long ov = rowV() * V + 64 * vt, oh = vLoc[3];
#if !KDART_WY_WG /* (the shared offsets kept from the first copy to the last spilled on sm_100a; the wgmma
                  * build allocates differently and keeps tid) */
        const int tid = fresh_tid();
#endif
        const int once = 1, again = kb + 1 < nkb ? 2 : 1;
        load_tile<TAIL>(st + 0 * 4096, io(p.dout) + ov, strV, nv, vc, tid, gran, again);
        load_tile<TAIL>(st + 1 * 4096, io(p.dv) + ov, strV, nv, vc, tid, gran, again);
        load_tile<TAIL>(st + 2 * 4096, io(p.v_new) + ov, strV, nv, vc, tid, gran, again);
        if (kb == 0) load_tile<TAIL>(st + 3 * 4096, io(p.v) + ov, strV, nv, vc, tid, gran, once);
        if constexpr (!SVF) {
            load_tile<TAIL>(st + 4 * 4096, io(p.h) + oh + 64ll * kb * V + 64 * vt, V, kc, vc, tid, gran, once);
            load_tile<TAIL>(st + 5 * 4096, io(p.dh) + oh + 64ll * kb * V + 64 * vt, V, kc, vc, tid, gran, once);
        } else {
            load_tile<TAIL>(st + 4 * 4096, io(p.h) + oh + 64ll * vt * Kr + 64 * kb, Kr, vc, kc, tid, gran, once);
            load_tile<TAIL>(st + 5 * 4096, io(p.dh) + oh + 64ll * vt * Kr + 64 * kb, Kr, vc, kc, tid, gran, once);
        }
    };

    /* A (all 64 columns; rows past the chunk's end zero) and beta, with step 0 */
    load_tile<false>(sA, io(p.A) + rowV() * 64, strA, nv, 64, tid);
    if (tid < 64) {
        float b = 0.f;
        if (tid < nv) {
            if constexpr (BETA_F32) b = static_cast<const float *>(p.beta)[(t0 + tid) * HV + hv];
            else b = ldf<IO>(static_cast<const unsigned short *>(p.beta) + (t0 + tid) * HV + hv);
        }
        sBeta[tid] = b;
    }
    issue(0);
    cp_commit();

    float dA[4][4], aq[4][4], ak[4][4], aw[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) dA[j][e] = 0.f;
    /* dAqk = scale * do v_new^T (fla's dAv dA, fused; DAQK): accumulated over the V tiles of the last K
     * block (where the first block's dvb is no longer live, unless it is the only one) and stored
     * before that block's K phase, so that it is never live there */
    float db0 = 0.f, db1 = 0.f; /* this thread's partials of rows m0 + gid, m0 + gid + 8 */
    float hdh = 0.f;            /* sum_v h dh of column tid / 4 (quarter tid % 4 of each V tile) */

    /* One step: V tile vt of K block kb (s = kb nvt + vt), its tiles copied one step ahead; aqk: the
     * dAqk accumulator (DAQK) */
    auto step = [&](const int kb, const int vt, float (&aqk)[4][4]) {
        const int s = kb * nvt + vt;
#if KDART_WY_WG
        if constexpr (kTma) {
            mbar_wait(sBar + 8 * (s & 1), (s >> 1) & 1);
            /* VARLEN: rows nv.. of the value tiles (128 contiguous bytes a row: the swizzle permutes
             * within a row) to zeros, as the copies below fill them: a neighbouring document's values,
             * NaN or not, reach no product */
            if (VARLEN && nv < Tr::kBT) {
                uint4 *t = reinterpret_cast<uint4 *>(sStage + (s & 1) * (Tr::kStage / 2));
                const int nt = kb == 0 ? 4 : 3;
                for (int i = nv * 8 + tid; i < 512; i += Tr::kThreads)
                    for (int j = 0; j < nt; ++j) t[j * 512 + i] = make_uint4(0u, 0u, 0u, 0u);
            }
        }
#endif
        cp_wait_all();
        fence_async_smem();
        __syncthreads(); /* step s's tiles are in; every warp is done with step s - 1 */
        if (s + 1 < nsteps) issue(s + 1);
        cp_commit();
        unsigned short *st = sStage + (s & 1) * (Tr::kStage / 2);
        const unsigned sDo = smem_u32(st), sDv = sDo + Tr::kTile, sVn = sDv + Tr::kTile, sV = sVn + Tr::kTile,
                       sH = sV + Tr::kTile, sDh = sH + Tr::kTile, sAu = smem_u32(sA);
        if (vt == 0) {
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) aq[j][e] = ak[j][e] = aw[j][e] = 0.f;
            hdh = 0.f;
        }
        /* sum_v h dh: column kk = tid / 4 of the K block, v in 16 (tid % 4).. (on sm_90a while the
         * wgmma run: the same tiles, read only) */
        auto sum_hdh = [&]() {
            const unsigned short *th = st + 4 * 4096, *tdh = st + 5 * 4096;
            const int kk = tid >> 2, qv = tid & 3, v0 = qv * 16;
            if constexpr (!SVF) { /* the lane's two 16-byte chunks of row kk: a quarter warp's eight
                                   * loads are the two rows' eight distinct chunks, 32 banks */
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    const int o = kk * 64 + ((((2 * qv + c) ^ kk) & 7) << 3);
                    const uint4 a = *reinterpret_cast<const uint4 *>(th + o);
                    const uint4 b = *reinterpret_cast<const uint4 *>(tdh + o);
                    hdh += dot2<IO>(a.x, b.x) + dot2<IO>(a.y, b.y) + (dot2<IO>(a.z, b.z) + dot2<IO>(a.w, b.w));
                }
            } else { /* column kk: each lane's 16 v rotated by 2 (tid % 4), 32 banks per load, not 8 */
#pragma unroll
                for (int i = 0; i < 16; ++i) {
                    const int o = swz(v0 + ((i + 2 * qv) & 15), kk);
                    hdh += ldf<IO>(th + o) * ldf<IO>(tdh + o);
                }
            }
        };
#if KDART_WY_WG /* the four products of the step issued at once, sum_v h dh while they run */
        wg_fence();
        wg_issue<IO, false, SVF>(aq, sDo, sH, n0);
        wg_issue<IO, false, SVF>(aw, sDv, sH, n0);
        if (kb == 0) wg_issue<IO, false, false>(dA, sDv, sV, n0);
        wg_issue<IO, false, SVF>(ak, sVn, sDh, n0);
        if (DAQK && kb == nkb - 1) wg_issue<IO, false, false>(aqk, sDo, sVn, n0);
        wg_commit();
        sum_hdh();
        wg_wait();
#else
        /* S_q += do h^T, S_w += dv h^T (and dA' += dv v^T) over the tile's 64 v, then S_k += v_new dh^T:
         * two passes, so that only one pass's fragments are live (one pass over all three held 176
         * registers where two CTAs per SM leave 128) */
#pragma unroll 1
        for (int k0 = 0; k0 < 64; k0 += 16) {
            unsigned ado[4], adv[4];
            ldsm4(a_n(sDo, m0, k0, lane), ado);
            ldsm4(a_n(sDv, m0, k0, lane), adv);
#pragma unroll
            for (int np = 0; np < 2; ++np) {
                unsigned bh[4];
                if constexpr (!SVF) ldsm4(b_n(sH, n0 + 16 * np, k0, lane), bh);
                else ldsm4t(b_t(sH, n0 + 16 * np, k0, lane), bh);
                mma<IO>(aq[2 * np], ado, bh[0], bh[1]);
                mma<IO>(aq[2 * np + 1], ado, bh[2], bh[3]);
                mma<IO>(aw[2 * np], adv, bh[0], bh[1]);
                mma<IO>(aw[2 * np + 1], adv, bh[2], bh[3]);
                if (kb == 0) {
                    unsigned bv[4];
                    ldsm4(b_n(sV, n0 + 16 * np, k0, lane), bv);
                    mma<IO>(dA[2 * np], adv, bv[0], bv[1]);
                    mma<IO>(dA[2 * np + 1], adv, bv[2], bv[3]);
                }
                if (DAQK && kb == nkb - 1) {
                    unsigned bq[4];
                    ldsm4(b_n(sVn, n0 + 16 * np, k0, lane), bq);
                    mma<IO>(aqk[2 * np], ado, bq[0], bq[1]);
                    mma<IO>(aqk[2 * np + 1], ado, bq[2], bq[3]);
                }
            }
        }
        if constexpr (SVF) gemm<IO, false, true>(ak, sVn, sDh, m0, n0, lane);
        else gemm<IO, false, false>(ak, sVn, sDh, m0, n0, lane);
        sum_hdh();
#endif
        if (kb == 0) {
            /* dvb = A^T dv over this V tile; dv2 = dvb beta; db += sum_v dvb v (in two halves of 16
             * columns: the whole 16 x 32 with S_q, S_k, S_w and dA' live spilled) */
            const unsigned short *tv = st + 3 * 4096;
            const int r0 = m0 + gid, r1 = r0 + 8;
            const float be0 = sBeta[r0], be1 = sBeta[r1];
            unsigned short *gdv2 = static_cast<unsigned short *>(p.dv2) + rowV() * V;
            /* dv2 through shared memory, out as 16-byte row pieces (pairs of 4 bytes left half of
             * each store's sectors unused: 5% of the stage's L2 traffic at K128 V256): in the rows
             * 8 warp.. of this step's h tile, which no other warpgroup reads (its wgmma read the h
             * rows n0.. and sum_v h dh row tid / 4), once the warpgroup's four warps are past their
             * products (a barrier of the 128); 16 rows x 32 columns, the 16-byte chunk q of local
             * row rl at q ^ (rl / 2 % 4) (no bank conflicts either way).  The copies of step s + 2
             * overwrite the tile after the next step's barrier. */
            constexpr bool kStage2 = KDART_WY_WG && !SVF && !TAIL;
            unsigned short *sd2 = st + 4 * 4096 + warp * 512;
            if constexpr (kStage2) asm volatile("bar.sync %0, 128;" ::"r"(1 + (warp >> 2)) : "memory");
#pragma unroll 1
            for (int half = 0; half < 2; ++half) {
                float dvb[2][4];
#pragma unroll
                for (int j = 0; j < 2; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) dvb[j][e] = 0.f;
                gemm_any<IO, true, true, 1>(dvb, sAu, sDv, m0, n0 + 16 * half, lane);
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const int c = n0 + 16 * half + 8 * j + 2 * tq, cg = 64 * vt + c;
                    const float2 v0 = unpack2<IO>(*reinterpret_cast<const unsigned *>(tv + swz(r0, c)));
                    const float2 v1 = unpack2<IO>(*reinterpret_cast<const unsigned *>(tv + swz(r1, c)));
                    db0 += dvb[j][0] * v0.x + dvb[j][1] * v0.y;
                    db1 += dvb[j][2] * v1.x + dvb[j][3] * v1.y;
#pragma unroll
                    for (int h2 = 0; h2 < 2; ++h2) {
                        const int r = h2 ? r1 : r0;
                        const float be = h2 ? be1 : be0;
                        const float x = dvb[j][2 * h2] * be, y = dvb[j][2 * h2 + 1] * be;
                        if constexpr (kStage2) {
                            const int rl = gid + 8 * h2, q = 2 * half + j;
                            *reinterpret_cast<unsigned *>(sd2 + rl * 32 + ((q ^ ((rl >> 1) & 3)) << 3) + 2 * tq) =
                                pack2<IO>(x, y);
                            continue;
                        }
                        if (r >= nv) continue;
                        unsigned short *a = gdv2 + r * strV + cg;
                        if (!TAIL || (gran >= 4 && cg < V)) { /* (a pair, as st2) */
                            const unsigned u = pack2<IO>(x, y);
                            asm volatile("st.global.cs.b32 [%0], %1;" ::"l"(a), "r"(u) : "memory");
                        } else if (gran < 4) {
                            if (cg < V) a[0] = from_float<IO>(x).bits;
                            if (cg + 1 < V) a[1] = from_float<IO>(y).bits;
                        }
                    }
                }
            }
            if constexpr (kStage2) {
                __syncwarp();
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const int e = lane + 32 * i, rl = e >> 2, q = e & 3, r = m0 + rl;
                    const uint4 u = *reinterpret_cast<const uint4 *>(sd2 + rl * 32 + ((q ^ ((rl >> 1) & 3)) << 3));
                    if (r < nv)
                        asm volatile("st.global.cs.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(gdv2 + r * strV + 64 * vt +
                                                                                             n0 + 8 * q),
                                     "r"(u.x), "r"(u.y), "r"(u.z), "r"(u.w)
                                     : "memory");
                }
            }
        }
    };
    /* The K phase of block kb, after its last V tile's step */
    auto kphase = [&](const int kb) {
        /* (the K block's last step's stage) */
        unsigned short *st = sStage + ((kb * nvt + nvt - 1) & 1) * (Tr::kStage / 2);
        const unsigned sAu = smem_u32(sA);

        /* ---------------- K phase of block kb ---------------- */
        __syncthreads(); /* every warp is done with this stage's tiles: dw, kg go there */
        unsigned short *sDW = st, *sKG = st + 4096;
        const unsigned sDWu = smem_u32(sDW), sKGu = smem_u32(sKG);
        /* the K block's q, k (io) and g (fp32) into the stage's other slots, copied while dw is
         * written and the column sums of h dh are reduced (element loads in the epilogue left
         * their latency exposed, twice per K block) */
        const unsigned short *sQt = st + 2 * 4096, *sKt = st + 3 * 4096;
        const float *sG = reinterpret_cast<const float *>(st + 4 * 4096);
        load_tile<TAIL>(st + 2 * 4096, io(p.q) + rowQ() * Kr + 64 * kb, strQ, nv, Kr - 64 * kb, tid, gran);
        load_tile<TAIL>(st + 3 * 4096, io(p.k) + rowQ() * Kr + 64 * kb, strQ, nv, Kr - 64 * kb, tid, gran);
        load_tile32<TAIL>(reinterpret_cast<float *>(st + 4 * 4096), p.g + rowV() * Kr + 64 * kb, strG, nv,
                          Kr - 64 * kb, tid, gran);
        cp_commit();
        {
            const float hs = hdh + __shfl_xor_sync(0xffffffffu, hdh, 1);
            const float hs2 = hs + __shfl_xor_sync(0xffffffffu, hs, 2);
            if ((tid & 3) == 0) sHdh[tid >> 2] = hs2;
        }
        const int r0 = m0 + gid, r1 = r0 + 8;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int c = n0 + 8 * j + 2 * tq;
            *reinterpret_cast<unsigned *>(sDW + swz(r0, c)) = pack2<IO>(-aw[j][0], -aw[j][1]);
            *reinterpret_cast<unsigned *>(sDW + swz(r1, c)) = pack2<IO>(-aw[j][2], -aw[j][3]);
        }
        cp_wait_all();
        fence_async_smem(); /* (the shared tiles just written are read by wgmma) */
        __syncthreads();
        float kgb[4][4]; /* dkgb = A^T dw */
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) kgb[j][e] = 0.f;
        gemm_any<IO, true, true>(kgb, sAu, sDWu, m0, n0, lane);

        const int last = nv - 1;
        const long long oK = rowV() * Kr;
        const float be0 = sBeta[r0], be1 = sBeta[r1];
        float col[4][2];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int c = n0 + 8 * j + 2 * tq, cg = 64 * kb + c;
            const float2 gn = *reinterpret_cast<const float2 *>(sG + swz32(last, c));
            col[j][0] = col[j][1] = 0.f;
#pragma unroll
            for (int h2 = 0; h2 < 2; ++h2) {
                const int r = h2 ? r1 : r0;
                const float be = h2 ? be1 : be0;
                const bool ok = r < nv;
                /* (rows past the chunk's end and columns past Kr are zeros) */
                const float2 g2 = *reinterpret_cast<const float2 *>(sG + swz32(r, c));
                const unsigned qu = *reinterpret_cast<const unsigned *>(sQt + swz(r, c));
                const unsigned ku = *reinterpret_cast<const unsigned *>(sKt + swz(r, c));
                IO q0, q1, k0, k1;
                q0.bits = (unsigned short)(qu & 0xffffu), q1.bits = (unsigned short)(qu >> 16);
                k0.bits = (unsigned short)(ku & 0xffffu), k1.bits = (unsigned short)(ku >> 16);
                const float2 q2 = make_float2(to_float(q0), to_float(q1)), k2 = make_float2(to_float(k0), to_float(k1));
                const float ge0 = ex2(g2.x), ge1 = ex2(g2.y);
                const float dq0 = aq[j][2 * h2] * ge0 * p.scale, dq1 = aq[j][2 * h2 + 1] * ge1 * p.scale;
                const float dk00 = ok ? ak[j][2 * h2] * ex2(gn.x - g2.x) : 0.f;
                const float dk01 = ok ? ak[j][2 * h2 + 1] * ex2(gn.y - g2.y) : 0.f;
                const float kg0 = k2.x * ge0, kg1 = k2.y * ge1;
                const float x0 = kgb[j][2 * h2], x1 = kgb[j][2 * h2 + 1];
                const float kdk0 = k2.x * dk00, kdk1 = k2.y * dk01;
                col[j][0] += kdk0;
                col[j][1] += kdk1;
                const float dk0 = dk00 + x0 * ge0 * be, dk1 = dk01 + x1 * ge1 * be;
                const float dg0 = q2.x * dq0 - kdk0 + kg0 * x0 * be, dg1 = q2.y * dq1 - kdk1 + kg1 * x1 * be;
                if (h2) db1 += x0 * kg0 + x1 * kg1;
                else db0 += x0 * kg0 + x1 * kg1;
                *reinterpret_cast<unsigned *>(sKG + swz(r, c)) = pack2<IO>(kg0, kg1);
                if (ok) {
                    st2<TAIL, !INTRA>(p.dq + oK + r * strG + cg, dq0, dq1, cg, Kr, gran);
                    st2<TAIL, !INTRA>(p.dk + oK + r * strG + cg, dk0, dk1, cg, Kr, gran);
                    if (r != last) st2<TAIL, !INTRA>(p.dg + oK + r * strG + cg, dg0, dg1, cg, Kr, gran);
                    else sLast[c] = dg0, sLast[c + 1] = dg1;
                }
            }
        }
        /* column sums of k dk0: over the 8 row groups of the warp, then (below) the 4 row blocks */
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float x = col[j][e];
                x += __shfl_xor_sync(0xffffffffu, x, 4);
                x += __shfl_xor_sync(0xffffffffu, x, 8);
                x += __shfl_xor_sync(0xffffffffu, x, 16);
                if (gid == 0) sCol[(warp & 3) * 64 + n0 + 8 * j + 2 * tq + e] = x;
            }
        fence_async_smem(); /* (the shared tiles just written are read by wgmma) */
        __syncthreads(); /* kg, the column sums, the last row */
        gemm_any<IO, false, false>(dA, sDWu, sKGu, m0, n0, lane); /* dA' += dw kg^T */
        if (tid < 64) {
            const int cg = 64 * kb + tid;
            if (!TAIL || cg < Kr) {
                const float dgk = ex2(sG[swz32(last, tid)]) * sHdh[tid] +
                                  (((sCol[tid] + sCol[64 + tid]) + sCol[128 + tid]) + sCol[192 + tid]);
                p.dg[oK + last * strG + cg] = sLast[tid] + dgk;
            }
        }
    };
    /* INTRA: dAqk and dA reach the intra part through shared memory, in its compact layout (the lower 16 x 16
     * blocks at BwdIntraTraits' kOffAqk, kOffAkk; daoff, dasw), the blocks off the diagonal rounded to tf32 as
     * its own loader rounds them; rows past the chunk's end zeros.  The global tensors are outputs only.
     * dAqk is final before the last K phase, which needs every register: it waits there in a stash, its ten
     * lower blocks dense (10 KB), in the stage the last K phase does not use (the first's bytes kOffAqk..
     * when the last step's is the second; else the second's from 16 KB on, clear of the dA products' sX,
     * sY); the end of the kernel's wy part moves it to its place once the last products are done. */
    using Ti = BwdIntraTraits<K>;
    /* (read back from sLoc[7] at each use: an offset held in a register from the stash to its reader spilled
     * at K 64) */
    auto stash_off = [&]() { return (int)vLoc[7]; };
    static_assert(Ti::kOffAqk + 10 * 1024 <= Tr::kStage && Tr::kStage + 2 * Tr::kTile + 10 * 1024 <= 2 * Tr::kStage,
                  "the dAqk stash inside the free stage, clear of the early copies and sX, sY");
    static_assert(Ti::kOffAkk + Ti::kDAFloats * 4 <= Tr::kOffA, "the compact dA regions clear of A");
    auto da_stash = [&](const float (&aqk)[4][4], int nv) {
        float *stash = reinterpret_cast<float *>(smem + stash_off());
        const int r0 = m0 + gid, r1 = r0 + 8, bi = m0 >> 4;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int c = n0 + 8 * j + 2 * tq, bj = c >> 4;
            if (bj > bi) continue; /* (above the diagonal blocks) */
            float *o = stash + (bi * (bi + 1) / 2 + bj) * 256 + (c & 15);
            *reinterpret_cast<float2 *>(o + (r0 & 15) * 16) = make_float2(
                r0 < nv && r0 >= c ? aqk[j][0] * p.scale : 0.f, r0 < nv && r0 >= c + 1 ? aqk[j][1] * p.scale : 0.f);
            *reinterpret_cast<float2 *>(o + (r1 & 15) * 16) = make_float2(
                r1 < nv && r1 >= c ? aqk[j][2] * p.scale : 0.f, r1 < nv && r1 >= c + 1 ? aqk[j][3] * p.scale : 0.f);
        }
    };
    if constexpr (!DAQK) {
        float aqk[4][4]; /* (not used without dAqk) */
#pragma unroll 1
        for (int s = 0; s < nsteps; ++s) {
            const int kb = s / nvt, vt = s - kb * nvt;
            step(kb, vt, aqk);
            if (vt == nvt - 1) kphase(kb);
        }
    } else {
        /* K blocks and their V tiles as two loops, so that aqk is live only over the last block's
         * V tiles (one flat loop over the steps kept it live through every K phase: 88 bytes of
         * spills at the K tile 128; the flat loop is the better one without it) */
#pragma unroll 1
        for (int kb = 0; kb < nkb; ++kb) {
            float aqk[4][4];
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) aqk[j][e] = 0.f;
#pragma unroll 1
            for (int vt = 0; vt < nvt; ++vt) step(kb, vt, aqk);
            if (kb == nkb - 1) { /* dAqk out: scale on and below the diagonal, zeros above, valid rows */
                float *gq = p.dAqk + rowV() * 64;
                const int r0 = m0 + gid, r1 = r0 + 8;
#pragma unroll
                for (int j = 0; j < 4 && (!INTRA || p.dAqk != nullptr); ++j) { /* (INTRA: an optional output) */
                    const int c = n0 + 8 * j + 2 * tq;
                    if (r0 < nv) st2<false>(gq + r0 * strA + c, r0 >= c ? aqk[j][0] * p.scale : 0.f,
                                            r0 >= c + 1 ? aqk[j][1] * p.scale : 0.f, c, 64);
                    if (r1 < nv) st2<false>(gq + r1 * strA + c, r1 >= c ? aqk[j][2] * p.scale : 0.f,
                                            r1 >= c + 1 ? aqk[j][3] * p.scale : 0.f, c, 64);
                }
                if constexpr (INTRA) da_stash(aqk, nv);
            }
            kphase(kb);
        }
    }

    /* ---------------- dA = -tril1(A^T (tril1(dA') beta_s) A^T) ---------------- */
    __syncthreads(); /* every warp is done with the last K phase's tiles */
    /* INTRA (native tiles, the K tiles 128 and 256): the intra part's first q, k, g copies go out now, into
     * its sQ, sK, sG (the first 36 KB), and land while the dA products run; those use the second stage's
     * first two tiles then.  (At the K tile 64 it made the kernel spill.) */
    constexpr bool kEarly = INTRA && DAQK && !TAIL && K >= 128;
    if constexpr (kEarly) kdart::intra::early_qkg<K, VARLEN>(p.in, vLoc[1], vLoc[2], nv);
    unsigned short *sX = sStage + (kEarly ? Tr::kStage / 2 : 0), *sY = sX + 4096;
    static_assert(Tr::kStage >= BwdIntraTraits<K>::kOffAqk, "sX, sY clear of the intra part's sQ, sK, sG");
    const unsigned sXu = smem_u32(sX), sYu = smem_u32(sY), sAu = smem_u32(sA);
    const int r0 = m0 + gid, r1 = r0 + 8;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int c = n0 + 8 * j + 2 * tq;
        const float bc0 = sBeta[c], bc1 = sBeta[c + 1];
        *reinterpret_cast<unsigned *>(sX + swz(r0, c)) =
            pack2<IO>(r0 > c && r0 < nv ? dA[j][0] * bc0 : 0.f, r0 > c + 1 && r0 < nv ? dA[j][1] * bc1 : 0.f);
        *reinterpret_cast<unsigned *>(sX + swz(r1, c)) =
            pack2<IO>(r1 > c && r1 < nv ? dA[j][2] * bc0 : 0.f, r1 > c + 1 && r1 < nv ? dA[j][3] * bc1 : 0.f);
    }
    /* db: the row's partials over the 4 lanes of a row group, then the 2 column halves */
    db0 += __shfl_xor_sync(0xffffffffu, db0, 1);
    db0 += __shfl_xor_sync(0xffffffffu, db0, 2);
    db1 += __shfl_xor_sync(0xffffffffu, db1, 1);
    db1 += __shfl_xor_sync(0xffffffffu, db1, 2);
    if (tq == 0) {
        sDb[(warp >> 2) * 64 + r0] = db0;
        sDb[(warp >> 2) * 64 + r1] = db1;
    }
    fence_async_smem(); /* (the shared tiles just written are read by wgmma) */
    __syncthreads();
    if (tid < nv) p.db[rowV() + tid * HV] = sDb[tid] + sDb[64 + tid];
    float xy[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) xy[j][e] = 0.f;
    gemm_any<IO, false, false>(xy, sXu, sAu, m0, n0, lane); /* X A^T: B[s][u] = A[u][s] */
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int c = n0 + 8 * j + 2 * tq;
        *reinterpret_cast<unsigned *>(sY + swz(r0, c)) = pack2<IO>(xy[j][0], xy[j][1]);
        *reinterpret_cast<unsigned *>(sY + swz(r1, c)) = pack2<IO>(xy[j][2], xy[j][3]);
        xy[j][0] = xy[j][1] = xy[j][2] = xy[j][3] = 0.f;
    }
    fence_async_smem(); /* (the shared tiles just written are read by wgmma) */
    __syncthreads();
    gemm_any<IO, true, true>(xy, sAu, sYu, m0, n0, lane); /* A^T Y */
    /* dA out (INTRA: an optional output), and INTRA: into the intra part's compact layout (see da_stash),
     * then dAqk from its stash */
    float *gdA = p.dA + rowV() * 64;
    if constexpr (!(INTRA && DAQK)) { /* (the loop as it was, so that these specializations keep their cubins) */
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int c = n0 + 8 * j + 2 * tq;
            if (r0 < nv)
                st2<false>(gdA + r0 * strA + c, r0 > c && c < nv ? -xy[j][0] : 0.f,
                           r0 > c + 1 && c + 1 < nv ? -xy[j][1] : 0.f, c, 64);
            if (r1 < nv)
                st2<false>(gdA + r1 * strA + c, r1 > c && c < nv ? -xy[j][2] : 0.f,
                           r1 > c + 1 && c + 1 < nv ? -xy[j][3] : 0.f, c, 64);
        }
    } else {
        __syncthreads(); /* every warp's products are done: sX, sY lie under cAkk */
        float *const cAkk = reinterpret_cast<float *>(smem + Ti::kOffAkk);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int c = n0 + 8 * j + 2 * tq;
#pragma unroll
            for (int h2 = 0; h2 < 2; ++h2) {
                const int r = h2 ? r1 : r0;
                float x = r > c && c < nv ? -xy[j][2 * h2] : 0.f;
                float y = r > c + 1 && c + 1 < nv ? -xy[j][2 * h2 + 1] : 0.f;
                if (r < nv && p.dA != nullptr) st2<false>(gdA + r * strA + c, x, y, c, 64);
                /* (one loop for both: the dA fragments held across a second one spilled in the tail bodies) */
                const int bi = m0 >> 4, bj = c >> 4, rl = r & 15;
                if (bj > bi) continue;
                if (r >= nv) x = y = 0.f;
                if (bj < bi) /* (off the diagonal: phase B's tf32 operands) */
                    x = __uint_as_float(intra::to_tf32(x)), y = __uint_as_float(intra::to_tf32(y));
                *reinterpret_cast<float2 *>(cAkk + intra::daoff(bi, rl) + (c ^ intra::dasw(rl))) = make_float2(x, y);
            }
        }
    }
    if constexpr (INTRA && DAQK) { /* the stash (which may lie under cAqk) into registers, then to cAqk */
        float *const cAqk = reinterpret_cast<float *>(smem + Ti::kOffAqk);
        const float *stash = reinterpret_cast<const float *>(smem + stash_off());
        float sv[10];
#pragma unroll
        for (int b = 0; b < 10; ++b) sv[b] = stash[b * 256 + tid];
        __syncthreads();
        const int rr = tid >> 4, cc = tid & 15;
#pragma unroll
        for (int b = 0; b < 10; ++b) { /* lower block b = bi (bi + 1) / 2 + bj */
            const int bi = b < 1 ? 0 : b < 3 ? 1 : b < 6 ? 2 : 3, bj = b - bi * (bi + 1) / 2;
            const int c = 16 * bj + cc;
            const float x = sv[b];
            cAqk[intra::daoff(bi, rr) + (c ^ intra::dasw(rr))] = bj < bi ? __uint_as_float(intra::to_tf32(x)) : x;
        }
    }
    /* (a stub instantiates no intra part: the code after its trap is not discarded, and the intra body
     * asserts what a stub breaks) */
    if constexpr (INTRA && !kStub) {
#if KDART_WY_WG
        if constexpr (kTma) /* (the barriers' words become the intra part's shared memory) */
            if (tid == 0) {
                asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(sBar) : "memory");
                asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(sBar + 8) : "memory");
            }
#endif
        /* every thread's stores of dq, dk, dg, db, dA, dAqk before any thread's loads of them; the
         * shared memory is free (the last products are done) */
        __syncthreads();
        kdart::intra::fused<IO, true, false, K, VARLEN, TAIL && VARLEN, BETA_F32, kEarly, POST>(
            p.in, p.post, kdart::intra::Loc{vLoc[1], vLoc[2], nv});
    }
}

#endif /* KDART_WY_DQKG_CUH */
