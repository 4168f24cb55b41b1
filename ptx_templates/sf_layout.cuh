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

// The scale domain a kernel writes: under the swizzled layout, rows up to a
// multiple of 128 and groups up to a multiple of 4, so that the padding
// bytes are written (as zeros) too.
FP4Q_DEVICE i64 sf_domain_rows(i32 rows) {
#if FP4Q_SF_SWIZZLED
    return (static_cast<i64>(rows) + 127) / 128 * 128;
#else
    return rows;
#endif
}

FP4Q_DEVICE int sf_domain_groups(int groups) {
#if FP4Q_SF_SWIZZLED
    return (groups + 3) / 4 * 4;
#else
    return groups;
#endif
}
