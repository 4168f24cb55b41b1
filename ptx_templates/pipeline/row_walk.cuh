// A grid-stride walk over a rows x per_row index space, as (row, col)
// pairs: one thread visits index first, first + stride, ... The pair is
// advanced by the stride's own (row, col) step with a carry, so a step
// costs two adds and a compare where dividing the flat index would cost a
// 64-bit division; the two divisions by per_row happen once, at the start,
// each as a multiply and a shift (Divisor).
#pragma once
#include "ptx/types.cuh"

// Division by d of every n below 2^31 as one wide multiply and a shift,
// with magic = ceil(2^shift / d) and shift = 31 + ceil(log2 d) from the host
// (fp4q/kernels/walk.py): magic * d exceeds 2^shift by less than d, so
// n * magic / 2^shift exceeds n / d by less than n / 2^shift < 1 / d
// (2^shift >= 2^31 * d) and its floor is n / d. Where a kernel takes them
// as launch parameters, a division costs two instructions instead of a
// 32-bit division's twenty.
struct Divisor {
    u32 d;
    u32 magic;
    u32 shift;

    FP4Q_DEVICE u32 quotient(u32 n) const { return static_cast<u32>((static_cast<u64>(n) * magic) >> shift); }
};

struct RowWalk {
    i64 row;
    int col;
    int per_row;
    u32 row_step;
    int col_step;

    // first and stride below 2^31 (thread indices of one launch), the
    // divisions by per_row (div.d) done by div's multiplies.
    FP4Q_DEVICE RowWalk(u32 first, u32 stride, const Divisor& div)
        : row(div.quotient(first)),
          col(static_cast<int>(first - div.quotient(first) * div.d)),
          per_row(static_cast<int>(div.d)),
          row_step(div.quotient(stride)),
          col_step(static_cast<int>(stride - div.quotient(stride) * div.d)) {}

    // The scale row of the unit's groups: its row.
    FP4Q_DEVICE i64 scale_row() const { return row; }

    FP4Q_DEVICE void advance() {
        row += row_step;
        col += col_step;
        if (col >= per_row) {
            col -= per_row;
            ++row;
        }
    }
};

// This thread's index in a 1-D grid and the grid's size in threads, for a
// kernel of SIMT_THREADS threads per CTA (a constant where blockDim.x is one
// more read of the parameter bank before the first load).
FP4Q_DEVICE u32 grid_thread() { return blockIdx.x * SIMT_THREADS + threadIdx.x; }
FP4Q_DEVICE u32 grid_threads() { return gridDim.x * SIMT_THREADS; }
