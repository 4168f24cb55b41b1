// Quantizing packed inputs: the scale byte and inverse scale of one group
// from its amax, and the codes of eight elements.
#pragma once
#include "numerics/amax.cuh"
#include "numerics/e2m1.cuh"
#include "numerics/e4m3.cuh"
#include "numerics/e8m0.cuh"
#include "numerics/input.cuh"

// The scale byte of one group from its amax: e4m3 (NVFP4, SF_VEC 16), with
// the d whose inverse its elements are multiplied by (inverse_scale), or
// e8m0 (MXFP4, 32), with that inverse scale itself, 2^-e (d is left 0).
template <int SF_VEC>
FP4Q_DEVICE u32 group_scale(float amax, float tensor_sf, float rcp_tensor_sf, float& d, float& inv) {
    if constexpr (SF_VEC == 16) {
        return nvfp4_scale_d(amax, tensor_sf, rcp_tensor_sf, d);
    } else {
        const int e = mx_exponent<FP4Q_MX_RCEIL>(amax);
        d = 0.0f;
        inv = exp2_neg(e);
        return static_cast<u32>(e + 127);
    }
}

// The scale byte of one group and the inverse scale its elements are
// multiplied by.
template <int SF_VEC>
FP4Q_DEVICE u32 group_scale_byte(float amax, float tensor_sf, float rcp_tensor_sf, float& inv) {
    float d;
    const u32 byte = group_scale<SF_VEC>(amax, tensor_sf, rcp_tensor_sf, d, inv);
    if constexpr (SF_VEC == 16) {
        if (__builtin_expect(scales_invert_in_range(rcp_tensor_sf), 1)) {
            inv = inverse_scale<true>(d);
        } else {
            inv = inverse_scale<false>(d);
        }
    }
    return byte;
}

// Words g * N .. g * N + N - 1 of w: group g's packed inputs.
template <int N, int WORDS>
FP4Q_DEVICE const u32 (&words_of(const u32 (&w)[WORDS], int g))[N] {
    return *reinterpret_cast<const u32(*)[N]>(w + g * N);
}

// Eight packed inputs times `inv` to one word of eight e2m1 codes.
template <bool INPUT_SIGNS = false, bool CLAMP = true>
FP4Q_DEVICE u32 quantize_e2m1x8(u32 w0, u32 w1, u32 w2, u32 w3, float inv) {
    const float v[8] = {mul_rn(input_lo(w0), inv), mul_rn(input_hi(w0), inv), mul_rn(input_lo(w1), inv),
                        mul_rn(input_hi(w1), inv), mul_rn(input_lo(w2), inv), mul_rn(input_hi(w2), inv),
                        mul_rn(input_lo(w3), inv), mul_rn(input_hi(w3), inv)};
    return e2m1x8<INPUT_SIGNS, CLAMP>(v, w0, w1, w2, w3);
}

// Eight float32 values (a group's xf held as floats: transformed, or for
// 4/6's candidates) times `inv` to one word of eight codes, v[0] in the low
// nibble, rounded to nearest: spec step 6, exact for every value.
FP4Q_DEVICE u32 quantize_floats8(const float* v, float inv) {
    float p[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) p[i] = mul_rn(v[i], inv);
    return e2m1x8(p);
}

// The fast variant's word for a power-of-two inverse scale (e2m1x8_pow2):
// eight packed inputs and the group's factors {2 inv, inv, inv / 2}.
struct Pow2Factors {
    float two_inv;
    float inv;
    float half_inv;
};

FP4Q_DEVICE u32 quantize_e2m1x8_pow2(u32 w0, u32 w1, u32 w2, u32 w3, const Pow2Factors& f) {
    const float x[8] = {input_lo(w0), input_hi(w0), input_lo(w1), input_hi(w1),
                        input_lo(w2), input_hi(w2), input_lo(w3), input_hi(w3)};
    return e2m1x8_pow2(x, w0, w1, w2, w3, f.two_inv, f.inv, f.half_inv);
}

