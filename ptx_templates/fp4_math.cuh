// FP4 numerics (NVFP4 and MXFP4), bit-exact to NVFP4_SPEC.md, shared by
// every kernel.
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

// NaN-dropping max of |x| over 2*N packed elements (spec step 2). The
// reduction runs on packed pairs (exact: max only compares); the last step
// starts from 0 so that an all-NaN group gives 0.
#if FP4Q_INPUT_FP16
FP4Q_DEVICE u32 max_x2(u32 a, u32 b) { return max_f16x2(a, b); }
#else
FP4Q_DEVICE u32 max_x2(u32 a, u32 b) { return max_bf16x2(a, b); }
#endif

template <int N>
FP4Q_DEVICE float amax_packed(const u32 (&w)[N]) {
    constexpr u32 magnitude = 0x7FFF7FFFu;
    u32 m = w[0] & magnitude;
#pragma unroll
    for (int i = 1; i < N; ++i) m = max_x2(m, w[i] & magnitude);
    return max_f32(max_f32(0.0f, input_lo(m)), input_hi(m));
}

// ---------------------------------------------------------------- scales
// The launch's tensor scale: the by-value argument, or the device scalar
// (read after griddepcontrol.wait: the previous kernel may write it).
FP4Q_DEVICE float launch_tensor_sf(float value, const float* ptr) {
#if FP4Q_TENSOR_SF_BY_POINTER
    return ld_global_f32(ptr);
#else
    return value;
#endif
}

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

// MXFP4 (spec "MXFP4"): the e8m0 exponent of a group from its amax.
// floor: floor(log2(amax)) - 2; rceil: the smallest e with 2^e >= amax/6
// (amax * R6 in float32). amax == 0 (or t underflowing to 0) gives -127,
// amax == Inf gives 127, everything clamps to [-127, 127].
FP4Q_DEVICE int floor_log2(u32 bits) {  // bits of a positive finite float
    const int biased = static_cast<int>(bits >> 23);
    return biased ? biased - 127 : (31 - __clz(bits)) - 149;
}

FP4Q_DEVICE int mx_exponent(float amax) {
    if (!(amax > 0.0f)) return -127;
    if (amax == f32_from_bits(0x7F800000u)) return 127;
#if FP4Q_MX_RCEIL
    const u32 t = f32_bits(mul_rn(amax, f32_from_bits(0x3E2AAAABu)));
    if (t == 0) return -127;
    const bool power_of_two = (t >> 23) ? (t & 0x7FFFFFu) == 0 : (t & (t - 1)) == 0;
    const int e = floor_log2(t) + (power_of_two ? 0 : 1);
#else
    const int e = floor_log2(f32_bits(amax)) - 2;
#endif
    return e < -127 ? -127 : (e > 127 ? 127 : e);
}

// 2^-e as a float32, exact (2^-127 is the subnormal 0x00400000).
FP4Q_DEVICE float exp2_neg(int e) {
    return e == 127 ? f32_from_bits(0x00400000u) : f32_from_bits(static_cast<u32>(127 - e) << 23);
}

// The scale byte of one group from its amax, and the inverse scale its
// elements are multiplied by: e4m3 (spec steps 3-5) or e8m0 (MXFP4).
template <int SF_VEC>
FP4Q_DEVICE u32 group_scale_byte(float amax, float tensor_sf, float rcp_tensor_sf, float& inv) {
    if constexpr (SF_VEC == 16) {
        float unused;
        return nvfp4_scale_pair(amax, 0.0f, tensor_sf, rcp_tensor_sf, inv, unused) & 0xFFu;
    } else {
        const int e = mx_exponent(amax);
        inv = exp2_neg(e);
        return static_cast<u32>(e + 127);
    }
}

