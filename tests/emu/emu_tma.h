/*
 * emu_tma.h: the emulated device's TMA tensor map, shared by the driver
 * (fake_cuda.cpp's cuTensorMapEncodeTiled writes it into the 128 bytes of a
 * CUtensorMap) and the kernels' side (emu_prelude.h's TMA copies read it from
 * the kernel parameter).  Plain data, no CUDA types: both sides include it.
 */
#ifndef KDART_EMU_TMA_H
#define KDART_EMU_TMA_H

#include <stdint.h>

namespace emu {
struct TmaMap {
    uintptr_t base;       /* the tensor's first element */
    int rank;             /* 2 or 3 */
    uint64_t dim[3];      /* elements per dimension, innermost first */
    uint64_t stride[3];   /* bytes between neighbours in each dimension (stride[0]: the element size) */
    uint32_t box[3];      /* the box's extent per dimension (box[0] * 2 == 128: one swizzled 128-byte row) */
};
} /* namespace emu */

#endif /* KDART_EMU_TMA_H */
