// First pass of the training quantizer's dynamic columnwise tensor scale
// under the random Hadamard transform (NVFP4_SPEC.md, "Tensor scales",
// "Random Hadamard transform (16)"): the values that direction quantizes are
// y, the transform of each column group (16 rows of one column of x), so its
// scale is taken over y (the post-RHT amax). Each CTA writes the
// NaN-ignoring maximum of |y| over its share of x's column groups to
// partial[blockIdx.x] and, where partial_x is not null, the maximum of |x|
// over the same values to partial_x[blockIdx.x]: the rowwise direction's
// dynamic scale, from the same read of x. The scale pass
// (kernels/global_scale.cu) turns either into a scale.
//
// A thread's unit is two adjacent columns of 16 rows: 16 4-byte loads, one
// per row, so a warp reads 128 contiguous bytes of each row; the units are
// walked as (16-row block, column pair). Needs x 4-byte aligned, an even row
// stride and cols even (the training quantizer's rules give more).
#include "numerics/amax.cuh"
#include "numerics/global_scale.cuh"
#include "numerics/hadamard.cuh"
#include "numerics/input.cuh"
#include "pipeline/pdl.cuh"
#include "pipeline/row_walk.cuh"
#include "ptx/global_memory.cuh"

// The 16 rows' words of a column pair as the two columns' values, in float32.
FP4Q_DEVICE void column_values(const u32 (&w)[16], float (&v)[2][16]) {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        v[0][i] = input_lo(w[i]);
        v[1][i] = input_hi(w[i]);
    }
}

extern "C" __global__ void __launch_bounds__(SIMT_THREADS)
fp4q_hadamard_amax(const u16* __restrict__ x, i64 x_row_stride, i32 rows, i32 cols, u32 hadamard, u32 unit_magic,
                   u32 unit_shift, float* __restrict__ partial, float* __restrict__ partial_x) {
    // unit_magic and unit_shift divide by the column pairs of a row (cols / 2).
    RowWalk unit(grid_thread(), grid_threads(), Divisor{static_cast<u32>(cols / 2), unit_magic, unit_shift});
    // x may be written by the previous kernel, and partial still read by it.
    pdl_wait();
    pdl_launch_dependents();
    float amax = 0.0f;
    u32 magnitudes = 0u;  // |x| of both columns, a packed pair
    for (; unit.row < rows / 16; unit.advance()) {
        const u16* p = x + unit.row * 16 * x_row_stride + 2 * unit.col;
        u32 w[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) w[i] = ld_global_nc_u32(p + i * x_row_stride);
#pragma unroll
        for (int i = 0; i < 16; ++i) magnitudes = max_x2(magnitudes, w[i] & MAGNITUDE_X2);
        float v[2][16];
        column_values(w, v);
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            hadamard16(v[c], hadamard);
            amax = max_f32(amax, amax16(v[c]));
        }
    }
    // Maxima of non-negative floats, NaN dropped: exact in any order, as integers.
    const u32 block = block_max_u32<SIMT_THREADS>(f32_bits(amax));
    if (threadIdx.x == 0) partial[blockIdx.x] = f32_from_bits(block);
    if (partial_x != nullptr) {
        __syncthreads();  // the reduction's shared words are read by warp 0 before they are reused
        const u32 block_x = block_max_u32<SIMT_THREADS>(f32_bits(max_f32(input_lo(magnitudes), input_hi(magnitudes))));
        if (threadIdx.x == 0) partial_x[blockIdx.x] = f32_from_bits(block_x);
    }
}
