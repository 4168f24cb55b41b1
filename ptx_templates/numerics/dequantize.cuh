// Dequantization (NVFP4_SPEC.md "Dequantization", "MXFP4"). Flags from the
// config: FP4Q_MXFP4 (e8m0 scales of 32-element groups, else e4m3 scales of
// 16 and a tensor scale), FP4Q_OUT_F32 (float32 output, else bf16).
#pragma once
#include "numerics/e2m1.cuh"
#include "numerics/e4m3.cuh"
#include "numerics/e8m0.cuh"
#include "numerics/tensor_scale.cuh"

constexpr int GROUP = FP4Q_MXFP4 ? 32 : 16;

// One output unit is 16 bytes: 4 float32 or 8 bf16 values, 2 or 4 bytes of codes.
constexpr int UNIT = FP4Q_OUT_F32 ? 4 : 8;

// The group's multiplier d: float32(sf) * (1 / tensor_sf) for NVFP4, 2^e for MXFP4.
FP4Q_DEVICE float group_scale(u32 byte, float rcp_tensor_sf) {
    if constexpr (FP4Q_MXFP4) {
        return e8m0_value(byte);
    } else {
        return mul_rn(e4m3_value(byte), rcp_tensor_sf);
    }
}

// 1 / tensor_sf, correctly rounded; MXFP4 has no tensor scale and never
// reads one.
FP4Q_DEVICE float rcp_tensor_sf(float value, const float* ptr) {
    if constexpr (FP4Q_MXFP4) {
        return 1.0f;
    } else {
        return rcp_rn(launch_tensor_sf(value, ptr));
    }
}

// One unit: the UNIT codes of `codes` (code i in bits 4i..4i+3) times d, as
// the 16 bytes of output in memory order.
FP4Q_DEVICE void dequantize_unit(u32 codes, float d, u32 (&out)[4]) {
    float y[UNIT];
    e2m1_values(codes, y);
#pragma unroll
    for (int i = 0; i < UNIT; ++i) y[i] = mul_rn(y[i], d);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        if constexpr (FP4Q_OUT_F32) {
            out[w] = f32_bits(y[w]);
        } else {
            out[w] = cvt_rn_bf16x2_f32(y[2 * w + 1], y[2 * w]);
        }
    }
}
