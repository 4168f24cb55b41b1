// Byte and bit permutes: moving sign bits of packed inputs without a shift
// and mask per element, and the random bytes of stochastic rounding.
#pragma once
#include "ptx/types.cuh"

// Bytes picked from the eight of {b, a} (a is bytes 0-3); a selector nibble
// with bit 3 set replicates the picked byte's sign bit over the byte.
FP4Q_DEVICE u32 prmt_b32(u32 a, u32 b, u32 selector) {
    u32 d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
    return d;
}

// a with its 32 bits in reverse order (bit 0 to bit 31).
FP4Q_DEVICE u32 brev_b32(u32 a) {
    u32 d;
    asm("brev.b32 %0, %1;" : "=r"(d) : "r"(a));
    return d;
}
