/*
 * fwd_h.cuh: fla's chunk_gated_delta_rule_fwd_h as chunk_kda_bwd calls it (and
 * chunk_kda's forward): the forward's state scan, recomputed by the backward,
 * which writes the state entering every chunk (h) and the new values (v_new)
 * that bwd_dhu, the dAv products and wy_dqkg read.
 * Math (docs/kernels.md, "fwd_h"), per (sequence n, value head hv, V tile of BV
 * columns), with S in R^{K x BV} fp32, starting from h0[n, hv] (or 0):
 *   for c = 0 .. ceil(T_n/64) - 1 (rows t of the chunk, g_last = gk at its last valid row):
 *     h[row c]  = IO(S)                                        (the state entering the chunk)
 *     v_new[t]  = IO(u[t] - w[t] . IO(S))                      (fp32 accumulation)
 *     S         = exp2(g_last) (.) S + kg^T v_new              (per K row; kg already decayed)
 *   ht[n, hv] = S (fp32) when p.ht != NULL.
 * UV (the whole backward's form): p.u holds v, and u = IO(A IO(v beta)) is made in the scan from
 * v, A (chunk_kda's Akk, a sixth tile a stage) and beta (registers), in recompute_wu's product order
 * (k ascending), so that u, v_new, h and ht have the bits of the two-stage form.
 * fla's roundings: IO(S) is both the stored state and the w . S operand, IO(v_new)
 * both the output and the kg^T operand, S itself stays fp32.  kg is chunk_kda's
 * k * exp2(g_last - g) (recompute_wu's kg): the kernel reads only g_last of gk.
 * k's head is hv / (HV / H) (GVA: k may have fewer heads than w and u).
 *
 * LAUNCH CONTRACT (mirrored by runtime/core/stages/fwd_h.c; FwdHTraits):
 *   kernel   kdart_fwd_h<IO, K, BV, VARLEN, TAIL, UV>; IO in {kdart::bf16, kdart::fp16}; K (the K
 *            tile) in {64, 128, 256}; BV (the V tile) in {32, 64}; TAIL: Kr below the K tile or
 *            V not a multiple of BV (copies and stores in the granule Kr and V allow,
 *            kdart_tile.cuh).  The state layout (p.state_v_first) is a runtime flag of every
 *            specialization: it changes only where h, h0 and ht are addressed.  UV: the parameter
 *            struct is kdart_fwd_h_uv_params (the common one, then A, beta, beta_f32).
 *   grid     (ceil(V / BV), N * HV, 1); blockIdx.y = r * HV + hv, r the row rank: sequence r, or with
 *            cu_seqlens the r-th longest (kdart_varlen.cuh, lpt_row), so long scans start first.
 *   block    FwdHTraits<K, BV>::kThreads: 128 threads (4 warps); 256 (two warpgroups, each scanning
 *            32 of the columns with its own state registers) at <256, 64>.
 *   smem     FwdHTraits<K, BV, UV>::kSmemBytes of dynamic shared memory (the asserts list them;
 *            UV: a stage holds A too, 115,712 bytes at the K tile 128).
 *   Requires T % 64 == 0 unless VARLEN; 16-byte aligned tensors; outputs never alias inputs.
 *   VARLEN: the sequences of cu_seqlens (B == 1) or, cu NULL, the B rows of T tokens; h's row
 *   of sequence n's chunk c is chunk_offsets[n] + c, chunk_offsets derived on the device
 *   (kdart_varlen.cuh, seq_of: every CTA validates cu_seqlens and, when it is bad, writes
 *   nothing; CTA (0, 0) reports).  A zero-length sequence writes only ht = h0 (or 0).
 *
 * Structure: one CTA is one serial scan.  S lives in mma.sync accumulator registers split by
 * rows: warp w owns the 16-row slabs 64 mt + 16 w + [0, 16), mt < K/64 (the row split of the
 * m16 tiles), of its warpgroup's columns (all BV, or at <256, 64> one half each).  The time is
 * the serial chain of a chunk step, so the step keeps only the two products and their shared-
 * memory hand-overs on it, and everything else fills their latencies.  Per chunk:
 *   each warp writes its rows of IO(S) into the S_H tile (swizzled, [k][v]) -> barrier B1
 *   (S_H and the chunk's tiles visible) -> the next chunk's copies (precomputed swizzled
 *   offsets, one pointer step a row group: a cp.async and its predicate each) -> v_new's
 *   accumulators = w IO(S) (warp w: rows 16 w .. 16 w + 15; A = w, B = S_H; fully unrolled, the
 *   ldmatrix loads run ahead of the MMAs) -> the thread's u elements read at once -> h out from
 *   S_H in 16-byte row pieces and S decayed per row by exp2(g_last), while the MMAs drain ->
 *   IO(u - w IO(S)) written over the u tile in place (a thread rewrites exactly the elements it
 *   read) -> barrier B2 -> v_new out from that tile -> S += kg^T v_new (A = kg^T, B = v_new).
 * kg, w (each K/64 tiles of 64 x 64), u and the g_last row (K floats) are copied with cp.async,
 * one or two chunks ahead (FwdHTraits::kStages: two stages, and two CTAs an SM, at the K tile
 * 128); g_last is read from shared memory (a global load in the chunk step waited a DRAM
 * latency each chunk).  All tiles are 64 x 64 swizzled (kdart_tile.cuh; at BV 32 only the left
 * half of the u and S_H tiles is used, and copied).  The accumulation orders of both products
 * are those of the first version: the results are bitwise the same.
 * No atomics: results are bitwise deterministic.
 */
