// Integer arithmetic whose instruction matters: Philox's 32x32 -> 64-bit
// products, both halves from one multiply; minima of non-negative float bit
// patterns, which order like the floats.
#pragma once
#include "ptx/types.cuh"

FP4Q_DEVICE u64 mul_wide_u32(u32 a, u32 b) {
    u64 d;
    asm("mul.wide.u32 %0, %1, %2;" : "=l"(d) : "r"(a), "r"(b));
    return d;
}

// Where two of these feed each other, ptxas on sm_90a and later issues one
// three-input minimum (VIMNMX3) for both.
FP4Q_DEVICE u32 min_u32(u32 a, u32 b) {
    u32 d;
    asm("min.u32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
