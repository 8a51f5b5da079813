/*
 * kdart_tile.cuh: 64 x 64 tiles of 16-bit values in shared memory, and the
 * mma.sync products over them, for the chunk kernels (wy_dqkg, recompute_wu,
 * bwd_dav).
 *
 * A tile is 64 rows of 64 io values, 128 bytes a row, whose 16-byte chunks
 * are XOR-swizzled by the row (swz): ldmatrix reads it without bank
 * conflicts, and it is the 128-byte swizzle that wgmma's descriptors name
 * (with the tile 1024-byte aligned).  Tiles are filled by cp.async
 * (load_tile: zeros past the valid rows and columns, optional L2 eviction
 * priorities); gemm multiplies two of them into mma.sync fragments.
 */
#ifndef KDART_TILE_CUH
#define KDART_TILE_CUH

#include "kdart_common.cuh"

namespace kdart {
namespace tile {

__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
/* element offset of (row, col) in a swizzled 64 x 64 tile */
__device__ __forceinline__ int swz(int row, int col) {
    return row * 64 + ((((col >> 3) ^ row) & 7) << 3) + (col & 7);
}
/* L2 eviction priorities: tiles the CTA reads again stay, tiles read for the last time go first */
__device__ __forceinline__ unsigned long long pol_last() {
    unsigned long long p;
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    return p;
}
__device__ __forceinline__ unsigned long long pol_first() {
    unsigned long long p;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}
/* hint: 0 none, 1 evict first (read for the last time), 2 evict last (this CTA reads it again) */
__device__ __forceinline__ void cp16z(unsigned s, const void *gsrc, bool ok, int hint = 0) {
    if (hint) {
        const unsigned long long pol = hint == 2 ? pol_last() : pol_first();
        asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;" ::"r"(s), "l"(gsrc),
                     "r"(ok ? 16 : 0), "l"(pol) : "memory");
    } else
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gsrc), "r"(ok ? 16 : 0)
                     : "memory");
}
__device__ __forceinline__ void cp8z(unsigned s, const void *gsrc, bool ok) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(s), "l"(gsrc), "r"(ok ? 8 : 0) : "memory");
}
/* The widest copy granule (elements) that the TAIL specializations may use:
 * every row stride and column bound of the io tensors is a multiple of Kr or
 * V, every tile starts at a multiple of 64 columns and every tensor is 16-byte
 * aligned, so with Kr and V multiples of 8 (4) each 16-byte (8-byte) granule
 * of a row lies wholly inside or wholly outside the valid columns. */
