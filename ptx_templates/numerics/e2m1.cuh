// Spec step 6: float32 products x * inv to e2m1 codes, and the value of a
// code (for dequantization).
#pragma once
#include "ptx/convert.cuh"
#include "ptx/float_math.cuh"
#include "ptx/integer_math.cuh"
#include "ptx/permute.cuh"

// Software e2m1, for targets without the conversion instruction
// (FP4Q_HAS_CVT_E2M1), as magnitude codes and sign bits.
//
// The e2m1 grid has step 0.5 below 2, 1 below 4 and 2 above, so the code
// of |v| is rint(min(2|v|, |v| + 2, |v|/2 + 4, 7)); rint is monotone and the
// shifts by 2 and 4 are even, so each branch can be rounded separately. Each
// branch is one fma/add onto the integer grid of M = 1.5 * 2^23, which
// rounds to nearest even exactly once and leaves the integer in the low
// mantissa bits. The branches are positive floats (|v| >= 0, M > 0), or
// NaN, and the minimum is taken of their bit patterns as unsigned integers,
// which order like the values (NaN and Inf above every finite one): the
// minima of the three branches, feeding each other, are then one
// three-input integer minimum on sm_90a where two float minima took two
// instructions. NaN: every branch is NaN, whose pattern is above
// bits(M + 7), so the clamp gives code 7, as min.f32 dropping the NaN did.
// Returns bits(M) + code.
template <bool CLAMP>
FP4Q_DEVICE u32 e2m1_magnitude_biased(float v) {
    const float m = 12582912.0f;
    const float a = abs_f32(v);
    const u32 t0 = f32_bits(fma_rn(a, 2.0f, m));
    const u32 t1 = f32_bits(add_rn(a, m + 2.0f));
    const u32 t2 = f32_bits(fma_rn(a, 0.5f, m + 4.0f));
    return min_u32(min_u32(t0, t1), CLAMP ? min_u32(t2, f32_bits(m + 7.0f)) : t2);
}

// The magnitude codes of eight floats, v[0] in the low nibble, sign bits
// clear. Each pair of biased codes becomes a byte by one multiply-add,
// c0 + (c1 << 4), whose low byte is code0 + 16 * code1 exactly: the bias
// bits(M) = 0x4B400000 has a zero low byte, and so has bits(M) << 4, and
// code0 + 16 * code1 <= 119 carries nothing out of the byte. Three byte
// permutes then gather the four low bytes into the word, and no bias is
// left to remove (the multiply-add tree took two more multiply-adds and a
// subtraction of the bias for the same word).
FP4Q_DEVICE u32 e2m1x8_pack_biased(const u32 (&c)[8]) {
    u32 pair[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) pair[i] = c[2 * i] + (c[2 * i + 1] << 4);
    // Byte 0 of a and byte 0 of b (selector 4), twice, then the low half-words of both.
    return prmt_b32(prmt_b32(pair[0], pair[1], 0x0040u), prmt_b32(pair[2], pair[3], 0x0040u), 0x5410u);
}

template <bool CLAMP>
FP4Q_DEVICE u32 e2m1x8_magnitudes(const float (&v)[8]) {
    u32 c[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) c[i] = e2m1_magnitude_biased<CLAMP>(v[i]);
    return e2m1x8_pack_biased(c);
}

// The fast variant (input signs, no clamp: |x * inv| < 7) for a power-of-two
// inverse scale inv (MXFP4's 2^-e), from the inputs x themselves: there
// x * inv is exact unless it underflows, so 2|v|, |v| and |v|/2 are |x|
// times two_inv = 2 inv, inv and half_inv = inv / 2 exactly (the caller
// passes those three only where they are exact powers of two, inv <= 2^126),
// and each branch of e2m1_magnitude_biased rounds the same real number onto
// the grid of M in one FMA, with no multiply for the product first. Where
// x * inv underflows (|v| < 2^-126) both ways give M, M + 2 and M + 4 and the
// code 0. The factors may also be any finite positive numbers for a group
// of zeros, whose products are 0 either way.
FP4Q_DEVICE u32 e2m1x8_pow2_magnitudes(const float (&x)[8], float two_inv, float inv, float half_inv) {
    const float m = 12582912.0f;
    u32 c[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const float a = abs_f32(x[i]);
        c[i] = min_u32(min_u32(f32_bits(fma_rn(a, two_inv, m)), f32_bits(fma_rn(a, inv, m + 2.0f))),
                       f32_bits(fma_rn(a, half_inv, m + 4.0f)));
    }
    return e2m1x8_pack_biased(c);
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

// Eight floats v (products of the packed inputs w0..w3 and an inverse
// scale) to a word of eight e2m1 codes, v[0] in the low nibble. The
// software conversion comes in three variants, <INPUT_SIGNS, CLAMP>:
//   <false, true>: exact for every product, NaN and infinities included;
//   <true,  true>: exact when no product is NaN: then x * inv has the sign
//                  of x (inv is +0, positive or NaN), so the sign bits can be
//                  read off the inputs;
//   <true, false>: also needs every |x * inv| < 7, which a scale rounded to
//                  nearest gives (|x * inv| <= 6 * (1 + 2^-4) for a normal
//                  e4m3 scale): rint(|v|/2 + 4) cannot pass 7, so no clamp.
// The hardware conversion is exact for all of them.
template <bool INPUT_SIGNS, bool CLAMP>
FP4Q_DEVICE u32 e2m1x8(const float (&v)[8], u32 w0, u32 w1, u32 w2, u32 w3) {
    static_assert(CLAMP || INPUT_SIGNS, "a NaN product needs the clamp");
    if constexpr (FP4Q_HAS_CVT_E2M1) {
        u32 word = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) word |= cvt_rn_satfinite_e2m1x2_f32(v[2 * i + 1], v[2 * i]) << (8 * i);
        return word;
    } else {
        const u32 signs = INPUT_SIGNS ? e2m1x8_input_signs(w0, w1, w2, w3) : e2m1x8_signs(v);
        return e2m1x8_magnitudes<CLAMP>(v) | signs;
    }
}

