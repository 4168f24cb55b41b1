// The 16-point random Hadamard transform (NVFP4_SPEC.md, "Random Hadamard
// transform (16)"): y = H16 (s . v) / 4 by the fast Walsh-Hadamard
// butterfly in the spec's order, and its inverse, in float32 registers.
#pragma once
#include "ptx/float_math.cuh"

// v[i] = -v[i] where bit i of the 16-bit sign mask is set (exact: the sign
// bit flips, NaN included).
FP4Q_DEVICE void flip_signs16(float (&v)[16], u32 mask) {
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = f32_from_bits(f32_bits(v[i]) ^ (((mask >> i) & 1u) << 31));
}

// Stages h = 1, 2, 4, 8; in each, every pair (v[i], v[i + h]) with bit h of
// i clear becomes (v[i] + v[i + h], v[i] - v[i + h]), each rounded; then
// every value times 0.25 (exact for 16-bit inputs).
FP4Q_DEVICE void hadamard16_butterfly(float (&v)[16]) {
#pragma unroll
    for (int h = 1; h < 16; h *= 2) {
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            if (i & h) continue;
            const float a = v[i];
            const float b = v[i + h];
            v[i] = add_rn(a, b);
            v[i + h] = sub_rn(a, b);
        }
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = mul_rn(v[i], 0.25f);
}

// The transform before quantizing: flip, butterfly, * 0.25.
FP4Q_DEVICE void hadamard16(float (&v)[16], u32 mask) {
    flip_signs16(v, mask);
    hadamard16_butterfly(v);
}

// Its inverse (fake quantization): butterfly, * 0.25, flip.
FP4Q_DEVICE void hadamard16_inverse(float (&v)[16], u32 mask) {
    hadamard16_butterfly(v);
    flip_signs16(v, mask);
}
