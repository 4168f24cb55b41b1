// Float arithmetic with explicit rounding modes: the spec's bits depend on
// each rounding, so none of these may be contracted into an FMA or replaced
// by an approximation. Plus the maxima and minima the amax and the e2m1
// conversion are built from.
#pragma once
#include "ptx/types.cuh"

FP4Q_DEVICE float mul_rn(float a, float b) {
    float d;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}

FP4Q_DEVICE float fma_rn(float a, float b, float c) {
    float d;
    asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(d) : "f"(a), "f"(b), "f"(c));
    return d;
}

FP4Q_DEVICE float add_rn(float a, float b) {
    float d;
    asm("add.rn.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}

FP4Q_DEVICE float sub_rn(float a, float b) {
    float d;
    asm("sub.rn.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}

FP4Q_DEVICE float sqrt_rn(float a) {
    float d;
    asm("sqrt.rn.f32 %0, %1;" : "=f"(d) : "f"(a));
    return d;
}

FP4Q_DEVICE float rcp_rn(float a) {
    float d;
    asm("rcp.rn.f32 %0, %1;" : "=f"(d) : "f"(a));
    return d;
}

// MUFU.RCP: 1 / a to about an ulp, subnormal inputs flushed (the start of
// rcp.rn's own fast path; numerics/e4m3.cuh: rcp_rn_normal).
FP4Q_DEVICE float rcp_approx_ftz_f32(float a) {
    float d;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(d) : "f"(a));
    return d;
}

FP4Q_DEVICE float div_rn(float a, float b) {
    float d;
    asm("div.rn.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}

// Packed product of two pairs of halves, each rounded to nearest even.
FP4Q_DEVICE u32 mul_rn_f16x2(u32 a, u32 b) {
    u32 d;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

// NaN-dropping maximum/minimum (IEEE maxNum), what the spec's amax needs.
FP4Q_DEVICE float max_f32(float a, float b) {
    float d;
    asm("max.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}

FP4Q_DEVICE float min_f32(float a, float b) {
    float d;
    asm("min.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}

// Packed maxima of two 16-bit floats; like max.f32, a NaN lane loses.
FP4Q_DEVICE u32 max_bf16x2(u32 a, u32 b) {
    u32 d;
    asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

FP4Q_DEVICE u32 max_f16x2(u32 a, u32 b) {
    u32 d;
    asm("max.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

// Packed maxima with NaN propagating (a NaN lane wins).
FP4Q_DEVICE u32 max_nan_bf16x2(u32 a, u32 b) {
    u32 d;
    asm("max.NaN.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

FP4Q_DEVICE u32 max_nan_f16x2(u32 a, u32 b) {
    u32 d;
    asm("max.NaN.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

// max(|a|, |b|) per 16-bit lane with NaN propagating (a NaN lane wins). The
// result's sign is the XOR of the inputs' signs: callers mask it off.
FP4Q_DEVICE u32 max_nan_xorsign_abs_bf16x2(u32 a, u32 b) {
    u32 d;
    asm("max.NaN.xorsign.abs.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

FP4Q_DEVICE u32 max_nan_xorsign_abs_f16x2(u32 a, u32 b) {
    u32 d;
    asm("max.NaN.xorsign.abs.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

// NaN-propagating maximum: a NaN operand gives NaN.
FP4Q_DEVICE float max_nan_f32(float a, float b) {
    float d;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}

// NaN-propagating minimum: a NaN operand gives NaN.
FP4Q_DEVICE float min_nan_f32(float a, float b) {
    float d;
    asm("min.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}

FP4Q_DEVICE float abs_f32(float a) {
    float d;
    asm("abs.f32 %0, %1;" : "=f"(d) : "f"(a));
    return d;
}
