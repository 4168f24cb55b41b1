// FP4 numerics (NVFP4 and MXFP4), bit-exact to NVFP4_SPEC.md, shared by
// every kernel.
#pragma once
#include "ptx.cuh"
#include "tensor_sf.cuh"

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
FP4Q_DEVICE u32 max_nan_abs_x2(u32 a, u32 b) { return max_nan_xorsign_abs_f16x2(a, b); }
#else
FP4Q_DEVICE u32 max_x2(u32 a, u32 b) { return max_bf16x2(a, b); }
FP4Q_DEVICE u32 max_nan_abs_x2(u32 a, u32 b) { return max_nan_xorsign_abs_bf16x2(a, b); }
#endif

constexpr u32 MAGNITUDE_X2 = 0x7FFF7FFFu;

template <int N>
FP4Q_DEVICE float amax_packed(const u32 (&w)[N]) {
    u32 m = w[0] & MAGNITUDE_X2;
#pragma unroll
    for (int i = 1; i < N; ++i) m = max_x2(m, w[i] & MAGNITUDE_X2);
    return max_f32(max_f32(0.0f, input_lo(m)), input_hi(m));
}

// The same maximum with NaN propagating: NaN when any element is NaN, else
// the spec's amax. It needs no mask per word (the instruction takes |x|),
// which makes it the one for the hot loop; a result that is not finite
// sends the caller to amax_packed and to the general e2m1 conversion.
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

// ---------------------------------------------------------------- scales
// The launch's tensor scale and its reciprocal (spec step 5).
struct TensorScale {
    float value;
    float rcp;
};

FP4Q_DEVICE TensorScale tensor_scale(float value, const float* ptr) {
    const float t = launch_tensor_sf(value, ptr);
    return {t, rcp_rn(t)};
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
// Spec step 6 comes in three variants, one per template pair
// <INPUT_SIGNS, CLAMP> of quantize_e2m1x8:
//   <false, true>: exact for every product, NaN and infinities included;
//   <true,  true>: exact when no product is NaN: then x * inv has the sign
//                  of x (inv is +0, positive or NaN), so the sign bits can be
//                  read off the inputs;
//   <true, false>: also needs every |x * inv| < 7, which a scale rounded to
//                  nearest gives (|x * inv| <= 6 * (1 + 2^-4) for a normal
//                  e4m3 scale): rint(|v|/2 + 4) cannot pass 7, so no clamp.
// sm_100a converts in hardware and ignores both flags.
#if defined(FP4Q_HAS_CVT_E2M1)
template <bool INPUT_SIGNS, bool CLAMP>
FP4Q_DEVICE u32 e2m1x8(const float (&v)[8], u32, u32, u32, u32) {
    u32 word = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) word |= cvt_rn_satfinite_e2m1x2_f32(v[2 * i + 1], v[2 * i]) << (8 * i);
    return word;
}
#else
// Software e2m1 (sm_90 has no conversion instruction), as magnitude codes
// and sign bits.
//
// The e2m1 grid has step 0.5 below 2, 1 below 4 and 2 above, so the code
// of |v| is rint(min(2|v|, |v| + 2, |v|/2 + 4, 7)); rint is monotone and the
// shifts by 2 and 4 are even, so each branch can be rounded separately. Each
// branch is one fma/add onto the integer grid of M = 1.5 * 2^23, which
// rounds to nearest even exactly once and leaves the integer in the low
// mantissa bits. NaN: every branch is NaN, and min() drops NaN in favour of
// M + 7 (code 7). Returns bits(M) + code.
template <bool CLAMP>
FP4Q_DEVICE u32 e2m1_magnitude_biased(float v) {
    const float m = 12582912.0f;
    const float a = abs_f32(v);
    const float t0 = fma_rn(a, 2.0f, m);
    const float t1 = add_rn(a, m + 2.0f);
    const float t2 = fma_rn(a, 0.5f, m + 4.0f);
    return f32_bits(min_f32(min_f32(t0, t1), CLAMP ? min_f32(t2, m + 7.0f) : t2));
}

// The magnitude codes of eight floats, v[0] in the low nibble, sign bits
// clear. The biased codes are combined by multiply-adds (Horner in base 16)
// and the bias removed once, which keeps the packing off the integer logic
// pipe.
template <bool CLAMP>
FP4Q_DEVICE u32 e2m1x8_magnitudes(const float (&v)[8]) {
    constexpr u32 bias = 0x4B400000u * 0x11111111u;  // bits(M) in every nibble, mod 2^32
    u32 acc = 0;
#pragma unroll
    for (int i = 7; i >= 0; --i) acc = acc * 16u + e2m1_magnitude_biased<CLAMP>(v[i]);
    return acc - bias;
}

// The sign bits (bit 3 of each nibble) of eight floats. v is always a
// product, and a NaN product is the canonical positive NaN, so v's sign
// bit is the spec's sign for every input.
FP4Q_DEVICE u32 e2m1x8_signs(const float (&v)[8]) {
    u32 signs = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) signs |= (f32_bits(v[i]) >> 31) << (4 * i + 3);
    return signs;
}

