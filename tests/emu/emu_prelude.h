/*
 * emu_prelude.h: what a kdart kernel source needs to compile as host C++ and
 * run on the CPU, one CTA at a time, its threads as cooperative fibers.
 *
 * This is the kernel side of kdart's emulated device (tests/emu/README.md):
 * libcuda_emu (fake_cuda.cpp) builds each kernel specialization the runtime
 * loads as a shared object from the same sources, rewritten by emu_rewrite.py
 * (every inline-asm statement becomes a call of a function below, every
 * dynamic shared-memory declaration a reference to one arena), with this
 * header included first.  The grid runs in order; a CTA's threads are fibers
 * that switch only at barriers and warp collectives, so a kernel's results
 * are deterministic and its data races invisible (compute-sanitizer's job on
 * a GPU).  What it checks is the arithmetic and the indexing: every kernel's
 * portable path (mma.sync, ldmatrix, cp.async) and, on a device of compute
 * capability 9.0, sm_90a's (wgmma, TMA, mbarriers) against the float64
 * references, on a machine without a GPU.
 *
 * Semantics kept: fragment layouts of mma.sync m16n8k16 (bf16, f16) and
 * m16n8k8 (tf32), ldmatrix / stmatrix x4 (and .trans), cp.async with its
 * zero fill and its groups, shuffles, votes, named and CTA barriers (exited
 * threads count as arrived), round-to-nearest-even conversions, the tf32
 * roundings; wgmma's shared-memory operand layouts (matrix descriptors, the
 * 128-, 64- and 32-byte swizzles) and accumulator fragments, TMA boxes with
 * the 128-byte swizzle and zero fill, mbarrier phases and transaction bytes.
 * Approximate instructions (ex2, lg2, rcp) are computed exactly; cache
 * hints, prefetches and fences do nothing.  Reads of what is not
 * there yet show as NaN: shared memory starts each CTA filled with 0xff
 * bytes, a cp.async destination holds them until the copy's wait, a TMA
 * destination until a thread sees its mbarrier phase complete, a
 * discarded L2 line after the discard.  A CTA runs warp by warp, each as
 * far as the CTA barriers let it, the warps in reverse order every other
 * launch: a result that depends on the order (a missing barrier) reads
 * NaN or breaks the suite's determinism check.  Threads that wait at
 * different barriers abort the run (a deadlock).
 */
#ifndef KDART_EMU_PRELUDE_H
#define KDART_EMU_PRELUDE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <map>
#include <type_traits>
#include <ucontext.h>
#include <vector>

#include "emu_tma.h"

/* ------------------------------------------------------------ keywords */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ static
#define __constant__ static const
#define __align__(n)
#define __restrict__ __restrict
#define __grid_constant__
#define __CUDA_ARCH__ 900
#define KDART_EMU 1

/* ------------------------------------------------------------ vector types */
struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
#define KDART_EMU_VEC2(T, N, A) struct alignas(A) N { T x, y; }; \
    static inline N make_##N(T a, T b) { N r; r.x = a; r.y = b; return r; }
#define KDART_EMU_VEC4(T, N, A) struct alignas(A) N { T x, y, z, w; }; \
    static inline N make_##N(T a, T b, T c, T d) { N r; r.x = a; r.y = b; r.z = c; r.w = d; return r; }
KDART_EMU_VEC2(float, float2, 8)
KDART_EMU_VEC4(float, float4, 16)
KDART_EMU_VEC2(unsigned, uint2, 8)
KDART_EMU_VEC4(unsigned, uint4, 16)
KDART_EMU_VEC2(int, int2, 8)
KDART_EMU_VEC4(int, int4, 16)
KDART_EMU_VEC2(unsigned short, ushort2, 4)
KDART_EMU_VEC4(unsigned short, ushort4, 8)
#undef KDART_EMU_VEC2
#undef KDART_EMU_VEC4

