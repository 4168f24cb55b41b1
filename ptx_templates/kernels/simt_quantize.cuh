// What the two SIMT quantize kernels (vector and plain) share: one launch
// ABI (SIMT_QUANTIZE_PARAMS in fp4q/kernels/quantize.py: cols values per
// row of x, out_cols of the outputs, which are zero past cols (padded_k);
// unit_magic and unit_shift divide by the units per row of their walk, the
// host's SimtConfig.units_per_row), one prologue; and the zeros of padded
// columns, which every kernel without TMA writes (the row and one-launch
// dynamic kernels too).
#pragma once
#include "layout/scale_layout.cuh"
#include "numerics/amax.cuh"
#include "numerics/quantize_group.cuh"
#include "numerics/tensor_scale.cuh"
#include "pipeline/pdl.cuh"
#include "pipeline/row_walk.cuh"
#include "ptx/global_memory.cuh"

#define FP4Q_SIMT_QUANTIZE_PARAMS                                                                 \
    const u16* __restrict__ x, u8* __restrict__ out, u8* __restrict__ sf_out, i64 x_row_stride, i32 rows, \
        i32 cols, i32 out_cols, u32 unit_magic, u32 unit_shift, float tensor_sf_value,                    \
        const float* __restrict__ tensor_sf_ptr

// The previous kernel may write x or tensor_sf and still read q and sf: wait
// for it, then let the next kernel start its own prologue. The tensor scale
// is read after this.
FP4Q_DEVICE void simt_quantize_prologue() {
    pdl_wait();
    pdl_launch_dependents();
}

// Zero codes in each row's columns from `cols` to `out_cols` (padded_k),
// STORE_BYTES at a time (8 where the output rows are 8-byte aligned, else
// 1), the grid sharing them out; nothing where the outputs are not padded.
// A kernel runs it outside its walk, whose units past x's row then store
// zero scales only, so that no unit pays for a padding branch.
template <int STORE_BYTES>
FP4Q_DEVICE void write_padding_codes(u8* __restrict__ q, i32 rows, i32 cols, i32 out_cols) {
    static_assert(STORE_BYTES == 1 || STORE_BYTES == 8, "byte or 8-byte stores");
    if (out_cols == cols) return;
    const u32 stores = static_cast<u32>(out_cols - cols) / (2 * STORE_BYTES);
    const u64 total = static_cast<u64>(rows) * stores;
    for (u64 i = grid_thread(); i < total; i += grid_threads()) {
        const u64 row = i / stores;
        u8* dst = q + row * static_cast<u32>(out_cols / 2) + cols / 2 + STORE_BYTES * (i - row * stores);
        if constexpr (STORE_BYTES == 8) {
            st_global_v2(dst, 0u, 0u);
        } else {
            *dst = 0;
        }
    }
}
