// The 16-bit input type, bf16 or (FP4Q_INPUT_FP16) fp16: widening to
// float32 and packed maxima. Inputs come as packed pairs: element 2i sits in
// the low half of word i (little-endian memory order).
#pragma once
#include "ptx/convert.cuh"
#include "ptx/float_math.cuh"

// float32 x (FP4Q_INPUT_F32) is read by the plain SIMT kernel alone, by its
// own path; what follows is for the 16-bit types.
static_assert(!(FP4Q_INPUT_F32 && FP4Q_INPUT_FP16), "one input type");

// The low and high element of a pair, as float32, exactly.
FP4Q_DEVICE float input_lo(u32 w) {
    if constexpr (FP4Q_INPUT_FP16) {
        return cvt_f32_f16(static_cast<u16>(w));
    } else {
        return f32_from_bits(w << 16);
    }
}

FP4Q_DEVICE float input_hi(u32 w) {
    if constexpr (FP4Q_INPUT_FP16) {
        return cvt_f32_f16(static_cast<u16>(w >> 16));
    } else {
        return f32_from_bits(w & 0xFFFF0000u);
    }
}

// N packed pairs as 2N float32 values, exactly, element 0 first: a group
// for float32 arithmetic (a transform, 4/6's errors).
template <int N>
FP4Q_DEVICE void input_values(const u32 (&w)[N], float (&v)[2 * N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
        v[2 * i] = input_lo(w[i]);
        v[2 * i + 1] = input_hi(w[i]);
    }
}

// Per-lane maximum of two pairs; a NaN lane loses.
FP4Q_DEVICE u32 max_x2(u32 a, u32 b) {
    if constexpr (FP4Q_INPUT_FP16) {
        return max_f16x2(a, b);
    } else {
        return max_bf16x2(a, b);
    }
}

// Per-lane maximum of two pairs; a NaN lane wins.
FP4Q_DEVICE u32 max_nan_x2(u32 a, u32 b) {
    if constexpr (FP4Q_INPUT_FP16) {
        return max_nan_f16x2(a, b);
    } else {
        return max_nan_bf16x2(a, b);
    }
}

// Both elements of a pair with the sign bits cleared.
constexpr u32 MAGNITUDE_X2 = 0x7FFF7FFFu;

// Per-lane max(|a|, |b|), NaN winning; the sign bits are garbage. One
// instruction where the target takes |x| in the maximum (FP4Q_HAS_MAX_ABS_X2),
// else the signs are cleared first.
FP4Q_DEVICE u32 max_nan_abs_x2(u32 a, u32 b) {
    if constexpr (FP4Q_HAS_MAX_ABS_X2) {
        if constexpr (FP4Q_INPUT_FP16) {
            return max_nan_xorsign_abs_f16x2(a, b);
        } else {
            return max_nan_xorsign_abs_bf16x2(a, b);
        }
    } else if constexpr (FP4Q_INPUT_FP16) {
        return max_nan_f16x2(a & MAGNITUDE_X2, b & MAGNITUDE_X2);
    } else {
        return max_nan_bf16x2(a & MAGNITUDE_X2, b & MAGNITUDE_X2);
    }
}

// Two float32 results rounded to nearest even into the input type, packed as
// the input is (`lo` the low half): what the unfused composition stores.
FP4Q_DEVICE u32 round_to_input_x2(float hi, float lo) {
    if constexpr (FP4Q_INPUT_FP16) {
        return cvt_rn_f16x2_f32(hi, lo);
    } else {
        return cvt_rn_bf16x2_f32(hi, lo);
    }
}