// The fast variant of e2m1x8 for a power-of-two inverse scale, from the
// inputs x (the four packed words they came from) and the three factors of
// e2m1x8_pow2_magnitudes; software conversion only.
FP4Q_DEVICE u32 e2m1x8_pow2(const float (&x)[8], u32 w0, u32 w1, u32 w2, u32 w3, float two_inv, float inv,
                            float half_inv) {
    return e2m1x8_pow2_magnitudes(x, two_inv, inv, half_inv) | e2m1x8_input_signs(w0, w1, w2, w3);
}

// The general conversion, exact for every product.
FP4Q_DEVICE u32 e2m1x8(const float (&v)[8]) { return e2m1x8<false, true>(v, 0u, 0u, 0u, 0u); }

// The value of a code (bit 3 the sign). Its three magnitude bits at float32
// bits 22..24 give a float whose exponent field is the e2m1 exponent and
// whose top mantissa bit is the e2m1 mantissa; the biases differ by 126
// (code 1, 0.5, lands on the subnormal 2^-127), so one exact multiply by
// 2^126 makes it the code's value.
FP4Q_DEVICE float e2m1_value(u32 code) {
    const u32 bits = ((code & 7u) << 22) | ((code & 8u) << 28);
    return mul_rn(f32_from_bits(bits), 0x1p126f);
}

// The values of the N (4 or 8) codes of `codes`, code i in bits 4i..4i+3,
// exactly. Where the target converts e4m3 (FP4Q_HAS_CVT_E4M3), four codes
// at a time become e4m3 bytes by two shifts and masks: a code's exponent
// bits at the byte's lowest two exponent bits and its mantissa bit at the
// byte's top mantissa bit make the byte's value the code's value times
// 2^-6 (the biases differ by 6; code 1, 0.5, lands on the e4m3 subnormal
// 2^-7), sign at the byte's sign. Pairs of bytes become pairs of halves,
// exactly, which an exact multiply by 64 in f16 (values up to 6) makes the
// codes' values, and widening to float32 is exact: the same values as
// e2m1_value, for about half the instructions per code.
template <int N>
FP4Q_DEVICE void e2m1_values(u32 codes, float (&v)[N]) {
    static_assert(N == 4 || N == 8, "one or two words of four codes");
    if constexpr (FP4Q_HAS_CVT_E4M3) {
        // Bytes of codes 0, 2, 4, 6 (low nibbles) and 1, 3, 5, 7 (high nibbles).
        const u32 even = ((codes << 2) & 0x1C1C1C1Cu) | ((codes << 4) & 0x80808080u);
        const u32 odd = ((codes >> 2) & 0x1C1C1C1Cu) | (codes & 0x80808080u);
        const u32 sixty_four = 0x54005400u;  // 64.0 in both halves
#pragma unroll
        for (int i = 0; i < N / 4; ++i) {
            const u32 e = mul_rn_f16x2(cvt_rn_f16x2_e4m3x2(even >> (16 * i)), sixty_four);  // codes 4i, 4i + 2
            const u32 o = mul_rn_f16x2(cvt_rn_f16x2_e4m3x2(odd >> (16 * i)), sixty_four);   // codes 4i + 1, 4i + 3
            v[4 * i] = cvt_f32_f16(static_cast<u16>(e));
            v[4 * i + 1] = cvt_f32_f16(static_cast<u16>(o));
            v[4 * i + 2] = cvt_f32_f16(static_cast<u16>(e >> 16));
            v[4 * i + 3] = cvt_f32_f16(static_cast<u16>(o >> 16));
        }
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i) v[i] = e2m1_value(codes >> (4 * i));
    }
}
