// Where scale (row, group) sits in the scale tensor (NVFP4_SPEC.md
// "Outputs"): the 128x4 swizzled GEMM layout under FP4Q_SF_SWIZZLED, else
// row-major.
#pragma once
#include "ptx/types.cuh"

// The 128x4 layout: 512-byte blocks of 128 rows x 4 groups, k_blocks of them
// per 128 rows; inside a block, row r's four bytes sit at (r % 32) * 16 +
// (r / 32) * 4. This is the offset of scale (row, RUN * run): callers that
// address scales in runs of RUN groups pass the run, so that the compiler
// knows the group is a multiple of RUN when it simplifies the formula. Int
// is the index type the caller computes in.
template <int RUN, typename Int>
FP4Q_DEVICE Int sf_128x4_offset(Int row, Int k_blocks, int run) {
    const int group = run * RUN;
    return ((row / 128) * k_blocks + group / 4) * 512 + (row % 32) * 16 + ((row % 128) / 32) * 4 + group % 4;
}

// The index of scale (row, group) of a tensor with `groups` groups per row.
// Row and group are below 2^31 and not negative: the swizzled offset splits
// into the 512-byte block, counted in 64 bits, and the offset inside it
// (sf_128x4_offset of the row within its 128 and the group within its 4),
// whose divisions are then shifts and masks of unsigned 32-bit values.
FP4Q_DEVICE i64 sf_index(i64 row, int group, int groups) {
    if constexpr (FP4Q_SF_SWIZZLED) {
        const u32 r = static_cast<u32>(row);
        const u32 g = static_cast<u32>(group);
        const i64 block = static_cast<i64>(r / 128) * static_cast<u32>((groups + 3) / 4) + g / 4;
        return block * 512 + sf_128x4_offset<1, u32>(r % 128, 0u, static_cast<int>(g % 4));
    } else {
        return row * groups + group;
    }
}

// The scale domain a kernel writes: under the swizzled layout, rows up to a
// multiple of 128 and groups up to a multiple of 4, so that the padding
// bytes are written (as zeros) too.
FP4Q_DEVICE i64 sf_domain_rows(i32 rows) {
    if constexpr (FP4Q_SF_SWIZZLED) {
        return (static_cast<i64>(rows) + 127) / 128 * 128;
    } else {
        return rows;
    }
}

FP4Q_DEVICE int sf_domain_groups(int groups) {
    if constexpr (FP4Q_SF_SWIZZLED) {
        return (groups + 3) / 4 * 4;
    } else {
        return groups;
    }
}
