// 4/6, Four Over Six (NVFP4_SPEC.md, "4/6"): each group (or 16x16 block)
// keeps the scale that maps its amax to 4 instead of 6 when that
// candidate's round-to-nearest squared error is smaller.
#pragma once
#include "numerics/e2m1.cuh"
#include "numerics/e4m3.cuh"

// Maps a group's amax onto 4, as R6 maps it onto 6.
[[maybe_unused]] constexpr float R4 = 0.25f;

// One candidate scale of a group: its e4m3 byte, d and inverse scale
// (spec steps 3-5 with `ratio` in place of R6).
struct ScaleCandidate {
    u32 byte;
    float d;
    float inv;
};

FP4Q_DEVICE ScaleCandidate scale_candidate(float amax, float tensor_sf, float rcp_tensor_sf, float ratio) {
    ScaleCandidate c;
    c.byte = nvfp4_scale_d(amax, tensor_sf, rcp_tensor_sf, c.d, ratio);
    c.inv = inverse_scale<false>(c.d);
    return c;
}

// A candidate's squared error over 16 values x of one row: each value's
// round-to-nearest code c = e2m1(x * inv), e = float32(e2m1_value(c) * d) - x,
// and the sum of e * e added in element order from +0, every product,
// difference and sum rounded on its own (no fma). A 2D block adds its 16 row
// errors from +0, top row first (add_rn).
FP4Q_DEVICE float squared_error16(const float (&x)[16], const ScaleCandidate& c) {
    float sum = 0.0f;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        float v[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = mul_rn(x[8 * half + i], c.inv);
        const u32 codes = e2m1x8(v);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float e = sub_rn(mul_rn(e2m1_value(codes >> (4 * i)), c.d), x[8 * half + i]);
            sum = add_rn(sum, mul_rn(e, e));
        }
    }
    return sum;
}

// Whether the map-to-4 candidate wins: a strictly smaller error; 6 on a tie
// and when either error is NaN (the comparison is false).
FP4Q_DEVICE bool keeps_four(float error4, float error6) { return error4 < error6; }

// The kept scale of one 16-value group whose amax is `amax`.
FP4Q_DEVICE ScaleCandidate four_over_six_scale(const float (&x)[16], float amax, float tensor_sf,
                                               float rcp_tensor_sf) {
    const ScaleCandidate six = scale_candidate(amax, tensor_sf, rcp_tensor_sf, r6());
    const ScaleCandidate four = scale_candidate(amax, tensor_sf, rcp_tensor_sf, R4);
    return keeps_four(squared_error16(x, four), squared_error16(x, six)) ? four : six;
}
