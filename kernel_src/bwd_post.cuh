/*
 * bwd_post.cuh: the last step of the KDA backward, from the chunk stages'
 * fp32 gradients to the gradients of what the user handed chunk_kda: the
 * l2norm backward of q and k, the gate backward (both of chunk_kda's gate
 * forms, with the A_log and dt_bias reductions), the beta-sigmoid backward,
 * the sum over a head's value heads (GVA) and every cast to the user's dtypes,
 * in one launch (fla runs l2norm_bwd twice, kda_gate_bwd, two torch
 * reductions, fused_beta_sigmoid_bwd and the casts).
 *
 * Math (docs/kernels.md, "bwd_post"), per token t, head h, value head hv:
 *   dq[t,h]  = r (y - s q) with y = sum_{hv of h} dq_in[t,hv], s = <y, q>, r = q_rstd[t,h]
 *              (q: the l2-normalized q the forward saved; without q_rstd, dq = y); dk alike
 *   x        = g_raw[t,hv] + dt_bias[hv]
 *   softplus form: a = -exp(A_log[hv]); dg = a dg_in sigmoid(x);     dA_log += dg_in a softplus(x)
 *   safe form:     a = exp(A_log[hv]);  dg = dg_in lb s (1 - s) a, s = sigmoid(a x); dA_log += dg x
 *   ddt_bias[hv] += dg (over every token);  without g_raw, dg = dg_in
 *   db[t,hv] = db_in beta_scale s (1 - s), s = sigmoid(beta_raw) (without beta_raw, db = db_in)
 * Everything is computed in fp32 and rounded once to the output's dtype.
 *
 * LAUNCH CONTRACT (mirrored by runtime/core/stages/bwd_post.c):
 *   kernel   kdart_bwd_post<IO, G_IO, BETA_IO, TAIL>: IO in {kdart::bf16, kdart::fp16};
 *            G_IO: g_raw and dg in the io dtype (else fp32); BETA_IO: beta_raw and db
 *            in the io dtype (else fp32); TAIL: K not a multiple of 4 (scalar accesses).
 *   grid     (H, nblk, 3): CTA (h, b, z) takes tokens [b TB, min(N, (b+1) TB)) of head h:
 *            z = 0 its dq, 1 its dk, 2 dg and db of its value heads (one stream of rows
 *            each: a CTA that walked the three in turn waited out three load latencies);
 *            nblk <= BwdPostTraits::kMaxBlocks.  The heads are the grid's fastest index, so
 *            that the CTAs in flight together read every head of the same tokens: one
 *            contiguous stretch of each tensor, where a head's rows alone are pieces of
 *            K values a token apart.
 *   block    256 threads, three CTAs per SM; static shared memory only.
 *   Every tensor 16-byte aligned; K <= 256.  The workspace holds the per-CTA
 *   partial sums of dA_log and ddt_bias and, after them, one counter per head that
 *   must be zero before the launch; the launch leaves it zero again.
 *   p.fused (kdart_kda_chunk_bwd, where wy_dqkg's launch wrote dg and db): z = 0
 *   sums wy_dqkg's partial rows (p.rows of them at p.workspace, [rows][HV][K + 4])
 *   into dA_log and ddt_bias, z = 1 and 2 take dq and dk; no counters.  p.fused = 2
 *   (wy_dqkg's launch wrote dq and dk too): the grid is z = 0 alone.
 *
 * Structure: a warp takes every eighth token of the CTA's range, several at once
 * (every load of those rows in flight before the first use: the kernel is bound by
 * memory), a lane four adjacent columns: at K <= 128 one group of four and
 * 2 kTokens tokens at once, at K > 128 two groups and kTokens tokens (the same
 * registers: the kernel branches on K once, to the body of one layout or the other);
 * TAIL: one column in eight groups, one token at a time.  So every row
 * is read in 16- (fp32) and 8-byte (16-bit) pieces, and the l2norm's row sum is a
 * warp butterfly.  The reductions are deterministic and take
 * no second launch: a CTA writes its partial sums (fixed order: lanes, then warps),
 * and the CTA that finds itself last of its head (a counter, after a fence) sums
 * every CTA's partials in block order and writes dA_log and ddt_bias, then puts the
 * counter back to zero.  The order of the sums never depends on which CTA is last.
 */
