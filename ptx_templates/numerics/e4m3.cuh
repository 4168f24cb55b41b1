// NVFP4 scales: e4m3 bytes from group amaxes (spec steps 3-5), and the
// value of an e4m3 byte. Targets without the e4m3 conversion instructions
// (FP4Q_HAS_CVT_E4M3) convert in software, to the same bits.
#pragma once
#include "ptx/convert.cuh"
#include "ptx/float_math.cuh"

// Spec step 4 in software: what cvt.rn.satfinite.e4m3x2.f32 gives for one
// float. |s| is clamped to 448 first (satfinite; Inf too). Below 2^-6 the
// e4m3 step is 2^-9, the ulp of 2^14: adding 2^14 rounds to nearest even
// onto that grid and leaves the code (0..8, 8 being 2^-6) in the low bits.
// From 2^-6 up, rounding the float32 mantissa to its top three bits (to
// nearest even; a carry moves into the exponent) and rebiasing the exponent
// from 127 to 7 gives the code. Any NaN gives 0x7F.
FP4Q_DEVICE u32 software_e4m3(float s) {
    const float a = min_f32(abs_f32(s), 448.0f);
    const u32 bits = f32_bits(a);
    const u32 code = a < 0x1p-6f ? f32_bits(add_rn(a, 0x1p14f)) - f32_bits(0x1p14f)
                                 : ((bits + 0x7FFFFu + ((bits >> 20) & 1u)) >> 20) - (120u << 3);
    return s != s ? 0x7Fu : ((f32_bits(s) >> 24) & 0x80u) | code;
}

// Two floats to two e4m3 bytes (spec step 4): `hi` in bits 8..15, `lo` in 0..7.
FP4Q_DEVICE u32 e4m3x2(float hi, float lo) {
    if constexpr (FP4Q_HAS_CVT_E4M3) {
        return cvt_rn_satfinite_e4m3x2_f32(hi, lo);
    } else {
        return (software_e4m3(hi) << 8) | software_e4m3(lo);
    }
}

// The value of an e4m3 byte in software, exactly. Its seven magnitude bits
// at float32 bits 20..26 give a float whose exponent field is the e4m3
// exponent and whose top three mantissa bits are the e4m3 mantissa; the
// biases differ by 120 (the e4m3 subnormals land on float32 subnormals), so
// one exact multiply by 2^120 makes it the byte's value. 0x7F and 0xFF are
// NaN.
FP4Q_DEVICE float software_e4m3_value(u32 byte) {
    if ((byte & 0x7Fu) == 0x7Fu) return f32_from_bits(0x7FFFFFFFu);
    const u32 bits = ((byte & 0x7Fu) << 20) | ((byte & 0x80u) << 24);
    return mul_rn(f32_from_bits(bits), 0x1p120f);
}

// Two e4m3 bytes (a in the low byte) to float32, exactly: in hardware
// through f16, which holds every e4m3 value.
FP4Q_DEVICE void e4m3x2_values(u32 bytes, float& a, float& b) {
    if constexpr (FP4Q_HAS_CVT_E4M3) {
        const u32 halves = cvt_rn_f16x2_e4m3x2(bytes);
        a = cvt_f32_f16(static_cast<u16>(halves));
        b = cvt_f32_f16(static_cast<u16>(halves >> 16));
    } else {
        a = software_e4m3_value(bytes & 0xFFu);
        b = software_e4m3_value((bytes >> 8) & 0xFFu);
    }
}

FP4Q_DEVICE float e4m3_value(u32 byte) {
    float value, unused;
    e4m3x2_values(byte & 0xFFu, value, unused);
    return value;
}

// Spec steps 3-5 for two groups at once (the e4m3 conversion is a pair
// instruction): the scale bytes, group a in the low byte, and the inverse
// scales the groups' elements are multiplied by.
FP4Q_DEVICE u32 nvfp4_scale_pair(float amax_a, float amax_b, float tensor_sf,
                                 float rcp_tensor_sf, float& inv_a, float& inv_b) {
    const float r6 = f32_from_bits(0x3E2AAAABu);
    const float s_a = mul_rn(tensor_sf, mul_rn(amax_a, r6));
    const float s_b = mul_rn(tensor_sf, mul_rn(amax_b, r6));
    const u32 bytes = e4m3x2(s_b, s_a);
    float sf_a, sf_b;
    e4m3x2_values(bytes, sf_a, sf_b);
    const float d_a = mul_rn(sf_a, rcp_tensor_sf);
    const float d_b = mul_rn(sf_b, rcp_tensor_sf);
    // d == 0 gives inv = 0; a NaN d fails the test and yields a NaN inv.
    inv_a = (d_a == 0.0f) ? 0.0f : rcp_rn(d_a);
    inv_b = (d_b == 0.0f) ? 0.0f : rcp_rn(d_b);
    return bytes;
}
