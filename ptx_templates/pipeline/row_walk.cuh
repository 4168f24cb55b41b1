// A grid-stride walk over a rows x per_row index space, as (row, col)
// pairs: one thread visits index first, first + stride, ... The pair is
// advanced by the stride's own (row, col) step with a carry, so a step
// costs two adds and a compare where dividing the flat index would cost a
// 64-bit division; the two 32-bit divisions happen once, at the start.
#pragma once
#include "ptx/types.cuh"

struct RowWalk {
    i64 row;
    int col;
    int per_row;
    u32 row_step;
    int col_step;

    // first and stride below 2**32 (thread indices of one launch).
    FP4Q_DEVICE RowWalk(u32 first, u32 stride, int per_row_)
        : row(first / static_cast<u32>(per_row_)),
          col(static_cast<int>(first % static_cast<u32>(per_row_))),
          per_row(per_row_),
          row_step(stride / static_cast<u32>(per_row_)),
          col_step(static_cast<int>(stride % static_cast<u32>(per_row_))) {}

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
