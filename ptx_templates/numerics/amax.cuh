// Spec step 2: the amax of a group, from its packed inputs.
#pragma once
#include "numerics/input.cuh"

// NaN-dropping max of |x| over 2*N packed elements. The reduction runs on
// packed pairs (exact: max only compares); the last step starts from 0 so
// that an all-NaN group gives 0.
template <int N>
FP4Q_DEVICE float amax_packed(const u32 (&w)[N]) {
    u32 m = w[0] & MAGNITUDE_X2;
#pragma unroll
    for (int i = 1; i < N; ++i) m = max_x2(m, w[i] & MAGNITUDE_X2);
    return max_f32(max_f32(0.0f, input_lo(m)), input_hi(m));
}

// The same maximum with NaN propagating: NaN when any element is NaN, else
// the spec's amax. It needs no mask per word where the instruction takes |x|
// (max_nan_abs_x2), which makes it the one for the hot loop; a result that
// is not finite sends the caller to amax_packed and to the general e2m1
// conversion.
template <int N>
FP4Q_DEVICE float amax_nan(const u32 (&w)[N]) {
    static_assert(N >= 2, "pairs of words");
    u32 m = max_nan_abs_x2(w[0], w[1]);
#pragma unroll
    for (int i = 2; i < N; ++i) m = max_nan_abs_x2(m, w[i]);
    m &= MAGNITUDE_X2;
    return max_nan_f32(input_lo(m), input_hi(m));
}

FP4Q_DEVICE bool is_finite(float v) { return abs_f32(v) < f32_from_bits(0x7F800000u); }
