// Byte permutes, for moving sign bits of packed inputs without a shift and
// mask per element.
#pragma once
#include "ptx/types.cuh"

// Bytes picked from the eight of {b, a} (a is bytes 0-3); a selector nibble
// with bit 3 set replicates the picked byte's sign bit over the byte.
FP4Q_DEVICE u32 prmt_b32(u32 a, u32 b, u32 selector) {
    u32 d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
    return d;
}
