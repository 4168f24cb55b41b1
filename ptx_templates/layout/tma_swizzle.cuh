// TMA's shared-memory swizzle: the 16-byte chunk index (address bits 4..6)
// is XORed with address bits 7..9, as many bits as the mode spans.
#pragma once
#include "ptx/types.cuh"

template <int SWIZZLE_BYTES>
FP4Q_DEVICE u32 swizzle(u32 offset) {
    if constexpr (SWIZZLE_BYTES == 0) {
        return offset;
    } else {
        constexpr u32 mask = SWIZZLE_BYTES / 16 - 1;
        return offset ^ (((offset >> 7) & mask) << 4);
    }
}
