// SiLU·mul (NVFP4_SPEC.md, "The project's exact sequences: fused serving
// quantizers"): exp by the spec's fixed sequence of correctly rounded
// float32 operations, silu(g) = g / (1 + exp(-g)), and h = silu(g) * up
// rounded once into the input type. Every operation is an explicit .rn
// instruction (no contraction, no approximation), so the bits are the numpy
// reference's.
#pragma once
#include "numerics/input.cuh"
#include "ptx/float_math.cuh"

// exp(x), the spec's sequence; see the spec for why each step is exact.
FP4Q_DEVICE float exp_f32(float x) {
    const float m = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer in the low mantissa bits
    const float xc = min_nan_f32(max_nan_f32(x, -104.0f), 89.0f);
    const float j = add_rn(mul_rn(xc, f32_from_bits(0x3FB8AA3Bu)), m);
    const float kf = sub_rn(j, m);
    const float r = sub_rn(sub_rn(xc, mul_rn(kf, f32_from_bits(0x3F317200u))), mul_rn(kf, f32_from_bits(0x35BFBE8Eu)));
    float p = f32_from_bits(0x3AB5121Du);
    p = add_rn(mul_rn(p, r), f32_from_bits(0x3C091CF0u));
    p = add_rn(mul_rn(p, r), f32_from_bits(0x3D2AAC79u));
    p = add_rn(mul_rn(p, r), f32_from_bits(0x3E2AAA49u));
    p = add_rn(mul_rn(p, r), f32_from_bits(0x3EFFFFFEu));
    p = add_rn(mul_rn(p, r), 1.0f);
    p = add_rn(mul_rn(p, r), 1.0f);
    // 2^k as two normal factors 2^floor(k/2) and 2^ceil(k/2), read off bits(j) = bits(m) + k.
    const u32 u = f32_bits(j);
    const u32 v = u >> 1;
    const float s1 = f32_from_bits((v << 23) + 0x3F800000u);
    const float s2 = f32_from_bits(((u - v) << 23) + 0x3F800000u);
    return mul_rn(mul_rn(p, s1), s2);
}

// silu(g) * up as float32 (each operation rounded once; the product rounds to float32).
FP4Q_DEVICE float silu_mul_f32(float g, float up) {
    const float s = div_rn(g, add_rn(1.0f, exp_f32(-g)));
    return mul_rn(s, up);
}

// SiLU·mul of a pair of elements, packed: gate word and up word in, h word out,
// each float32 result rounded to nearest even into the input type.
FP4Q_DEVICE u32 silu_mul_x2(u32 gate, u32 up) {
    const float lo = silu_mul_f32(input_lo(gate), input_lo(up));
    const float hi = silu_mul_f32(input_hi(gate), input_hi(up));
    return round_to_input_x2(hi, lo);
}
