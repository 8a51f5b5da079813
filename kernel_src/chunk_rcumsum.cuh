/*
 * chunk_rcumsum.cuh: in-place reverse (suffix) cumulative sum of dg within
 * each 64-row chunk, the fold that fla runs as a separate launch after
 * bwd_intra (chunk_local_cumsum(dg, 64, reverse=True)).
 *
 * bwd_intra with fold_dg does the same inside its own CTA; this standalone
 * kernel exists for callers that produce dg elsewhere, and it is the
 * smallest real kernel the runtime compiles, so the pipeline tests use it.
 *
 * Launch: grid (T/64, B*HV), K threads (one per channel d), no dynamic
 * shared memory.  Each thread walks its column from row 63 up to row 0, so
 * the sum order is fixed and the result deterministic.
 */
#ifndef KDART_CHUNK_RCUMSUM_CUH
#define KDART_CHUNK_RCUMSUM_CUH

#include "kdart_common.cuh"

template <int K>
struct RcumsumTraits {
    static constexpr int kThreads = K;
    static constexpr int kSmemBytes = 0;
    static_assert(K == 64 || K == 128 || K == 256, "chunk_rcumsum supports K in {64, 128, 256}");
};

template <int K>
__global__ void __launch_bounds__(RcumsumTraits<K>::kThreads)
kdart_chunk_rcumsum(const kdart_rcumsum_params p) {
    const int chunk = blockIdx.x;
    const int bh = blockIdx.y;              /* b*HV + hv */
    const int b = bh / p.HV, hv = bh % p.HV;
    const int d = threadIdx.x;
    const long long row_stride = (long long)p.HV * K;
    float *x = p.x + ((long long)b * p.T + (long long)chunk * KDART_CHUNK) * row_stride
             + (long long)hv * K + d;
    float acc = 0.f;
#pragma unroll 8
    for (int r = KDART_CHUNK - 1; r >= 0; --r) {
        acc += x[r * row_stride];
        x[r * row_stride] = acc;
    }
}

#endif /* KDART_CHUNK_RCUMSUM_CUH */
