// The vector kernel's work, shared by the vector kernel and the dynamic
// (single-pass) kernel: each thread quantizes units of VEC_ELEMS (8, 16 or
// 32) consecutive elements, its one to four 16-byte loads issued before any
// arithmetic. A unit holds whole groups (UNIT_GROUPS of them) or a share of
// one: then the THREADS_PER_GROUP threads of a group sit in adjacent lanes
// and agree on its amax through butterfly shuffles. Under a tiled
// layout (128x4, 8x4) the padding rows' scales are written as zeros. Needs x rows and
// the outputs 16-byte aligned, and, for units of two groups, an even number
// of groups per row (the host's rule). Its units go through the steps of
// kernels/steps.cuh: the load step's inputs are GlobalRows, each read one to
// four 16-byte loads; the store step is RowwiseStore. The including kernel
// defines SF_VEC and VEC_ELEMS.
#pragma once
#include "kernels/simt_quantize.cuh"
#include "kernels/steps.cuh"
#include "layout/scale_layout.cuh"
#include "numerics/amax.cuh"
#include "pipeline/row_walk.cuh"
#include "ptx/global_memory.cuh"
#include "ptx/sync.cuh"

constexpr int THREADS_PER_GROUP = SF_VEC > VEC_ELEMS ? SF_VEC / VEC_ELEMS : 1;
constexpr int UNIT_GROUPS = VEC_ELEMS > SF_VEC ? VEC_ELEMS / SF_VEC : 1;
constexpr int VEC_LOADS = VEC_ELEMS / 8;  // 16-byte loads per thread
static_assert((VEC_ELEMS == 8 || VEC_ELEMS == 16 || VEC_ELEMS == 32) &&
                  (SF_VEC % VEC_ELEMS == 0 || VEC_ELEMS % SF_VEC == 0),
              "8, 16 or 32 elements: whole groups or a share of one");

// The VEC_ELEMS elements at p, as packed pairs.
FP4Q_DEVICE void load_vector(const u16* p, u32 (&w)[4 * VEC_LOADS]) {
#pragma unroll
    for (int v = 0; v < VEC_LOADS; ++v) ld_global_nc_v4(p + 8 * v, w[4 * v], w[4 * v + 1], w[4 * v + 2], w[4 * v + 3]);
}

// Zero scales for the rows from `first` on of the row of tiles at
// `tile_row` (a tiled layout), threads thread, thread + threads, ...
// sharing them out: they walk the words of those tiles in order (a tile's
// word w holds the four groups of its row sf_tile_word_row(w)), by shifts
// and masks instead of a division, and write those rows' words.
FP4Q_DEVICE void zero_tile_rows(u8* __restrict__ tile_row, u32 first, int groups, u32 thread, u32 threads) {
    const u32 words = static_cast<u32>(sf_domain_groups(groups)) / 4 * SF_TILE_ROWS;
    for (u32 i = thread; i < words; i += threads) {
        if (sf_tile_word_row(i % SF_TILE_ROWS) >= first) st_global_u32(tile_row + 4 * static_cast<u64>(i), 0u);
    }
}

// Zero scales for the rows from `rows` up to the next whole tile of the
// layout (its padding), all in the last row of tiles, shared out over the
// grid.
FP4Q_DEVICE void write_padding_scales(u8* __restrict__ sf, i32 rows, int groups) {
    if constexpr (SF_TILE_ROWS > 1) {
        const u32 first_padding_row = static_cast<u32>(rows) % SF_TILE_ROWS;
        if (first_padding_row == 0) return;
        u8* tile_row = sf + sf_index(rows - static_cast<i32>(first_padding_row), 0, groups);
        zero_tile_rows(tile_row, first_padding_row, groups, grid_thread(), grid_threads());
    }
}

// The units of a row are VEC_ELEMS elements each, over the scale domain's
// groups: unit (row, col) starts in group unit_group(col).
FP4Q_DEVICE int unit_group(int col) { return col / THREADS_PER_GROUP * UNIT_GROUPS; }

FP4Q_DEVICE int units_per_row(int groups) { return sf_domain_groups(groups) * THREADS_PER_GROUP / UNIT_GROUPS; }

FP4Q_DEVICE bool unit_live(const RowWalk& unit, i32 rows, int groups) {
    return unit.row < rows && unit_group(unit.col) < groups;
}

// The store step, into output rows of `cols` values: a unit's codes in one
// 4- to 16-byte store, its groups' scale bytes at their place in the layout
// (a dead unit, past x's row or in the scale domain's padding groups, gets
// zero scales); `padding` writes the padding rows' scales and the codes
// past x's row (write_padding_scales, write_padding_codes).
struct RowwiseStore {
    u8* q;
    u8* sf;

    FP4Q_DEVICE void padding(i32 rows, i32 cols, i32 out_cols) const {
        write_padding_scales(sf, rows, out_cols / SF_VEC);
        write_padding_codes<8>(q, rows, cols, out_cols);
    }

