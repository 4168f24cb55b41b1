// NVFP4 quantization without TMA: one thread per 16-element group, plain
// loads and stores. Serves the shapes and pointers that TMA cannot address
// (a packed row stride that is not a multiple of 16 bytes, misaligned
// bases). Same numerics header as the TMA kernel, so the same bits.
#include "nvfp4_math.cuh"

FP4Q_DEVICE u32 load_pair(const u16* p) {
    return static_cast<u32>(p[0]) | (static_cast<u32>(p[1]) << 16);
}

extern "C" __global__ void __launch_bounds__(SIMT_THREADS)
fp4q_quantize_nvfp4_simt(const u16* __restrict__ x, i64 x_row_stride,
                         u8* __restrict__ q, u8* __restrict__ sf,
                         float tensor_sf_value, const float* __restrict__ tensor_sf_ptr,
                         i32 rows, i32 cols) {
    griddepcontrol_wait();
    griddepcontrol_launch_dependents();
#if FP4Q_TENSOR_SF_BY_POINTER
    const float tensor_sf = ld_global_f32(tensor_sf_ptr);
#else
    const float tensor_sf = tensor_sf_value;
#endif
    const float rcp_tensor_sf = rcp_rn(tensor_sf);
    const int groups = cols / 16;
#if FP4Q_SF_SWIZZLED
    // The padded 128 x 4 domain, so that every padding byte is written too.
    const i64 domain_rows = (static_cast<i64>(rows) + 127) / 128 * 128;
    const int domain_groups = (groups + 3) / 4 * 4;
#else
    const i64 domain_rows = rows;
    const int domain_groups = groups;
#endif
    const i64 total = domain_rows * domain_groups;
    for (i64 idx = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<i64>(gridDim.x) * blockDim.x) {
        const i64 m = idx / domain_groups;
        const int j = static_cast<int>(idx % domain_groups);
        u32 sf_byte = 0;
        if (m < rows && j < groups) {
            const u16* src = x + m * x_row_stride + j * 16;
            u32 w[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) w[i] = load_pair(src + 2 * i);
            float inv, unused;
            sf_byte = nvfp4_scale_pair(amax_packed(w), 0.0f, tensor_sf, rcp_tensor_sf, inv, unused) & 0xFFu;
            const u32 lo = quantize_e2m1x8(w[0], w[1], w[2], w[3], inv);
            const u32 hi = quantize_e2m1x8(w[4], w[5], w[6], w[7], inv);
            u8* dst = q + m * (cols / 2) + j * 8;
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                dst[b] = static_cast<u8>(lo >> (8 * b));
                dst[4 + b] = static_cast<u8>(hi >> (8 * b));
            }
        }
#if FP4Q_SF_SWIZZLED
        const i64 offset = ((m / 128) * (domain_groups / 4) + j / 4) * 512 + (m % 32) * 16 +
                           ((m % 128) / 32) * 4 + j % 4;
#else
        const i64 offset = m * groups + j;
#endif
        sf[offset] = static_cast<u8>(sf_byte);
    }
}
