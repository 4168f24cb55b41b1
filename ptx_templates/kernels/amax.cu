// First pass of the dynamic global scale: each CTA writes the NaN-ignoring
// maximum of |x| over its share of the tensor to partial[blockIdx.x], as a
// float32. x is bf16 (or fp16) with `rows` rows of `cols` elements,
// `x_row_stride` elements apart; under the SiLU·mul prologue (PROLOGUE 1) the
// maximum is of h = SiLU·mul(x), `cols` wide, its gate and up halves read
// from rows of 2 * cols. FP4Q_VECTOR_LOADS reads 8 elements per 16-byte load
// (16-byte aligned base, row stride a multiple of 8).
#include "numerics/global_scale.cuh"
#include "numerics/input.cuh"
#include "numerics/silu.cuh"
#include "pipeline/pdl.cuh"
#include "ptx/global_memory.cuh"

constexpr int VEC = FP4Q_VECTOR_LOADS ? 8 : 1;
constexpr int VEC_WORDS = FP4Q_VECTOR_LOADS ? 4 : 1;
constexpr int UNROLL = 4;

// The VEC elements at p, as packed pairs (a lone element in the low half).
FP4Q_DEVICE void load_words(const u16* p, u32 (&w)[VEC_WORDS]) {
    if constexpr (FP4Q_VECTOR_LOADS) {
        ld_global_nc_v4(p, w[0], w[1], w[2], w[3]);
    } else {
        w[0] = *p;
    }
}

// The magnitudes of the VEC values of the unit at p (x's, or h's from the
// halves at p and p + cols), as a packed pair of their maxima. The maximum
// drops a NaN lane for the other operand, so starting from 0 no NaN survives.
FP4Q_DEVICE u32 load_magnitudes(const u16* p, i64 cols) {
    u32 w[VEC_WORDS];
    load_words(p, w);
    if constexpr (PROLOGUE == 1) {
        u32 up[VEC_WORDS];
        load_words(p + cols, up);
#pragma unroll
        for (int i = 0; i < VEC_WORDS; ++i) w[i] = silu_mul_x2(w[i], up[i]);
    }
    if constexpr (FP4Q_VECTOR_LOADS) {
        return max_x2(max_x2(w[0] & MAGNITUDE_X2, w[1] & MAGNITUDE_X2), max_x2(w[2] & MAGNITUDE_X2, w[3] & MAGNITUDE_X2));
    } else {
        return w[0] & MAGNITUDE_X2;
    }
}

extern "C" __global__ void __launch_bounds__(AMAX_THREADS)
fp4q_amax(const u16* __restrict__ x, i64 x_row_stride, i32 rows, i32 cols, float* __restrict__ partial) {
    // x may be written by the previous kernel, and partial still read by it.
    pdl_wait();
    pdl_launch_dependents();
    const i64 units_per_row = cols / VEC;
    const i64 units = rows * units_per_row;
    const bool dense = PROLOGUE == 0 && x_row_stride == cols;
    const i64 stride = static_cast<i64>(gridDim.x) * AMAX_THREADS;
    u32 m = 0;
    for (i64 u = blockIdx.x * static_cast<i64>(AMAX_THREADS) + threadIdx.x; u < units; u += UNROLL * stride) {
        u32 w[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            const i64 v = u + k * stride;
            const i64 offset = dense ? v * VEC : (v / units_per_row) * x_row_stride + (v % units_per_row) * VEC;
            w[k] = v < units ? load_magnitudes(x + offset, cols) : 0u;
        }
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) m = max_x2(m, w[k]);
    }
    const float amax = max_f32(input_lo(m), input_hi(m));
    const u32 block = block_max_u32<AMAX_THREADS>(f32_bits(amax));
    if (threadIdx.x == 0) partial[blockIdx.x] = f32_from_bits(block);
}
