// MXFP4 scales (spec "MXFP4"): the e8m0 exponent of a group from its amax,
// and the value of an e8m0 byte.
#pragma once
#include "ptx/float_math.cuh"

// floor(log2(x)) of a positive finite float, from its bits.
FP4Q_DEVICE int floor_log2(u32 bits) {
    const int biased = static_cast<int>(bits >> 23);
    return biased ? biased - 127 : (31 - __clz(bits)) - 149;
}

// The group's exponent e. floor (RCEIL false): floor(log2(amax)) - 2; rceil:
// the smallest e with 2^e >= amax/6 (amax * R6 in float32). amax == 0 (or
// amax * R6 underflowing to 0) gives -127, amax == Inf gives 127, everything
// clamps to [-127, 127].
//
// The common case first, in a few integer operations on the float's bits:
// rceil, t normal and below 2^127 (or 0): ceil(log2 t) is t's exponent
// field, plus one unless its mantissa is 0, so (t + 0x7FFFFF) >> 23 - 127,
// in [-126, 127] there; t == 0 gives -127 the same way. floor, amax normal
// and finite (or 0): floor(log2(amax)) - 2 is its exponent field - 129,
// clamped at -127 (which also takes amax == 0). These are the general
// code's values on those inputs, which it keeps for the rest (subnormal t
// or amax, Inf, NaN).
template <bool RCEIL>
FP4Q_DEVICE int mx_exponent(float amax) {
    const u32 t = RCEIL ? f32_bits(mul_rn(amax, f32_from_bits(0x3E2AAAABu))) : f32_bits(amax);
    if (__builtin_expect((t - 0x00800000u < (RCEIL ? 0x7E800000u : 0x7F000000u)) | (t == 0u), 1)) {
        const int e = RCEIL ? static_cast<int>((t + 0x7FFFFFu) >> 23) - 127 : static_cast<int>(t >> 23) - 129;
        return e < -127 ? -127 : e;
    }
    if (!(amax > 0.0f)) return -127;
    if (amax == f32_from_bits(0x7F800000u)) return 127;
    int e;
    if constexpr (RCEIL) {
        const u32 t = f32_bits(mul_rn(amax, f32_from_bits(0x3E2AAAABu)));
        if (t == 0) return -127;
        const bool power_of_two = (t >> 23) ? (t & 0x7FFFFFu) == 0 : (t & (t - 1)) == 0;
        e = floor_log2(t) + (power_of_two ? 0 : 1);
    } else {
        e = floor_log2(f32_bits(amax)) - 2;
    }
    return e < -127 ? -127 : (e > 127 ? 127 : e);
}

// 2^-e as a float32, exact (2^-127 is the subnormal 0x00400000): the inverse
// scale of a group with exponent e.
FP4Q_DEVICE float exp2_neg(int e) {
    return e == 127 ? f32_from_bits(0x00400000u) : f32_from_bits(static_cast<u32>(127 - e) << 23);
}

// e8m0 byte to 2^(byte - 127): the byte is the float32 exponent field,
// except 0 (2^-127 is subnormal) and 0xFF (the e8m0 NaN).
FP4Q_DEVICE float e8m0_value(u32 byte) {
    if (byte == 0xFFu) return f32_from_bits(0x7FFFFFFFu);
    return f32_from_bits(byte == 0u ? 0x00400000u : byte << 23);
}
