// FP4 quantization of whole rows: the kernel of the prologues that need a
// statistic of the row before any of its elements is quantized (RMSNorm,
// add+RMSNorm) and of the tensor scales taken per row (a float32 per row,
// or each row's own dynamic scale). A CTA takes one row at a time (a
// grid-stride loop over rows) and holds it in registers: unit u of a row
// (SF_VEC elements, one group) is thread u % SIMT_THREADS's unit
// u / SIMT_THREADS, so a warp's loads are contiguous; ROW_UNITS units per
// thread cover the row's scale domain. Per row:
//
//   load       the prologue's elementwise part: x's units; SiLU·mul's
//              dtype(silu(gate) * up); add+RMSNorm's r = dtype(x + residual),
//              stored back to residual. Zeros past the row's units.
//   normalize  (RMSNorm) the row's sum of squares in the spec's fixed tree:
//              each unit is an aligned run of SF_VEC elements (a node of the
//              tree), the units of one slot (one per thread) combine by
//              butterfly shuffles across the warp and through shared memory
//              across warps, the slots pairwise in order; units past K add
//              +0. Then h = dtype(dtype(r * rinv) * w), weight read unit by
//              unit (every row reads the same, from cache).
//   scale      the row's tensor scale: the launch's, the row's float32, or
//              the global scale of the row's amax (NaN ignored), written out
//   quantize   RoundToNearest, the other kernels' step
//   store      RowwiseStore (vector_quantize.cuh) into output rows of
//              out_cols values: codes, scale bytes, zeros past x's row
//              (padded_k) and for a tiled layout's padding groups and rows
//
// With SEGMENTED (the mixture-of-experts quantizers), the rows are grouped
// into experts or batches (pipeline/segments.cuh): each CTA first resolves
// them from the device offsets or counts, then writes the zero scales of
// the scale rows no segment fills and walks the rows the segments own, each
// under its segment's float32 tensor scale, its scales at its segment's
// place.
//
// Needs x's rows, weight, residual, out and a tiled sf_out 16-byte
// aligned (the host's rule).
#define VEC_ELEMS SF_VEC
#include "kernels/simt_quantize.cuh"
#include "kernels/vector_quantize.cuh"
#include "numerics/global_scale.cuh"
#include "numerics/rms_norm.cuh"
#include "pipeline/segments.cuh"
#include "ptx/shared_memory.cuh"

constexpr int WORDS = SF_VEC / 2;  // packed pairs of one unit
constexpr int WARPS = SIMT_THREADS / 32;
// kernels.call.PROLOGUES: 0 none, 1 silu_mul, 2 rms_norm, 3 add_rms_norm.
constexpr bool SILU_MUL = PROLOGUE == 1;
constexpr bool NORMALIZE = PROLOGUE >= 2;
constexpr bool ADD_RESIDUAL = PROLOGUE == 3;
// kernels.rows.ROW_SCALES: 0 the launch's tensor scale, 1 a float32 per row
// (per expert with EXPERTS), 2 each row's dynamic scale.
constexpr bool SCALE_PER_ROW = ROW_SCALE == 1;
constexpr bool SCALE_DYNAMIC_PER_ROW = ROW_SCALE == 2;
// kernels.rows.SEGMENTS: 0 the rows of one tensor, 1 of experts, 2 of batches.
constexpr bool SEGMENTED = SEGMENTS != 0;
constexpr bool EXPERTS = SEGMENTS == 1;
static_assert((WARPS & (WARPS - 1)) == 0 && (ROW_UNITS & (ROW_UNITS - 1)) == 0, "tree levels are powers of two");
static_assert(!SEGMENTED || (FP4Q_SF_SWIZZLED && SCALE_PER_ROW && !NORMALIZE),
              "experts and batches: swizzled scales, a tensor scale per segment, an element-wise prologue");

// A unit of the row the CTA holds: its row, its index in the row and the
// row of its scales.
struct RowUnit {
    i64 row;
    int col;
    i64 sf_row;

    FP4Q_DEVICE i64 scale_row() const { return sf_row; }
};

FP4Q_DEVICE int slot_unit(int s) { return s * SIMT_THREADS + static_cast<int>(threadIdx.x); }

FP4Q_DEVICE void load_unit(const u16* p, u32 (&w)[WORDS]) {
#pragma unroll
    for (int v = 0; v < WORDS / 4; ++v) ld_global_nc_v4(p + 8 * v, w[4 * v], w[4 * v + 1], w[4 * v + 2], w[4 * v + 3]);
}

