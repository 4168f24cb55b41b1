// First pass of the dynamic global scale: each CTA writes the NaN-ignoring
// maximum of |x| over its share of the tensor to partial[blockIdx.x], as a
// float32. x is bf16 (or fp16) with `rows` rows of `cols` elements,
// `row_stride` elements apart. FP4Q_VECTOR_LOADS reads 8 elements per
// 16-byte load (16-byte aligned base, row stride a multiple of 8).
#include "block_max.cuh"

#if FP4Q_VECTOR_LOADS
constexpr int VEC = 8;
#else
constexpr int VEC = 1;
#endif
constexpr int UNROLL = 4;
constexpr u32 MAGNITUDE = 0x7FFF7FFFu;

// Packed pairs of 16-bit magnitudes: the maximum drops a NaN lane for the
// other operand, so starting from 0 no NaN survives.
#if FP4Q_INPUT_FP16
FP4Q_DEVICE u32 max_x2(u32 a, u32 b) { return max_f16x2(a, b); }
FP4Q_DEVICE float widen(u16 h) { return cvt_f32_f16(h); }
#else
FP4Q_DEVICE u32 max_x2(u32 a, u32 b) { return max_bf16x2(a, b); }
FP4Q_DEVICE float widen(u16 h) { return f32_from_bits(static_cast<u32>(h) << 16); }
#endif

FP4Q_DEVICE u32 load_magnitudes(const u16* p) {
#if FP4Q_VECTOR_LOADS
    u32 a, b, c, d;
    ld_global_nc_v4(p, a, b, c, d);
    return max_x2(max_x2(a & MAGNITUDE, b & MAGNITUDE), max_x2(c & MAGNITUDE, d & MAGNITUDE));
#else
    return *p & MAGNITUDE;
#endif
}

extern "C" __global__ void __launch_bounds__(AMAX_THREADS)
fp4q_amax(const u16* __restrict__ x, i64 row_stride, i32 rows, i32 cols, float* __restrict__ partial) {
    // x may be written by the previous kernel, and partial still read by it.
    griddepcontrol_wait();
    griddepcontrol_launch_dependents();
    const i64 units_per_row = cols / VEC;
    const i64 units = rows * units_per_row;
    const bool dense = row_stride == cols;
    const i64 stride = static_cast<i64>(gridDim.x) * AMAX_THREADS;
    u32 m = 0;
    for (i64 u = blockIdx.x * static_cast<i64>(AMAX_THREADS) + threadIdx.x; u < units; u += UNROLL * stride) {
        u32 w[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            const i64 v = u + k * stride;
            const i64 offset = dense ? v * VEC : (v / units_per_row) * row_stride + (v % units_per_row) * VEC;
            w[k] = v < units ? load_magnitudes(x + offset) : 0u;
        }
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) m = max_x2(m, w[k]);
    }
    const float amax = max_f32(widen(static_cast<u16>(m)), widen(static_cast<u16>(m >> 16)));
    const u32 block = block_max_u32<AMAX_THREADS>(f32_bits(amax));
    if (threadIdx.x == 0) partial[blockIdx.x] = f32_from_bits(block);
}