#ifndef KDART_BWD_POST_CUH
#define KDART_BWD_POST_CUH

#include "kdart_common.cuh"
#include "kdart_tile.cuh" /* (unpack2: the fused launch's raw gates, gate_bwd4) */

struct BwdPostTraits {
    static constexpr int kThreads = 256;
    static constexpr int kWarps = kThreads / 32;
    static constexpr int kMaxK = 256;
    static constexpr int kMaxBlocks = 256; /* grid.x at most: the workspace's partial rows */
    static constexpr int kTokens = 2;      /* tokens a warp loads at once per group of columns a lane holds */
    static constexpr int kMinBlocks = 3;   /* CTAs per SM (85 registers a thread) */
    static_assert(kMaxK == 2 * 4 * 32, "a lane holds at most two groups of four columns");
    static_assert(kWarps == 8, "the final sum splits the blocks into eight interleaved subsets");
};

namespace kdart {
namespace post {

/* The columns a lane owns: NG groups of W adjacent ones (TAIL: eight single columns; else groups of four,
 * one for K up to 128, two up to 256), and U, the tokens a warp loads at once: the registers of U * NG
 * groups of values, so that a row of 128 columns has twice the tokens in flight of a row of 256. */
template <bool TAIL, int NG_> struct Cols {
    static_assert(TAIL ? NG_ == 8 : NG_ == 1 || NG_ == 2, "eight single columns, or one or two groups of four");
    static constexpr int NG = NG_;
    static constexpr int W = TAIL ? 1 : 4;
    static constexpr int U = TAIL ? 1 : BwdPostTraits::kTokens * (2 / NG_);
    static __device__ __forceinline__ int col(int lane, int g) { return TAIL ? lane + 32 * g : 4 * lane + 128 * g; }
};

template <int W> __device__ __forceinline__ void ld_f32(const float *p, float (&x)[W]) {
    if (W == 4) {
        const float4 v = __ldg(reinterpret_cast<const float4 *>(p));
        x[0] = v.x, x[1] = v.y, x[W > 2 ? 2 : 0] = v.z, x[W > 3 ? 3 : 0] = v.w;
    } else {
        x[0] = __ldg(p);
    }
}
template <int W> __device__ __forceinline__ void st_f32(float *p, const float (&x)[W]) {
    if (W == 4) *reinterpret_cast<float4 *>(p) = make_float4(x[0], x[W > 1 ? 1 : 0], x[W > 2 ? 2 : 0], x[W > 3 ? 3 : 0]);
    else *p = x[0];
}
template <typename T, int W> __device__ __forceinline__ void ld_any(const T *p, float (&x)[W]) {
    if (sizeof(T) == 4) {
        ld_f32<W>(reinterpret_cast<const float *>(p), x);
    } else if (W == 4) {
        const uint2 v = __ldg(reinterpret_cast<const uint2 *>(p));
        T e;
        e.bits = (unsigned short)(v.x & 0xffffu); x[0] = to_float(e);
        e.bits = (unsigned short)(v.x >> 16);     x[W > 1 ? 1 : 0] = to_float(e);
        e.bits = (unsigned short)(v.y & 0xffffu); x[W > 2 ? 2 : 0] = to_float(e);
        e.bits = (unsigned short)(v.y >> 16);     x[W > 3 ? 3 : 0] = to_float(e);
    } else {
        x[0] = to_float(p[0]);
    }
}
template <typename T, int W> __device__ __forceinline__ void st_any(T *p, const float (&x)[W]) {
    if (sizeof(T) == 4) {
        st_f32<W>(reinterpret_cast<float *>(p), x);
    } else if (W == 4) {
        uint2 v;
        v.x = pack2<T>(x[0], x[W > 1 ? 1 : 0]);
        v.y = pack2<T>(x[W > 2 ? 2 : 0], x[W > 3 ? 3 : 0]);
        *reinterpret_cast<uint2 *>(p) = v;
    } else {
        p[0] = from_float<T>(x[0]);
    }
}
/* (float "io" types for the templates above) */
template <> __device__ __forceinline__ void ld_any<float, 1>(const float *p, float (&x)[1]) { x[0] = __ldg(p); }
template <> __device__ __forceinline__ void ld_any<float, 4>(const float *p, float (&x)[4]) { ld_f32<4>(p, x); }
template <> __device__ __forceinline__ void st_any<float, 1>(float *p, const float (&x)[1]) { p[0] = x[0]; }
template <> __device__ __forceinline__ void st_any<float, 4>(float *p, const float (&x)[4]) { st_f32<4>(p, x); }

/* (the fast division: 1 + e^-x >= 1, where __fdividef is within 2 ulp; the IEEE division's slow-path call,
 * one per unrolled use, cost 5% of the kernel's time) */
__device__ __forceinline__ float sigmoid(float x) { return __fdividef(1.f, 1.f + __expf(-x)); }
/* log(1 + e^x), as torch's softplus with threshold 20; OUTLINE: log1pf's long body as a call (the fused
 * launch's copy of the gate backward, see gate_bwd4) */
__device__ __noinline__ float log1p_exp(float x) { return log1pf(__expf(x)); }
template <bool OUTLINE = false> __device__ __forceinline__ float softplus(float x) {
    return x > 20.f ? x : OUTLINE ? log1p_exp(x) : log1pf(__expf(x));
}

/* The gate backward of one element (the header's two forms; here and in the fused wy_dqkg launch's last
 * step, kernel_src/bwd_intra_body.inc, so that both give the same bits): y the element's dg_in, xb its raw
 * gate plus dt_bias, a the head's gate_a; returns dg and adds the element's dA_log term to acc_a. */
__device__ __forceinline__ float gate_a(float A_log, bool safe) { return safe ? __expf(A_log) : -__expf(A_log); }
template <bool OUTLINE = false>
__device__ __forceinline__ float gate_bwd(float y, float xb, float a, bool safe, float lower_bound, float &acc_a) {
    if (safe) {
        const float s = sigmoid(a * xb);
        const float dg = y * (lower_bound * (s * (1.f - s))) * a;
        acc_a = fmaf(dg, xb, acc_a);
        return dg;
    }
    acc_a = fmaf(y, a * softplus<OUTLINE>(xb), acc_a);
    return a * (y * sigmoid(xb));
}
/* The gate backward of four elements of one row (the fused wy_dqkg launch's last step): graw their raw
 * gates (io dtype, packed), bias their dt_bias columns; the same operations in the same order as four
 * gate_bwd calls (acc_a in, the sum with their terms out).  Not inlined (nor its softplus's log1pf):
 * the fused kernel then carries this code once, not once per row and pass.  Its text had outgrown the
 * SM's instruction cache on packed rows (8904 instructions, 142 KB): a third of the launch's cycles went
 * to instruction fetch and it ran 61% slower than without the gate part; out of line, 7% slower. */
struct Gate4 {
    float dg[4];
    float acc_a;
};
template <typename IO>
__device__ __noinline__ Gate4 gate_bwd4(float4 y, uint2 graw, float4 bias, float a, bool safe, float lower_bound,
                                        float acc_a) {
    const float2 g01 = tile::unpack2<IO>(graw.x), g23 = tile::unpack2<IO>(graw.y);
    const float yy[4] = {y.x, y.y, y.z, y.w}, xb[4] = {g01.x + bias.x, g01.y + bias.y, g23.x + bias.z, g23.y + bias.w};
    Gate4 r;
#pragma unroll
    for (int e = 0; e < 4; ++e) r.dg[e] = gate_bwd<true>(yy[e], xb[e], a, safe, lower_bound, acc_a);
    r.acc_a = acc_a;
    return r;
}
/* The l2norm backward of four columns of a row (the fused wy_dqkg launch's last step, HV == H): y the
 * columns' gradient before it, x their q (or k) values in the io dtype (packed), s the row's <y, x> over all
 * K, r its rstd; stores y r - s x r in the io dtype at out (8 bytes).  Inlined: its caller's row loop is not
 * unrolled, so this is a few copies of a few instructions, and a call would keep the next row's loads
 * (issued before it) from crossing it. */
template <typename IO>
__device__ __forceinline__ void l2_fin4(unsigned short *out, float4 y, uint2 x, float s, float r) {
    const float2 x01 = tile::unpack2<IO>(x.x), x23 = tile::unpack2<IO>(x.y);
    const float v0 = y.x * r - s * x01.x * r, v1 = y.y * r - s * x01.y * r;
    const float v2 = y.z * r - s * x23.x * r, v3 = y.w * r - s * x23.y * r;
    const unsigned lo = kdart::pack2<IO>(v0, v1), hi = kdart::pack2<IO>(v2, v3);
    asm volatile("st.global.cs.v2.b32 [%0], {%1, %2};" ::"l"(out), "r"(lo), "r"(hi) : "memory");
}
/* The beta-sigmoid backward of one element: db_in, the raw beta br */
__device__ __forceinline__ float beta_bwd(float db, float br, float beta_scale) {
    const float s = sigmoid(br);
    return db * beta_scale * s * (1.f - s);
}

/* The same sum in every lane, in a fixed order. */
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

} /* namespace post */
} /* namespace kdart */