// The load step of a row: x's units, SiLU·mul of its two halves, or
// r = dtype(x + residual), which goes back to residual; zeros past the
// row's units.
FP4Q_DEVICE void load_row(const u16* __restrict__ x, u16* __restrict__ residual, i64 x_row_stride, i64 row,
                          i32 cols, u32 (&r)[ROW_UNITS][WORDS]) {
    const int units = cols / SF_VEC;
#pragma unroll
    for (int s = 0; s < ROW_UNITS; ++s) {
        const int u = slot_unit(s);
#pragma unroll
        for (int i = 0; i < WORDS; ++i) r[s][i] = 0u;
        if (u >= units) continue;
        const u16* p = x + row * x_row_stride + u * SF_VEC;
        load_unit(p, r[s]);
        if constexpr (SILU_MUL) {
            u32 up[WORDS];
            load_unit(p + cols, up);
#pragma unroll
            for (int i = 0; i < WORDS; ++i) r[s][i] = silu_mul_x2(r[s][i], up[i]);
        }
    }
    if constexpr (ADD_RESIDUAL) {
#pragma unroll
        for (int s = 0; s < ROW_UNITS; ++s) {
            const int u = slot_unit(s);
            if (u >= units) continue;
            u16* p = residual + row * cols + u * SF_VEC;
            u32 res[WORDS];
#pragma unroll
            for (int v = 0; v < WORDS / 4; ++v) ld_global_v4(p + 8 * v, res[4 * v], res[4 * v + 1], res[4 * v + 2], res[4 * v + 3]);
#pragma unroll
            for (int i = 0; i < WORDS; ++i) r[s][i] = add_x2(r[s][i], res[i]);
#pragma unroll
            for (int v = 0; v < WORDS / 4; ++v) st_global_v4(p + 8 * v, r[s][4 * v], r[s][4 * v + 1], r[s][4 * v + 2], r[s][4 * v + 3]);
        }
    }
}

// The row's sum of squares, every thread getting it. `partial` holds one
// sum per (slot, warp); two of them, used by alternate rows, so that a warp
// writing the next row's sums never overwrites ones a slower warp still
// reads (it cannot pass that row's barrier before the slow warp reaches it).
FP4Q_DEVICE float row_sum_of_squares(const u32 (&r)[ROW_UNITS][WORDS], float (&partial)[ROW_UNITS][WARPS]) {
    float slot[ROW_UNITS];
#pragma unroll
    for (int s = 0; s < ROW_UNITS; ++s) {
        float v = sum_of_squares(r[s]);
#pragma unroll
        for (int lane_mask = 1; lane_mask < 32; lane_mask <<= 1) v = add_rn(v, shfl_sync_bfly_b32(v, lane_mask));
        slot[s] = v;
    }
    if (threadIdx.x % 32 == 0) {
#pragma unroll
        for (int s = 0; s < ROW_UNITS; ++s) partial[s][threadIdx.x / 32] = slot[s];
    }
    __syncthreads();
#pragma unroll
    for (int s = 0; s < ROW_UNITS; ++s) {
        float warps[WARPS];
#pragma unroll
        for (int i = 0; i < WARPS; ++i) warps[i] = partial[s][i];
        slot[s] = pairwise_sum(warps);
    }
    return pairwise_sum(slot);
}

// The normalize step: h = dtype(dtype(r * rinv) * w) in place, over the
// row's units (those past it stay zero).
FP4Q_DEVICE void normalize_row(u32 (&r)[ROW_UNITS][WORDS], const u16* __restrict__ weight, float rinv, i32 cols) {
#pragma unroll
    for (int s = 0; s < ROW_UNITS; ++s) {
        const int u = slot_unit(s);
        if (u >= cols / SF_VEC) continue;
        u32 w[WORDS];
        load_unit(weight + u * SF_VEC, w);
#pragma unroll
        for (int i = 0; i < WORDS; ++i) r[s][i] = rms_norm_x2(r[s][i], rinv, w[i]);
    }
}

// The row's amax (NaN ignored), every thread getting it: float32 bits of
// non-negative values, which order like the unsigned integers, so the
// integer maximum is exact and needs no order. `maxima`: one per warp, two
// of them by alternate rows as for the sums.
FP4Q_DEVICE u32 row_amax_bits(const u32 (&h)[ROW_UNITS][WORDS], u32 (&maxima)[WARPS]) {
    u32 m = 0u;
#pragma unroll
    for (int s = 0; s < ROW_UNITS; ++s) {
#pragma unroll
        for (int i = 0; i < WORDS; ++i) m = max_x2(m, h[s][i] & MAGNITUDE_X2);
    }
    const float amax = max_f32(input_lo(m), input_hi(m));
    const u32 warp = redux_sync_max_u32(f32_bits(amax));
    if (threadIdx.x % 32 == 0) maxima[threadIdx.x / 32] = warp;
    __syncthreads();
    u32 bits = 0u;
#pragma unroll
    for (int i = 0; i < WARPS; ++i) bits = bits > maxima[i] ? bits : maxima[i];
    return bits;
}

// Where a row goes: its row of x and q, the row of its scales and the
// index of its float32 tensor scale (per row, or per expert or batch).
struct RowPlace {
    i64 row;
    i64 sf_row;
    i64 scale_index;
};

