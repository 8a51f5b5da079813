/*
 * kdart_varlen.cuh: where a CTA's chunk lies in a packed batch (fla's cu_seqlens
 * contract), for the kernels of one CTA per chunk.
 *
 * Chunk i (0-based, over all sequences in order) is sequence n's chunk c, where
 * chunk_offsets[n] <= i < chunk_offsets[n+1] and chunk_offsets is the exclusive
 * prefix sum of ceil(T_n / 64).  Every CTA scans ALL of cu_seqlens, NTH sequences
 * per step (one barrier per step, the warp totals double-buffered by parity); the
 * scan is also the validation: lengths enter the sum only where they are in range,
 * so no unvalidated value ever becomes an index.  Nothing here reads fla's
 * chunk_indices or chunk_offsets: the answer is derived on the device, so a
 * captured launch replays for any cu_seqlens contents.
 */
#ifndef KDART_VARLEN_CUH
#define KDART_VARLEN_CUH

#include "kdart_common.cuh"

namespace kdart {

__device__ __forceinline__ long long ld_cu(const void *cu, int is64, int j) {
    return is64 ? static_cast<const long long *>(cu)[j] : (long long)static_cast<const int *>(cu)[j];
}

/* Finds chunk ci of the N sequences of cu_seqlens over T storage tokens: returns its
 * valid rows (1..64) and first token *t0, or 0 when ci is past the last chunk, or -1
 * when cu_seqlens is bad (cu[0] != 0, decreasing, cu[N] > T, or more than NT chunks),
 * which thread 0 of the reporting CTA atomicOr's into *status as KDART_DEVERR_* bits.
 * Every thread of the CTA (NTH of them) must call it, and gets the same answer; len, when
 * given, gets the chunk's sequence's length.
 * scratch: 2 * NTH / 32 + 4 ints of shared memory (2 more with len), and 8-byte aligned. */
template <int NTH>
__device__ __forceinline__ int locate_chunk(const void *cu, int is64, int N, int T, int NT, int ci, bool report,
                                            int *status, int *scratch, long long *t0, long long *len = nullptr) {
    constexpr int NW = NTH / 32;
    long long *sT0 = reinterpret_cast<long long *>(scratch);  /* [0..1] */
    int *sInt = scratch + 2;                                   /* [0]: valid rows, [1]: findings */
    int *sScan = scratch + 4;                                  /* [2][NW] warp totals */
    long long *sLen = reinterpret_cast<long long *>(scratch + 4 + 2 * NW); /* (len given) */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    N = max(N, 0);
    if (tid == 0) {
        int f = 0;
        if (ld_cu(cu, is64, 0) != 0) f |= KDART_DEVERR_CU_ORDER;
        if (ld_cu(cu, is64, N) > T) f |= KDART_DEVERR_CU_RANGE;
        sInt[1] = f;
        sInt[0] = 0;
    }
    int bad = 0;
    unsigned carry = 0; /* chunks of the sequences before this step's */
#pragma unroll 1
    for (int base = 0, par = 0; base < N; base += NTH, par ^= NW) {
        const int j = base + tid;
        long long lo = 0, hi = 0;
        unsigned cnt = 0;
        if (j < N) {
            lo = ld_cu(cu, is64, j);
            hi = ld_cu(cu, is64, j + 1);
            if (hi < lo) bad = 1;
            if (lo >= 0 && lo <= hi && hi <= T) cnt = (unsigned)((hi - lo + 63) >> 6);
        }
        unsigned inc = cnt; /* warp-inclusive scan */
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const unsigned x = __shfl_up_sync(0xffffffffu, inc, o);
            if (lane >= o) inc += x;
        }
        if (lane == 31) sScan[par + warp] = (int)inc;
        __syncthreads();
        unsigned pre = 0, tot = 0;
#pragma unroll
        for (int w = 0; w < NW; ++w) {
            const unsigned x = (unsigned)sScan[par + w];
            pre += w < warp ? x : 0u;
            tot += x;
        }
        const unsigned ex = carry + pre + inc - cnt; /* chunk_offsets[j] */
        if ((unsigned)ci - ex < cnt) {               /* ex <= ci < ex + cnt: one thread */
            const long long s = lo + 64 * (long long)((unsigned)ci - ex);
            sT0[0] = s;
            if (len != nullptr) *sLen = hi - lo;
            sInt[0] = (int)min(64ll, hi - s);
        }
        carry += tot;
    }
    /* (the barrier also publishes sT0 and sInt) */
    const int f = (__syncthreads_or(bad) ? KDART_DEVERR_CU_ORDER : 0) | sInt[1] |
                  (carry > (unsigned)max(NT, 0) ? KDART_DEVERR_CHUNKS : 0);
    if (f != 0) {
        if (report && tid == 0 && status != nullptr) atomicOr(status, f);
        return -1;
    }
    *t0 = sT0[0];
    if (len != nullptr) *len = *sLen;
    const int nv = sInt[0];
    __syncthreads(); /* the scratch may be written again once every thread has read it */
    return nv;
}

