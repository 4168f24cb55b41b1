// The TMA kernel's consumer step: one chunk of 64 elements of a row, 32
// packed input words in, 8 words of e2m1 codes and the chunk's scale bytes
// out.
#pragma once
#include "numerics/amax.cuh"
#include "numerics/quantize_group.cuh"

// The chunk's codes and its scale bytes: four e4m3 (NVFP4, groups of 16) or
// two e8m0 (MXFP4, groups of 32), group 0 in the low byte.
struct Chunk64 {
    u32 q[8];
    u32 sf;
};

template <int WORDS>
FP4Q_DEVICE void group_words(const u32 (&w)[32], int g, u32 (&out)[WORDS]) {
#pragma unroll
    for (int i = 0; i < WORDS; ++i) out[i] = w[g * WORDS + i];
}

// Which e2m1 variant is exact is decided once per chunk (quantize_e2m1_words).
template <int SF_VEC>
FP4Q_DEVICE Chunk64 quantize_chunk64(const u32 (&w)[32], float tensor_sf, float rcp_tensor_sf) {
    constexpr int GROUPS = 64 / SF_VEC;
    constexpr int WORDS = SF_VEC / 2;
    float amax[GROUPS];
    float largest = 0.0f;  // NaN if any element is
#pragma unroll
    for (int g = 0; g < GROUPS; ++g) {
        u32 group[WORDS];
        group_words(w, g, group);
        amax[g] = amax_nan(group);
        largest = max_nan_f32(largest, amax[g]);
    }
    const bool finite = is_finite(largest);
    if (__builtin_expect(!finite, 0)) {
#pragma unroll
        for (int g = 0; g < GROUPS; ++g) {
            u32 group[WORDS];
            group_words(w, g, group);
            amax[g] = amax_packed(group);
        }
    }
    float inv[GROUPS];
    Chunk64 out;
    if constexpr (SF_VEC == 16) {
        const u32 lo = nvfp4_scale_pair(amax[0], amax[1], tensor_sf, rcp_tensor_sf, inv[0], inv[1]);
        const u32 hi = nvfp4_scale_pair(amax[2], amax[3], tensor_sf, rcp_tensor_sf, inv[2], inv[3]);
        out.sf = lo | (hi << 16);
    } else {
        const int e0 = mx_exponent<FP4Q_MX_RCEIL>(amax[0]);
        const int e1 = mx_exponent<FP4Q_MX_RCEIL>(amax[1]);
        inv[0] = exp2_neg(e0);
        inv[1] = exp2_neg(e1);
        out.sf = static_cast<u32>(e0 + 127) | (static_cast<u32>(e1 + 127) << 8);
    }
    float largest_inv = inv[0];
    float largest_scaled = mul_rn(amax[0], inv[0]);
#pragma unroll
    for (int g = 1; g < GROUPS; ++g) {
        largest_inv = max_nan_f32(largest_inv, inv[g]);
        largest_scaled = max_nan_f32(largest_scaled, mul_rn(amax[g], inv[g]));
    }
    quantize_e2m1_words<8>(w, [&](int i) { return inv[i * 8 / SF_VEC]; }, finite, largest_scaled, largest_inv, out.q);
    return out;
}
