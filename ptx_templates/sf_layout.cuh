// Where scale (row, group) sits in the scale tensor (NVFP4_SPEC.md
// "Outputs"): the 128x4 swizzled GEMM layout under FP4Q_SF_SWIZZLED, else
// row-major. Shared by the kernels that address scales one by one.
#pragma once
#include "ptx.cuh"

FP4Q_DEVICE i64 sf_index(i64 row, int group, int groups) {
#if FP4Q_SF_SWIZZLED
    const i64 k_blocks = (groups + 3) / 4;
    return ((row / 128) * k_blocks + group / 4) * 512 + (row % 32) * 16 + ((row % 128) / 32) * 4 + group % 4;
#else
    return row * groups + group;
#endif
}
