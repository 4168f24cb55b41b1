// Dequantization numerics, bit-exact to NVFP4_SPEC.md ("Dequantization",
// "MXFP4"), shared by the dequantize kernels. Flags from the config:
// FP4Q_MXFP4 (e8m0 scales of 32-element groups, else e4m3 scales of 16 and
// a tensor scale), FP4Q_OUT_F32 (float32 output, else bf16),
// FP4Q_SF_SWIZZLED (the 128x4 scale layout, else linear).
#pragma once
#include "ptx.cuh"
#include "sf_layout.cuh"
#include "tensor_sf.cuh"

#if FP4Q_MXFP4
constexpr int GROUP = 32;
#else
constexpr int GROUP = 16;
#endif

// One output unit is 16 bytes: 4 float32 or 8 bf16 values, 2 or 4 bytes of codes.
#if FP4Q_OUT_F32
constexpr int UNIT = 4;
#else
constexpr int UNIT = 8;
#endif

// The code's three magnitude bits at float32 bits 22..24 give a float whose
// exponent field is the e2m1 exponent and whose top mantissa bit is the
// e2m1 mantissa; the biases differ by 126 (code 1, 0.5, lands on the
// subnormal 2^-127), so one exact multiply by 2^126 makes it the code's value.
FP4Q_DEVICE float e2m1_value(u32 code) {
    const u32 bits = ((code & 7u) << 22) | ((code & 8u) << 28);
    return mul_rn(f32_from_bits(bits), 0x1p126f);
}

// e4m3 byte to float32, exactly (through f16, which holds every e4m3 value).
FP4Q_DEVICE float e4m3_value(u32 byte) {
    return cvt_f32_f16(static_cast<u16>(cvt_rn_f16x2_e4m3x2(byte & 0xFFu)));
}

// e8m0 byte to 2^(byte - 127): the byte is the float32 exponent field,
// except 0 (2^-127 is subnormal) and 0xFF (the e8m0 NaN).
FP4Q_DEVICE float e8m0_value(u32 byte) {
    if (byte == 0xFFu) return f32_from_bits(0x7FFFFFFFu);
    return f32_from_bits(byte == 0u ? 0x00400000u : byte << 23);
}

// The group's multiplier d: float32(sf) * (1 / tensor_sf) for NVFP4, 2^e for MXFP4.
FP4Q_DEVICE float group_scale(u32 byte, float rcp_tensor_sf) {
#if FP4Q_MXFP4
    return e8m0_value(byte);
#else
    return mul_rn(e4m3_value(byte), rcp_tensor_sf);
#endif
}

// 1 / tensor_sf, correctly rounded; MXFP4 has no tensor scale and never
// reads one.
FP4Q_DEVICE float rcp_tensor_sf(float value, const float* ptr) {
#if FP4Q_MXFP4
    return 1.0f;
#else
    return rcp_rn(launch_tensor_sf(value, ptr));
#endif
}

// One unit: the UNIT codes of `codes` (code i in bits 4i..4i+3) times d, as
// the 16 bytes of output in memory order.
FP4Q_DEVICE void dequantize_unit(u32 codes, float d, u32 (&out)[4]) {
    float y[UNIT];
#pragma unroll
    for (int i = 0; i < UNIT; ++i) y[i] = mul_rn(e2m1_value(codes >> (4 * i)), d);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
#if FP4Q_OUT_F32
        out[w] = f32_bits(y[w]);
#else
        out[w] = cvt_rn_bf16x2_f32(y[2 * w + 1], y[2 * w]);
#endif
    }
}