#ifndef KDART_FWD_H_CUH
#define KDART_FWD_H_CUH

#include "kdart_common.cuh"
#include "kdart_tile.cuh"
#include "kdart_varlen.cuh"

template <int K_, int BV_, bool UV_ = false>
struct FwdHTraits {
    static constexpr int K = K_;
    static constexpr int kBV = BV_;
    /* warpgroups: two at K 256, BV 64, each scanning 32 of the columns with its own state registers (one
     * warpgroup's 128 state registers a thread sat on the register file's edge and spilled) */
    static constexpr int kWG = (K == 256 && BV_ == 64) ? 2 : 1;
    static constexpr int kThreads = 128 * kWG;
    static constexpr int kCB = BV_ / kWG; /* the columns a warpgroup owns */
    static constexpr int kKB = K / 64;                     /* 64-column blocks of the K tile */
    static constexpr int kTile = 64 * 64 * 2;              /* one 64 x 64 io tile (bytes) */
    /* two CTAs an SM at the K tiles 64 and 128 (both V tiles: the scan is a serial chain of
     * latencies, and a second CTA's chain fills its gaps), hence two stages at 128 (three do not fit
     * beside a second CTA); three at 64; two at 256 (72 KB a stage, one CTA an SM) */
    static constexpr int kStages = K == 64 ? 3 : 2;
    /* kg blocks | w blocks | u (UV: v) | UV: A, and v_new after the u product (over the rows of A of
     * the warp that read them: a warp reads only its own rows; two warpgroups: v_new over v) */
    static constexpr int kStage = (2 * kKB + 1 + (UV_ ? 1 : 0)) * kTile;
    static constexpr int kOffH = kStages * kStage;         /* IO(S): kKB tiles [k][v] */
    static constexpr int kOffG = kOffH + kKB * kTile;      /* g_last: a row of K floats per stage */
    /* seq_of's scratch; UV: in the last stage's A tile, first written by a copy issued after barrier
     * B1 of chunk 0, which every warp reaches after seq_of (two CTAs an SM need those 128 bytes at 128) */
    static constexpr int kOffScr = UV_ ? (kStages - 1) * kStage + (2 * kKB + 1) * kTile : kOffG + kStages * K * 4;
    static constexpr int kSmemBytes = UV_ ? kOffG + kStages * K * 4 : kOffScr + 128;
    static constexpr int kMinBlocks = K < 256 ? 2 : 1;
    /* the kg^T v_new product's n16 column pairs per pass over the K blocks (their B fragments live
     * through the pass): a warpgroup's whole share of the columns */
    static constexpr int kHN = kCB / 16;
    static_assert(K == 64 || K == 128 || K == 256, "the K tiles");
    static_assert(BV_ == 32 || BV_ == 64, "the V tiles");
    static_assert(kThreads / kWG / 32 * 16 == 64, "a warp per 16 rows of the chunk (v_new) and of each K block (S)");
    static_assert(kCB % 16 == 0, "whole n16 column pairs per warpgroup");
    static_assert((K * BV_ / 8) % kThreads == 0 && (64 * BV_ / 8) % kThreads == 0,
                  "whole 16-byte pieces of h and v_new a thread");
    static_assert(kStages == 2 || kStages == 3, "cp_wait<kStages - 2>");
    static_assert(kMinBlocks * (kSmemBytes + 1024) <= 228 * 1024, "the CTAs per SM fit");
    static_assert(16 * (kThreads / 32) <= 128, "seq_of's scratch: 4 ints a warp");
    static_assert(UV_ || (K == 64 && kSmemBytes == 82816) || (K == 128 && kSmemBytes == 99456) ||
                      (K == 256 && kSmemBytes == 182400),
                  "FWDH_SMEM of runtime/core/stages/fwd_h.c");
    static_assert(!UV_ || (K == 64 && kSmemBytes == 107264) || (K == 128 && kSmemBytes == 115712) ||
                      (K == 256 && kSmemBytes == 198656),
                  "FWDH_SMEM_UV of runtime/core/stages/fwd_h.c");
};