/* ------------------------------------------------------------ the fibers */
namespace emu {

constexpr int kMaxThreads = 1024;
constexpr size_t kSmemBytes = 256 * 1024;
constexpr size_t kStack = 256 * 1024;

struct Copy { /* a cp.async not landed yet: group is the thread's commit count when it was issued */
    unsigned dst;
    uintptr_t src;
    int cp, n;
    unsigned group;
};
constexpr int kMaxCopies = 256;
struct Fiber {
    ucontext_t ctx;
    dim3 tid;
    int linear, done;
    int wbar;                   /* the CTA or named barrier it waits at (-1: none), at generation wgen */
    unsigned wgen;
    unsigned commits;           /* cp.async.commit_group count */
    int ncopies;
    Copy copies[kMaxCopies];    /* issued, not landed */
};
struct Barrier {
    int arrived = 0;
    unsigned gen = 0;
    int expect = 0; /* 0: every live thread of the CTA */
    int red_or = 0, red_res = 0;
};
struct Warp {
    int arrived = 0, live = 0;
    unsigned gen = 0;
    alignas(16) unsigned char slot[32][64];
};
struct Cta {
    dim3 bid, bdim, gdim;
    int nthreads, live;
    Fiber *cur;
    ucontext_t sched;
    Barrier bar[24]; /* 0: the CTA's; 1..8: named (bar.sync id); 16..23: the warpgroups' (wgmma) */
    Warp warp[kMaxThreads / 32];
};
inline Cta g_cta;
inline unsigned long long g_progress; /* arrivals, releases and exits: a scheduler pass without any is a deadlock */
inline unsigned g_launches;
alignas(1024) inline unsigned char g_smem[kSmemBytes];

inline Fiber *cur() { return g_cta.cur; }
inline void yield() { swapcontext(&g_cta.cur->ctx, &g_cta.sched); }
inline int lane() { return cur()->linear & 31; }
inline Warp &my_warp() { return g_cta.warp[cur()->linear >> 5]; }

[[noreturn]] inline void fail(const char *what) {
    fprintf(stderr, "emu: %s (block %u,%u,%u thread %d)\n", what, g_cta.bid.x, g_cta.bid.y, g_cta.bid.z,
            g_cta.cur ? g_cta.cur->linear : -1);
    abort();
}

inline void bar_release(Barrier &b) {
    b.arrived = 0;
    b.red_res = b.red_or;
    b.red_or = 0;
    b.gen++;
}
inline void warp_release(Warp &w) {
    w.arrived = 0;
    w.gen++;
}
/* barrier id: all live threads (id 0, expect 0) or `expect` of them (named barriers, warpgroups); the last
 * thread to arrive runs last() before it releases the others */
template <typename F> inline int bar_wait(int id, int expect, int pred, F last) {
    Barrier &b = g_cta.bar[id];
    const unsigned g = b.gen;
    b.red_or |= pred;
    const int need = expect ? expect : g_cta.live;
    g_progress++;
    if (++b.arrived >= need) {
        last();
        bar_release(b);
    } else {
        g_cta.cur->wbar = id, g_cta.cur->wgen = g;
        while (b.gen == g) yield();
        g_cta.cur->wbar = -1;
    }
    return b.red_res;
}
inline int bar_wait(int id, int expect, int pred) { return bar_wait(id, expect, pred, [] {}); }
/* a thread that exits counts as arrived at the CTA barrier it no longer reaches */
inline void on_exit() {
    g_cta.live--;
    Barrier &b = g_cta.bar[0];
    if (b.arrived && b.arrived >= g_cta.live) bar_release(b);
    Warp &w = my_warp();
    w.live--;
    if (w.arrived && w.arrived >= w.live) warp_release(w);
}
inline void warp_bar() {
    Warp &w = my_warp();
    const unsigned g = w.gen;
    g_progress++;
    if (++w.arrived >= w.live) {
        warp_release(w);
    } else {
        while (w.gen == g) yield();
    }
}
/* A warp collective: each lane puts `in` in its slot; once every lane has, f((const In *)nullptr, warp) gives
 * this lane's result from the warp's slots (the null pointer only names the slot type); a second barrier
 * keeps the slots until every lane has read them. */
template <typename In, typename F> inline auto collective(const In &in, F f) {
    static_assert(sizeof(In) <= 64, "slot size");
    Warp &w = my_warp();
    memcpy(w.slot[lane()], &in, sizeof in);
    warp_bar();
    auto r = f(static_cast<const In *>(nullptr), w);
    warp_bar();
    return r;
}
template <typename In> inline const In &slot(const Warp &w, int l) {
    return *reinterpret_cast<const In *>(w.slot[l]);
}

inline void mbar_reset();
inline void (*g_body)(void *) = nullptr;
inline void *g_body_arg = nullptr;
inline void land_copies(Fiber &f, unsigned upto);
inline void fiber_entry() {
    g_body(g_body_arg);
    land_copies(*g_cta.cur, ~0u);
    g_progress++;
    on_exit();
    g_cta.cur->done = 1;
}

/* Runs body(arg) as every thread of grid x block, CTA by CTA in order. */
inline void run_grid(dim3 grid, dim3 block, void (*body)(void *), void *arg) {
    const int n = (int)(block.x * block.y * block.z);
    if (n <= 0 || n > kMaxThreads || n % 32) fail("block size");
    static Fiber fibers[kMaxThreads];
    static unsigned char *stacks = nullptr;
    if (!stacks) {
        stacks = (unsigned char *)mmap(nullptr, kStack * kMaxThreads, PROT_READ | PROT_WRITE,
                                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (stacks == MAP_FAILED) fail("fiber stacks");
    }
    g_body = body;
    g_body_arg = arg;
    /* KDART_EMU_CTA_ORDER=reverse: the CTAs last to first (what one CTA's stores do to another's loads shows
     * up where the order matters) */
    static const int cta_rev = [] {
        const char *e = getenv("KDART_EMU_CTA_ORDER");
        return e && strcmp(e, "reverse") == 0;
    }();
    const unsigned long long ncta = (unsigned long long)grid.x * grid.y * grid.z;
    for (unsigned long long ci = 0; ci < ncta; ++ci) {
        const unsigned long long lin = cta_rev ? ncta - 1 - ci : ci;
        const unsigned bx = (unsigned)(lin % grid.x), by = (unsigned)(lin / grid.x % grid.y),
                       bz = (unsigned)(lin / ((unsigned long long)grid.x * grid.y));
        Cta &c = g_cta;
        c.bid = {bx, by, bz};
        c.bdim = block;
        c.gdim = grid;
        c.nthreads = c.live = n;
        for (auto &b : c.bar) b = Barrier();
        for (int w = 0; w < n / 32; ++w) c.warp[w].arrived = 0, c.warp[w].live = 32;
        memset(g_smem, 0xff, sizeof g_smem);
        mbar_reset();
        for (int t = 0; t < n; ++t) {
            Fiber &f = fibers[t];
            f.linear = t;
            f.done = 0;
            f.commits = 0;
            f.ncopies = 0;
            f.wbar = -1;
            f.tid = {(unsigned)(t % block.x), (unsigned)(t / block.x % block.y), (unsigned)(t / (block.x * block.y))};
            getcontext(&f.ctx);
            f.ctx.uc_stack.ss_sp = stacks + (size_t)t * kStack;
            f.ctx.uc_stack.ss_size = kStack;
            f.ctx.uc_link = &c.sched;
            makecontext(&f.ctx, (void (*)())fiber_entry, 0);
        }
        /* Warp by warp: a warp runs until each of its threads has finished or waits at a CTA (or
         * named) barrier, then the next one; every other launch takes the warps in reverse order.
         * So one warp gets as far ahead of the others as the barriers allow, and a result that
         * depends on the order (a missing barrier between warps) differs between two launches. */
        const bool rev = g_launches & 1;
        const int nw = n / 32;
        auto blocked = [&](const Fiber &f) { return f.wbar >= 0 && c.bar[f.wbar].gen == f.wgen; };
        for (int left = n; left > 0;) {
            const unsigned long long before = g_progress;
            for (int i = 0; i < nw; ++i) {
                const int w = rev ? nw - 1 - i : i;
                for (bool ran = true; ran;) {
                    ran = false;
                    const unsigned long long mark = g_progress;
                    for (int l = 0; l < 32; ++l) {
                        Fiber &f = fibers[32 * w + l];
                        if (f.done || blocked(f)) continue;
                        c.cur = &f;
                        swapcontext(&c.sched, &f.ctx);
                        ran = true;
                    }
                    if (g_progress == mark) break; /* (lanes that wait for lanes of no progress) */
                }
            }
            left = 0;
            for (int t = 0; t < n; ++t) left += !fibers[t].done;
            if (left && g_progress == before) {
                c.cur = nullptr;
                fail("deadlock: the live threads wait at different barriers");
            }
        }
        c.cur = nullptr;
    }
    g_launches++;
}

/* ------------------------------------------------------------ numbers */
inline float as_f(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline unsigned as_u(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline unsigned short f2bf(float f) { /* round to nearest even; NaN stays NaN */
    unsigned u = as_u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
inline float bf2f(unsigned short h) { return as_f((unsigned)h << 16); }
/* IEEE half by hand (round to nearest even), so nothing depends on F16C */
inline unsigned short float_to_half(float f) {
    const unsigned u = as_u(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u); /* 65520 and up round to inf */
    const int e = (int)(a >> 23);
    unsigned q, rem, halfway;
    if (e < 113) { /* a half subnormal (units of 2^-24) or zero */
        if (a < 0x33000000u) return (unsigned short)sign;
        const unsigned m = (a & 0x7fffffu) | 0x800000u;
        const int drop = 126 - e;
        q = m >> drop, rem = m & ((1u << drop) - 1u), halfway = 1u << (drop - 1);
    } else {
        q = (a >> 13) - (112u << 10), rem = a & 0x1fffu, halfway = 0x1000u;
    }
    if (rem > halfway || (rem == halfway && (q & 1u))) q++;
    return (unsigned short)(sign | q);
}
inline float half_to_float(unsigned short h) {
    const unsigned sign = (unsigned)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) return as_f(sign) + (sign ? -1.f : 1.f) * ldexpf((float)m, -24);
    if (e == 31) return as_f(sign | 0x7f800000u | (m << 13));
    return as_f(sign | ((e + 112u) << 23) | (m << 13));
}
inline unsigned tf32_rn(float x) { /* cvt.rn.tf32.f32: 10 mantissa bits, nearest even */
    unsigned u = as_u(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return u;
    u += 0xfffu + ((u >> 13) & 1u);
    return u & 0xffffe000u;
}
inline unsigned tf32_rna(float x) { /* cvt.rna.tf32.f32: nearest, ties away */
    unsigned u = as_u(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return u;
    u += 0x1000u;
    return u & 0xffffe000u;
}

} /* namespace emu */

/* ------------------------------------------------------------ builtins */
#define threadIdx (::emu::g_cta.cur->tid)
#define blockIdx (::emu::g_cta.bid)
#define blockDim (::emu::g_cta.bdim)
#define gridDim (::emu::g_cta.gdim)

inline void __syncthreads() { emu::bar_wait(0, 0, 0); }
inline int __syncthreads_or(int p) { return emu::bar_wait(0, 0, p != 0); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::warp_bar(); }
inline void __threadfence() {}
inline void __threadfence_block() {}
[[noreturn]] inline void __trap() { emu::fail("__trap"); }

inline float __uint_as_float(unsigned u) { return emu::as_f(u); }
inline unsigned __float_as_uint(float f) { return emu::as_u(f); }
inline float __int_as_float(int u) { return emu::as_f((unsigned)u); }
inline int __float_as_int(float f) { return (int)emu::as_u(f); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.f / x; }
inline float __saturatef(float x) { return x < 0.f ? 0.f : x > 1.f ? 1.f : x; }
inline float rsqrtf(float x) { return 1.f / sqrtf(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }

template <typename A, typename B> inline typename std::common_type<A, B>::type min(A a, B b) {
    return b < a ? b : a;
}
template <typename A, typename B> inline typename std::common_type<A, B>::type max(A a, B b) {
    return a < b ? b : a;
}

template <typename T> inline T __ldg(const T *p) { return *p; }
template <typename T> inline T __ldcg(const T *p) { return *p; }
template <typename T> inline T __ldcs(const T *p) { return *p; }
template <typename T> inline T __ldlu(const T *p) { return *p; }
template <typename T> inline void __stcs(T *p, T v) { *p = v; }
template <typename T> inline void __stcg(T *p, T v) { *p = v; }

template <typename T> inline T atomicAdd(T *p, T v) { T o = *p; *p = o + v; return o; }
template <typename T> inline T atomicOr(T *p, T v) { T o = *p; *p = o | v; return o; }
template <typename T> inline T atomicMax(T *p, T v) { T o = *p; *p = o < v ? v : o; return o; }
template <typename T> inline T atomicExch(T *p, T v) { T o = *p; *p = v; return o; }

template <typename T> inline T __shfl_sync(unsigned, T v, int src, int width = 32) {
    return emu::collective(v, [&](const T *, const emu::Warp &w) {
        const int l = emu::lane(), base = l & ~(width - 1);
        return emu::slot<T>(w, base + (src & (width - 1)));
    });
}
template <typename T> inline T __shfl_xor_sync(unsigned, T v, int m, int width = 32) {
    return emu::collective(v, [&](const T *, const emu::Warp &w) {
        const int l = emu::lane(), s = l ^ m;
        return emu::slot<T>(w, (s & ~(width - 1)) == (l & ~(width - 1)) ? s : l);
    });
}
template <typename T> inline T __shfl_up_sync(unsigned, T v, unsigned d, int width = 32) {
    return emu::collective(v, [&](const T *, const emu::Warp &w) {
        const int l = emu::lane(), s = l - (int)d;
        return emu::slot<T>(w, s >= (l & ~(width - 1)) ? s : l);
    });
}
template <typename T> inline T __shfl_down_sync(unsigned, T v, unsigned d, int width = 32) {
    return emu::collective(v, [&](const T *, const emu::Warp &w) {
        const int l = emu::lane(), s = l + (int)d;
        return emu::slot<T>(w, s < (l & ~(width - 1)) + width ? s : l);
    });
}
inline unsigned __ballot_sync(unsigned, int p) {
    const int v = p != 0;
    return emu::collective(v, [&](const int *, const emu::Warp &w) {
        unsigned b = 0;
        for (int l = 0; l < 32; ++l) b |= (unsigned)emu::slot<int>(w, l) << l;
        return b;
    });
}
inline int __any_sync(unsigned m, int p) { return __ballot_sync(m, p) != 0; }
inline int __all_sync(unsigned m, int p) { return __ballot_sync(m, p) == 0xffffffffu; }
inline unsigned __reduce_or_sync(unsigned, unsigned v) {
    return emu::collective(v, [&](const unsigned *, const emu::Warp &w) {
        unsigned b = 0;
        for (int l = 0; l < 32; ++l) b |= emu::slot<unsigned>(w, l);
        return b;
    });
}

/* ------------------------------------------------------------ inline PTX (emu_rewrite.py's targets) */
namespace emu {

template <typename P> inline uintptr_t addr(P p) {
    if constexpr (std::is_pointer<P>::value) return (uintptr_t)(const void *)p;
    else return (uintptr_t)p;
}
inline unsigned char *sh(unsigned a) {
    if (a >= kSmemBytes) fail("shared address out of the arena");
    return g_smem + a;
}
template <typename P> inline void cvta_shared(unsigned *r, P p) {
    const uintptr_t a = addr(p), b = (uintptr_t)g_smem;
    if (a < b || a >= b + kSmemBytes) fail("cvta.to.shared of a pointer outside the shared arena");
    *r = (unsigned)(a - b);
}
/* cp.async: the destination reads as NaN (0xff bytes) from the issue until the copy lands, at the thread's
 * cp.async.wait_group that covers its group, its wait_all, or its exit; so a read of the tile before the
 * wait, or a copy issued into a tile other threads still read, shows */
inline void land(const Copy &k) {
    unsigned char *d = sh(k.dst);
    if (k.n) memcpy(d, (const void *)k.src, (size_t)k.n);
    if (k.n < k.cp) memset(d + k.n, 0, (size_t)(k.cp - k.n));
}
inline void land_copies(Fiber &f, unsigned upto) { /* the copies of groups < upto */
    int keep = 0;
    for (int i = 0; i < f.ncopies; ++i) {
        if (f.copies[i].group < upto) land(f.copies[i]);
        else f.copies[keep++] = f.copies[i];
    }
    f.ncopies = keep;
}
template <typename D, typename S> inline void cp_async(D dst, S src, int cp, int n) {
    Fiber &f = *g_cta.cur;
    if (f.ncopies == kMaxCopies) fail("more than 256 cp.async in flight in one thread");
    const Copy k = {(unsigned)dst, addr(src), cp, n, f.commits};
    memset(sh(k.dst), 0xff, (size_t)cp);
    f.copies[f.ncopies++] = k;
}
inline void cp_commit() { g_cta.cur->commits++; }
template <typename N> inline void cp_wait_group(N n) {
    Fiber &f = *g_cta.cur;
    land_copies(f, f.commits >= (unsigned)n ? f.commits - (unsigned)n : 0u);
}
inline void cp_wait_all() {
    Fiber &f = *g_cta.cur;
    f.commits++;
    land_copies(f, ~0u);
}
template <typename D, typename S> inline void cp_async16(D d, S s) { cp_async(d, s, 16, 16); }
template <typename D, typename S, typename N> inline void cp_async16z(D d, S s, N n) { cp_async(d, s, 16, (int)n); }
template <typename D, typename S, typename N> inline void cp_async16zh(D d, S s, N n, unsigned long long) {
    cp_async(d, s, 16, (int)n);
}
template <typename D, typename S, typename N> inline void cp_async8z(D d, S s, N n) { cp_async(d, s, 8, (int)n); }
template <typename D, typename S, typename N> inline void cp_async4z(D d, S s, N n) { cp_async(d, s, 4, (int)n); }
template <typename D, typename S, typename G, typename N> inline void cp_asyncgz(D d, S s, G g, N n) {
    cp_async(d, s, (int)g, (int)n);
}
template <typename... A> inline void nop(A...) {}

/* ldmatrix x4: lane l gives the address of row l % 8 of matrix l / 8; lane l gets, from matrix m, the pair
 * (row l / 4, columns 2 (l % 4) and +1), or with .trans the pair (rows 2 (l % 4) and +1, column l / 4) */
template <typename A> inline void ldmatrix_x4(unsigned *r0, unsigned *r1, unsigned *r2, unsigned *r3, A a, bool trans) {
    const unsigned my = (unsigned)a;
    unsigned out[4];
    collective(my, [&](const unsigned *, const Warp &w) {
        const int l = lane();
        for (int m = 0; m < 4; ++m) {
            unsigned short e[2];
            for (int j = 0; j < 2; ++j) {
                const int row = trans ? 2 * (l % 4) + j : l / 4, col = trans ? l / 4 : 2 * (l % 4) + j;
                const unsigned rowaddr = slot<unsigned>(w, 8 * m + row);
                memcpy(&e[j], sh(rowaddr + 2u * (unsigned)col), 2);
            }
            out[m] = (unsigned)e[0] | ((unsigned)e[1] << 16);
        }
        return 0;
    });
    *r0 = out[0], *r1 = out[1], *r2 = out[2], *r3 = out[3];
}
template <typename A> inline void ldsm4(unsigned *a, unsigned *b, unsigned *c, unsigned *d, A x) { ldmatrix_x4(a, b, c, d, x, false); }
template <typename A> inline void ldsm4t(unsigned *a, unsigned *b, unsigned *c, unsigned *d, A x) { ldmatrix_x4(a, b, c, d, x, true); }
template <typename A> inline void stsm4(A a, unsigned r0, unsigned r1, unsigned r2, unsigned r3) {
    struct In { unsigned a, r[4]; } in = {(unsigned)a, {r0, r1, r2, r3}};
    collective(in, [&](const In *, const Warp &w) {
        const int l = lane();
        if (l == 0) /* lane 0 writes all: each 8x8 matrix m, row i at the address lane 8 m + i gave */
            for (int m = 0; m < 4; ++m)
                for (int src = 0; src < 32; ++src) {
                    const unsigned v = slot<In>(w, src).r[m];
                    const int row = src / 4, col = 2 * (src % 4);
                    memcpy(sh(slot<In>(w, 8 * m + row).a + 2u * (unsigned)col), &v, 4);
                }
        return 0;
    });
}

inline float lo_bf(unsigned u) { return bf2f((unsigned short)(u & 0xffff)); }
inline float hi_bf(unsigned u) { return bf2f((unsigned short)(u >> 16)); }
inline float lo_h(unsigned u) { return half_to_float((unsigned short)(u & 0xffff)); }
inline float hi_h(unsigned u) { return half_to_float((unsigned short)(u >> 16)); }

/* mma.sync m16n8k16, 16-bit inputs (BF: bf16, else f16), f32 accumulate: g = lane / 4, t = lane % 4;
 * A a0 (g, 2t..), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..); B b0 (k 2t.., n g), b1 (k 2t+8.., n g);
 * C c0 c1 (g, 2t, 2t+1), c2 c3 (g+8, 2t, 2t+1).  Products exact, summed in double, rounded once. */
template <bool BF> inline void mma16816(float *d0, float *d1, float *d2, float *d3, unsigned a0, unsigned a1,
                                         unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
    struct In { unsigned a[4], b[2]; } in = {{a0, a1, a2, a3}, {b0, b1}};
    float out[4];
    collective(in, [&](const In *, const Warp &w) {
        const int l = lane(), g = l / 4, t = l % 4;
        auto A = [&](int r, int k) { /* element (r, k) of the 16 x 16 A */
            const int gl = r % 8, hr = r / 8, hk = k / 8, kk = k % 8;
            const unsigned u = slot<In>(w, 4 * gl + kk / 2).a[hr + 2 * hk];
            return BF ? ((kk & 1) ? hi_bf(u) : lo_bf(u)) : ((kk & 1) ? hi_h(u) : lo_h(u));
        };
        auto B = [&](int k, int n) {
            const int hk = k / 8, kk = k % 8;
            const unsigned u = slot<In>(w, 4 * n + kk / 2).b[hk];
            return BF ? ((kk & 1) ? hi_bf(u) : lo_bf(u)) : ((kk & 1) ? hi_h(u) : lo_h(u));
        };
        for (int e = 0; e < 4; ++e) {
            const int r = g + 8 * (e / 2), n = 2 * t + (e & 1);
            double s = 0;
            for (int k = 0; k < 16; ++k) s += (double)A(r, k) * (double)B(k, n);
            out[e] = (float)s;
        }
        return 0;
    });
    *d0 += out[0], *d1 += out[1], *d2 += out[2], *d3 += out[3];
}
template <typename... X> inline void mma_bf16(X... x) { mma16816<true>(x...); }
template <typename... X> inline void mma_f16(X... x) { mma16816<false>(x...); }
/* mma.sync m16n8k8 tf32: A a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4); B b0 (k t, n g), b1 (k t+4,
 * n g); the operands' low 13 bits ignored, as the hardware does. */
inline void mma_tf32(float *d0, float *d1, float *d2, float *d3, unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                     unsigned b0, unsigned b1) {
    struct In { unsigned a[4], b[2]; } in = {{a0, a1, a2, a3}, {b0, b1}};
    float out[4];
    collective(in, [&](const In *, const Warp &w) {
        const int l = lane(), g = l / 4, t = l % 4;
        auto tf = [](unsigned u) { return (double)as_f(u & 0xffffe000u); };
        for (int e = 0; e < 4; ++e) {
            const int r = g + 8 * (e / 2), n = 2 * t + (e & 1);
            double s = 0;
            for (int k = 0; k < 8; ++k) {
                const unsigned a = slot<In>(w, 4 * (r % 8) + k % 4).a[(r / 8) + 2 * (k / 4)];
                const unsigned b = slot<In>(w, 4 * n + k % 4).b[k / 4];
                s += tf(a) * tf(b);
            }
            out[e] = (float)s;
        }
        return 0;
    });
    *d0 += out[0], *d1 += out[1], *d2 += out[2], *d3 += out[3];
}

inline void cvt_rn_bf16x2(unsigned *r, float hi, float lo) { *r = (unsigned)f2bf(lo) | ((unsigned)f2bf(hi) << 16); }
inline void cvt_rn_f16x2(unsigned *r, float hi, float lo) {
    *r = (unsigned)float_to_half(lo) | ((unsigned)float_to_half(hi) << 16);
}
inline void cvt_bf16(unsigned short *h, float f) { *h = f2bf(f); }
inline void cvt_f16(unsigned short *h, float f) { *h = float_to_half(f); }
inline void cvt_f32_f16(float *f, unsigned short h) { *f = half_to_float(h); }
inline void cvt_tf32_rn(unsigned *r, float x) { *r = tf32_rn(x); }
inline void cvt_tf32_rna(unsigned *r, float x) { *r = tf32_rna(x); }
inline void ex2(float *y, float x) { *y = exp2f(x); }
inline void lg2(float *y, float x) { *y = log2f(x); }
inline void rcp(float *y, float x) { *y = 1.f / x; }
inline void tid_x(unsigned *r) { *r = g_cta.cur->tid.x; }
inline void ctaid_x(unsigned *r) { *r = g_cta.bid.x; }
inline void ctaid_y(unsigned *r) { *r = g_cta.bid.y; }
inline void nctaid_x(unsigned *r) { *r = g_cta.gdim.x; }
inline void policy(unsigned long long *p) { *p = 0; }

template <typename A> inline void ld_sh_v4(unsigned *a, unsigned *b, unsigned *c, unsigned *d, A x) {
    unsigned v[4];
    memcpy(v, sh((unsigned)x), 16);
    *a = v[0], *b = v[1], *c = v[2], *d = v[3];
}
template <typename A> inline void ld_sh_v2(unsigned *a, unsigned *b, A x) {
    unsigned v[2];
    memcpy(v, sh((unsigned)x), 8);
    *a = v[0], *b = v[1];
}
template <typename A> inline void ld_sh_b32(unsigned *a, A x) { memcpy(a, sh((unsigned)x), 4); }
template <typename A> inline void ld_sh_u16(unsigned short *a, A x) { memcpy(a, sh((unsigned)x), 2); }
template <typename A, typename V> inline void st_sh_u16(A x, V v) {
    const unsigned short h = (unsigned short)v;
    memcpy(sh((unsigned)x), &h, 2);
}
template <typename P, typename... V> inline void st_global(P p, V... v) {
    unsigned char *d = (unsigned char *)addr(p);
    auto put = [&](auto x) { memcpy(d, &x, sizeof x); d += sizeof x; };
    (put(v), ...);
}
/* discard.global.L2: the line's contents become undefined; here 0xff bytes (NaN), so a read after the
 * discard shows */
template <typename P> inline void discard_l2(P p) { memset((void *)(addr(p) & ~(uintptr_t)127), 0xff, 128); }
/* the same with a cache policy last (not stored) */
template <typename P, typename... V> inline void st_global_hint(P p, V... v) {
    unsigned char *d = (unsigned char *)addr(p);
    size_t i = 0;
    auto put = [&](auto x) {
        if (++i < sizeof...(V)) memcpy(d, &x, sizeof x), d += sizeof x;
    };
    (put(v), ...);
}
template <typename A> inline void named_bar(A id, int n) { bar_wait(1 + ((int)id & 7), n, 0); }

/* ---- sm_90a: wgmma, mbarriers, TMA (KDART_EMU_CC 90) ---- */

/* The 128-, 64- or 32-byte swizzle of shared address a (mask 7, 3, 1): its 16-byte chunk index XOR-ed with
 * address bits 7.. (the hardware's, on the absolute address) */
inline unsigned swizzled(unsigned a, unsigned mask) { return a ^ (((a >> 7) & mask) << 4); }
/* Element (mn, k) of a wgmma operand in shared memory, by its matrix descriptor d (start address, leading
 * and stride byte offsets, swizzle mode: 1 128-byte, 2 64-byte, 3 32-byte) and its major-ness: the
 * canonical layouts of 16-bit elements, rows of W bytes (the swizzle's width), 8-row atoms; K-major: row
 * mn, k along the row, atoms SBO apart along mn; MN-major: row k, mn along the row, atoms SBO apart along
 * k and LBO apart along mn.  The swizzle XORs address bits 4.. with bits 7.. of the absolute address. */
inline unsigned short wg_elem(unsigned long long d, bool mn_major, int mn, int k) {
    const unsigned start = (unsigned)(d & 0x3FFFu) << 4, lbo = (unsigned)((d >> 16) & 0x3FFFu) << 4,
                   sbo = (unsigned)((d >> 32) & 0x3FFFu) << 4, mode = (unsigned)(d >> 62);
    if (mode == 0) fail("wgmma descriptor without a swizzle: not emulated");
    const unsigned W = mode == 1 ? 128u : mode == 2 ? 64u : 32u, per = W / 2, mask = W / 16 - 1;
    unsigned a;
    if (!mn_major) {
        if (2u * (unsigned)k >= W) fail("wgmma K-major operand wider than its swizzle row");
        a = start + (unsigned)(mn / 8) * sbo + (unsigned)(mn % 8) * W + 2u * (unsigned)k;
    } else {
        a = start + (unsigned)(k / 8) * sbo + (unsigned)(k % 8) * W + (unsigned)(mn / (int)per) * lbo +
            2u * (unsigned)(mn % (int)per);
    }
    unsigned short e;
    memcpy(&e, sh(swizzled(a, mask)), 2);
    return e;
}
struct WgSlot {
    float *acc;
    int n;
    unsigned long long da, db;
    int scale_d, scale_a, ta, tb;
};
inline WgSlot g_wgslot[kMaxThreads];
/* wgmma.mma_async m64nNk16, f32 accumulators, 16-bit operands both from shared memory: D = (scale_d ? D : 0)
 * + (scale_a A) B over the warpgroup's 64 rows; thread t's registers are the mma.sync C fragments of rows
 * 16 (t / 32 % 4).., as the hardware lays them out (register 4 i + e: row g + 8 (e / 2), column 8 i + 2 t4 +
 * (e & 1)).  The product is done when the last thread of the warpgroup issues it (wgmma.wait_group then
 * has nothing to wait for); operands and flags must agree across the warpgroup. */
inline void wgmma_op(int N, const char *ty, float *acc, unsigned long long da, unsigned long long db, int scale_d,
                     int scale_a, int ta, int tb) {
    g_wgslot[cur()->linear] = WgSlot{acc, N / 2, da, db, scale_d != 0, scale_a, ta, tb};
    const bool bf = ty[0] == 'b';
    const int wg = cur()->linear >> 7; /* (its own barrier, 16 + wg: at most 8 warpgroups, kMaxThreads) */
    bar_wait(16 + wg, 128, 0, [&] {
        const WgSlot &s0 = g_wgslot[128 * wg];
        for (int t = 1; t < 128; ++t) {
            const WgSlot &s = g_wgslot[128 * wg + t];
            if (s.da != s0.da || s.db != s0.db || s.scale_d != s0.scale_d || s.scale_a != s0.scale_a ||
                s.ta != s0.ta || s.tb != s0.tb || s.n != s0.n)
                fail("wgmma operands differ across the warpgroup");
        }
        static double A[64][16], B[16][256];
        auto val = [&](unsigned short e) { return (double)(bf ? bf2f(e) : half_to_float(e)); };
        for (int m = 0; m < 64; ++m)
            for (int k = 0; k < 16; ++k) A[m][k] = s0.scale_a * val(wg_elem(s0.da, s0.ta != 0, m, k));
        for (int k = 0; k < 16; ++k)
            for (int n = 0; n < N; ++n) B[k][n] = val(wg_elem(s0.db, s0.tb != 0, n, k));
        for (int t = 0; t < 128; ++t) {
            const WgSlot &s = g_wgslot[128 * wg + t];
            const int w = t / 32, l = t % 32;
            for (int r = 0; r < s.n; ++r) {
                const int i = r / 4, e = r % 4, row = 16 * w + l / 4 + 8 * (e / 2), col = 8 * i + 2 * (l % 4) + (e & 1);
                double d = 0;
                for (int k = 0; k < 16; ++k) d += A[row][k] * B[k][col];
                s.acc[r] = (s.scale_d ? s.acc[r] : 0.f) + (float)d;
            }
        }
    });
}

/* mbarriers: the state lives beside shared memory, keyed by the barrier's address (reset with every CTA);
 * a TMA copy's bytes land when a thread first sees the phase they complete: until then the destination
 * holds 0xff bytes (NaN), so a read of a TMA tile before its barrier's wait shows. */
struct Mbar {
    int count = 0, pending = 0;
    long long tx = 0;
    unsigned phase = 0; /* completed phases */
    struct Pend { unsigned dst; std::vector<unsigned char> bytes; unsigned phase; };
    std::vector<Pend> copies;
};
inline std::map<unsigned, Mbar> g_mbar;
inline void mbar_reset() { g_mbar.clear(); }
inline Mbar &mbar_at(unsigned a) {
    auto it = g_mbar.find(a);
    if (it == g_mbar.end()) fail("mbarrier used before mbarrier.init");
    return it->second;
}
inline void mbar_check(Mbar &b) {
    if (b.pending == 0 && b.tx == 0) b.phase++, b.pending = b.count;
}
template <typename A> inline void mbar_init(A a) {
    Mbar b;
    b.count = b.pending = 1;
    g_mbar[(unsigned)a] = b;
}
template <typename A, typename N> inline void mbar_expect(A a, N bytes) {
    Mbar &b = mbar_at((unsigned)a);
    b.tx += (long long)bytes;
    b.pending--;
    g_progress++;
    mbar_check(b);
}
template <typename A> inline void mbar_inval(A a) { g_mbar.erase((unsigned)a); }
inline void mbar_land(Mbar &b) { /* the copies of completed phases */
    size_t keep = 0;
    for (size_t i = 0; i < b.copies.size(); ++i) {
        if (b.copies[i].phase < b.phase) memcpy(sh(b.copies[i].dst), b.copies[i].bytes.data(), b.copies[i].bytes.size());
        else b.copies[keep++] = std::move(b.copies[i]);
    }
    b.copies.resize(keep);
}
/* mbarrier.try_wait.parity in a loop: until the phase of parity p has completed (the barrier's current phase
 * has the other parity) */
template <typename A, typename P> inline void mbar_wait(A a, P p) {
    for (;;) {
        Mbar &b = mbar_at((unsigned)a);
        if ((b.phase & 1u) != ((unsigned)p & 1u)) {
            mbar_land(b);
            return;
        }
        yield();
    }
}
/* cp.async.bulk.tensor.{2,3}d with the 128-byte swizzle: the box at coordinates c of map m (zeros outside
 * the tensor) into shared memory at dst, rows of 128 bytes, 16-byte chunks XOR-ed with address bits 7..9;
 * its bytes count against barrier bar's transaction */
inline void tma_box(unsigned dst, const TmaMap *m, const long long *c, unsigned bar) {
    Mbar &b = mbar_at(bar);
    const uint32_t bx = m->box[0], by = m->box[1], bz = m->rank == 3 ? m->box[2] : 1;
    const size_t bytes = (size_t)bx * by * bz * 2;
    Mbar::Pend pd;
    pd.dst = dst;
    pd.bytes.assign(bytes, 0);
    pd.phase = b.phase;
    if (dst % 1024) fail("TMA destination not 1024-byte aligned (the 128-byte swizzle)");
    for (uint32_t z = 0; z < bz; ++z)
        for (uint32_t y = 0; y < by; ++y)
            for (uint32_t x = 0; x < bx; ++x) {
                const long long cx = c[0] + x, cy = c[1] + y, cz = m->rank == 3 ? c[2] + z : 0;
                unsigned short e = 0;
                if (cx >= 0 && cy >= 0 && cz >= 0 && (uint64_t)cx < m->dim[0] && (uint64_t)cy < m->dim[1] &&
                    (m->rank < 3 || (uint64_t)cz < m->dim[2]))
                    memcpy(&e, (const void *)(m->base + cx * m->stride[0] + cy * m->stride[1] + cz * m->stride[2]), 2);
                const unsigned o = (unsigned)(((size_t)z * by + y) * bx + x) * 2u; /* (dst: 1024-byte aligned) */
                memcpy(&pd.bytes[swizzled(o, 7)], &e, 2);
            }
    memset(sh(dst), 0xff, bytes);
    b.copies.push_back(std::move(pd));
    b.tx -= (long long)bytes;
    g_progress++;
    mbar_check(b);
}
template <typename D, typename M, typename X, typename Y, typename Z, typename B, typename H>
inline void tma3(D dst, M m, X x, Y y, Z z, B bar, H) {
    const long long c[3] = {(long long)(int)x, (long long)(int)y, (long long)(int)z};
    tma_box((unsigned)dst, (const TmaMap *)addr(m), c, (unsigned)bar);
}
template <typename D, typename M, typename X, typename Y, typename B, typename H>
inline void tma2(D dst, M m, X x, Y y, B bar, H) {
    const long long c[3] = {(long long)(int)x, (long long)(int)y, 0};
    tma_box((unsigned)dst, (const TmaMap *)addr(m), c, (unsigned)bar);
}
[[noreturn]] inline void unsupported(const char *what) {
    fprintf(stderr, "emu: inline PTX not emulated: %s\n", what);
    abort();
}

} /* namespace emu */

#endif /* KDART_EMU_PRELUDE_H */
