// Fake quantization (NVFP4_SPEC.md, "Fake quantization"): each value of x
// quantized to NVFP4 as the rowwise direction of the training quantizer and
// dequantized again, in float32, then rounded into x's dtype; nothing else
// goes to memory. A thread takes one unit at a time: a group of 16 values of
// a row, or (FP4Q_BLOCK_2D) a 16x16 block, walked by block rows. Per unit:
// load, transform (FP4Q_HADAMARD: the 16-point transform of each group),
// amax, scale (FP4Q_FOUR_OVER_SIX: the 4/6 choice), codes (FP4Q_STOCHASTIC:
// stochastic rounding with the group's rowwise Philox words), dequantize,
// inverse transform, store. A block is read once per pass (amax, the 4/6
// errors, the codes) rather than held: 256 values would not fit registers.
// FP4Q_AMAX_PASS: the first pass of tensor_sf="dynamic" instead, the steps up
// to the amax (post-Hadamard), each CTA's maximum written to partial[blockIdx.x]
// for the scale pass (kernels/global_scale.cu).
#include "numerics/amax.cuh"
#include "numerics/e2m1.cuh"
#include "numerics/four_over_six.cuh"
#include "numerics/global_scale.cuh"
#include "numerics/hadamard.cuh"
#include "numerics/input.cuh"
#include "numerics/philox.cuh"
#include "numerics/stochastic.cuh"
#include "numerics/tensor_scale.cuh"
#include "pipeline/pdl.cuh"
#include "pipeline/row_walk.cuh"
#include "ptx/global_memory.cuh"

constexpr int BLOCK_ROWS = FP4Q_BLOCK_2D ? 16 : 1;

// Load and transform: the 16 values of the group at p, as float32.
// FP4Q_VECTOR (x's rows and out 16-byte aligned): a group is two 16-byte
// loads and two stores; else element loads and stores, for any alignment.
FP4Q_DEVICE void load_group(const u16* p, u32 mask, float (&v)[16]) {
    if constexpr (FP4Q_VECTOR) {
        u32 w[8];
        ld_global_nc_v4(p, w[0], w[1], w[2], w[3]);
        ld_global_nc_v4(p + 8, w[4], w[5], w[6], w[7]);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            v[2 * i] = input_lo(w[i]);
            v[2 * i + 1] = input_hi(w[i]);
        }
    } else {
#pragma unroll
        for (int i = 0; i < 16; ++i) v[i] = input_lo(p[i]);
    }
    if constexpr (FP4Q_HADAMARD) hadamard16(v, mask);
}

// Quantize, dequantize, inverse transform and store one group of values v
// under scale c; `group` is its rowwise index (its random words').
FP4Q_DEVICE void fake_quantize_group(float (&v)[16], const ScaleCandidate& c, u64 group, u64 seed, u64 offset,
                                     u32 mask, u16* out) {
    u32 rbits[4];
    if constexpr (FP4Q_STOCHASTIC) group_random_words(seed, offset, group, ROWWISE, rbits);
    float y[16];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        float p[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) p[i] = mul_rn(v[8 * half + i], c.inv);
        const u32 codes = FP4Q_STOCHASTIC ? e2m1x8_stochastic(p, rbits[2 * half], rbits[2 * half + 1]) : e2m1x8(p);
#pragma unroll
        for (int i = 0; i < 8; ++i) y[8 * half + i] = mul_rn(e2m1_value(codes >> (4 * i)), c.d);
    }
    if constexpr (FP4Q_HADAMARD) hadamard16_inverse(y, mask);
    u32 pair[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        pair[i] = FP4Q_INPUT_FP16 ? cvt_rn_f16x2_f32(y[2 * i + 1], y[2 * i]) : cvt_rn_bf16x2_f32(y[2 * i + 1], y[2 * i]);
    }
    if constexpr (FP4Q_VECTOR) {
        st_global_v4(out, pair[0], pair[1], pair[2], pair[3]);
        st_global_v4(out + 8, pair[4], pair[5], pair[6], pair[7]);
    } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            out[2 * i] = static_cast<u16>(pair[i]);
            out[2 * i + 1] = static_cast<u16>(pair[i] >> 16);
        }
    }
}