/* The (chunk, batch row, head) a CTA of a chunk grid (X chunks by Y rows: T/64 by
 * B*HV at fixed length, NT by HV packed) stands for.  The CTAs start in launch
 * order, x fastest, and that order is read with the value heads fastest: CTA
 * L = x + X y takes head L % HV of chunk slot L / HV.  The CTAs in flight then read
 * every head of a few consecutive chunks, one contiguous stretch of each
 * [.., T, HV, ..] tensor, where walking one head's chunks would read 64-row pieces
 * HV rows apart.  Returns *c, the chunk (of its batch row at fixed length; among all
 * chunks packed), *b, the batch row (0 packed), and *hv.  The reads are volatile,
 * so callers may recompute rather than hold them.  The host keeps X Y below 2^32
 * (kdart__chunk_grid). */
__device__ __forceinline__ void chunk_cta(int HV, int *c, int *b, int *hv) {
    unsigned bx, by, nx;
    asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(bx));
    asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(by));
    asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(nx));
    const unsigned L = bx + nx * by, r = L / (unsigned)HV, rb = r / nx;
    *c = (int)(r - rb * nx);
    *b = (int)rb;
    *hv = (int)(L - r * (unsigned)HV);
}

/* The chunk of a CTA in the kernels of one CTA per (chunk, value head): grid
 * (T/64, B*HV) at fixed length; VARLEN (NT, HV), the chunk its index among all
 * chunks (which is also its row of a per-chunk state), over cu_seqlens's
 * sequences or, cu NULL, over N rows of T tokens (chunk_cta's order either
 * way).  Returns the chunk's valid rows (1..64) with *t0 its first token, *hrow
 * its state row, *hv its value head; or <= 0 when the CTA has nothing to do
 * (past the last chunk, or bad cu_seqlens, which CTA (0, 0) reports: every
 * CTA then returns before its first store).  Every thread calls it; scratch
 * as locate_chunk's. */
template <int NTH, bool VARLEN>
__device__ __forceinline__ int chunk_of(int T, int HV, const void *cu, int is64, int N, int NT, int *status,
                                        int *scratch, long long *t0, long long *hrow, int *hv,
                                        long long *len = nullptr) {
    int ci, bb;
    chunk_cta(HV, &ci, &bb, hv);
    if constexpr (!VARLEN) {
        *t0 = (long long)bb * T + 64ll * ci;
        *hrow = (long long)bb * (T / 64) + ci;
        return 64;
    } else {
        *hrow = ci;
        if (cu == nullptr) {
            const int nct = (T + 63) >> 6;
            const int n = ci / nct, c = ci - n * nct;
            if (n >= N) return 0;
            if (len != nullptr) *len = T;
            *t0 = (long long)n * T + 64ll * c;
            return min(64, T - 64 * c);
        }
        return locate_chunk<NTH>(cu, is64, N, T, NT, ci, ci == 0 && *hv == 0, status, scratch, t0, len);
    }
}

/* bwd_dhu's V split (the host's SM count sms != 0): a sequence of len tokens is long when its 64-column
 * scan alone takes a quarter longer than the balanced per-SM share of all the grid's scans, len * sms >
 * 1.25 tokens * HV * ceil(V / 64) over all tokens of cu_seqlens; the split scans its value heads 32
 * columns a CTA (and bwd_dav computes their dv), which pays only when the sequence outlasts the others by
 * a margin: equal documents (a THD batch) stay whole.  bwd_dav's long_only mode writes dv for exactly these
 * sequences, so both kernels must ask this one function.  In double: garbage lengths must not overflow
 * (any answer is then fine: the kernels validate cu_seqlens). */
__device__ __forceinline__ bool split_long(long long len, long long tokens, int HV, int V, int sms) {
    return (double)len * sms > 1.25 * (double)tokens * HV * ((V + 63) / 64);
}

/* The sequence of a CTA in the kernels of one CTA per (sequence, value head, V tile), grid
 * (.., N * HV): sequence n's first token *bos and its first row of a per-chunk state *co
 * (chunk_offsets[n], the chunks of the sequences before it).  Fixed length: the rows of T
 * tokens (T % 64 == 0); VARLEN: cu_seqlens's sequences or, cu NULL, the N rows of T tokens.
 * Returns the sequence's length, or -1 when cu_seqlens is bad (cu[0] != 0, decreasing,
 * cu[N] > T, or more than NT chunks), which thread 0 of CTA (0, 0) atomicOr's into *status:
 * every CTA scans all of cu_seqlens, so each one finds the same answer and a bad cu_seqlens
 * writes nothing.  Every thread calls it; scratch: 4 * NTH / 32 ints of shared memory, 8-byte
 * aligned. */
