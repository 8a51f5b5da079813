// lab/experiments/one-cta/intra_frag_probe.cu: a compile-only probe of the one-CTA-an-SM design's tightest
// point (README.md here, phase 4): 512 threads, 128 registers a thread, dq, dk, dg of a 64 x 128 chunk held
// in the wy part's fragment layout (warp: rows 16 wm.., columns 32 wg..; 16 fp32 each) while the intra terms
// are added to them: off the diagonal as tf32 m16n8k8 GEMMs with the warp's own pivot (row side e = 16 wm,
// column side p = 16 wm + 15), on the diagonal in SIMT with each exp2 made on both sides.  Arithmetic of the
// intra terms as bwd_intra's (docs/kernels.md): dq += Aq, dk += beta Ak + Ct, dg += q Aq + (beta Ak - Ct) k.
// Not checked against a reference: it exists for ptxas's register and spill report and the SASS counts.
//   nvcc -arch=sm_90a -cubin -Xptxas -v -I ../../../kernel_src -o /tmp/probe.cubin intra_frag_probe.cu
// (-DDIAG_GEMM: the diagonal as masked GEMMs through the block's middle row)
#include "bwd_intra.cuh" // kdart::bf16, to_float, and the intra kernels' ex2, to_tf32, mma_tf32

namespace {
constexpr int kT = 512, KP = 136; // threads; padded fp32 / bf16 row stride of the K = 128 tiles
using kdart::intra::ex2;
using kdart::intra::mma_tf32;
using kdart::intra::to_tf32;
__device__ __forceinline__ float bf(kdart::bf16 x) { return kdart::to_float(x); }
} // namespace

struct Smem {
    kdart::bf16 q[64 * KP], k[64 * KP]; // the chunk's q, k (all of K)
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
                const unsigned b0 = to_tf32(bf(s.k[sa * KP + d]) * ex2(ge - s.g[sa * KP + d]));
                const unsigned b1 = to_tf32(bf(s.k[sb * KP + d]) * ex2(ge - s.g[sb * KP + d]));
                const float *ar0 = s.aq + r0 * 72 + 8 * kk, *ar1 = s.aq + r1 * 72 + 8 * kk;
                mma_tf32(cq, __float_as_uint(ar0[tq]), __float_as_uint(ar1[tq]), __float_as_uint(ar0[tq + 4]),
                    __float_as_uint(ar1[tq + 4]), b0, b1);
                const float *kr0 = s.ak + r0 * 72 + 8 * kk, *kr1 = s.ak + r1 * 72 + 8 * kk;
                mma_tf32(ck, __float_as_uint(kr0[tq]), __float_as_uint(kr1[tq]), __float_as_uint(kr0[tq + 4]),
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
                dg[j][x] += bf(s.q[r * KP + c]) * aqv + akv * bf(s.k[r * KP + c]);
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
                const unsigned bq0 = to_tf32(bf(s.q[ra * KP + d]) * fa);
                const unsigned bq1 = to_tf32(bf(s.q[rb * KP + d]) * fb);
                const unsigned bk0 = to_tf32(s.beta[ra] * bf(s.k[ra * KP + d]) * fa);
                const unsigned bk1 = to_tf32(s.beta[rb] * bf(s.k[rb * KP + d]) * fb);
                // A = dA transposed: A[s][r] = dA[r][s], rows s = r0, r1 (this warp's block), k-dim r
                mma_tf32(cc, __float_as_uint(s.aq[ra * 72 + r0]), __float_as_uint(s.aq[ra * 72 + r1]),
                    __float_as_uint(s.aq[rb * 72 + r0]), __float_as_uint(s.aq[rb * 72 + r1]), bq0, bq1);
                mma_tf32(cc, __float_as_uint(s.ak[ra * 72 + r0]), __float_as_uint(s.ak[ra * 72 + r1]),
                    __float_as_uint(s.ak[rb * 72 + r0]), __float_as_uint(s.ak[rb * 72 + r1]), bk0, bk1);
            }
#pragma unroll
            for (int x = 0; x < 4; ++x) {
                const int r = x < 2 ? r0 : r1, c = c0 + 8 * j + 2 * tq + (x & 1);
                const float ct = cc[x] * ex2(gp - s.g[r * KP + c]);
                dk[j][x] += ct;
                dg[j][x] -= ct * bf(s.k[r * KP + c]);
            }
        }
    }