// ---------------------------------------------------------------- e2m1
#if defined(FP4Q_HAS_CVT_E2M1)
// Eight floats to a word of eight e2m1 codes (spec step 6), v[0] in the
// low nibble.
FP4Q_DEVICE u32 e2m1x8(const float (&v)[8]) {
    u32 word = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) word |= cvt_rn_satfinite_e2m1x2_f32(v[2 * i + 1], v[2 * i]) << (8 * i);
    return word;
}
#else
// Software e2m1 (sm_90 has no conversion instruction). The e2m1 grid has
// step 0.5 below 2, 1 below 4 and 2 above, so the code of |v| is
// rint(min(2|v|, |v| + 2, |v|/2 + 4, 7)); rint is monotone and the shifts by
// 2 and 4 are even, so each branch can be rounded separately. Each branch is
// one fma/add onto the integer grid of M = 1.5 * 2^23, which rounds to
// nearest even exactly once and leaves the integer in the low mantissa bits.
// NaN: every branch is NaN, and min() drops NaN in favour of M + 7 (code 7).
// Returns bits(M) + code + 8 * sign.
FP4Q_DEVICE u32 e2m1_biased(float v) {
    const float m = 12582912.0f;
    const float a = abs_f32(v);
    const float t0 = fma_rn(a, 2.0f, m);
    const float t1 = add_rn(a, m + 2.0f);
    const float t2 = fma_rn(a, 0.5f, m + 4.0f);
    const float t = min_f32(min_f32(t0, t1), min_f32(t2, m + 7.0f));
    // v is always a product, and a NaN product is the canonical positive
    // NaN, so v's sign bit is the spec's sign for every input. Bit 3 of
    // bits(t) is clear (code <= 7), so OR-ing the sign in is adding 8.
    return f32_bits(t) | ((f32_bits(v) >> 28) & 8u);
}

// Eight floats to a word of eight e2m1 codes, v[0] in the low nibble. The
// biased codes are combined by multiply-adds (Horner in base 16) and the
// bias removed once, which keeps the packing off the integer logic pipe.
FP4Q_DEVICE u32 e2m1x8(const float (&v)[8]) {
    constexpr u32 bias = 0x4B400000u * 0x11111111u;  // bits(M) in every nibble, mod 2^32
    u32 acc = 0;
#pragma unroll
    for (int i = 7; i >= 0; --i) acc = acc * 16u + e2m1_biased(v[i]);
    return acc - bias;
}
#endif

// Eight packed inputs times `inv` to one word of eight e2m1 codes.
FP4Q_DEVICE u32 quantize_e2m1x8(u32 w0, u32 w1, u32 w2, u32 w3, float inv) {
    const float v[8] = {mul_rn(input_lo(w0), inv), mul_rn(input_hi(w0), inv), mul_rn(input_lo(w1), inv),
                        mul_rn(input_hi(w1), inv), mul_rn(input_lo(w2), inv), mul_rn(input_hi(w2), inv),
                        mul_rn(input_lo(w3), inv), mul_rn(input_hi(w3), inv)};
    return e2m1x8(v);
}

// One chunk of 64 elements of a row: 32 packed input words in, 8 words of
// e2m1 codes out, and the chunk's scale bytes: four e4m3 (NVFP4, groups of
// 16) or two e8m0 (MXFP4, groups of 32), group 0 in the low byte.
struct Chunk64 {
    u32 q[8];
    u32 sf;
};

template <int SF_VEC>
FP4Q_DEVICE Chunk64 quantize_chunk64(const u32 (&w)[32], float tensor_sf, float rcp_tensor_sf) {
    constexpr int GROUPS = 64 / SF_VEC;
    constexpr int WORDS = SF_VEC / 2;
    float amax[GROUPS];
#pragma unroll
    for (int g = 0; g < GROUPS; ++g) {
        u32 group[WORDS];
#pragma unroll
        for (int i = 0; i < WORDS; ++i) group[i] = w[g * WORDS + i];
        amax[g] = amax_packed(group);
    }
    float inv[GROUPS];
    Chunk64 out;
    if constexpr (SF_VEC == 16) {
        const u32 lo = nvfp4_scale_pair(amax[0], amax[1], tensor_sf, rcp_tensor_sf, inv[0], inv[1]);
        const u32 hi = nvfp4_scale_pair(amax[2], amax[3], tensor_sf, rcp_tensor_sf, inv[2], inv[3]);
        out.sf = lo | (hi << 16);
    } else {
        const int e0 = mx_exponent(amax[0]);
        const int e1 = mx_exponent(amax[1]);
        inv[0] = exp2_neg(e0);
        inv[1] = exp2_neg(e1);
        out.sf = static_cast<u32>(e0 + 127) | (static_cast<u32>(e1 + 127) << 8);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int g = i * 8 / SF_VEC;  // q word i covers elements 8i .. 8i+7
        out.q[i] = quantize_e2m1x8(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3], inv[g]);
    }
    return out;
}
