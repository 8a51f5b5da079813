/*
 * kdart_common.cuh: the small device-side vocabulary every kdart kernel uses.
 *
 * NVRTC ships no host headers and, in CUDA 13.0, not even cuda_bf16.h, so
 * kernels include nothing outside kernel_src/.  This header supplies the two
 * 16-bit io types as plain storage structs with explicit conversions written
 * in PTX (round-to-nearest-even, the same rounding as __float2bfloat16_rn),
 * and a few helpers.  Keeping the kernels free of toolkit headers also keeps
 * every NVRTC compile fast and makes the cache key's "sources" field the
 * complete list of what the compiler read from us.
 */
#ifndef KDART_COMMON_CUH
#define KDART_COMMON_CUH

#include "kda_params.h"

namespace kdart {

/* 16-bit io types: raw bits only; arithmetic is always done in fp32. */
struct bf16 { unsigned short bits; };
struct fp16 { unsigned short bits; };

__device__ __forceinline__ float to_float(bf16 x) {
    return __uint_as_float(((unsigned)x.bits) << 16);
}
__device__ __forceinline__ float to_float(fp16 x) {
    float f;
    asm("{ .reg .b16 h; mov.b16 h, %1; cvt.f32.f16 %0, h; }" : "=f"(f) : "h"(x.bits));
    return f;
}
__device__ __forceinline__ float to_float(float x) { return x; }

template <typename T> __device__ __forceinline__ T from_float(float f);
template <> __device__ __forceinline__ bf16 from_float<bf16>(float f) {
    unsigned short h;
    asm("{ .reg .b16 r; cvt.rn.bf16.f32 r, %1; mov.b16 %0, r; }" : "=h"(h) : "f"(f));
    bf16 out; out.bits = h; return out;
}
template <> __device__ __forceinline__ fp16 from_float<fp16>(float f) {
    unsigned short h;
    asm("{ .reg .b16 r; cvt.rn.f16.f32 r, %1; mov.b16 %0, r; }" : "=h"(h) : "f"(f));
    fp16 out; out.bits = h; return out;
}
template <> __device__ __forceinline__ float from_float<float>(float f) { return f; }

/* Two 16-bit values packed in one 32-bit register, low half first, as the
 * mma.sync operand fragments expect.  One cvt.rn.{bf16,f16}x2.f32 does both
 * conversions (same round-to-nearest-even as from_float; the first source
 * operand lands in the upper half). */
template <typename T> __device__ __forceinline__ unsigned pack2(float lo, float hi);
template <> __device__ __forceinline__ unsigned pack2<bf16>(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
template <> __device__ __forceinline__ unsigned pack2<fp16>(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* 32-bit shared-window address of a generic pointer into shared memory (the
 * form ldmatrix, stmatrix and cp.async take). */
__device__ __forceinline__ unsigned smem_u32(const void *p) {
    unsigned r;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
    return r;
}

/* threadIdx.x through a volatile read: every use reads it again, so nothing derived from it (a thread's
 * shared or global offsets) is computed once and held in registers across a long stretch of the kernel,
 * where it costs a register or a spill (bwd_intra's passes, wy_dqkg's steps) */
__device__ __forceinline__ int fresh_tid() {
    unsigned t;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
    return (int)t;
}

/* std::enable_if (NVRTC has no <type_traits>): a kernel template whose
 * specializations split into real and stub bodies declares both with it, so
 * that the real body is the __global__ function itself (as a __forceinline__
 * call from a wrapper kernel, ptxas allocates and schedules it differently). */
template <bool C, typename T = void> struct enable_if {};
template <typename T> struct enable_if<true, T> { using type = T; };
template <bool C, typename T = void> using enable_if_t = typename enable_if<C, T>::type;
/* std::conditional, for the same reason: a type chosen by a template flag */
template <bool C, typename A, typename B> struct conditional { using type = A; };
template <typename A, typename B> struct conditional<false, A, B> { using type = B; };
template <bool C, typename A, typename B> using conditional_t = typename conditional<C, A, B>::type;

/* Compile-time tag so kernels can pick the mma.sync type string. */
template <typename T> struct io_traits;
template <> struct io_traits<bf16> { static constexpr bool is_bf16 = true; };
template <> struct io_traits<fp16> { static constexpr bool is_bf16 = false; };

} /* namespace kdart */

#endif /* KDART_COMMON_CUH */
