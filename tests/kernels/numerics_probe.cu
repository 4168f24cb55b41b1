// Test probe: runs the numerics headers on raw float32 inputs so the GPU
// tests can compare each step with the reference bit for bit.
// Per eight floats: one word of e2m1 codes (each value multiplied by 1.0
// first, as the kernels always convert products); per pair of amax values:
// the two e4m3 scale bytes and the two inverse scales. `pairs` is a multiple of 4.
#include "numerics/e2m1.cuh"
#include "numerics/e4m3.cuh"

extern "C" __global__ void fp4q_numerics_probe(const float* __restrict__ v, u32* __restrict__ codes,
                                               const float* __restrict__ amax, u16* __restrict__ sf,
                                               float* __restrict__ inv, float tensor_sf, i32 pairs) {
    const float rcp_tensor_sf = rcp_rn(tensor_sf);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < pairs; i += gridDim.x * blockDim.x) {
        if (i % 4 == 0) {
            float eight[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) eight[e] = mul_rn(v[2 * i + e], 1.0f);
            codes[i / 4] = e2m1x8(eight);
        }
        float inv_a, inv_b;
        sf[i] = static_cast<u16>(
            nvfp4_scale_pair(amax[2 * i], amax[2 * i + 1], tensor_sf, rcp_tensor_sf, inv_a, inv_b));
        inv[2 * i] = inv_a;
        inv[2 * i + 1] = inv_b;
    }
}
