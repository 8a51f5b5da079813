/*
 * chunk_rcumsum: the reverse cumulative sum of dg within each chunk
 * (kernel_src/chunk_rcumsum.cuh).  A kernel without an operation of its
 * own: bwd_intra folds it in (fold_dg), and callers that launch it
 * themselves take it from kdart_get_function.
 */
#include "../stage.h"

static void rcumsum_shape(const int *vals, int *threads, int *smem) {
    *threads = kdart__k_tile_at(vals[0]); /* one thread per channel */
    *smem = 0;
}

const kdart__kernel kdart__stage_chunk_rcumsum = {
    "chunk_rcumsum", "chunk_rcumsum.cuh", "kdart_chunk_rcumsum", 1,
    {{"K", 3, {"64", "128", "256"}, {"64", "128", "256"}, 1}},
    rcumsum_shape, NULL, NULL, NULL,
};
