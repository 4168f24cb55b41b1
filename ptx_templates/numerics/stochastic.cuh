// Stochastic rounding to e2m1 (NVFP4_SPEC.md, "Stochastic rounding"): the
// semantics of cvt.rs.satfinite.e2m1x4.f32, in software on every target.
// NVRTC accepts .rs only for sm_100a and sm_103a, neither of them a target
// fp4q ships (sm_100f's cubin also runs on sm_100, whose byte order of the
// random bits is not probed), so every kernel takes this path, which gives
// the instruction's bits by definition.
#pragma once
#include "ptx/convert.cuh"
#include "ptx/float_math.cuh"
#include "ptx/permute.cuh"

// The e2m1 code of float32 v rounded with random byte r (0..255). For
// |v| < 6 the grid step below |v| is 0.5 below 2, 1 below 4 and 2 above; n
// = floor(|v| / step * 256) (the product by a power of two is exact, the
// conversion truncates) holds the lower neighbour's index within the binade
// above bit 8 and the 8 discarded bits D below it, so (n + r) >> 8 is that
// index plus the carry of D + r, the .rs rule; the binade's first code is
// added back. |v| >= 6 (and Inf) saturates to 6 with v's sign; NaN gives
// 0x7 (+6). The sign is v's: -0 and negative values that round to 0 give 0x8.
FP4Q_DEVICE u32 e2m1_round_stochastic(float v, u32 r) {
    const float a = abs_f32(v);
    const float units_256 = a < 2.0f ? 512.0f : a < 4.0f ? 256.0f : 128.0f;
    const u32 first = a < 2.0f ? 0u : a < 4.0f ? 2u : 4u;
    const u32 magnitude = a < 6.0f ? ((cvt_rzi_u32_f32(mul_rn(a, units_256)) + r) >> 8) + first : 7u;
    return v != v ? 7u : magnitude | ((f32_bits(v) >> 28) & 8u);
}

// The random bytes that one cvt.rs.satfinite.e2m1x4.f32 takes from rbits,
// byte i for value x_i (the spec's mapping: x0 <- rbits[23:16],
// x1 <- bitrev8(rbits[7:0]), x2 <- rbits[31:24], x3 <- bitrev8(rbits[15:8])).
// brev reverses the word, so its bytes 3 and 2 are bitrev8 of bytes 0 and
// 1, and one permute of {brev, rbits} picks bytes 2, 7, 3, 6.
FP4Q_DEVICE u32 cvt_rs_random_bytes(u32 rbits) { return prmt_b32(rbits, brev_b32(rbits), 0x6372u); }

// Eight float32 values, v[0] in the low nibble, rounded as two
// cvt.rs.satfinite.e2m1x4.f32 with the words rbits_lo (v[0..3]) and
// rbits_hi (v[4..7]): one word of eight codes, as e2m1x8 gives.
FP4Q_DEVICE u32 e2m1x8_stochastic(const float (&v)[8], u32 rbits_lo, u32 rbits_hi) {
    const u32 bytes[2] = {cvt_rs_random_bytes(rbits_lo), cvt_rs_random_bytes(rbits_hi)};
    u32 word = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) word |= e2m1_round_stochastic(v[i], (bytes[i / 4] >> (8 * (i % 4))) & 0xFFu) << (4 * i);
    return word;
}

// quantize_floats8 rounded stochastically: eight float32 values times inv,
// rounded with the random words rbits_lo (v[0..3]) and rbits_hi (v[4..7]).
FP4Q_DEVICE u32 quantize_floats8_stochastic(const float* v, float inv, u32 rbits_lo, u32 rbits_hi) {
    float p[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) p[i] = mul_rn(v[i], inv);
    return e2m1x8_stochastic(p, rbits_lo, rbits_hi);
}