namespace kdart {
namespace fwdh {
using namespace kdart::tile;

/* The V-first state's 8 consecutive K entries of column v (rows k8 .. k8 + 7 of the S_H
 * tile, 2-byte reads) packed for one 16-byte store. */
__device__ __forceinline__ uint4 gather8(const unsigned short *sH, int k8, int v) {
    const unsigned short *t = sH + (k8 >> 6) * 64 * 64;
    unsigned e[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) e[i] = t[swz((k8 & 63) + i, v)];
    return make_uint4(e[0] | (e[1] << 16), e[2] | (e[3] << 16), e[4] | (e[5] << 16), e[6] | (e[7] << 16));
}

/* f(x, mt, j, e) over this thread's state fragments x = st[mt][j][e]: K block mt, n8 tile j, accumulator
 * element e (the array passed, not captured: a closure holding its address kept it in local memory) */
template <int KB, int NJ, typename F>
__device__ __forceinline__ void each_state(float (&st)[KB][NJ][4], F f) {
#pragma unroll
    for (int mt = 0; mt < KB; ++mt)
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) f(st[mt][j][e], mt, j, e);
}

/* 4 bytes by cp.async (zeros when !ok): the masked specializations' g_last rows, whose rows
 * (HV * Kr floats apart) are only 4-byte aligned */
__device__ __forceinline__ void cp4z(unsigned s, const void *gsrc, bool ok) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(s), "l"(gsrc), "r"(ok ? 4 : 0) : "memory");
}

} /* namespace fwdh */
} /* namespace kdart */

namespace kdart {
namespace fwdh {
/* the kernel's parameter struct: the u-from-v specializations' has A and beta after the common fields */
template <bool UV> struct ParamsOf { using type = kdart_fwd_h_params; };
template <> struct ParamsOf<true> { using type = kdart_fwd_h_uv_params; };
__device__ __forceinline__ const kdart_fwd_h_params &base_of(const kdart_fwd_h_params &p) { return p; }
__device__ __forceinline__ const kdart_fwd_h_params &base_of(const kdart_fwd_h_uv_params &p) { return p.base; }
} /* namespace fwdh */
} /* namespace kdart */

