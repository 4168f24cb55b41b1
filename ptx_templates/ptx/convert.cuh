// Conversions between float32 and the narrow formats (e4m3, e2m1, f16, bf16),
// and to integers.
#pragma once
#include "ptx/types.cuh"

// Two floats to two e4m3 bytes: `hi` lands in bits 8..15, `lo` in 0..7.
// satfinite clamps |x| > 448 (and Inf) to 448 and keeps NaN as 0x7F.
FP4Q_DEVICE u32 cvt_rn_satfinite_e4m3x2_f32(float hi, float lo) {
    u16 d;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
    return d;
}

// Two e4m3 bytes (in the low 16 bits) to two halves, exactly.
FP4Q_DEVICE u32 cvt_rn_f16x2_e4m3x2(u32 packed) {
    u32 d;
    u16 s = static_cast<u16>(packed);
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(d) : "h"(s));
    return d;
}

// Two floats to two bf16 (round to nearest even): `hi` in bits 16..31, `lo` in 0..15.
FP4Q_DEVICE u32 cvt_rn_bf16x2_f32(float hi, float lo) {
    u32 d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}

// Two floats to two halves (round to nearest even): `hi` in bits 16..31, `lo` in 0..15.
FP4Q_DEVICE u32 cvt_rn_f16x2_f32(float hi, float lo) {
    u32 d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}

FP4Q_DEVICE float cvt_f32_f16(u16 h) {
    float d;
    asm("cvt.f32.f16 %0, %1;" : "=f"(d) : "h"(h));
    return d;
}

// Two floats to one byte of e2m1 codes: `hi` in bits 4..7, `lo` in 0..3.
FP4Q_DEVICE u32 cvt_rn_satfinite_e2m1x2_f32(float hi, float lo) {
    u32 d;
    asm("{\n\t.reg .b8 t;\n\t"
        "cvt.rn.satfinite.e2m1x2.f32 t, %1, %2;\n\t"
        "cvt.u32.u8 %0, t;\n\t}"
        : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}

// A float to an unsigned integer, rounded toward zero (floor for a >= 0);
// NaN gives 0, values beyond the range saturate.
FP4Q_DEVICE u32 cvt_rzi_u32_f32(float a) {
    u32 d;
    asm("cvt.rzi.u32.f32 %0, %1;" : "=r"(d) : "f"(a));
    return d;
}
