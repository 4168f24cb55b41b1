// First pass of the dynamic global scale: each CTA writes the NaN-ignoring
// maximum of |x| over its share of the tensor to partial[blockIdx.x], as a
// float32. x is bf16 (or fp16) with `rows` rows of `cols` elements,
// `x_row_stride` elements apart. FP4Q_VECTOR_LOADS reads 8 elements per
// 16-byte load (16-byte aligned base, row stride a multiple of 8).
#include "numerics/global_scale.cuh"
#include "numerics/input.cuh"
#include "pipeline/pdl.cuh"
#include "ptx/global_memory.cuh"

constexpr int VEC = FP4Q_VECTOR_LOADS ? 8 : 1;
constexpr int UNROLL = 4;

// The magnitudes of the VEC elements at p, as a packed pair of their maxima.
// The maximum drops a NaN lane for the other operand, so starting from 0 no
// NaN survives.
FP4Q_DEVICE u32 load_magnitudes(const u16* p) {
    if constexpr (FP4Q_VECTOR_LOADS) {
        u32 a, b, c, d;
        ld_global_nc_v4(p, a, b, c, d);
        return max_x2(max_x2(a & MAGNITUDE_X2, b & MAGNITUDE_X2), max_x2(c & MAGNITUDE_X2, d & MAGNITUDE_X2));
    } else {
        return *p & MAGNITUDE_X2;
    }
}

extern "C" __global__ void __launch_bounds__(AMAX_THREADS)
fp4q_amax(const u16* __restrict__ x, i64 x_row_stride, i32 rows, i32 cols, float* __restrict__ partial) {
    // x may be written by the previous kernel, and partial still read by it.
    pdl_wait();
    pdl_launch_dependents();
    const i64 units_per_row = cols / VEC;
    const i64 units = rows * units_per_row;
    const bool dense = x_row_stride == cols;
    const i64 stride = static_cast<i64>(gridDim.x) * AMAX_THREADS;
    u32 m = 0;
    for (i64 u = blockIdx.x * static_cast<i64>(AMAX_THREADS) + threadIdx.x; u < units; u += UNROLL * stride) {
        u32 w[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            const i64 v = u + k * stride;
            const i64 offset = dense ? v * VEC : (v / units_per_row) * x_row_stride + (v % units_per_row) * VEC;
            w[k] = v < units ? load_magnitudes(x + offset) : 0u;
        }
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) m = max_x2(m, w[k]);
    }
    const float amax = max_f32(input_lo(m), input_hi(m));
    const u32 block = block_max_u32<AMAX_THREADS>(f32_bits(amax));
    if (threadIdx.x == 0) partial[blockIdx.x] = f32_from_bits(block);
}