// The steps of one row after its load (load_row, with the prologue):
// normalize, the tensor scale, quantize, store. `partial` and `maxima`: this
// row's halves of the CTA's reduction buffers (by the parity of the CTA's
// row count).
FP4Q_DEVICE void quantize_loaded_row(u32 (&h)[ROW_UNITS][WORDS], const u16* __restrict__ weight,
                                     const RowwiseStore& store, i32 rows, i32 cols, i32 out_cols, float eps,
                                     const TensorScale& launch_scale, float* __restrict__ tensor_sf_ptr,
                                     const RowPlace& place, float (&partial)[ROW_UNITS][WARPS], u32 (&maxima)[WARPS]) {
    if constexpr (NORMALIZE) {
        normalize_row(h, weight, rms_inverse(row_sum_of_squares(h, partial), cols, eps), cols);
    }
    TensorScale scale = launch_scale;
    if constexpr (SCALE_PER_ROW) {
        scale = tensor_scale_of(ld_global_f32(tensor_sf_ptr + place.scale_index));
    } else if constexpr (SCALE_DYNAMIC_PER_ROW) {
        scale = tensor_scale_of(global_scale_of_amax(row_amax_bits(h, maxima)));
        if (threadIdx.x == 0) tensor_sf_ptr[place.scale_index] = scale.value;
    }
    const RoundToNearest quantize{scale};
    const int units = cols / SF_VEC;
    const int domain_units = sf_domain_groups(out_cols / SF_VEC);
#pragma unroll
    for (int s = 0; s < ROW_UNITS; ++s) {
        const RowUnit unit{place.row, slot_unit(s), place.sf_row};
        if (unit.col >= domain_units) continue;
        store(unit, unit.col < units, rows, out_cols, quantize(h[s]));
    }
}

// Zero scales for every scale row no segment fills: in each 128-row block,
// the rows past the last of its segment's rows (all of them past the last
// segment's blocks). The blocks are shared out over the CTAs, a block's
// words over the CTA's threads.
FP4Q_DEVICE void write_segment_padding(const SegmentTable& table, int segments, u8* __restrict__ sf, i32 sf_blocks,
                                       int groups) {
    const u64 block_bytes = static_cast<u64>(sf_domain_groups(groups)) / 4 * 512;
    for (i32 block = blockIdx.x; block < sf_blocks; block += gridDim.x) {
        const u32 filled = filled_rows(table, segments, block);
        if (filled < SF_TILE_ROWS) zero_tile_rows(sf + block * block_bytes, filled, groups, threadIdx.x, SIMT_THREADS);
    }
}

extern "C" __global__ void __launch_bounds__(SIMT_THREADS, ROW_MIN_CTAS)
fp4q_quantize_fp4_rows(const u16* __restrict__ x, const u16* __restrict__ weight, u16* __restrict__ residual,
                       const i32* __restrict__ expert_offsets, const i32* __restrict__ valid_rows,
                       u8* __restrict__ out, u8* __restrict__ sf_out, i64 x_row_stride, i32 rows, i32 cols,
                       i32 out_cols, i32 experts, i32 batch_rows, i32 sf_blocks, float eps, float tensor_sf_value,
                       float* __restrict__ tensor_sf_ptr) {
    __shared__ float partial[2][ROW_UNITS][WARPS];
    __shared__ u32 maxima[2][WARPS];
    simt_quantize_prologue();
    const RowwiseStore store{out, sf_out};
    const TensorScale launch_scale = tensor_scale(tensor_sf_value, tensor_sf_ptr);
    int parity = 0;
    if constexpr (SEGMENTED) {
        // `experts`: the experts or batches. Every row of x may be read for experts (rows no
        // expert owns are read and dropped), so a CTA's first row is loaded before the table
        // is built, and each row before the search for its expert, which then overlap the
        // loads; a batch's row past its count is not read, so its batch comes first.
        __shared__ SegmentTable table;
        u32 h[ROW_UNITS][WORDS];
        i64 row = blockIdx.x;
        bool loaded = false;
        if constexpr (EXPERTS) {
            if (row < rows) load_row(x, residual, x_row_stride, row, cols, h);
            loaded = true;
            load_experts(table, expert_offsets, experts, rows);
        } else {
            load_batches(table, valid_rows, experts, batch_rows);
        }
        write_segment_padding(table, experts, sf_out, sf_blocks, out_cols / SF_VEC);
        const i64 end = table.end_row[experts - 1];
        for (; row < end; row += gridDim.x, parity ^= 1, loaded = false) {
            if (EXPERTS && !loaded) load_row(x, residual, x_row_stride, row, cols, h);
            if (row < table.first_row[0]) continue;
            const int e = segment_of_row(table, experts, row);
            if (row >= table.end_row[e]) continue;
            if constexpr (!EXPERTS) load_row(x, residual, x_row_stride, row, cols, h);
            const RowPlace place{row, table.first_sf_row[e] + (row - table.first_row[e]), e};
            quantize_loaded_row(h, weight, store, rows, cols, out_cols, eps, launch_scale, tensor_sf_ptr, place,
                                partial[parity], maxima[parity]);
        }
    } else {
        store.padding(rows, cols, out_cols);
        for (i64 row = blockIdx.x; row < rows; row += gridDim.x, parity ^= 1) {
            u32 h[ROW_UNITS][WORDS];
            load_row(x, residual, x_row_stride, row, cols, h);
            quantize_loaded_row(h, weight, store, rows, cols, out_cols, eps, launch_scale, tensor_sf_ptr,
                                RowPlace{row, row, row}, partial[parity], maxima[parity]);
        }
    }
}