// Words of eight codes, q[i] from the packed inputs w[4i .. 4i+3] times
// inv_of(i), by one e2m1 variant for all of them.
template <bool INPUT_SIGNS, bool CLAMP, int WORDS, typename InvOf>
FP4Q_DEVICE void quantize_e2m1_words_as(const u32 (&w)[4 * WORDS], InvOf inv_of, u32 (&q)[WORDS]) {
#pragma unroll
    for (int i = 0; i < WORDS; ++i) {
        q[i] = quantize_e2m1x8<INPUT_SIGNS, CLAMP>(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3], inv_of(i));
    }
}

// The same words by the cheapest variant that is exact for all of them,
// decided once, so that the common case runs one branch and no per-element
// checks: `finite` says no input is NaN or infinite; `largest_scaled` is
// the largest amax * inv of their groups, which bounds every |x * inv|
// (rounding is monotone) and is NaN when an inv is NaN or infinite, or
// 0 * Inf; `largest_inv` is the largest inv. `inv_exact` says inv_of gives
// the spec's inverse scales; where it does not (NVFP4 scales whose
// reciprocal left rcp_rn_normal's range), `make_exact()` makes it so first,
// and the general variant follows, so that the common case tests the range
// in the same branch. The conversion instruction is exact for every
// product, so with it there is no variant to decide and one copy of the code.
template <int WORDS, typename InvOf, typename FastWord, typename MakeExact>
FP4Q_DEVICE void quantize_e2m1_words(const u32 (&w)[4 * WORDS], InvOf inv_of, bool finite, float largest_scaled,
                                     float largest_inv, bool inv_exact, MakeExact make_exact, bool fast_word_ok,
                                     FastWord fast_word, u32 (&q)[WORDS]) {
    if constexpr (FP4Q_HAS_CVT_E2M1) {
        if (__builtin_expect(!inv_exact, 0)) make_exact();
        quantize_e2m1_words_as<false, true>(w, inv_of, q);
    } else if (__builtin_expect(inv_exact & finite & (largest_scaled < 7.0f) & fast_word_ok, 1)) {
#pragma unroll
        for (int i = 0; i < WORDS; ++i) q[i] = fast_word(i);
    } else if (inv_exact & finite & (largest_scaled < 7.0f)) {
        quantize_e2m1_words_as<true, false>(w, inv_of, q);
    } else if (!inv_exact) {
        make_exact();
        quantize_e2m1_words_as<false, true>(w, inv_of, q);
    } else if (finite & is_finite(largest_inv)) {
        quantize_e2m1_words_as<true, true>(w, inv_of, q);
    } else {
        quantize_e2m1_words_as<false, true>(w, inv_of, q);
    }
}

// A run of 2 * WORDS consecutive elements of one row, packed inputs w, to
// codes and scale bytes: whole groups (1, 2 or 4 of them), or one thread's
// share of a group whose other shares sit in adjacent lanes. `combine`
// returns a group's amax from this run's share of it (WholeGroups, the
// default, for whole groups); every lane of the warp calls it together.
// Which e2m1 variant is exact is decided once per run (quantize_e2m1_words).
template <int SF_VEC, int WORDS>
struct QuantizedRun {
    static constexpr int GROUPS = 2 * WORDS >= SF_VEC ? 2 * WORDS / SF_VEC : 1;
    static_assert(GROUPS <= 4 && WORDS % 4 == 0, "up to four scale bytes, whole words of codes");
    u32 q[WORDS / 4];
    u32 sf;  // the groups' scale bytes, group 0 in the low byte
};

// The combine step of a run of whole groups: each amax is the group's own.
struct WholeGroups {
    FP4Q_DEVICE float operator()(float amax) const { return amax; }
};