namespace kdart {
namespace post {
/* The last step of both A_log / dt_bias reductions: each warp's sum v of one item a lane, added in warp
 * order by warp 0 and written to ddt_bias (column c < K of value head hv) or dA_log (c == K), so that the
 * order never depends on the schedule.  Every thread of the CTA calls it. */
__device__ __forceinline__ void finish_item(const kdart_bwd_post_params &p, float (*s_part)[BwdPostTraits::kMaxK + 1],
                                            int warp, int lane, bool live, int hv, int c, float v) {
    s_part[warp][lane] = v;
    __syncthreads();
    if (warp == 0 && live) {
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < BwdPostTraits::kWarps; ++w) s += s_part[w][lane];
        if (c < p.K) {
            if (p.ddt_bias) p.ddt_bias[(long long)hv * p.K + c] = s;
        } else {
            p.dA_log[hv] = s;
        }
    }
    __syncthreads();
}

/* The kernel's body for one column layout C (Cols); s_part and s_last: the kernel's shared memory. */
template <typename IO, bool G_IO, bool BETA_IO, typename C>
__device__ __forceinline__ void body(const kdart_bwd_post_params &p, float (*s_part)[BwdPostTraits::kMaxK + 1],
                                     int &s_last) {
    using GT = kdart::conditional_t<G_IO, IO, float>;
    using BT = kdart::conditional_t<BETA_IO, IO, float>;
    constexpr int NG = C::NG, W = C::W, NW = BwdPostTraits::kWarps;

    const int h = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int H = p.H, HV = p.HV, K = p.K, G = HV / H;
    const long long t0 = (long long)blockIdx.y * p.TB;
    const long long t1 = min((long long)p.N, t0 + p.TB);

    /* dq and dk: the value heads' sum, then the l2norm backward.  A warp takes U of its tokens at once:
     * every load of the U rows is issued before the first use (one token at a time left each warp with
     * two loads in flight, and the kernel far from the copy bandwidth). */
    constexpr int U = C::U;
    const int which = blockIdx.z - p.fused; /* 0: dq, 1: dk, 2: dg and db (fused: z = 0 sums the rows) */
    if (which < 2) {
        const float *din = which ? p.dk_in : p.dq_in;
        const IO *y = static_cast<const IO *>(which ? p.k : p.q);
        const float *rstd = which ? p.k_rstd : p.q_rstd;
        IO *out = static_cast<IO *>(which ? p.dk : p.dq);
#pragma unroll 1
        for (long long tw = t0 + warp; tw < t1; tw += NW * U) {
            float d[U][NG][W], q[U][NG][W], r[U];
#pragma unroll
            for (int u = 0; u < U; ++u)
#pragma unroll
                for (int g = 0; g < NG; ++g)
#pragma unroll
                    for (int e = 0; e < W; ++e) d[u][g][e] = 0.f, q[u][g][e] = 0.f;
#pragma unroll 1
            for (int j = 0; j < G; ++j) {
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const long long t = tw + (long long)u * NW;
#pragma unroll
                    for (int g = 0; g < NG; ++g) {
                        const int c = C::col(lane, g);
                        if (t < t1 && c < K) {
                            float x[W];
                            ld_f32<W>(din + ((t * HV + (long long)h * G + j) * K + c), x);
#pragma unroll
                            for (int e = 0; e < W; ++e) d[u][g][e] += x[e];
                        }
                    }
                }
            }
            if (rstd) {
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const long long t = tw + (long long)u * NW;
                    r[u] = t < t1 ? __ldg(rstd + (t * H + h)) : 0.f;
#pragma unroll
                    for (int g = 0; g < NG; ++g) {
                        const int c = C::col(lane, g);
                        if (t < t1 && c < K) ld_any<IO, W>(y + ((t * H + h) * K + c), q[u][g]);
                    }
                }
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    float sd = 0.f;
#pragma unroll
                    for (int g = 0; g < NG; ++g)
#pragma unroll
                        for (int e = 0; e < W; ++e) sd = fmaf(d[u][g][e], q[u][g][e], sd);
                    sd = warp_sum(sd);
#pragma unroll
                    for (int g = 0; g < NG; ++g)
#pragma unroll
                        for (int e = 0; e < W; ++e) d[u][g][e] = d[u][g][e] * r[u] - sd * q[u][g][e] * r[u];
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const long long t = tw + (long long)u * NW;
#pragma unroll
                for (int g = 0; g < NG; ++g) {
                    const int c = C::col(lane, g);
                    if (t < t1 && c < K) st_any<IO, W>(out + ((t * H + h) * K + c), d[u][g]);
                }
            }
        }
        return;
    }

    /* dg and db of each value head of h; the gate's partial sums */
    const bool gate = p.g_raw != nullptr;
    const GT *g_raw = static_cast<const GT *>(p.g_raw);
    GT *dg_out = static_cast<GT *>(p.dg);
    const BT *beta_raw = static_cast<const BT *>(p.beta_raw);
    BT *db_out = static_cast<BT *>(p.db);
