// lab/experiments/one-cta/intra_frag_probe.cu: a compile-only probe of the one-CTA-an-SM design's tightest
// point (README.md here, phase 4): 512 threads, 128 registers a thread, dq, dk, dg of a 64 x 128 chunk held
// in the wy part's fragment layout (warp: rows 16 wm.., columns 32 wg..; 16 fp32 each) while the intra terms
// are added to them: off the diagonal as tf32 m16n8k8 GEMMs with the warp's own pivot (row side e = 16 wm,
// column side p = 16 wm + 15), on the diagonal in SIMT with each exp2 made on both sides.  Arithmetic of the
// intra terms as bwd_intra's (docs/kernels.md): dq += Aq, dk += beta Ak + Ct, dg += q Aq + (beta Ak - Ct) k.
// Not checked against a reference: it exists for ptxas's register and spill report and the SASS counts.
//   nvcc -arch=sm_90a -cubin -Xptxas -v -o /tmp/probe.cubin intra_frag_probe.cu   (-DDIAG_GEMM: the diagonal
//   as masked GEMMs through the block's middle row)
#include <cuda_bf16.h>

namespace {
constexpr int kT = 512, KP = 136; // threads; padded fp32 / bf16 row stride of the K = 128 tiles

__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ unsigned tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ void mma(float (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                    unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
} // namespace

struct Smem {
    __nv_bfloat16 q[64 * KP], k[64 * KP]; // the chunk's q, k (all of K)
    float g[64 * KP];                     // its gate cumsum, log2 units
    float aq[64 * 72], ak[64 * 72];       // dAqk, dAkk (full 64 x 64 for the probe; compact in the kernel)
    float beta[64];
};

extern "C" __global__ void __launch_bounds__(kT, 1)
    probe(const float *__restrict__ wy, float *__restrict__ out, int n) {
    extern __shared__ __align__(16) unsigned char raw[];
    Smem &s = *reinterpret_cast<Smem *>(raw);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp & 3, wg = warp >> 2, gid = lane >> 2, tq = lane & 3;
    const int r0 = 16 * wm + gid, r1 = r0 + 8, c0 = 32 * wg;
    const long long cta = (long long)blockIdx.x * 64 * 128 * 3;

    // the wy part's results, resident (in the kernel: its accumulators after the K phase)
    float dq[4][4], dk[4][4], dg[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int r = e < 2 ? r0 : r1, c = c0 + 8 * j + 2 * tq + (e & 1);
            dq[j][e] = wy[cta + r * 128 + c];
            dk[j][e] = wy[cta + 8192 + r * 128 + c];
            dg[j][e] = wy[cta + 16384 + r * 128 + c];
        }
    __syncthreads();

    // ---- row side, off the diagonal: rows of block wm, sources s < 16 wm, pivot e = 16 wm
    if (wm > 0) {
        const int e = 16 * wm;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            float cq[4] = {0.f, 0.f, 0.f, 0.f}, ck[4] = {0.f, 0.f, 0.f, 0.f};
            const int d = c0 + 8 * j + gid; // B's column (n = gid)
            const float ge = s.g[e * KP + d];
#pragma unroll 1
            for (int kk = 0; kk < 2 * wm; ++kk) {
                const int sa = 8 * kk + tq, sb = sa + 4;
                const unsigned b0 = tf32(__bfloat162float(s.k[sa * KP + d]) * ex2(ge - s.g[sa * KP + d]));
                const unsigned b1 = tf32(__bfloat162float(s.k[sb * KP + d]) * ex2(ge - s.g[sb * KP + d]));
                const float *ar0 = s.aq + r0 * 72 + 8 * kk, *ar1 = s.aq + r1 * 72 + 8 * kk;
                mma(cq, __float_as_uint(ar0[tq]), __float_as_uint(ar1[tq]), __float_as_uint(ar0[tq + 4]),
                    __float_as_uint(ar1[tq + 4]), b0, b1);
                const float *kr0 = s.ak + r0 * 72 + 8 * kk, *kr1 = s.ak + r1 * 72 + 8 * kk;
                mma(ck, __float_as_uint(kr0[tq]), __float_as_uint(kr1[tq]), __float_as_uint(kr0[tq + 4]),
                    __float_as_uint(kr1[tq + 4]), b0, b1);
            }
            // fold into the resident values: the row factor exp2(g_r - g_e), then the three gradients
#pragma unroll
            for (int x = 0; x < 4; ++x) {
                const int r = x < 2 ? r0 : r1, c = c0 + 8 * j + 2 * tq + (x & 1);
                const float f = ex2(s.g[r * KP + c] - s.g[e * KP + c]);
                const float aqv = cq[x] * f, akv = ck[x] * f * s.beta[r];
                dq[j][x] += aqv;
                dk[j][x] += akv;
                dg[j][x] += __bfloat162float(s.q[r * KP + c]) * aqv + akv * __bfloat162float(s.k[r * KP + c]);
            }
        }
    }
    // ---- column side, off the diagonal: outputs s of block wm, sources r > p = 16 wm + 15
    if (wm < 3) {
        const int p = 16 * wm + 15;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            float cc[4] = {0.f, 0.f, 0.f, 0.f};
            const int d = c0 + 8 * j + gid;
            const float gp = s.g[p * KP + d];
#pragma unroll 1
            for (int kk = 2 * wm + 2; kk < 8; ++kk) {
                const int ra = 8 * kk + tq, rb = ra + 4;
                const float fa = ex2(s.g[ra * KP + d] - gp), fb = ex2(s.g[rb * KP + d] - gp);
                const unsigned bq0 = tf32(__bfloat162float(s.q[ra * KP + d]) * fa);
                const unsigned bq1 = tf32(__bfloat162float(s.q[rb * KP + d]) * fb);
                const unsigned bk0 = tf32(s.beta[ra] * __bfloat162float(s.k[ra * KP + d]) * fa);
                const unsigned bk1 = tf32(s.beta[rb] * __bfloat162float(s.k[rb * KP + d]) * fb);
                // A = dA transposed: A[s][r] = dA[r][s], rows s = r0, r1 (this warp's block), k-dim r
                mma(cc, __float_as_uint(s.aq[ra * 72 + r0]), __float_as_uint(s.aq[ra * 72 + r1]),
                    __float_as_uint(s.aq[rb * 72 + r0]), __float_as_uint(s.aq[rb * 72 + r1]), bq0, bq1);
                mma(cc, __float_as_uint(s.ak[ra * 72 + r0]), __float_as_uint(s.ak[ra * 72 + r1]),
                    __float_as_uint(s.ak[rb * 72 + r0]), __float_as_uint(s.ak[rb * 72 + r1]), bk0, bk1);
            }
#pragma unroll
            for (int x = 0; x < 4; ++x) {
                const int r = x < 2 ? r0 : r1, c = c0 + 8 * j + 2 * tq + (x & 1);
                const float ct = cc[x] * ex2(gp - s.g[r * KP + c]);
                dk[j][x] += ct;
                dg[j][x] -= ct * __bfloat162float(s.k[r * KP + c]);
            }
        }
    }
#ifdef DIAG_GEMM
    // ---- the diagonal block wm as masked GEMMs through its middle row m (the safe gate's bound keeps both
    // factors inside fp32): row side Aq[r] = exp2(g_r - g_m) sum_{u <= r} dAqk[r,u] k[u] exp2(g_m - g_u)
    // (dAkk: u < r), column side Ct[s] = exp2(g_m - g_s) sum_{r >= s} (dAqk[r,s] q[r] + [r > s] dAkk[r,s]
    // beta_r k[r]) exp2(g_r - g_m)
    {
        const int b0r = 16 * wm, m = b0r + 8;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int d = c0 + 8 * j + gid;
            const float gm = s.g[m * KP + d];
            float cq[4] = {0.f, 0.f, 0.f, 0.f}, ck[4] = {0.f, 0.f, 0.f, 0.f}, cc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int kk = 0; kk < 2; ++kk) {
                const int ua = b0r + 8 * kk + tq, ub = ua + 4;
                const float ea = ex2(gm - s.g[ua * KP + d]), eb = ex2(gm - s.g[ub * KP + d]);
                const unsigned bk0 = tf32(__bfloat162float(s.k[ua * KP + d]) * ea);
                const unsigned bk1 = tf32(__bfloat162float(s.k[ub * KP + d]) * eb);
                const float aq00 = ua <= r0 ? s.aq[r0 * 72 + ua] : 0.f, aq10 = ua <= r1 ? s.aq[r1 * 72 + ua] : 0.f;
                const float aq01 = ub <= r0 ? s.aq[r0 * 72 + ub] : 0.f, aq11 = ub <= r1 ? s.aq[r1 * 72 + ub] : 0.f;
                mma(cq, tf32(aq00), tf32(aq10), tf32(aq01), tf32(aq11), bk0, bk1);
                const float ak00 = ua < r0 ? s.ak[r0 * 72 + ua] : 0.f, ak10 = ua < r1 ? s.ak[r1 * 72 + ua] : 0.f;
                const float ak01 = ub < r0 ? s.ak[r0 * 72 + ub] : 0.f, ak11 = ub < r1 ? s.ak[r1 * 72 + ub] : 0.f;
                mma(ck, tf32(ak00), tf32(ak10), tf32(ak01), tf32(ak11), bk0, bk1);
                // column side: k-dim r = ua, ub; rows s = r0, r1; B = q[r] exp2(g_r - g_m), beta k[r] alike
                const float fa = 1.f / ea, fb = 1.f / eb;
                const unsigned bq0 = tf32(__bfloat162float(s.q[ua * KP + d]) * fa);
                const unsigned bq1 = tf32(__bfloat162float(s.q[ub * KP + d]) * fb);
                const unsigned bb0 = tf32(s.beta[ua] * __bfloat162float(s.k[ua * KP + d]) * fa);
                const unsigned bb1 = tf32(s.beta[ub] * __bfloat162float(s.k[ub * KP + d]) * fb);
                const float t00 = ua >= r0 ? s.aq[ua * 72 + r0] : 0.f, t10 = ua >= r1 ? s.aq[ua * 72 + r1] : 0.f;
                const float t01 = ub >= r0 ? s.aq[ub * 72 + r0] : 0.f, t11 = ub >= r1 ? s.aq[ub * 72 + r1] : 0.f;
                mma(cc, tf32(t00), tf32(t10), tf32(t01), tf32(t11), bq0, bq1);
                const float v00 = ua > r0 ? s.ak[ua * 72 + r0] : 0.f, v10 = ua > r1 ? s.ak[ua * 72 + r1] : 0.f;
                const float v01 = ub > r0 ? s.ak[ub * 72 + r0] : 0.f, v11 = ub > r1 ? s.ak[ub * 72 + r1] : 0.f;
                mma(cc, tf32(v00), tf32(v10), tf32(v01), tf32(v11), bb0, bb1);
            }
#pragma unroll
            for (int x = 0; x < 4; ++x) {
                const int r = x < 2 ? r0 : r1, c = c0 + 8 * j + 2 * tq + (x & 1);
                const float f = ex2(s.g[r * KP + c] - s.g[m * KP + c]);
                const float aqv = cq[x] * f, akv = ck[x] * f * s.beta[r], ct = cc[x] / f;
                const float kr = __bfloat162float(s.k[r * KP + c]);
                dq[j][x] += aqv;
                dk[j][x] += akv + ct;
                dg[j][x] += __bfloat162float(s.q[r * KP + c]) * aqv + (akv - ct) * kr;
            }
        }
    }
