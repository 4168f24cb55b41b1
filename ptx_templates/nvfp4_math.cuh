// NVFP4 numerics, bit-exact to NVFP4_SPEC.md, shared by every kernel.
#pragma once
#include "ptx.cuh"

// ---------------------------------------------------------------- input
// Packed pairs of 16-bit inputs to float32, exactly. Element 2i sits in the
// low half of word i (little-endian memory order).
#if FP4Q_INPUT_FP16
FP4Q_DEVICE float input_lo(u32 w) { return cvt_f32_f16(static_cast<u16>(w)); }
FP4Q_DEVICE float input_hi(u32 w) { return cvt_f32_f16(static_cast<u16>(w >> 16)); }
#else
FP4Q_DEVICE float input_lo(u32 w) { return f32_from_bits(w << 16); }
FP4Q_DEVICE float input_hi(u32 w) { return f32_from_bits(w & 0xFFFF0000u); }
#endif

// NaN-dropping max of |x| over 2*N packed elements, starting from 0 so that
// an all-NaN group gives 0 (spec step 2).
template <int N>
FP4Q_DEVICE float amax_packed(const u32 (&w)[N]) {
    float m = 0.0f;
#pragma unroll
    for (int i = 0; i < N; ++i) {
        m = max_f32(m, abs_f32(input_lo(w[i])));
        m = max_f32(m, abs_f32(input_hi(w[i])));
    }
    return m;
}

// ---------------------------------------------------------------- scales
// Spec steps 3-5 for two groups at once (the e4m3 conversion is a pair
// instruction). Returns the two scale bytes, group a in the low byte.
FP4Q_DEVICE u32 nvfp4_scale_pair(float amax_a, float amax_b, float tensor_sf,
                                 float rcp_tensor_sf, float& inv_a, float& inv_b) {
    const float r6 = f32_from_bits(0x3E2AAAABu);
    const float s_a = mul_rn(tensor_sf, mul_rn(amax_a, r6));
    const float s_b = mul_rn(tensor_sf, mul_rn(amax_b, r6));
    const u32 bytes = cvt_rn_satfinite_e4m3x2_f32(s_b, s_a);
    const u32 halves = cvt_rn_f16x2_e4m3x2(bytes);
    const float d_a = mul_rn(cvt_f32_f16(static_cast<u16>(halves)), rcp_tensor_sf);
    const float d_b = mul_rn(cvt_f32_f16(static_cast<u16>(halves >> 16)), rcp_tensor_sf);
    // d == 0 gives inv = 0; a NaN d fails the test and yields a NaN inv.
    inv_a = (d_a == 0.0f) ? 0.0f : rcp_rn(d_a);
    inv_b = (d_b == 0.0f) ? 0.0f : rcp_rn(d_b);
    return bytes;
}

// ---------------------------------------------------------------- e2m1
#if defined(FP4Q_HAS_CVT_E2M1)
FP4Q_DEVICE u32 e2m1x2(float hi, float lo) { return cvt_rn_satfinite_e2m1x2_f32(hi, lo); }
#else
// Software e2m1 (sm_90 has no conversion instruction). The e2m1 grid has
// step 0.5 below 2, 1 below 4 and 2 above, so the code of |v| is
// rint(min(2|v|, |v| + 2, |v|/2 + 4, 7)); rint is monotone and the shifts by
// 2 and 4 are even, so each branch can be rounded separately. Each branch is
// one fma/add onto the integer grid of M = 1.5 * 2^23, which rounds to
// nearest even exactly once and leaves the integer in the low mantissa bits.
// NaN: every branch is NaN, and min() drops NaN in favour of M + 7 (code 7).
FP4Q_DEVICE u32 e2m1_code(float v) {
    const float m = 12582912.0f;
    const float a = abs_f32(v);
    const float t0 = fma_rn(a, 2.0f, m);
    const float t1 = add_rn(a, m + 2.0f);
    const float t2 = fma_rn(a, 0.5f, m + 4.0f);
    const float t = min_f32(min_f32(t0, t1), min_f32(t2, m + 7.0f));
    // The product that made v is a canonical (positive) NaN when NaN, so
    // its sign bit is the spec's sign for every input.
    return (f32_bits(t) & 7u) | ((f32_bits(v) >> 28) & 8u);
}

FP4Q_DEVICE u32 e2m1x2(float hi, float lo) { return e2m1_code(lo) | (e2m1_code(hi) << 4); }
#endif

// Eight packed inputs times `inv` to one word of eight e2m1 codes (spec
// step 6), element 0 in the low nibble.
FP4Q_DEVICE u32 quantize_e2m1x8(u32 w0, u32 w1, u32 w2, u32 w3, float inv) {
    const u32 b0 = e2m1x2(mul_rn(input_hi(w0), inv), mul_rn(input_lo(w0), inv));
    const u32 b1 = e2m1x2(mul_rn(input_hi(w1), inv), mul_rn(input_lo(w1), inv));
    const u32 b2 = e2m1x2(mul_rn(input_hi(w2), inv), mul_rn(input_lo(w2), inv));
    const u32 b3 = e2m1x2(mul_rn(input_hi(w3), inv), mul_rn(input_lo(w3), inv));
    return b0 | (b1 << 8) | (b2 << 16) | (b3 << 24);
}

// One chunk of 64 elements (four groups of 16) of a row: 32 packed input
// words in, 8 words of e2m1 codes and 4 scale bytes out.
struct Chunk64 {
    u32 q[8];
    u32 sf;
};

FP4Q_DEVICE Chunk64 quantize_chunk64(const u32 (&w)[32], float tensor_sf, float rcp_tensor_sf) {
    float amax[4];
#pragma unroll
    for (int g = 0; g < 4; ++g) {
        u32 group[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) group[i] = w[g * 8 + i];
        amax[g] = amax_packed(group);
    }
    float inv[4];
    Chunk64 out;
    const u32 lo = nvfp4_scale_pair(amax[0], amax[1], tensor_sf, rcp_tensor_sf, inv[0], inv[1]);
    const u32 hi = nvfp4_scale_pair(amax[2], amax[3], tensor_sf, rcp_tensor_sf, inv[2], inv[3]);
    out.sf = lo | (hi << 16);
#pragma unroll
    for (int g = 0; g < 4; ++g) {
        out.q[2 * g] = quantize_e2m1x8(w[g * 8 + 0], w[g * 8 + 1], w[g * 8 + 2], w[g * 8 + 3], inv[g]);
        out.q[2 * g + 1] = quantize_e2m1x8(w[g * 8 + 4], w[g * 8 + 5], w[g * 8 + 6], w[g * 8 + 7], inv[g]);
    }
    return out;
}