template <typename IO, int K, int BV, bool VARLEN, bool TAIL, bool UV = false>
__global__ __launch_bounds__(FwdHTraits<K, BV, UV>::kThreads, FwdHTraits<K, BV, UV>::kMinBlocks) void kdart_fwd_h(
    const typename kdart::fwdh::ParamsOf<UV>::type pu) {
    using Tr = FwdHTraits<K, BV, UV>;
    const kdart_fwd_h_params &p = kdart::fwdh::base_of(pu);
    using namespace kdart;
    using namespace kdart::fwdh;
    /* NJ: n8 state tiles a warp holds; RJ: 16-byte pieces of a BV-column row */
    constexpr int S = Tr::kStages, KB = Tr::kKB, NJ = Tr::kCB / 8, RJ = BV / 8, TILE = 64 * 64;
    extern __shared__ __align__(1024) unsigned char smem[];
    unsigned short *sH = reinterpret_cast<unsigned short *>(smem + Tr::kOffH);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    /* the warp's 16 rows (of the chunk, and of each K block of S) and its warpgroup's first column */
    const int m0 = 16 * (warp & 3), c0 = (warp >> 2) * Tr::kCB, gid = lane >> 2, tq = lane & 3;
    const int HV = p.HV, V = p.V, Kr = TAIL ? p.Kr : K, svf = p.state_v_first;
    int n = blockIdx.y / HV;
    const int v0 = blockIdx.x * BV, hv = blockIdx.y - n * HV;
    /* packed sequences: the grid rows longest sequence first (kdart_varlen.cuh, lpt_row; the stages'
     * shared memory is free until the first copies).  Everything below indexes by (n, hv), never by
     * blockIdx.y: h0 and ht rows are the sequence's. */
    if constexpr (VARLEN)
        if (p.cu_seqlens != nullptr) n = lpt_row<Tr::kThreads>(p.cu_seqlens, p.cu_is64, p.N, n, reinterpret_cast<int *>(smem));
    const long long srow = (long long)n * HV + hv; /* this scan's row of h0 and ht */

    long long bos, co;
    const int len = seq_of<Tr::kThreads, VARLEN>(p.T, p.cu_seqlens, p.cu_is64, p.N, p.NT, n, p.status,
                                                 reinterpret_cast<int *>(smem + Tr::kOffScr), &bos, &co);
    if (len < 0) return; /* bad cu_seqlens (reported by CTA (0, 0)): nothing written */

    const int nct = (len + 63) >> 6;
    const int gran = TAIL ? granule(Kr, V) : 8;
    const int nvc = TAIL ? min(BV, V - v0) : BV; /* this tile's valid columns */
    const int hk = hv / (HV / p.H);
    const long long strK = (long long)p.H * Kr, strW = (long long)HV * Kr, strV = (long long)HV * V;
    const long long KV = (long long)Kr * V;
    auto io = [](const void *b) { return static_cast<const unsigned short *>(b); };
    const unsigned short *gk = io(p.k) + (bos * p.H + hk) * Kr;
    const unsigned short *gw = io(p.w) + (bos * HV + hv) * Kr;
    const unsigned short *gu = io(p.u) + (bos * HV + hv) * V + v0;
    unsigned short *gvn = p.v_new ? static_cast<unsigned short *>(p.v_new) + (bos * HV + hv) * V + v0 : nullptr;
    const float *gg = p.gk + (bos * HV + hv) * Kr;
    /* UV: A's rows (64 io values) and beta's */
    const unsigned short *gA = nullptr;
    if constexpr (UV) gA = io(pu.A) + (bos * HV + hv) * 64;
    const long long strA = (long long)HV * 64;
    unsigned short *gh = static_cast<unsigned short *>(p.h) + (co * HV + hv) * KV;
    auto stage = [&](int c) { return reinterpret_cast<unsigned short *>(smem + (c % S) * Tr::kStage); };

    float *sG = reinterpret_cast<float *>(smem + Tr::kOffG);
    /* the native copies: thread (cr, ch) copies the 16-byte piece ch of rows cr + RS q of every tile,
     * which lie at one swizzled offset (sdst) plus RS q rows (RS a multiple of 8 keeps the swizzle);
     * its global rows go by one pointer step each (a copy costs the cp.async and its predicate) */
    constexpr int RS = Tr::kThreads / 8, NQ = 64 / RS;
    const int cr = tid >> 3, ch = tid & 7;
    const unsigned sdst = smem_u32(smem) + 2 * (cr * 64 + (((ch ^ cr) & 7) << 3));

    /* UV at native dims: v's 16-byte pieces spread over every thread, piece q of this thread at row r,
     * column piece pc; each thread scales its own pieces by beta once they land (cp.async makes a
     * thread's own copies visible to it), ahead of the barrier that shows them to every warp, so that
     * IO(v beta) is made once a CTA instead of once a warp in the u product's B fragments */
    /* (not at K 256, nor packed at BV 64: ptxas spilled there) */
    constexpr bool VS = UV && !TAIL && K <= 128 && (BV == 32 || !VARLEN);
    constexpr bool VS_AHEAD = VS && BV == 32; /* beta a chunk ahead (at BV 64: at the top of its chunk) */
    constexpr int NVQ = 64 * (BV / 8) / Tr::kThreads;
    static_assert(NVQ * Tr::kThreads == 64 * (BV / 8), "whole pieces of v a thread");
    auto vpiece = [&](int q, int &r, int &pc) {
        const int i = tid + Tr::kThreads * q;
        r = i / (BV / 8), pc = i % (BV / 8);
    };
    float vb[VS ? NVQ : 1]; /* beta at the rows of this thread's pieces of v, a chunk ahead */
    auto load_vbeta = [&](int c) {
        if constexpr (VS) {
            const int nr = min(64, len - 64 * c);
#pragma unroll
            for (int q = 0; q < NVQ; ++q) {
                int r, pc;
                vpiece(q, r, pc);
                const long long at = (bos + 64ll * c + r) * HV + hv;
                vb[q] = r >= nr ? 0.f
                        : pu.beta_f32 ? static_cast<const float *>(pu.beta)[at]
                                      : unpack2<IO>((unsigned)io(pu.beta)[at]).x;
            }
        }
    };
    /* chunk c's kg and w blocks, u tile and g_last row into its stage (rows past the sequence's end,
     * columns past Kr or V: zeros; at BV 32 only the left half of the u tile, the only one read) */
    auto issue = [&](int c) {
        const int nr = min(64, len - 64 * c);
        const float *glr = gg + (64ll * c + nr - 1) * strW;
        const unsigned sgl = smem_u32(sG + (c % S) * K);
        if constexpr (!TAIL) {
            const unsigned sd = sdst + (c % S) * Tr::kStage;
            const long long r0 = 64ll * c + cr;
            const unsigned short *pk = gk + r0 * strK + ch * 8, *pw = gw + r0 * strW + ch * 8,
                                 *pu = gu + r0 * strV + ch * 8;
            const unsigned short *pa = UV ? gA + r0 * strA + ch * 8 : nullptr;
#pragma unroll
            for (int q = 0; q < NQ; ++q) {
                const bool ok = !VARLEN || cr + RS * q < nr;
#pragma unroll
                for (int kb = 0; kb < KB; ++kb) {
                    cp16z(sd + kb * 2 * TILE + q * RS * 128, ok ? pk + 64 * kb : gk, ok);
                    cp16z(sd + (KB + kb) * 2 * TILE + q * RS * 128, ok ? pw + 64 * kb : gw, ok);
                }
                if (!VS && (BV == 64 || ch < 4)) cp16z(sd + 2 * KB * 2 * TILE + q * RS * 128, ok ? pu : gu, ok);
                if constexpr (UV) cp16z(sd + (2 * KB + 1) * 2 * TILE + q * RS * 128, ok ? pa : gA, ok);
                pk += RS * strK, pw += RS * strW, pu += RS * strV;
                if constexpr (UV) pa += RS * strA;
            }
            if constexpr (VS) { /* v: pieces vpiece(q) of every thread, scaled by beta in place (below) */
                const unsigned sv = smem_u32(stage(c) + 2 * KB * TILE);
#pragma unroll
                for (int q = 0; q < NVQ; ++q) {
                    int r, pc;
                    vpiece(q, r, pc);
                    const bool ok = !VARLEN || r < nr;
                    cp16z(sv + 2 * (r * 64 + (((pc ^ r) & 7) << 3)), ok ? gu + (64ll * c + r) * strV + 8 * pc : gu, ok);
                }
            }
            if (tid < K / 4) cp16z(sgl + 16 * tid, glr + 4 * tid, true);
        } else {
            unsigned short *sg = stage(c);
            const long long r0 = 64ll * c;
#pragma unroll
            for (int kb = 0; kb < KB; ++kb) {
                load_tile<TAIL, Tr::kThreads>(sg + kb * TILE, gk + r0 * strK + 64 * kb, strK, nr, Kr - 64 * kb, tid,
                                              gran);
                load_tile<TAIL, Tr::kThreads>(sg + (KB + kb) * TILE, gw + r0 * strW + 64 * kb, strW, nr,
                                              Kr - 64 * kb, tid, gran);
            }
            load_tile<TAIL, Tr::kThreads>(sg + 2 * KB * TILE, gu + r0 * strV, strV, nr, nvc, tid, gran);
            if constexpr (UV) load_tile<TAIL, Tr::kThreads>(sg + (2 * KB + 1) * TILE, gA + r0 * strA, strA, nr, 64, tid, gran);
            /* g_last: 4-byte pieces (its rows are 4-byte aligned), zeros past Kr */
#pragma unroll
            for (int k = tid; k < K; k += Tr::kThreads) cp4z(sgl + 4 * k, k < Kr ? glr + k : gg, k < Kr);
        }
    };
#pragma unroll
    for (int c = 0; c < S - 1; ++c) {
        if (c < nct) issue(c);
        cp_commit();
    }

    /* where state fragment (mt, j, e) lies in this scan's h0 and ht (fp32, [K][V] or [V][K]); -1 past Kr or V */
    auto state_at = [=](int mt, int j, int e) -> long long {
        const int k = 64 * mt + m0 + gid + 8 * (e >> 1), v = v0 + c0 + 8 * j + 2 * tq + (e & 1);
        return TAIL && (k >= Kr || v >= V) ? -1 : svf ? (long long)v * Kr + k : (long long)k * V + v;
    };
    /* S from h0, zeros past Kr and V */
    float st[KB][NJ][4];
    const float *h0 = p.h0 ? p.h0 + srow * KV : nullptr;
#pragma unroll
    for (int mt = 0; mt < KB; ++mt)
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const long long at = state_at(mt, j, e);
                st[mt][j][e] = h0 && at >= 0 ? h0[at] : 0.f;
            }

    if (VS_AHEAD && nct > 0) load_vbeta(0);
