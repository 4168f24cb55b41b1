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

// One float to an e4m3 byte (spec step 4): the pair conversion with +0 in
// the high half, whose byte e4m3(+0) = 0x00 needs no mask, or the software
// one alone.
FP4Q_DEVICE u32 e4m3_byte(float s) {
    if constexpr (FP4Q_HAS_CVT_E4M3) {
        return cvt_rn_satfinite_e4m3x2_f32(0.0f, s);
    } else {
        return software_e4m3(s);
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

// 1 / a correctly rounded, for 2^-126 <= |a| < 2^126 only: the fast path of
// ptxas's own rcp.rn.f32 (the same on sm_80, sm_90a and sm_100f: MUFU.RCP,
// then one Newton step r + r * -(a * r - 1)) without the test of a's
// exponent (biased 1..252) that sends other values to its IEEE slow path,
// so that a caller who knows the range pays three instructions instead of
// a test, a branch and a reconvergence. ptxas negates the residual
// e = a * r - 1 with an FADD.FTZ; here the negation folds into the FMA,
// which differs only for a subnormal e, where |r * e| < 2^-126 |r| is far
// below half an ulp of r and r + r * -e rounds to r either way.
FP4Q_DEVICE float rcp_rn_normal(float a) {
    const float r = rcp_approx_ftz_f32(a);
    const float e = fma_rn(a, r, -1.0f);
    return fma_rn(r, -e, r);
}

// Whether every nonzero d = float32(sf) * rcp_tensor_sf of an NVFP4 scale sf
// is a normal float below 2^126, where rcp_rn_normal is rcp.rn: the nonzero
// |sf| lie in [2^-9, 448] (e4m3, or 448 where satfinite clamps; a NaN sf
// only comes from a NaN tensor_sf, whose rcp fails the test), so
// 2^-117 <= |rcp_tensor_sf| < 2^117 puts |d| in [2^-126, 448 * 2^117), and
// 448 * 2^117 < 2^126 (monotone rounding keeps the products inside). Every
// tensor_sf the spec allows ([2^-126, 2^100]) passes; a device scalar
// outside that range goes to rcp_rn (inverse_scale<false>).
FP4Q_DEVICE bool scales_invert_in_range(float rcp_tensor_sf) {
    const float r = abs_f32(rcp_tensor_sf);
    return (r >= 0x1p-117f) & (r < 0x1p117f);
}

// The inverse scale of d (spec step 5): 0 where d == 0, rcp.rn(d) otherwise
// (a NaN d fails the test and gives a NaN). IN_RANGE: the caller knows d is
// 0 or in rcp_rn_normal's range (scales_invert_in_range); then the
// reciprocal is taken unconditionally (of 0 it is a NaN that the select
// drops), which leaves a select where the test of d was a branch.
template <bool IN_RANGE>
FP4Q_DEVICE float inverse_scale(float d) {
    if constexpr (IN_RANGE) {
        const float r = rcp_rn_normal(d);
        return d == 0.0f ? 0.0f : r;
    } else {
        return d == 0.0f ? 0.0f : rcp_rn(d);
    }
}

// R6 = float32(1/6) (bits 0x3E2AAAAB), which maps a group's amax onto the
// e2m1 maximum 6 (spec step 3).
FP4Q_DEVICE float r6() { return f32_from_bits(0x3E2AAAABu); }

// Spec steps 3-5 up to d, for two groups at once (the e4m3 conversion is a
// pair instruction): the scale bytes, group a in the low byte, and the d
// each group's inverse scale is the inverse of.
FP4Q_DEVICE u32 nvfp4_scale_pair_d(float amax_a, float amax_b, float tensor_sf, float rcp_tensor_sf, float& d_a,
                                   float& d_b) {
    const float s_a = mul_rn(tensor_sf, mul_rn(amax_a, r6()));
    const float s_b = mul_rn(tensor_sf, mul_rn(amax_b, r6()));
    const u32 bytes = e4m3x2(s_b, s_a);
    float sf_a, sf_b;
    e4m3x2_values(bytes, sf_a, sf_b);
    d_a = mul_rn(sf_a, rcp_tensor_sf);
    d_b = mul_rn(sf_b, rcp_tensor_sf);
    return bytes;
}

// The same for one group (a run of one NVFP4 group): one float to convert,
// where the pair's other half (an amax of 0 times tensor_sf) would cost a
// multiply whose byte is thrown away. `ratio` maps the amax onto the e2m1
// maximum: R6, or R4 = 0.25 for the map-to-4 candidate of 4/6.
FP4Q_DEVICE u32 nvfp4_scale_d(float amax, float tensor_sf, float rcp_tensor_sf, float& d, float ratio = r6()) {
    const float s = mul_rn(tensor_sf, mul_rn(amax, ratio));
    const u32 byte = e4m3_byte(s);  // bits 8..15 clear: no mask before the pair decode
    float sf, unused;
    e4m3x2_values(byte, sf, unused);
    d = mul_rn(sf, rcp_tensor_sf);
    return byte;
}

// Spec steps 3-5 for two groups: the scale bytes, group a in the low byte,
// and the inverse scales the groups' elements are multiplied by (by
// rcp_rn_normal where the range allows, as quantize_run does, so that the
// numerics probe tests both).
FP4Q_DEVICE u32 nvfp4_scale_pair(float amax_a, float amax_b, float tensor_sf,
                                 float rcp_tensor_sf, float& inv_a, float& inv_b) {
    float d_a, d_b;
    const u32 bytes = nvfp4_scale_pair_d(amax_a, amax_b, tensor_sf, rcp_tensor_sf, d_a, d_b);
    if (__builtin_expect(scales_invert_in_range(rcp_tensor_sf), 1)) {
        inv_a = inverse_scale<true>(d_a);
        inv_b = inverse_scale<true>(d_b);
    } else {
        inv_a = inverse_scale<false>(d_a);
        inv_b = inverse_scale<false>(d_b);
    }
    return bytes;
}
