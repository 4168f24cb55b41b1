// 4/6, Four Over Six (NVFP4_SPEC.md, "4/6"): each group (or 16x16 block)
// keeps the scale that maps its amax to 4 instead of 6 when that
// candidate's round-to-nearest squared error is smaller.
#pragma once
#include "numerics/e2m1.cuh"
#include "numerics/e4m3.cuh"
#include "ptx/sync.cuh"

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

// The squared errors of 8 values x of one row under candidate c: each
// value's round-to-nearest code c = e2m1(x * inv), e = float32(e2m1_value(c)
// * d) - x, and e * e, every product and difference rounded on its own (no
// fma).
FP4Q_DEVICE void squared_errors8(const float* x, const ScaleCandidate& c, float (&e)[8]) {
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = mul_rn(x[i], c.inv);
    const u32 codes = e2m1x8(v);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const float d = sub_rn(mul_rn(e2m1_value(codes >> (4 * i)), c.d), x[i]);
        e[i] = mul_rn(d, d);
    }
}

// sum + t[0] + t[1] + ... in that order, each addition rounded.
template <int N>
FP4Q_DEVICE float add_in_order(float sum, const float (&t)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) sum = add_rn(sum, t[i]);
    return sum;
}

// A candidate's squared error over 16 values x of one row: their squared
// errors added in element order from +0. A 2D block adds its 16 row errors
// from +0, top row first (add_rn).
FP4Q_DEVICE float squared_error16(const float (&x)[16], const ScaleCandidate& c) {
    float sum = 0.0f;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        float e[8];
        squared_errors8(x + 8 * half, c, e);
        sum = add_in_order(sum, e);
    }
    return sum;
}

// The in-order sum from +0 of 2N terms held by a lane pair (lanes 2i and
// 2i + 1 of a full warp): the first lane holds terms 0 .. N-1, the second
// (`second`) terms N .. 2N-1. The first lane's partial sum goes to the
// second (one shuffle), which continues it, and the total comes back (a
// second shuffle): both lanes return it. Every lane of the warp calls it
// together.
template <int N>
FP4Q_DEVICE float lane_pair_sum(const float (&t)[N], bool second) {
    const float partial = add_in_order(0.0f, t);
    const float from_first = shfl_sync_bfly_b32(partial, 1u);
    const float own = second ? add_in_order(from_first, t) : partial;
    const float from_second = shfl_sync_bfly_b32(own, 1u);
    return second ? own : from_second;
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

// The kept scale of a group split over a lane pair (lane_pair_sum), this
// lane holding 8 of its values x (`second`: values 8 .. 15) and both lanes
// the group's amax: each candidate's errors summed in element order across
// the pair. Every lane of the warp calls it together.
FP4Q_DEVICE ScaleCandidate four_over_six_scale_pair(const float (&x)[8], float amax, float tensor_sf,
                                                    float rcp_tensor_sf, bool second) {
    const ScaleCandidate six = scale_candidate(amax, tensor_sf, rcp_tensor_sf, r6());
    const ScaleCandidate four = scale_candidate(amax, tensor_sf, rcp_tensor_sf, R4);
    float errors6[8], errors4[8];
    squared_errors8(x, six, errors6);
    squared_errors8(x, four, errors4);
    return keeps_four(lane_pair_sum(errors4, second), lane_pair_sum(errors6, second)) ? four : six;
}
