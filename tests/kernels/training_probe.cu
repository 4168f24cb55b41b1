// Test probe of the training numerics: runs numerics/philox.cuh,
// stochastic.cuh, hadamard.cuh and four_over_six.cuh on raw inputs so the
// GPU tests can compare each with the reference bit for bit. Item i (of
// `items`, a multiple of 16) has 16 float32 values v[16i ..] and gives:
//   philox[4i ..]: Philox4x32-10 of counters[4i ..] under keys[2i ..];
//   group_words[4i ..]: the words of group rng.group + i (rng: seed, offset,
//     group as low/high u32 pairs, then the direction);
//   rounded[16i ..]: e2m1_round_stochastic of each value with rbytes[16i ..];
//   words[2i ..]: e2m1x8_stochastic of its two halves with rbits[4i ..];
//   transformed / inverted[16i ..]: hadamard16 and hadamard16_inverse of its
//     values under `mask`;
//   errors[2i ..]: the squared errors of its candidates 6 and 4 (amax of its
//     values, `tensor_sf`), and scales[i]: bytes 6, 4, the kept one, then 1
//     where 4 was kept;
//   every 16th item also the 16x16 block of items i .. i+15 (its rows):
//     block_errors[2 (i / 16) ..] and block_scales[i / 16] the same way.
#include "numerics/four_over_six.cuh"
#include "numerics/hadamard.cuh"
#include "numerics/philox.cuh"
#include "numerics/stochastic.cuh"

FP4Q_DEVICE float amax16(const float* v) {
    float m = 0.0f;
    for (int e = 0; e < 16; ++e) m = max_f32(m, abs_f32(v[e]));
    return m;
}

FP4Q_DEVICE u32 scale_bytes(const ScaleCandidate& six, const ScaleCandidate& four, float error6, float error4) {
    const bool four_kept = keeps_four(error4, error6);
    return six.byte | (four.byte << 8) | ((four_kept ? four.byte : six.byte) << 16) | (u32(four_kept) << 24);
}

extern "C" __global__ void fp4q_training_probe(
    const u32* __restrict__ counters, const u32* __restrict__ keys, u32* __restrict__ philox,
    const u32* __restrict__ rng, u32* __restrict__ group_words, const float* __restrict__ v,
    const u8* __restrict__ rbytes, u8* __restrict__ rounded, const u32* __restrict__ rbits, u32* __restrict__ words,
    u32 mask, float* __restrict__ transformed, float* __restrict__ inverted, float tensor_sf,
    float* __restrict__ errors, u32* __restrict__ scales, float* __restrict__ block_errors,
    u32* __restrict__ block_scales, i32 items) {
    const float rcp_tensor_sf = rcp_rn(tensor_sf);
    const u64 seed = rng[0] | (u64(rng[1]) << 32);
    const u64 offset = rng[2] | (u64(rng[3]) << 32);
    const u64 group = rng[4] | (u64(rng[5]) << 32);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < items; i += gridDim.x * blockDim.x) {
        u32 c[4] = {counters[4 * i], counters[4 * i + 1], counters[4 * i + 2], counters[4 * i + 3]};
        philox4x32_10(c, keys[2 * i], keys[2 * i + 1]);
        u32 w[4];
        group_random_words(seed, offset, group + u64(i), rng[6], w);
        float x[16];
        for (int e = 0; e < 4; ++e) {
            philox[4 * i + e] = c[e];
            group_words[4 * i + e] = w[e];
        }
        for (int e = 0; e < 16; ++e) {
            x[e] = v[16 * i + e];
            rounded[16 * i + e] = static_cast<u8>(e2m1_round_stochastic(x[e], rbytes[16 * i + e]));
        }
        for (int h = 0; h < 2; ++h) {
            const float eight[8] = {x[8 * h], x[8 * h + 1], x[8 * h + 2], x[8 * h + 3],
                                    x[8 * h + 4], x[8 * h + 5], x[8 * h + 6], x[8 * h + 7]};
            words[2 * i + h] = e2m1x8_stochastic(eight, rbits[4 * i + 2 * h], rbits[4 * i + 2 * h + 1]);
        }
        float y[16], z[16];
        for (int e = 0; e < 16; ++e) y[e] = z[e] = x[e];
        hadamard16(y, mask);
        hadamard16_inverse(z, mask);
        for (int e = 0; e < 16; ++e) {
            transformed[16 * i + e] = y[e];
            inverted[16 * i + e] = z[e];
        }
        const float amax = amax16(x);
        const ScaleCandidate six = scale_candidate(amax, tensor_sf, rcp_tensor_sf, r6());
        const ScaleCandidate four = scale_candidate(amax, tensor_sf, rcp_tensor_sf, R4);
        const float error6 = squared_error16(x, six), error4 = squared_error16(x, four);
        errors[2 * i] = error6;
        errors[2 * i + 1] = error4;
        scales[i] = scale_bytes(six, four, error6, error4);
        const ScaleCandidate kept = four_over_six_scale(x, amax, tensor_sf, rcp_tensor_sf);
        if (kept.byte != ((scales[i] >> 16) & 0xFFu)) scales[i] |= 1u << 31;  // the test sees any disagreement
        if (i % 16 == 0) {
            float block_amax = 0.0f;
            for (int r = 0; r < 16; ++r) block_amax = max_f32(block_amax, amax16(v + 16 * (i + r)));
            const ScaleCandidate b6 = scale_candidate(block_amax, tensor_sf, rcp_tensor_sf, r6());
            const ScaleCandidate b4 = scale_candidate(block_amax, tensor_sf, rcp_tensor_sf, R4);
            float e6 = 0.0f, e4 = 0.0f;
            for (int r = 0; r < 16; ++r) {
                float row[16];
                for (int e = 0; e < 16; ++e) row[e] = v[16 * (i + r) + e];
                e6 = add_rn(e6, squared_error16(row, b6));
                e4 = add_rn(e4, squared_error16(row, b4));
            }
            block_errors[2 * (i / 16)] = e6;
            block_errors[2 * (i / 16) + 1] = e4;
            block_scales[i / 16] = scale_bytes(b6, b4, e6, e4);
        }
    }
}