#pragma unroll 1
    for (int c = 0; c < nct; ++c) {
        const int nr = min(64, len - 64 * c);
        /* UV: beta at the rows s of this thread's B fragments of v (k0 + 2 tq + {0, 1, 8, 9}), zeros past
         * the chunk (v's rows there are zeros; beta's may be anything) */
        if (VS && !VS_AHEAD) load_vbeta(c);
        float bt[UV && !VS ? 16 : 1];
        if constexpr (UV && !VS) {
#pragma unroll
            for (int i = 0; i < 16; ++i) {
                const int s = 16 * (i >> 2) + 2 * tq + (i & 1) + 8 * ((i >> 1) & 1);
                const long long at = (bos + 64ll * c + s) * HV + hv;
                bt[i] = s >= nr ? 0.f
                        : pu.beta_f32 ? static_cast<const float *>(pu.beta)[at]
                                     : unpack2<IO>((unsigned)io(pu.beta)[at]).x;
            }
        }
        /* IO(S) into S_H: the stored state and the w . S operand */
#pragma unroll
        for (int mt = 0; mt < KB; ++mt)
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
                const int col = c0 + 8 * j + 2 * tq, r = m0 + gid;
                *reinterpret_cast<unsigned *>(sH + mt * TILE + swz(r, col)) = pack2<IO>(st[mt][j][0], st[mt][j][1]);
                *reinterpret_cast<unsigned *>(sH + mt * TILE + swz(r + 8, col)) = pack2<IO>(st[mt][j][2], st[mt][j][3]);
            }
        cp_wait<S - 2>();
        if constexpr (VS) { /* IO(v beta) in place: this thread's own pieces (rows past the chunk stay zero) */
            unsigned short *sv = stage(c) + 2 * KB * TILE;
#pragma unroll
            for (int q = 0; q < NVQ; ++q) {
                int r, pc;
                vpiece(q, r, pc);
                uint4 *pp = reinterpret_cast<uint4 *>(sv + r * 64 + (((pc ^ r) & 7) << 3));
                uint4 x = *pp;
                unsigned *xs = reinterpret_cast<unsigned *>(&x);
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float2 f = unpack2<IO>(xs[e]);
                    xs[e] = pack2<IO>(f.x * vb[q], f.y * vb[q]);
                }
                *pp = x;
            }
        }
        __syncthreads(); /* B1: S_H and chunk c's tiles visible; every warp is done with chunk c - 1's stage */
        if (c + S - 1 < nct) issue(c + S - 1);
        cp_commit();
        if (VS_AHEAD && c + 1 < nct) load_vbeta(c + 1); /* (vb is dead until chunk c + 1's scaling) */

        /* v_new = u - w . IO(S): this warp's 16 rows, its warpgroup's kCB columns, A = w, B = S_H */
        unsigned short *sU = stage(c) + 2 * KB * TILE;
        const unsigned uW = smem_u32(stage(c) + KB * TILE), uH = smem_u32(sH);
        float acc[NJ][4];
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
#pragma unroll
        for (int kb = 0; kb < KB; ++kb)