// The unit's scale from its amax: 6, or the 4/6 choice by the errors of
// its rows: a group's values v, or a block's rows, each read again.
FP4Q_DEVICE ScaleCandidate unit_scale(const u16* x, i64 x_row_stride, const float (&v)[16], float amax,
                                      const TensorScale& tsf, u32 mask) {
    const ScaleCandidate six = scale_candidate(amax, tsf.value, tsf.rcp, r6());
    if constexpr (!FP4Q_FOUR_OVER_SIX) {
        return six;
    } else {
        const ScaleCandidate four = scale_candidate(amax, tsf.value, tsf.rcp, R4);
        float error6 = 0.0f, error4 = 0.0f;
        if constexpr (FP4Q_BLOCK_2D) {
            for (int r = 0; r < BLOCK_ROWS; ++r) {
                float row[16];
                load_group(x + r * x_row_stride, mask, row);
                error6 = add_rn(error6, squared_error16(row, six));
                error4 = add_rn(error4, squared_error16(row, four));
            }
        } else {
            error6 = squared_error16(v, six);
            error4 = squared_error16(v, four);
        }
        return keeps_four(error4, error6) ? four : six;
    }
}

extern "C" __global__ void __launch_bounds__(SIMT_THREADS)
fp4q_fake_quantize_nvfp4(const u16* __restrict__ x, u16* __restrict__ out, float tensor_sf_value,
                         const float* __restrict__ tensor_sf_ptr, i64 x_row_stride, i32 rows, i32 cols, u64 seed,
                         u64 offset, u32 hadamard, u32 unit_magic, u32 unit_shift, float* __restrict__ partial) {
    // unit_magic and unit_shift divide by the groups per row (FakeQuantizeConfig.units_per_row).
    RowWalk unit(grid_thread(), grid_threads(), Divisor{static_cast<u32>(cols / 16), unit_magic, unit_shift});
    pdl_wait();
    pdl_launch_dependents();
    if constexpr (FP4Q_AMAX_PASS) {
        // Maxima of non-negative floats, NaN dropped: exact in any order, as integers.
        float amax = 0.0f;
        for (; unit.row < rows; unit.advance()) {
            float v[16];
            load_group(x + unit.row * x_row_stride + unit.col * 16, hadamard, v);
            amax = max_f32(amax, amax16(v));
        }
        const u32 block = block_max_u32<SIMT_THREADS>(f32_bits(amax));
        if (threadIdx.x == 0) partial[blockIdx.x] = f32_from_bits(block);
        return;
    }
    const TensorScale tsf = tensor_scale(tensor_sf_value, tensor_sf_ptr);
    const i64 groups = cols / 16;
    for (; unit.row < rows / BLOCK_ROWS; unit.advance()) {
        const i64 row = unit.row * BLOCK_ROWS;
        const int col = unit.col * 16;
        const u16* src = x + row * x_row_stride + col;
        float v[16];
        float amax = 0.0f;
        for (int r = 0; r < BLOCK_ROWS; ++r) {
            load_group(src + r * x_row_stride, hadamard, v);
            amax = max_f32(amax, amax16(v));
        }
        const ScaleCandidate c = unit_scale(src, x_row_stride, v, amax, tsf, hadamard);
        for (int r = 0; r < BLOCK_ROWS; ++r) {
            if constexpr (FP4Q_BLOCK_2D) load_group(src + r * x_row_stride, hadamard, v);
            fake_quantize_group(v, c, (row + r) * groups + unit.col, seed, offset,
                                hadamard, out + (row + r) * cols + col);
        }
    }
}
