// lab/experiments/wy-wgmma/probe.cu: checks wgmma.diff's operand modes alone, in seconds, before the kernel
// tests: one warpgroup pair multiplies two swizzled 64 x 64 bf16 tiles with wg_issue<AT, BT, NP> at each
// column half (and, for NP = 1, each 16-column quarter), and the host compares every output with a double
// product.  Build (with wgmma.diff applied to kernel_src/):
//   nvcc -std=c++17 -arch=sm_90a -I kernel_src -o /tmp/wg_probe lab/experiments/wy-wgmma/probe.cu
// and run /tmp/wg_probe on the H200: one line per mode, "ok" or the worst error and where.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include "kda_params.h"
#include "wy_dqkg.cuh"

using namespace kdart;
using namespace kdart::wy;

template <bool AT, bool BT, int NP>
__global__ void probe(const unsigned short *ga, const unsigned short *gb, float *out, int quarter) {
    extern __shared__ __align__(1024) unsigned char smem[];
    unsigned short *sa = reinterpret_cast<unsigned short *>(smem), *sb = sa + 4096;
    for (int i = threadIdx.x; i < 4096; i += blockDim.x) {
        const int r = i >> 6, c = i & 63;
        sa[swz(r, c)] = ga[i];
        sb[swz(r, c)] = gb[i];
    }
    fence_async_smem();
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tq = lane & 3;
    const int m0 = 16 * (warp & 3), n0 = 32 * (warp >> 2) + (NP == 1 ? 16 * quarter : 0);
    float c[2 * NP][4];
    for (int j = 0; j < 2 * NP; ++j)
        for (int e = 0; e < 4; ++e) c[j][e] = 0.f;
#if KDART_WY_WG
    wg_fence();
    wg_issue<bf16, AT, BT, NP>(c, smem_u32(sa), smem_u32(sb), n0);
    wg_commit();
    wg_wait();
#endif
    for (int j = 0; j < 2 * NP; ++j) {
        const int col = n0 + 8 * j + 2 * tq;
        out[(m0 + gid) * 64 + col] = c[j][0];
        out[(m0 + gid) * 64 + col + 1] = c[j][1];
        out[(m0 + gid + 8) * 64 + col] = c[j][2];
        out[(m0 + gid + 8) * 64 + col + 1] = c[j][3];
    }
}

static unsigned short to_bf16(float x) {
    unsigned u;
    memcpy(&u, &x, 4);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float from_bf16(unsigned short b) {
    unsigned u = (unsigned)b << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

template <bool AT, bool BT, int NP>
static int run(const unsigned short *da, const unsigned short *db, const float *ha, const float *hb, float *dout) {
    int bad = 0;
    for (int q = 0; q < (NP == 1 ? 2 : 1); ++q) {
        cudaMemset(dout, 0xff, 4096 * 4); /* NaN: a column this mode does not write stays NaN */
        cudaFuncSetAttribute(probe<AT, BT, NP>, cudaFuncAttributeMaxDynamicSharedMemorySize, 16384 + 1024);
        probe<AT, BT, NP><<<1, 256, 16384 + 1024>>>(da, db, dout, q);
        float o[4096];
        if (cudaMemcpy(o, dout, sizeof o, cudaMemcpyDeviceToHost) != cudaSuccess) {
            printf("AT=%d BT=%d NP=%d q=%d: launch failed: %s\n", AT, BT, NP, q, cudaGetErrorString(cudaGetLastError()));
            return 1;
        }
        double worst = 0;
        int wr = -1, wc = -1;
        for (int r = 0; r < 64; ++r)
            for (int n = 0; n < 64; ++n) {
                const int half = n >> 5, qq = (n >> 4) & 1;
                if (NP == 1 && qq != q) continue; /* (this launch's quarter of each half) */
                (void)half;
                double s = 0;
                for (int k = 0; k < 64; ++k) {
                    const double a = AT ? ha[k * 64 + r] : ha[r * 64 + k];
                    const double b = BT ? hb[k * 64 + n] : hb[n * 64 + k];
                    s += a * b;
                }
                const double e = std::isnan(o[r * 64 + n]) ? 1e30 : fabs(o[r * 64 + n] - s);
                if (e > worst) worst = e, wr = r, wc = n;
            }
        const bool ok = worst < 1e-3;
        bad |= !ok;
        printf("AT=%d BT=%d NP=%d q=%d: %s (worst |err| %.3g at row %d col %d)\n", AT, BT, NP, q, ok ? "ok" : "WRONG",
               worst, wr, wc);
    }
    return bad;
}

int main() {
    float ha[4096], hb[4096];
    unsigned short ba[4096], bb[4096];
    srand(7);
    for (int i = 0; i < 4096; ++i) {
        ba[i] = to_bf16((float)rand() / RAND_MAX - 0.5f), ha[i] = from_bf16(ba[i]);
        bb[i] = to_bf16((float)rand() / RAND_MAX - 0.5f), hb[i] = from_bf16(bb[i]);
    }
    unsigned short *da, *db;
    float *dout;
    cudaMalloc(&da, sizeof ba), cudaMalloc(&db, sizeof bb), cudaMalloc(&dout, 4096 * 4);
    cudaMemcpy(da, ba, sizeof ba, cudaMemcpyHostToDevice), cudaMemcpy(db, bb, sizeof bb, cudaMemcpyHostToDevice);
    int bad = 0;
    bad |= run<false, false, 2>(da, db, ha, hb, dout);
    bad |= run<false, true, 2>(da, db, ha, hb, dout);
    bad |= run<true, false, 2>(da, db, ha, hb, dout);
    bad |= run<true, true, 2>(da, db, ha, hb, dout);
    bad |= run<true, true, 1>(da, db, ha, hb, dout);
    bad |= run<false, false, 1>(da, db, ha, hb, dout);
    printf(bad ? "probe: some mode is WRONG\n" : "probe: every mode ok\n");
    return bad;
}