#pragma unroll
            for (int k0 = 0; k0 < 64; k0 += 16) {
                unsigned a[4];
                ldsm4(a_n(uW + kb * 2 * TILE, m0, k0, lane), a);
#pragma unroll
                for (int np = 0; np < NJ / 2; ++np) {
                    unsigned b[4];
                    ldsm4t(b_t(uH + kb * 2 * TILE, c0 + 16 * np, k0, lane), b);
                    mma<IO>(acc[2 * np], a, b[0], b[1]);
                    mma<IO>(acc[2 * np + 1], a, b[2], b[3]);
                }
            }
        /* u at this thread's v_new elements, all read before any is rewritten (one shared-memory
         * latency, where element by element each store waited for its own load); UV: u = IO(A IO(v b)),
         * A = this warp's rows of A, B = v's fragments scaled by beta and rounded as they are loaded
         * (recompute_wu's product: gemm<IO, false, true, ...>'s order, so the same bits) */
        unsigned uo[NJ][2];
        if constexpr (UV) {
            const unsigned uA = smem_u32(stage(c) + (2 * KB + 1) * TILE), uV = smem_u32(sU);
            /* in NH passes over the columns, so that only NJ / NH accumulator tiles live beside the
             * state; each tile still sums k ascending.  Two passes at NJ 8 at fixed length (32 B of
             * spill there down to 4), one for packed sequences (two would spill 64 B there, one none) */
            constexpr int NH = NJ >= 8 && !VARLEN ? 2 : 1, NJH = NJ / NH;
#pragma unroll
            for (int hh = 0; hh < NH; ++hh) {
                float ua[NJH][4];
#pragma unroll
                for (int j = 0; j < NJH; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) ua[j][e] = 0.f;
#pragma unroll
                for (int k0 = 0; k0 < 64; k0 += 16) {
                    unsigned a[4];
                    ldsm4(a_n(uA, m0, k0, lane), a);
                    const float *bk = bt + (VS ? 0 : 4 * (k0 >> 4));
#pragma unroll
                    for (int np = 0; np < NJH / 2; ++np) {
                        unsigned b[4];
                        ldsm4t(b_t(uV, c0 + 8 * NJH * hh + 16 * np, k0, lane), b);
                        if constexpr (!VS) { /* (VS: v was scaled in place) */
#pragma unroll
                            for (int r = 0; r < 4; ++r) {
                                const float2 x = unpack2<IO>(b[r]);
                                const int o = 2 * (r & 1); /* b[0], b[2]: rows 2 tq, +1; b[1], b[3]: 8 + 2 tq, +1 */
                                b[r] = pack2<IO>(x.x * bk[o], x.y * bk[o + 1]);
                            }
                        }
                        mma<IO>(ua[2 * np], a, b[0], b[1]);
                        mma<IO>(ua[2 * np + 1], a, b[2], b[3]);
                    }
                }
#pragma unroll
                for (int j = 0; j < NJH; ++j)
#pragma unroll
                    for (int h = 0; h < 2; ++h) uo[NJH * hh + j][h] = pack2<IO>(ua[j][2 * h], ua[j][2 * h + 1]);
            }
            /* v_new goes over this warp's own rows of A (v's rows are read by every warp), once every
             * lane's ldmatrix of them is done (a thread's stores land on rows other lanes read); with two
             * warpgroups two warps share the rows of A, so v_new goes over v after a barrier */
            if constexpr (Tr::kWG == 1) {
                __syncwarp();
                sU = stage(c) + (2 * KB + 1) * TILE;
            } else {
                __syncthreads();
            }
        } else {
#pragma unroll
            for (int j = 0; j < NJ; ++j)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    uo[j][h] = *reinterpret_cast<const unsigned *>(sU + swz(m0 + gid + 8 * h, c0 + 8 * j + 2 * tq));
        }

        /* h out: [K][V] rows of BV columns, or the V-first [V][K] rows of K entries, 16-byte pieces */
        unsigned short *ghc = gh + (long long)c * HV * KV;
        if (!svf) {
#pragma unroll
            for (int q = 0; q < K * RJ / Tr::kThreads; ++q) {
                const int i = tid + q * Tr::kThreads, k = i / RJ, c8 = (i - k * RJ) * 8;
                if (!TAIL || k < Kr)
                    st8<TAIL>(ghc + k * (long long)V + v0 + c8,
                              *reinterpret_cast<const uint4 *>(sH + (k >> 6) * TILE + swz(k & 63, c8)), v0 + c8, V,
                              gran);
            }
        } else {
#pragma unroll
            for (int q = 0; q < BV * (K / 8) / Tr::kThreads; ++q) {
                const int i = tid + q * Tr::kThreads, v = i / (K / 8), k8 = (i - v * (K / 8)) * 8;
                if (!TAIL || (v < nvc && k8 < Kr))
                    st8<TAIL>(ghc + (long long)(v0 + v) * Kr + k8, gather8(sH, k8, v), k8, Kr, gran);
            }
        }

        /* S = exp2(g_last) (.) S, while the v_new product drains: g_last came with the chunk's tiles */
        {
            const float *sg = sG + (c % S) * K;
#pragma unroll
            for (int mt = 0; mt < KB; ++mt) {
                const float d0 = ex2(sg[64 * mt + m0 + gid]), d1 = ex2(sg[64 * mt + m0 + gid + 8]);
#pragma unroll
                for (int j = 0; j < NJ; ++j) {
                    st[mt][j][0] *= d0, st[mt][j][1] *= d0;
                    st[mt][j][2] *= d1, st[mt][j][3] *= d1;
                }
            }
        }

        /* IO(v_new) over the u tile in place (a thread rewrites exactly the elements it read) */
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float2 uu = unpack2<IO>(uo[j][h]);
                *reinterpret_cast<unsigned *>(sU + swz(m0 + gid + 8 * h, c0 + 8 * j + 2 * tq)) =
                    pack2<IO>(uu.x - acc[j][2 * h], uu.y - acc[j][2 * h + 1]);
            }
        __syncthreads(); /* B2: every row of IO(v_new) visible; S_H read by every warp */

        if (gvn) {
            unsigned short *gv = gvn + 64ll * c * strV;
#pragma unroll
            for (int q = 0; q < 64 * RJ / Tr::kThreads; ++q) {
                const int i = tid + q * Tr::kThreads, r = i / RJ, c8 = (i - r * RJ) * 8;
                if (r < nr)
                    st8<TAIL>(gv + r * strV + c8, *reinterpret_cast<const uint4 *>(sU + swz(r, c8)), v0 + c8, V, gran);
            }
        }

        /* S += kg^T IO(v_new) (A = kg^T, B = v_new) */
        const unsigned uK = smem_u32(stage(c)), uU = smem_u32(sU);
