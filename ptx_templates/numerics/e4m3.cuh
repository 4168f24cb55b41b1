// NVFP4 scales: e4m3 bytes from group amaxes (spec steps 3-5), and the
// value of an e4m3 byte.
#pragma once
#include "ptx/convert.cuh"
#include "ptx/float_math.cuh"

// Two e4m3 bytes (a in the low byte) to float32, exactly: through f16,
// which holds every e4m3 value.
FP4Q_DEVICE void e4m3x2_values(u32 bytes, float& a, float& b) {
    const u32 halves = cvt_rn_f16x2_e4m3x2(bytes);
    a = cvt_f32_f16(static_cast<u16>(halves));
    b = cvt_f32_f16(static_cast<u16>(halves >> 16));
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
    const u32 bytes = cvt_rn_satfinite_e4m3x2_f32(s_b, s_a);
    float sf_a, sf_b;
    e4m3x2_values(bytes, sf_a, sf_b);
    const float d_a = mul_rn(sf_a, rcp_tensor_sf);
    const float d_b = mul_rn(sf_b, rcp_tensor_sf);
    // d == 0 gives inv = 0; a NaN d fails the test and yields a NaN inv.
    inv_a = (d_a == 0.0f) ? 0.0f : rcp_rn(d_a);
    inv_b = (d_b == 0.0f) ? 0.0f : rcp_rn(d_b);
    return bytes;
}