#pragma unroll 1
    for (int j = 0; j < G; ++j) {
        const int hv = h * G + j;
        float a = 0.f, bias[NG][W], acc[NG][W], acc_a = 0.f;
        if (gate) {
            a = gate_a(__ldg(p.A_log + hv), p.safe_gate);
        }
#pragma unroll
        for (int g = 0; g < NG; ++g) {
            const int c = C::col(lane, g);
#pragma unroll
            for (int e = 0; e < W; ++e) bias[g][e] = 0.f, acc[g][e] = 0.f;
            if (gate && p.dt_bias && c < K) ld_f32<W>(p.dt_bias + ((long long)hv * K + c), bias[g]);
        }
#pragma unroll 1
        for (long long tw = t0 + warp; tw < t1; tw += NW * U) {
            float dy[U][NG][W], x[U][NG][W];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const long long t = tw + (long long)u * NW;
#pragma unroll
                for (int g = 0; g < NG; ++g) {
                    const int c = C::col(lane, g);
                    if (t < t1 && c < K) {
                        const long long o = (t * HV + hv) * K + c;
                        ld_f32<W>(p.dg_in + o, dy[u][g]);
                        if (gate) ld_any<GT, W>(g_raw + o, x[u][g]);
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const long long t = tw + (long long)u * NW;
#pragma unroll
                for (int g = 0; g < NG; ++g) {
                    const int c = C::col(lane, g);
                    if (t >= t1 || c >= K) continue;
                    if (gate) {
#pragma unroll
                        for (int e = 0; e < W; ++e) {
                            const float dgv = gate_bwd(dy[u][g][e], x[u][g][e] + bias[g][e], a, p.safe_gate,
                                                       p.lower_bound, acc_a);
                            acc[g][e] += dgv;
                            dy[u][g][e] = dgv;
                        }
                    }
                    st_any<GT, W>(dg_out + ((t * HV + hv) * K + c), dy[u][g]);
                }
            }
        }
#pragma unroll 1
        for (long long t = t0 + threadIdx.x; t < t1; t += BwdPostTraits::kThreads) {
            float db = __ldg(p.db_in + (t * HV + hv));
            if (beta_raw) db = beta_bwd(db, kdart::to_float(beta_raw[t * HV + hv]), p.beta_scale);
            db_out[t * HV + hv] = kdart::from_float<BT>(db);
        }
        if (gate) {
            /* this CTA's partials: lanes (per column), then warps in order */
            acc_a = warp_sum(acc_a);
#pragma unroll
            for (int g = 0; g < NG; ++g) {
                const int c = C::col(lane, g);
#pragma unroll
                for (int e = 0; e < W; ++e)
                    if (c + e < K) s_part[warp][c + e] = acc[g][e];
            }
            if (lane == 0) s_part[warp][BwdPostTraits::kMaxK] = acc_a;
            __syncthreads();
            float *part = p.workspace + ((long long)blockIdx.y * HV + hv) * (K + 1);
            for (int c = threadIdx.x; c <= K; c += BwdPostTraits::kThreads) {
                const int sc = c < K ? c : BwdPostTraits::kMaxK;
                float v = 0.f;
#pragma unroll
                for (int w = 0; w < NW; ++w) v += s_part[w][sc];
                part[c] = v;
            }
            __syncthreads();
        }
    }
    if (!gate) return;

    /* the last CTA of head h sums every CTA's partials, in block order */
    unsigned *tickets = reinterpret_cast<unsigned *>(p.workspace + (long long)BwdPostTraits::kMaxBlocks * HV * (K + 1));
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) s_last = atomicAdd(tickets + h, 1u) == gridDim.y - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    const int nblk = gridDim.y, items = G * (K + 1);
#pragma unroll 1
    for (int i0 = 0; i0 < items; i0 += 32) {
        const int item = i0 + lane, j = item / (K + 1), c = item - j * (K + 1);
        float v = 0.f;
        if (item < items) {
            const float *src = p.workspace + ((long long)(h * G + j)) * (K + 1) + c;
#pragma unroll 8
            for (int b = warp; b < nblk; b += NW) v += __ldcg(src + (long long)b * HV * (K + 1));
        }
        finish_item(p, s_part, warp, lane, item < items, h * G + j, c, v);
    }
    if (threadIdx.x == 0) tickets[h] = 0u;
}