#else
    // ---- the diagonal block wm, SIMT: each (r, s, d) of the block's lower triangle, its exp2 made by the
    // lane of row r (row side) and again by the lane of row s (column side)
    const int b0r = 16 * wm;
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int x = 0; x < 4; ++x) {
            const int r = x < 2 ? r0 : r1, c = c0 + 8 * j + 2 * tq + (x & 1);
            const float gr = s.g[r * KP + c], kr = __bfloat162float(s.k[r * KP + c]);
            const float qr = __bfloat162float(s.q[r * KP + c]), br = s.beta[r];
            float aq = 0.f, ak = 0.f, ct = 0.f;
#pragma unroll 4
            for (int t = 0; t < 16; ++t) {
                const int u = b0r + t;
                const float gu = s.g[u * KP + c];
                if (u < r) { // row side: sources u below r
                    const float ev = ex2(gr - gu);
                    const float ku = __bfloat162float(s.k[u * KP + c]);
                    aq += s.aq[r * 72 + u] * ev * ku;
                    ak += s.ak[r * 72 + u] * ev * ku;
                } else if (u == r) {
                    aq += s.aq[r * 72 + r] * kr;
                    ct += s.aq[r * 72 + r] * qr;
                } else { // column side: targets u above r
                    const float ev = ex2(gu - gr);
                    ct += (s.aq[u * 72 + r] * __bfloat162float(s.q[u * KP + c]) +
                           s.ak[u * 72 + r] * s.beta[u] * __bfloat162float(s.k[u * KP + c])) * ev;
                }
            }
            dq[j][x] += aq;
            dk[j][x] += br * ak + ct;
            dg[j][x] += qr * aq + (br * ak - ct) * kr;
        }
#endif
    // the results (in the kernel: the post epilogue, then the io stores)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int x = 0; x < 4; ++x) {
            const int r = x < 2 ? r0 : r1, c = c0 + 8 * j + 2 * tq + (x & 1);
            out[cta + r * 128 + c] = dq[j][x];
            out[cta + 8192 + r * 128 + c] = dk[j][x];
            out[cta + 16384 + r * 128 + c] = dg[j][x];
        }
}
