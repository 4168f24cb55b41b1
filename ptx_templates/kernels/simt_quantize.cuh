// What the two SIMT quantize kernels (vector and plain) share: one launch
// ABI (SIMT_QUANTIZE_PARAMS in fp4q/kernels/quantize.py: cols values per
// row of x, out_cols of the outputs, which are zero past cols (padded_k);
// unit_magic and unit_shift divide by the units per row of their walk, the
// host's SimtConfig.units_per_row), and one prologue.
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