template <int NTH, bool VARLEN>
__device__ __forceinline__ int seq_of(int T, const void *cu, int is64, int N, int NT, int n, int *status,
                                      int *scratch, long long *bos, long long *co) {
    constexpr int NW = NTH / 32;
    if (!VARLEN || cu == nullptr) {
        *bos = (long long)n * T;
        *co = (long long)n * ((T + 63) >> 6);
        return T;
    }
    long long *sBefore = reinterpret_cast<long long *>(scratch); /* [NW] */
    int *sTot = scratch + 2 * NW, *sBad = scratch + 3 * NW;      /* [NW] chunks (all sequences), [NW] findings */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int bad = 0;
    long long before = 0;
    unsigned tot = 0;
    for (int i = tid; i < N; i += NTH) {
        const long long lo = ld_cu(cu, is64, i), hi = ld_cu(cu, is64, i + 1);
        if (hi < lo || (i == 0 && lo != 0)) bad |= KDART_DEVERR_CU_ORDER;
        if (i == N - 1 && hi > T) bad |= KDART_DEVERR_CU_RANGE;
        /* only lengths in range enter the sums: no unvalidated value becomes an index */
        const unsigned cnt = lo >= 0 && lo <= hi && hi <= T ? (unsigned)((hi - lo + 63) >> 6) : 0u;
        tot += cnt;
        if (i < n) before += cnt;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        before += __shfl_xor_sync(0xffffffffu, before, o);
        tot += __shfl_xor_sync(0xffffffffu, tot, o);
        bad |= __shfl_xor_sync(0xffffffffu, bad, o);
    }
    if (lane == 0) sBefore[warp] = before, sTot[warp] = (int)tot, sBad[warp] = bad;
    __syncthreads();
    before = 0, tot = 0, bad = 0;
#pragma unroll
    for (int w = 0; w < NW; ++w) before += sBefore[w], tot += (unsigned)sTot[w], bad |= sBad[w];
    if (tot > (unsigned)max(NT, 0)) bad |= KDART_DEVERR_CHUNKS;
    __syncthreads(); /* the scratch may be written again once every thread has read it */
    if (bad) {
        if (status != nullptr && tid == 0 && blockIdx.x == 0 && blockIdx.y == 0) atomicOr(status, bad);
        return -1;
    }
    *bos = ld_cu(cu, is64, n);
    *co = before;
    return (int)(ld_cu(cu, is64, n + 1) - *bos);
}

/* The grid row order of a variable-length scan kernel (one CTA per (sequence, value head, V tile),
 * grid rows n * HV + hv): a scan is serial over its sequence's chunks, and the hardware starts CTAs in
 * grid order, so a long sequence whose rows come late in cu_seqlens starts when the first short ones
 * end and finishes after everything else.  Row rank r (blockIdx.y / HV) takes the sequence of rank r by
 * length, longest first, ties by index: every CTA computes the same permutation of 0 .. N - 1 from the
 * same cu_seqlens (each thread counts the sequences ahead of its own), so each row is scanned once.
 * Beyond NTH sequences the rows keep index order: every CTA would read all of cu_seqlens, and with that
 * many sequences the scans are short and their order matters little.  Garbage cu_seqlens only permute
 * the rows (seq_of validates it afterwards and the scans write nothing).  Every thread calls it; it uses
 * NTH + 1 words of shared memory at s and ends with a barrier. */
template <int NTH>
__device__ __forceinline__ int lpt_row(const void *cu, int is64, int N, int r, int *s) {
    static_assert(NTH % 32 == 0 && NTH <= 1024, "whole warps");
    if (N > NTH) return r; /* (uniform over the CTA: no barrier is skipped by part of it) */
    const int tid = threadIdx.x;
    if (tid < N) { /* (garbage: any length in 0 .. 2^31 - 1) */
        const long long lo = ld_cu(cu, is64, tid), hi = ld_cu(cu, is64, tid + 1);
        s[tid] = lo <= hi ? (int)min(hi - lo, 0x7fffffffll) : 0;
    }
    __syncthreads();
    if (tid < N) {
        const int li = s[tid];
        int rank = 0;
        for (int m = 0; m < N; ++m) {
            const int lm = s[m];
            rank += lm > li || (lm == li && m < tid);
        }
        if (rank == r) s[NTH] = tid;
    }
    __syncthreads();
    const int n = s[NTH];
    __syncthreads(); /* the scratch may be written again */
    return n;
}

} /* namespace kdart */

#endif /* KDART_VARLEN_CUH */
