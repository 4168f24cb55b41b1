// Integer arithmetic whose instruction matters: Philox's 32x32 -> 64-bit
// products, both halves from one multiply.
#pragma once
#include "ptx/types.cuh"

FP4Q_DEVICE u64 mul_wide_u32(u32 a, u32 b) {
    u64 d;
    asm("mul.wide.u32 %0, %1, %2;" : "=l"(d) : "r"(a), "r"(b));
    return d;
}
