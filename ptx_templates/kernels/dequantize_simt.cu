// NVFP4 / MXFP4 dequantization without TMA: one thread per output unit,
// byte loads and element stores. Serves the shapes and pointers that TMA
// and 16-byte stores cannot address (K % 32 != 0, unaligned bases or row
// strides). Same numerics header as the TMA kernel, so the same bits.
#include "layout/scale_layout.cuh"
#include "numerics/dequantize.cuh"
#include "pipeline/pdl.cuh"

extern "C" __global__ void __launch_bounds__(SIMT_THREADS)
fp4q_dequantize_simt(const u8* __restrict__ q, i64 q_row_stride,
                     const u8* __restrict__ sf,
                     u8* __restrict__ out,
                     float tensor_sf_value,
                     const float* __restrict__ tensor_sf_ptr,
                     i32 rows, i32 cols) {
    pdl_wait();
    pdl_launch_dependents();
    const float rcp_tsf = rcp_tensor_sf(tensor_sf_value, tensor_sf_ptr);
    const int groups = cols / GROUP;
    const int units_per_row = cols / UNIT;
    const i64 total = static_cast<i64>(rows) * units_per_row;
    for (i64 idx = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<i64>(gridDim.x) * blockDim.x) {
        const i64 row = idx / units_per_row;
        const int col = static_cast<int>(idx % units_per_row) * UNIT;
        const u8* src = q + row * q_row_stride + col / 2;
        u32 codes = 0;
#pragma unroll
        for (int b = 0; b < UNIT / 2; ++b) codes |= static_cast<u32>(src[b]) << (8 * b);
        u32 w[4];
        dequantize_unit(codes, group_scale(sf[sf_index(row, col / GROUP, groups)], rcp_tsf), w);
        const i64 element = row * cols + col;
        if constexpr (FP4Q_OUT_F32) {
            u32* dst = reinterpret_cast<u32*>(out) + element;
#pragma unroll
            for (int e = 0; e < 4; ++e) dst[e] = w[e];
        } else {
            u16* dst = reinterpret_cast<u16*>(out) + element;
#pragma unroll
            for (int e = 0; e < 8; ++e) dst[e] = static_cast<u16>(w[e / 2] >> (16 * (e % 2)));
        }
    }
}
