// Quantizing packed inputs: the scale byte and inverse scale of one group
// from its amax, and the codes of eight elements.
#pragma once
#include "numerics/e2m1.cuh"
#include "numerics/e4m3.cuh"
#include "numerics/e8m0.cuh"
#include "numerics/input.cuh"

// The scale byte of one group from its amax, and the inverse scale its
// elements are multiplied by: e4m3 (NVFP4, SF_VEC 16) or e8m0 (MXFP4, 32).
template <int SF_VEC>
FP4Q_DEVICE u32 group_scale_byte(float amax, float tensor_sf, float rcp_tensor_sf, float& inv) {
    if constexpr (SF_VEC == 16) {
        float unused;
        return nvfp4_scale_pair(amax, 0.0f, tensor_sf, rcp_tensor_sf, inv, unused) & 0xFFu;
    } else {
        const int e = mx_exponent<FP4Q_MX_RCEIL>(amax);
        inv = exp2_neg(e);
        return static_cast<u32>(e + 127);
    }
}

// Eight packed inputs times `inv` to one word of eight e2m1 codes.
template <bool INPUT_SIGNS = false, bool CLAMP = true>
FP4Q_DEVICE u32 quantize_e2m1x8(u32 w0, u32 w1, u32 w2, u32 w3, float inv) {
    const float v[8] = {mul_rn(input_lo(w0), inv), mul_rn(input_hi(w0), inv), mul_rn(input_lo(w1), inv),
                        mul_rn(input_hi(w1), inv), mul_rn(input_lo(w2), inv), mul_rn(input_hi(w2), inv),
                        mul_rn(input_lo(w3), inv), mul_rn(input_hi(w3), inv)};
    return e2m1x8<INPUT_SIGNS, CLAMP>(v, w0, w1, w2, w3);
}
