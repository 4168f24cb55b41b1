// Where scale (row, group) sits in the scale tensor (NVFP4_SPEC.md
// "Outputs", "The 8x4 scale layout"): the 128x4 swizzled GEMM layout under
// FP4Q_SF_SWIZZLED, FlashInfer's 8x4 layout under FP4Q_SF_8X4, else
// row-major.
#pragma once
#include "ptx/types.cuh"

// The rows and groups of one tile of the layout (1 x 1: row-major). A kernel
// writes the scales of whole tiles, their padding bytes as zeros.
constexpr int SF_TILE_ROWS = FP4Q_SF_SWIZZLED ? 128 : FP4Q_SF_8X4 ? 8 : 1;
constexpr int SF_TILE_GROUPS = FP4Q_SF_SWIZZLED || FP4Q_SF_8X4 ? 4 : 1;

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
// Row and group are below 2^31 and not negative: a tiled offset splits into
// the tile, counted in 64 bits, and the offset inside it (for 128x4,
// sf_128x4_offset of the row within its 128 and the group within its 4;
// for 8x4, row r's four bytes at 4 * r), whose divisions are then shifts
// and masks of unsigned 32-bit values.
FP4Q_DEVICE i64 sf_index(i64 row, int group, int groups) {
    if constexpr (SF_TILE_ROWS > 1) {
        const u32 r = static_cast<u32>(row);
        const u32 g = static_cast<u32>(group);
        const i64 tile = static_cast<i64>(r / SF_TILE_ROWS) * static_cast<u32>((groups + 3) / 4) + g / 4;
        const u32 inside = FP4Q_SF_SWIZZLED ? sf_128x4_offset<1, u32>(r % 128, 0u, static_cast<int>(g % 4))
                                            : (r % SF_TILE_ROWS) * 4 + g % 4;
        return tile * (SF_TILE_ROWS * SF_TILE_GROUPS) + inside;
    } else {
        return row * groups + group;
    }
}

// The scale domain a kernel writes: rows and groups up to whole tiles, so
// that the padding bytes are written (as zeros) too.
FP4Q_DEVICE i64 sf_domain_rows(i32 rows) {
    return (static_cast<i64>(rows) + SF_TILE_ROWS - 1) / SF_TILE_ROWS * SF_TILE_ROWS;
}

FP4Q_DEVICE int sf_domain_groups(int groups) { return (groups + SF_TILE_GROUPS - 1) / SF_TILE_GROUPS * SF_TILE_GROUPS; }

// Word w (4 bytes) of a tile holds the four groups of this row of the tile.
FP4Q_DEVICE u32 sf_tile_word_row(u32 w) { return FP4Q_SF_SWIZZLED ? (w % 4) * 32 + w / 4 : w; }
