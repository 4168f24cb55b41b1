// Spec step 2: the amax of a group, from its packed inputs.
#pragma once
#include "numerics/input.cuh"
#include "ptx/permute.cuh"

// op over the N words of v as a balanced tree, in place: log2(N) dependent
// steps instead of N - 1, for the maxima below, whose order does not change
// their result.
template <int N, typename Op>
FP4Q_DEVICE u32 reduce_tree(u32 (&v)[N], Op op) {
#pragma unroll
    for (int stride = 1; stride < N; stride *= 2) {
#pragma unroll
        for (int i = 0; i + stride < N; i += 2 * stride) v[i] = op(v[i], v[i + stride]);
    }
    return v[0];
}

// NaN-dropping max of |x| over 2*N packed elements. The reduction runs on
// packed pairs (exact: max only compares); the last step starts from 0 so
// that an all-NaN group gives 0.
template <int N>
FP4Q_DEVICE float amax_packed(const u32 (&w)[N]) {
    u32 v[N];
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = w[i] & MAGNITUDE_X2;
    const u32 m = reduce_tree(v, [](u32 a, u32 b) { return max_x2(a, b); });
    return max_f32(max_f32(0.0f, input_lo(m)), input_hi(m));
}

// The same maximum with NaN propagating: NaN when any element is NaN, else
// the spec's amax. Where the instruction takes |x| (max_nan_abs_x2) the words
// need no mask, which makes it the one for the hot loop; elsewhere each word
// is masked once and the maxima need none. A result that is not finite
// sends the caller to amax_packed and to the general e2m1 conversion. The
// two halves' maximum is taken on the packed pair too: m against m with its
// halves swapped gives max(|lo|, |hi|) in both (NaN if either is), and the
// high half widens with its sign cleared. A 16-bit maximum only compares,
// so it is the float32 maximum of the widened halves; a permute, a maximum
// and a widening where two widenings, two masks and a float32 maximum were.
template <int N>
FP4Q_DEVICE float amax_nan(const u32 (&w)[N]) {
    static_assert(N >= 2, "pairs of words");
    u32 v[N];
    if constexpr (FP4Q_HAS_MAX_ABS_X2) {
#pragma unroll
        for (int i = 0; i < N; ++i) v[i] = w[i];
        const u32 m = reduce_tree(v, [](u32 a, u32 b) { return max_nan_abs_x2(a, b); });
        return input_hi(max_nan_abs_x2(m, prmt_b32(m, m, 0x1032u)) & MAGNITUDE_X2);
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i) v[i] = w[i] & MAGNITUDE_X2;
        const u32 m = reduce_tree(v, [](u32 a, u32 b) { return max_nan_x2(a, b); });
        return input_hi(max_nan_x2(m, prmt_b32(m, m, 0x1032u)));
    }
}

FP4Q_DEVICE bool is_finite(float v) { return abs_f32(v) < f32_from_bits(0x7F800000u); }

// The amax of 16 float32 values (a transformed group): NaN dropped, as
// max.f32 drops it, from 0 (an all-NaN group gives 0).
FP4Q_DEVICE float amax16(const float (&v)[16]) {
    float m = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) m = max_f32(m, abs_f32(v[i]));
    return m;
}