#ifdef DIAG_GEMM
    // ---- the diagonal block wm as masked GEMMs through its middle row m (the safe gate's bound keeps both
    // factors inside fp32): row side Aq[r] = exp2(g_r - g_m) sum_{u <= r} dAqk[r,u] k[u] exp2(g_m - g_u)
    // (dAkk: u < r), column side Ct[s] = exp2(g_m - g_s) sum_{r >= s} (dAqk[r,s] q[r] + [r > s] dAkk[r,s]
    // beta_r k[r]) exp2(g_r - g_m)
    {
        // the A fragment (rows r0, r1; k-dim ua, ub) of a diagonal block of dA, or of its transpose (trans),
        // the other triangle (and, strict, the diagonal) masked to zero, rounded to tf32
        auto frag = [&](const float *dA, bool trans, bool strict, int ua, int ub, unsigned (&a)[4]) {
            const int rows[2] = {r0, r1}, cols[2] = {ua, ub};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = rows[e & 1], u = cols[e >> 1];
                const bool keep = trans ? (strict ? u > r : u >= r) : (strict ? u < r : u <= r);
                a[e] = to_tf32(keep ? (trans ? dA[u * 72 + r] : dA[r * 72 + u]) : 0.f);
            }
        };
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
                const unsigned bk0 = to_tf32(bf(s.k[ua * KP + d]) * ea);
                const unsigned bk1 = to_tf32(bf(s.k[ub * KP + d]) * eb);
                unsigned a[4];
                frag(s.aq, false, false, ua, ub, a);
                mma_tf32(cq, a[0], a[1], a[2], a[3], bk0, bk1);
                frag(s.ak, false, true, ua, ub, a);
                mma_tf32(ck, a[0], a[1], a[2], a[3], bk0, bk1);
                // column side: k-dim r = ua, ub; rows s = r0, r1; B = q[r] exp2(g_r - g_m), beta k[r] alike
                const float fa = 1.f / ea, fb = 1.f / eb;
                const unsigned bq0 = to_tf32(bf(s.q[ua * KP + d]) * fa);
                const unsigned bq1 = to_tf32(bf(s.q[ub * KP + d]) * fb);
                const unsigned bb0 = to_tf32(s.beta[ua] * bf(s.k[ua * KP + d]) * fa);
                const unsigned bb1 = to_tf32(s.beta[ub] * bf(s.k[ub * KP + d]) * fb);
                frag(s.aq, true, false, ua, ub, a);
                mma_tf32(cc, a[0], a[1], a[2], a[3], bq0, bq1);
                frag(s.ak, true, true, ua, ub, a);
                mma_tf32(cc, a[0], a[1], a[2], a[3], bb0, bb1);
            }
#pragma unroll
            for (int x = 0; x < 4; ++x) {
                const int r = x < 2 ? r0 : r1, c = c0 + 8 * j + 2 * tq + (x & 1);
                const float f = ex2(s.g[r * KP + c] - s.g[m * KP + c]);
                const float aqv = cq[x] * f, akv = ck[x] * f * s.beta[r], ct = cc[x] / f;
                const float kr = bf(s.k[r * KP + c]);
                dq[j][x] += aqv;
                dk[j][x] += akv + ct;
                dg[j][x] += bf(s.q[r * KP + c]) * aqv + (akv - ct) * kr;
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
            const float gr = s.g[r * KP + c], kr = bf(s.k[r * KP + c]);
            const float qr = bf(s.q[r * KP + c]), br = s.beta[r];
            float aq = 0.f, ak = 0.f, ct = 0.f;
#pragma unroll 4
            for (int t = 0; t < 16; ++t) {
                const int u = b0r + t;
                const float gu = s.g[u * KP + c];
                if (u < r) { // row side: sources u below r
                    const float ev = ex2(gr - gu);
                    const float ku = bf(s.k[u * KP + c]);
                    aq += s.aq[r * 72 + u] * ev * ku;
                    ak += s.ak[r * 72 + u] * ev * ku;
                } else if (u == r) {
                    aq += s.aq[r * 72 + r] * kr;
                    ct += s.aq[r * 72 + r] * qr;
                } else { // column side: targets u above r
                    const float ev = ex2(gu - gr);
                    ct += (s.aq[u * 72 + r] * bf(s.q[u * KP + c]) +
                           s.ak[u * 72 + r] * s.beta[u] * bf(s.k[u * KP + c])) * ev;
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
