// Test probe: runs the numerics header on raw float32 inputs so the GPU
// tests can compare each step with the reference bit for bit.
// Per pair i: codes[i] = e2m1 byte of (v[2i], v[2i+1]); per pair of amax
// values, the two e4m3 scale bytes and the two inverse scales.
#include "nvfp4_math.cuh"

extern "C" __global__ void fp4q_numerics_probe(const float* __restrict__ v, u8* __restrict__ codes,
                                               const float* __restrict__ amax, u16* __restrict__ sf,
                                               float* __restrict__ inv, float tensor_sf, i32 pairs) {
    const float rcp_tensor_sf = rcp_rn(tensor_sf);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < pairs; i += gridDim.x * blockDim.x) {
        // Through a multiply, as in the kernels, where e2m1 always sees a product.
        codes[i] = static_cast<u8>(e2m1x2(mul_rn(v[2 * i + 1], 1.0f), mul_rn(v[2 * i], 1.0f)));
        float inv_a, inv_b;
        sf[i] = static_cast<u16>(
            nvfp4_scale_pair(amax[2 * i], amax[2 * i + 1], tensor_sf, rcp_tensor_sf, inv_a, inv_b));
        inv[2 * i] = inv_a;
        inv[2 * i + 1] = inv_b;
    }
}