/* fused: dA_log and ddt_bias from wy_dqkg's partial rows ([rows][HV][K + 4]: dt_bias's K sums, then
 * dA_log's, one per 64-column pass).  CTA (h, b, 0) takes the items b, b + nblk, .. (32 each) of head h's
 * G (K + 1) outputs: its warps sum every eighth row, then warp 0 the eight warps' sums in order, so the
 * order never depends on the schedule. */
__device__ __forceinline__ void sum_rows(const kdart_bwd_post_params &p, float (*s_part)[BwdPostTraits::kMaxK + 1]) {
    constexpr int NW = BwdPostTraits::kWarps;
    const int h = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int HV = p.HV, K = p.K, G = HV / p.H, items = G * (K + 1), np = (K + 63) / 64;
    const long long rs = (long long)HV * (K + 4);
#pragma unroll 1
    for (int i0 = 32 * blockIdx.y; i0 < items; i0 += 32 * gridDim.y) {
        const int item = i0 + lane, j = item / (K + 1), c = item - j * (K + 1);
        float v = 0.f;
        if (item < items) {
            const float *src = p.workspace + (long long)(h * G + j) * (K + 4) + c;
            if (c < K) {
#pragma unroll 8
                for (int r = warp; r < p.rows; r += NW) v += __ldcg(src + r * rs);
            } else {
#pragma unroll 1
                for (int r = warp; r < p.rows; r += NW)
                    for (int e = 0; e < np; ++e) v += __ldcg(src + r * rs + e);
            }
        }
        finish_item(p, s_part, warp, lane, item < items, h * G + j, c, v);
    }
}
} /* namespace post */
} /* namespace kdart */

template <typename IO, bool G_IO, bool BETA_IO, bool TAIL>
__global__ void __launch_bounds__(BwdPostTraits::kThreads, BwdPostTraits::kMinBlocks) kdart_bwd_post(const kdart_bwd_post_params p) {
    using namespace kdart::post;
    __shared__ float s_part[BwdPostTraits::kWarps][BwdPostTraits::kMaxK + 1];
    __shared__ int s_last;
    if (p.fused && blockIdx.z == 0) {
        if (p.rows > 0) sum_rows(p, s_part);
        return;
    }
    if constexpr (TAIL) body<IO, G_IO, BETA_IO, Cols<true, 8>>(p, s_part, s_last);
    else if (p.K <= 128) body<IO, G_IO, BETA_IO, Cols<false, 1>>(p, s_part, s_last);
    else body<IO, G_IO, BETA_IO, Cols<false, 2>>(p, s_part, s_last);
}

#endif /* KDART_BWD_POST_CUH */