// The same sign bits read off the four packed input words the products came
// from (both input types keep the signs in bits 15 and 31 of a word): four
// byte permutes and two logic ops for eight elements instead of two integer
// ops per element.
FP4Q_DEVICE u32 e2m1x8_input_signs(u32 w0, u32 w1, u32 w2, u32 w3) {
    // Bytes 1 and 3 of each word, each replaced by its sign bit repeated.
    const u32 lo01_hi01 = prmt_b32(w0, w1, 0xFBD9u);
    const u32 lo23_hi23 = prmt_b32(w2, w3, 0xFBD9u);
    const u32 lo = prmt_b32(lo01_hi01, lo23_hi23, 0x5410u);  // byte i: sign of element 2i
    const u32 hi = prmt_b32(lo01_hi01, lo23_hi23, 0x7632u);  // byte i: sign of element 2i + 1
    return (lo & 0x08080808u) | (hi & 0x80808080u);
}

template <bool INPUT_SIGNS, bool CLAMP>
FP4Q_DEVICE u32 e2m1x8(const float (&v)[8], u32 w0, u32 w1, u32 w2, u32 w3) {
    static_assert(CLAMP || INPUT_SIGNS, "a NaN product needs the clamp");
    const u32 signs = INPUT_SIGNS ? e2m1x8_input_signs(w0, w1, w2, w3) : e2m1x8_signs(v);
    return e2m1x8_magnitudes<CLAMP>(v) | signs;
}
#endif

// Eight floats (products) to a word of eight e2m1 codes, v[0] in the low
// nibble: the general conversion.
FP4Q_DEVICE u32 e2m1x8(const float (&v)[8]) { return e2m1x8<false, true>(v, 0u, 0u, 0u, 0u); }

// Eight packed inputs times `inv` to one word of eight e2m1 codes.
template <bool INPUT_SIGNS = false, bool CLAMP = true>
FP4Q_DEVICE u32 quantize_e2m1x8(u32 w0, u32 w1, u32 w2, u32 w3, float inv) {
    const float v[8] = {mul_rn(input_lo(w0), inv), mul_rn(input_hi(w0), inv), mul_rn(input_lo(w1), inv),
                        mul_rn(input_hi(w1), inv), mul_rn(input_lo(w2), inv), mul_rn(input_hi(w2), inv),
                        mul_rn(input_lo(w3), inv), mul_rn(input_hi(w3), inv)};
    return e2m1x8<INPUT_SIGNS, CLAMP>(v, w0, w1, w2, w3);
}

// One chunk of 64 elements of a row: 32 packed input words in, 8 words of
// e2m1 codes out, and the chunk's scale bytes: four e4m3 (NVFP4, groups of
// 16) or two e8m0 (MXFP4, groups of 32), group 0 in the low byte.
struct Chunk64 {
    u32 q[8];
    u32 sf;
};

template <int WORDS>
FP4Q_DEVICE void group_words(const u32 (&w)[32], int g, u32 (&out)[WORDS]) {
#pragma unroll
    for (int i = 0; i < WORDS; ++i) out[i] = w[g * WORDS + i];
}

template <int SF_VEC, bool INPUT_SIGNS, bool CLAMP>
FP4Q_DEVICE void quantize_codes64(const u32 (&w)[32], const float (&inv)[64 / SF_VEC], u32 (&q)[8]) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {  // q word i covers elements 8i .. 8i+7
        q[i] = quantize_e2m1x8<INPUT_SIGNS, CLAMP>(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3],
                                                    inv[i * 8 / SF_VEC]);
    }
}

// Which e2m1 variant is exact is decided once per chunk, so the common case
// runs one branch and no per-group checks in the element loop.
template <int SF_VEC>
FP4Q_DEVICE Chunk64 quantize_chunk64(const u32 (&w)[32], float tensor_sf, float rcp_tensor_sf) {
    constexpr int GROUPS = 64 / SF_VEC;
    constexpr int WORDS = SF_VEC / 2;
    float amax[GROUPS];
    float largest = 0.0f;  // NaN if any element is
#pragma unroll
    for (int g = 0; g < GROUPS; ++g) {
        u32 group[WORDS];
        group_words(w, g, group);
        amax[g] = amax_nan(group);
        largest = max_nan_f32(largest, amax[g]);
    }
    const bool finite = is_finite(largest);
    if (__builtin_expect(!finite, 0)) {
#pragma unroll
        for (int g = 0; g < GROUPS; ++g) {
            u32 group[WORDS];
            group_words(w, g, group);
            amax[g] = amax_packed(group);
        }
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
    // The largest |x * inv| of each group is amax * inv (rounding is monotone);
    // NaN when inv is NaN, or infinite, or 0 * Inf.
    float largest_inv = inv[0];
    float largest_scaled = mul_rn(amax[0], inv[0]);
#pragma unroll
    for (int g = 1; g < GROUPS; ++g) {
        largest_inv = max_nan_f32(largest_inv, inv[g]);
        largest_scaled = max_nan_f32(largest_scaled, mul_rn(amax[g], inv[g]));
    }
    if (__builtin_expect(finite & (largest_scaled < 7.0f), 1)) {
        quantize_codes64<SF_VEC, true, false>(w, inv, out.q);
    } else if (finite & is_finite(largest_inv)) {
        quantize_codes64<SF_VEC, true, true>(w, inv, out.q);
    } else {
        quantize_codes64<SF_VEC, false, true>(w, inv, out.q);
    }
    return out;
}
