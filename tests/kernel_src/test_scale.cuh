/*
 * test_scale.cuh: the kernel of the registry's test-only stage
 * (tests/test_stage.c): y = scale * x over a [rows, K] bf16 tensor, into
 * fp32.  Small on purpose: the test is about what follows from a stage's one
 * description (listing, checks, preparing, launching), not about the
 * kernel.  Launch contract: 128 threads, no shared memory, any grid.
 */
#include "test_scale_params.h"

template <int KT>
__global__ void __launch_bounds__(128) kdart_test_scale(kdart_test_scale_params p) {
    static_assert(KT == 64 || KT == 128, "the K parameter's values");
    const long long n = (long long)p.rows * p.K;
    const unsigned short *x = static_cast<const unsigned short *>(p.x);
    for (long long i = blockIdx.x * 128ll + threadIdx.x; i < n; i += gridDim.x * 128ll)
        p.y[i] = p.scale * __uint_as_float((unsigned)x[i] << 16); /* bf16 -> fp32 is exact */
}
