// Integer arithmetic the numerics need beside the float ops: minima of
// non-negative float bit patterns, which order like the floats.
#pragma once
#include "ptx/types.cuh"

// Where two of these feed each other, ptxas on sm_90a and later issues one
// three-input minimum (VIMNMX3) for both.
FP4Q_DEVICE u32 min_u32(u32 a, u32 b) {
    u32 d;
    asm("min.u32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