template <int SF_VEC, int WORDS, typename Combine = WholeGroups>
FP4Q_DEVICE QuantizedRun<SF_VEC, WORDS> quantize_run(const u32 (&w)[WORDS], float tensor_sf, float rcp_tensor_sf,
                                                     Combine combine = {}) {
    using Run = QuantizedRun<SF_VEC, WORDS>;
    constexpr int GROUPS = Run::GROUPS;
    constexpr int GROUP_WORDS = WORDS / GROUPS;
    float amax[GROUPS];
    float largest;  // NaN if any element is
#pragma unroll
    for (int g = 0; g < GROUPS; ++g) {
        amax[g] = amax_nan(words_of<GROUP_WORDS>(w, g));
        largest = g == 0 ? amax[0] : max_nan_f32(largest, amax[g]);
    }
    const bool finite = is_finite(largest);
    if (__builtin_expect(!finite, 0)) {
#pragma unroll
        for (int g = 0; g < GROUPS; ++g) amax[g] = amax_packed(words_of<GROUP_WORDS>(w, g));
    }
#pragma unroll
    for (int g = 0; g < GROUPS; ++g) amax[g] = combine(amax[g]);
    // NVFP4: the d of each group and its inverse by rcp_rn_normal, which is
    // rcp.rn where scales_invert_in_range holds (every tensor_sf the spec
    // allows); otherwise quantize_e2m1_words has make_exact redo them by rcp_rn.
    float d[GROUPS];
    float inv[GROUPS];
    Run out;
    out.sf = 0;
    if constexpr (SF_VEC == 16 && GROUPS % 2 == 0) {
#pragma unroll
        for (int g = 0; g < GROUPS; g += 2) {
            out.sf |= nvfp4_scale_pair_d(amax[g], amax[g + 1], tensor_sf, rcp_tensor_sf, d[g], d[g + 1]) << (8 * g);
        }
    } else {
#pragma unroll
        for (int g = 0; g < GROUPS; ++g) {
            out.sf |= group_scale<SF_VEC>(amax[g], tensor_sf, rcp_tensor_sf, d[g], inv[g]) << (8 * g);
        }
    }
    if constexpr (SF_VEC == 16) {
#pragma unroll
        for (int g = 0; g < GROUPS; ++g) inv[g] = inverse_scale<true>(d[g]);
    }
    const bool inv_exact = SF_VEC != 16 || scales_invert_in_range(rcp_tensor_sf);
    float largest_inv = inv[0];
    float largest_scaled = mul_rn(amax[0], inv[0]);
#pragma unroll
    for (int g = 1; g < GROUPS; ++g) {
        largest_inv = max_nan_f32(largest_inv, inv[g]);
        largest_scaled = max_nan_f32(largest_scaled, mul_rn(amax[g], inv[g]));
    }
    // The fast variant's words: NVFP4 multiplies by inv first; MXFP4's inv is
    // a power of two, and e2m1x8_pow2 folds it into the roundings, with the
    // factors {2 inv, inv, inv / 2}, exact where inv <= 2^126 (2^-e, e >= -126;
    // a group of zeros, e = -127, takes 1, which is as good for zeros).
    Pow2Factors factors[GROUPS];
    bool pow2_ok = true;
    if constexpr (SF_VEC == 32 && !FP4Q_HAS_CVT_E2M1) {
        float largest_factor = 0.0f;
#pragma unroll
        for (int g = 0; g < GROUPS; ++g) {
            const float f = amax[g] == 0.0f ? 1.0f : inv[g];
            factors[g] = {mul_rn(f, 2.0f), f, mul_rn(f, 0.5f)};
            largest_factor = g == 0 ? f : max_f32(largest_factor, f);
        }
        pow2_ok = largest_factor <= 0x1p126f;
    }
    const auto fast_word = [&](int i) {
        const u32 w0 = w[4 * i], w1 = w[4 * i + 1], w2 = w[4 * i + 2], w3 = w[4 * i + 3];
        if constexpr (SF_VEC == 32) {
            return quantize_e2m1x8_pow2(w0, w1, w2, w3, factors[i * 4 / GROUP_WORDS]);
        } else {
            return quantize_e2m1x8<true, false>(w0, w1, w2, w3, inv[i * 4 / GROUP_WORDS]);
        }
    };
    quantize_e2m1_words<WORDS / 4>(
        w, [&](int i) { return inv[i * 4 / GROUP_WORDS]; }, finite, largest_scaled, largest_inv, inv_exact,
        [&] {
#pragma unroll
            for (int g = 0; g < GROUPS; ++g) inv[g] = inverse_scale<false>(d[g]);
        },
        pow2_ok, fast_word, out.q);
    return out;
}