__device__ __forceinline__ int granule(int Kr, int V) {
    return ((Kr | V) & 7) == 0 ? 8 : ((Kr | V) & 3) == 0 ? 4 : 1;
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
/* every copy group but the N most recent ones complete */
template <int N>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
__device__ __forceinline__ void ldsm4(unsigned a, unsigned (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
}
__device__ __forceinline__ void ldsm4t(unsigned a, unsigned (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
}
template <typename IO>
__device__ __forceinline__ void mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    if constexpr (io_traits<IO>::is_bf16)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Fragment addresses (bytes, in a swizzled tile at s) for this lane.
 * A operand rows m0.., k columns k0..: stored [m][k] (a_n) or [k][m] (a_t).
 * B operand, two n8 tiles n0..n0+15, k rows k0..: stored [n][k] (b_n) or [k][n] (b_t);
 * registers 0, 1: the first n tile's b0, b1; 2, 3: the second's. */
__device__ __forceinline__ unsigned a_n(unsigned s, int m0, int k0, int l) {
    return s + 2 * swz(m0 + (l & 15), k0 + ((l >> 4) << 3));
}
__device__ __forceinline__ unsigned a_t(unsigned s, int m0, int k0, int l) {
    return s + 2 * swz(k0 + (l & 7) + (((l >> 4) & 1) << 3), m0 + (((l >> 3) & 1) << 3));
}
__device__ __forceinline__ unsigned b_n(unsigned s, int n0, int k0, int l) {
    return s + 2 * swz(n0 + (l & 7) + (((l >> 4) & 1) << 3), k0 + (((l >> 3) & 1) << 3));
}
__device__ __forceinline__ unsigned b_t(unsigned s, int n0, int k0, int l) {
    return s + 2 * swz(k0 + (l & 7) + (((l >> 3) & 1) << 3), n0 + (((l >> 4) & 1) << 3));
}

/* c (16 x 16 NP, this warp's rows m0.., columns n0..) += A (64-deep) B */
template <typename IO, bool AT, bool BT, int NP = 2>
__device__ __forceinline__ void gemm(float (&c)[2 * NP][4], unsigned sa, unsigned sb, int m0, int n0, int l) {
#pragma unroll 1
    for (int k0 = 0; k0 < 64; k0 += 16) {
        unsigned a[4], b[4];
        if (AT) ldsm4t(a_t(sa, m0, k0, l), a);
        else ldsm4(a_n(sa, m0, k0, l), a);
#pragma unroll
        for (int np = 0; np < NP; ++np) {
            if (BT) ldsm4t(b_t(sb, n0 + 16 * np, k0, l), b);
            else ldsm4(b_n(sb, n0 + 16 * np, k0, l), b);
            mma<IO>(c[2 * np], a, b[0], b[1]);
            mma<IO>(c[2 * np + 1], a, b[2], b[3]);
        }
    }
}

/* a packed io pair (low half first, as a 32-bit word of a tile holds two columns) as floats */
template <typename IO>
__device__ __forceinline__ float2 unpack2(unsigned u) {
    IO a, b;
    a.bits = (unsigned short)(u & 0xffffu), b.bits = (unsigned short)(u >> 16);
    return make_float2(to_float(a), to_float(b));
}
template <typename IO>
__device__ __forceinline__ float ldf(const unsigned short *g) {
    IO x;
    x.bits = *g;
    return to_float(x);
}

/* One row chunk of 8 io values (16 bytes at g, columns c..c+7 of n valid)
 * stored: whole where the granule allows (load_tile's granules), else in parts. */
template <bool TAIL>
__device__ __forceinline__ void st8(unsigned short *g, uint4 x, int c, int n, int gran) {
    if (!TAIL || (gran == 8 && c < n)) {
        *reinterpret_cast<uint4 *>(g) = x;
    } else if (TAIL && gran == 4) {
        if (c < n) *reinterpret_cast<uint2 *>(g) = make_uint2(x.x, x.y);
        if (c + 4 < n) *reinterpret_cast<uint2 *>(g + 4) = make_uint2(x.z, x.w);
    } else if (TAIL) {
        const unsigned u[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int e = 0; e < 8; ++e)
            if (c + e < n) g[e] = (unsigned short)(u[e >> 1] >> (16 * (e & 1)));
    }
}

/* One 64 x 64 io tile into a swizzled shared tile by NTH threads: rows < nr and columns < nc
 * from g (row r at g + r * stride), zeros elsewhere.  Native: 16-byte cp.async
 * (nc == 64, g and stride 8-element aligned).  TAIL: cp.async of the granule
 * gran (granule() above: 8 or 4 elements, the granules past nc zero-filled),
 * or element loads where Kr or V is not a multiple of 4. */
template <bool TAIL, int NTH = 256>
__device__ __forceinline__ void load_tile(unsigned short *s, const unsigned short *g, long long stride, int nr,
                                          int nc, int tid, int gran = 8, int hint = 0) {
    static_assert(NTH == 128 || NTH == 256, "load_tile: 8 threads a row, 128 or 256 threads");
    const int ch = tid & 7;
#pragma unroll TAIL ? 1 : 2 /* (TAIL: its three paths unrolled held the addresses of both rows and spilled) */
    for (int j = 0; j < 512 / NTH; ++j) {
        const int row = (tid >> 3) + (NTH / 8) * j;
        unsigned short *d = s + row * 64 + (((ch ^ row) & 7) << 3);
        if constexpr (!TAIL) {
            const bool ok = row < nr;
            cp16z(smem_u32(d), ok ? g + row * stride + ch * 8 : g, ok, hint);
        } else if (gran == 8) {
            const bool ok = row < nr && ch * 8 < nc;
            cp16z(smem_u32(d), ok ? g + row * stride + ch * 8 : g, ok, hint);
        } else if (gran == 4) {
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                const bool ok = row < nr && ch * 8 + 4 * q < nc;
                cp8z(smem_u32(d + 4 * q), ok ? g + row * stride + ch * 8 + 4 * q : g, ok);
            }
        } else {
            unsigned short e[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) e[i] = row < nr && ch * 8 + i < nc ? g[row * stride + ch * 8 + i] : 0;
            uint4 u;
            u.x = e[0] | ((unsigned)e[1] << 16);
            u.y = e[2] | ((unsigned)e[3] << 16);
            u.z = e[4] | ((unsigned)e[5] << 16);
            u.w = e[6] | ((unsigned)e[7] << 16);
            *reinterpret_cast<uint4 *>(d) = u;
        }
    }
}

} /* namespace tile */
} /* namespace kdart */

#endif /* KDART_TILE_CUH */
