// The random bits of stochastic rounding (NVFP4_SPEC.md, "Stochastic
// rounding", "Random bits"): Philox4x32-10 as Random123 defines it, and the
// counter and key of one group, so that a group's bits depend on (seed,
// offset) and its index alone, never on the thread or CTA that quantizes it.
#pragma once
#include "ptx/integer_math.cuh"

// Philox4x32-10 of the 128-bit counter c (c[0] the low word) under the key
// (k0, k1), in place. One round maps (c0, c1, c2, c3) to
// (hi(M1 c2) ^ c1 ^ k0, lo(M1 c2), hi(M0 c0) ^ c3 ^ k1, lo(M0 c0)); the key
// gains Random123's Weyl increments between rounds.
FP4Q_DEVICE void philox4x32_10(u32 (&c)[4], u32 k0, u32 k1) {
#pragma unroll
    for (int round = 0; round < 10; ++round) {
        if (round) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        const u64 p0 = mul_wide_u32(0xD2511F53u, c[0]);
        const u64 p1 = mul_wide_u32(0xCD9E8D57u, c[2]);
        const u32 c1 = c[1];
        c[0] = static_cast<u32>(p1 >> 32) ^ c1 ^ k0;
        c[1] = static_cast<u32>(p1);
        c[2] = static_cast<u32>(p0 >> 32) ^ c[3] ^ k1;
        c[3] = static_cast<u32>(p0);
    }
}

// The direction bit of a group's counter.
[[maybe_unused]] constexpr u32 ROWWISE = 0;
[[maybe_unused]] constexpr u32 COLUMNWISE = 1;

// The four words of the group with row-major index `group` in the output of
// `direction`: key (seed low, seed high), counter (offset low, offset high,
// group low, group high | direction << 31). Word w is the rbits of the
// group's elements 4w .. 4w+3.
FP4Q_DEVICE void group_random_words(u64 seed, u64 offset, u64 group, u32 direction, u32 (&w)[4]) {
    w[0] = static_cast<u32>(offset);
    w[1] = static_cast<u32>(offset >> 32);
    w[2] = static_cast<u32>(group);
    w[3] = static_cast<u32>(group >> 32) | (direction << 31);
    philox4x32_10(w, static_cast<u32>(seed), static_cast<u32>(seed >> 32));
}