    // unit: a RowWalk, or any (row, col) pair of a unit with the row of its
    // scales (scale_row()).
    template <typename Unit>
    FP4Q_DEVICE void operator()(const Unit& unit, bool live, i32 rows, i32 cols,
                                const QuantizedRun<SF_VEC, 4 * VEC_LOADS>& out) const {
        const int groups = cols / SF_VEC;
        if (live) {
            u8* dst = q + unit.row * (cols / 2) + unit.col * (VEC_ELEMS / 2);
            if constexpr (VEC_LOADS == 1) {
                st_global_u32(dst, out.q[0]);
            } else if constexpr (VEC_LOADS == 2) {
                st_global_v2(dst, out.q[0], out.q[1]);
            } else {
                st_global_v4(dst, out.q[0], out.q[1], out.q[2], out.q[3]);
            }
        }
        if (unit.row < rows && unit.col % THREADS_PER_GROUP == 0) {
            u8* dst = sf + sf_index(unit.scale_row(), unit_group(unit.col), groups);
            const u32 bytes = live ? out.sf : 0u;
            if constexpr (UNIT_GROUPS == 2 && SF_TILE_GROUPS == 4) {
                // Both bytes in one store (an even group: 2-byte aligned in the 16-byte aligned
                // tiled layouts), so that a warp's stores touch half as many L2 sectors.
                st_global_u16(dst, bytes);
            } else {
#pragma unroll
                for (int g = 0; g < UNIT_GROUPS; ++g) dst[g] = static_cast<u8>(bytes >> (8 * g));
            }
        }
    }
};

// A unit's words: the load step's READS arrays of 4 * VEC_LOADS packed
// pairs, the first of them rewritten by the transform step into the words
// that are quantized.
template <typename Load>
using UnitWords = u32[Load::READS][4 * VEC_LOADS];

// The load step's reads of the unit, each one to four 16-byte loads, or
// zeros for a unit outside x; then the transform step.
template <typename Load, typename Transform>
FP4Q_DEVICE void load_unit(const Load& load, const Transform& transform, const RowWalk& unit, i32 cols, bool live,
                           UnitWords<Load>& w) {
#pragma unroll
    for (int r = 0; r < Load::READS; ++r) {
#pragma unroll
        for (int i = 0; i < 4 * VEC_LOADS; ++i) w[r][i] = 0u;
    }
    if (live) {
#pragma unroll
        for (int r = 0; r < Load::READS; ++r) {
            const GlobalRows& x = load.input(r);
            load_vector(x.ptr + unit.row * x.row_stride + unit.col * VEC_ELEMS + load.shift(r, cols), w[r]);
        }
    }
    transform(w);
}

// This thread's first unit in the walk that quantize_units takes, loaded
// and transformed into w (`live`: unit_live of it). The walk covers the
// scale domain of output rows of out_cols values; unit_magic and
// unit_shift divide by its units per row (the host's
// SimtConfig.units_per_row). `prologue()` runs before the load, once the
// indices are known.
template <typename Load, typename Transform, typename Prologue>
FP4Q_DEVICE RowWalk load_first_unit(const Load& load, const Transform& transform, i32 rows, i32 cols, i32 out_cols,
                                    u32 unit_magic, u32 unit_shift, Prologue prologue, bool& live,
                                    UnitWords<Load>& w) {
    const int groups = cols / SF_VEC;
    const Divisor per_row{static_cast<u32>(units_per_row(out_cols / SF_VEC)), unit_magic, unit_shift};
    const RowWalk unit(grid_thread(), grid_threads(), per_row);
    prologue();
    live = unit_live(unit, rows, groups);
    load_unit(load, transform, unit, cols, live, w);
    return unit;
}

// Quantizes and stores this thread's units, from `unit` on, whose words
// are in w, transformed (`live`: unit_live of it), into output rows of
// out_cols values; the later units are loaded and transformed here.
template <typename Load, typename Transform, typename Quantize, typename Store>
FP4Q_DEVICE void quantize_units(const Load& load, const Transform& transform, const Quantize& quantize,
                                const Store& store, i32 rows, i32 cols, i32 out_cols, RowWalk unit, bool live,
                                UnitWords<Load>& w) {
    const int groups = cols / SF_VEC;
    // Where the grid has a thread for every unit (up to about one wave of
    // them: the serving sizes), no thread has a second one, and the walk's
    // step and the next load are skipped instead of computed and found past
    // the end. rows * per_row <= grid_threads holds exactly when the walk's
    // row step, grid_threads / per_row rounded down, is at least rows: one
    // compare of values the walk holds, where the product took six
    // instructions that ptxas redid on every trip.
    const bool one_pass = unit.row_step >= static_cast<u32>(rows);
    // The loop runs while any lane of the warp has a row (the first lane has
    // the lowest), so that every lane takes part in each shuffle.
    while (vote_sync_any_pred(unit.row < rows)) {
        const auto out = quantize(w[0], [](float amax) {
#pragma unroll
            for (int lane_mask = 1; lane_mask < THREADS_PER_GROUP; lane_mask <<= 1) {
                amax = max_f32(amax, shfl_sync_bfly_b32(amax, lane_mask));
            }
            return amax;
        });
        store(unit, live, rows, out_cols, out);
        if (one_pass) break;
        unit.advance();
        live = unit_live(unit, rows, groups);
        load_unit(load, transform, unit, cols, live, w);
    }
}

// Quantizes x by the four steps. `prologue()` runs before the first read
// of x (load_first_unit); `make_quantize()` returns the quantize step and
// is called once, with the first loads in flight, after the padding scales
// are written: on a small input the padding stores and a device scale's
// load then overlap the loads of x instead of following them.
template <typename Load, typename Transform, typename MakeQuantize, typename Store, typename Prologue>
FP4Q_DEVICE void quantize_vector(const Load& load, const Transform& transform, MakeQuantize make_quantize,
                                 const Store& store, i32 rows, i32 cols, i32 out_cols, u32 unit_magic,
                                 u32 unit_shift, Prologue prologue) {
    bool live;
    UnitWords<Load> w;
    const RowWalk unit =
        load_first_unit(load, transform, rows, cols, out_cols, unit_magic, unit_shift, prologue, live, w);
    store.padding(rows, cols, out_cols);
    quantize_units(load, transform, make_quantize(), store, rows, cols, out_cols, unit, live, w);
}
