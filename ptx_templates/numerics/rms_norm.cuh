// RMSNorm and add+RMSNorm (NVFP4_SPEC.md, "The project's exact sequences:
// fused serving quantizers"): the residual sum rounded to the input type,
// the row's sum of squares as a pairwise tree in index order, the row's
// 1 / sqrt(ss / K + eps) and h = dtype(dtype(r * rinv) * w), each operation
// an explicit .rn instruction, so the bits are the numpy reference's.
#pragma once
#include "numerics/input.cuh"
#include "ptx/float_math.cuh"

// dtype(x + residual) of a pair, packed.
FP4Q_DEVICE u32 add_x2(u32 x, u32 residual) {
    return round_to_input_x2(add_rn(input_hi(x), input_hi(residual)), add_rn(input_lo(x), input_lo(residual)));
}

// v[0] + v[1] + ... + v[N - 1] as the spec's tree: adjacent pairs, then
// adjacent sums of those, until one is left (N a power of two). A level per
// instantiation, so every index is a constant and v stays in registers.
template <int N>
FP4Q_DEVICE float pairwise_sum(const float (&v)[N]) {
    static_assert(N > 0 && (N & (N - 1)) == 0, "a power of two");
    if constexpr (N == 1) {
        return v[0];
    } else {
        float half[N / 2];
#pragma unroll
        for (int i = 0; i < N / 2; ++i) half[i] = add_rn(v[2 * i], v[2 * i + 1]);
        return pairwise_sum(half);
    }
}

// The tree sum of the squares of WORDS packed pairs (2 * WORDS elements, an
// aligned run of the row, so their sum is one node of the row's tree).
template <int WORDS>
FP4Q_DEVICE float sum_of_squares(const u32 (&w)[WORDS]) {
    float sq[2 * WORDS];
#pragma unroll
    for (int i = 0; i < WORDS; ++i) {
        const float lo = input_lo(w[i]);
        const float hi = input_hi(w[i]);
        sq[2 * i] = mul_rn(lo, lo);
        sq[2 * i + 1] = mul_rn(hi, hi);
    }
    return pairwise_sum(sq);
}

// 1 / sqrt(ss / K + eps) of a row of K elements whose squares sum to ss.
FP4Q_DEVICE float rms_inverse(float ss, int k, float eps) {
    return div_rn(1.0f, sqrt_rn(add_rn(div_rn(ss, static_cast<float>(k)), eps)));
}

// h = dtype(dtype(r * rinv) * w) of a pair, packed: vLLM's two roundings.
FP4Q_DEVICE u32 rms_norm_x2(u32 r, float rinv, u32 w) {
    const u32 n = round_to_input_x2(mul_rn(input_hi(r), rinv), mul_rn(input_lo(r), rinv));
    return round_to_input_x2(mul_rn(input_hi(n), input_hi(w)), mul_rn(input_lo(n), input_lo(w)));
}