#pragma unroll
        for (int t0 = 0; t0 < 64; t0 += 16)
#pragma unroll
            for (int n0 = 0; n0 < Tr::kCB / 16; n0 += Tr::kHN) {
                unsigned b[Tr::kHN][4];
#pragma unroll
                for (int np = 0; np < Tr::kHN; ++np) ldsm4t(b_t(uU, c0 + 16 * (n0 + np), t0, lane), b[np]);
#pragma unroll
                for (int mt = 0; mt < KB; ++mt) {
                    unsigned a[4];
                    ldsm4t(a_t(uK + mt * 2 * TILE, m0, t0, lane), a);
#pragma unroll
                    for (int np = 0; np < Tr::kHN; ++np) {
                        mma<IO>(st[mt][2 * (n0 + np)], a, b[np][0], b[np][1]);
                        mma<IO>(st[mt][2 * (n0 + np) + 1], a, b[np][2], b[np][3]);
                    }
                }
            }
    }
    cp_wait_all(); /* (no copy group is pending past the last chunk's; none may outlive the CTA) */

    /* the final state, fp32 */
    if (p.ht) {
        float *ht = p.ht + srow * KV;
        each_state(st, [=](float &x, int mt, int j, int e) {
            const long long at = state_at(mt, j, e);
            if (at >= 0) ht[at] = x;
        });
    }
}

#endif /* KDART_FWD_H_CUH */
