// The segments of a launch's rows (NVFP4_SPEC.md, "The project's exact
// sequences: experts and batches"): each expert (or batch) owns rows
// [first_row[e], end_row[e]) of x, quantized under its own tensor scale,
// and the scales of its row first_row[e] + r sit at scale row
// first_sf_row[e] + r. Every CTA resolves them itself from device memory,
// so that the host never reads them and a CUDA graph replays with any
// routing. For E experts, e = 0 .. E, from the offsets:
//
//   first_row[e]    = min(max(off[0], ..., off[e], 0), rows): each offset
//                     clamped into [0, rows], then a running maximum
//   end_row[e]      = first_row[e + 1]
//   first_sf_row[e] = 128 * (sum over i < e of ceil(n_i / 128)),
//                     n_i = first_row[i + 1] - first_row[i]
//
// the first and third a scan over the CTA, SEGMENT_ITEMS consecutive
// entries per thread. For B batches of M rows each, with counts c[b]
// (valid_rows, or M where there are none):
//
//   first_row[b]    = b * M
//   end_row[b]      = b * M + min(max(c[b], 0), M)
//   first_sf_row[b] = b * 128 * ceil(M / 128)
#pragma once
#include "ptx/global_memory.cuh"
#include "ptx/sync.cuh"

// MAX_EXPERTS: the most experts (or batches) a launch has (the host's rule).
constexpr int SEGMENT_ITEMS = (MAX_EXPERTS + SIMT_THREADS) / SIMT_THREADS;  // E + 1 entries over the CTA
constexpr int SCAN_WARPS = SIMT_THREADS / 32;

struct SegmentTable {
    i32 first_row[MAX_EXPERTS + 1];
    i32 end_row[MAX_EXPERTS + 1];
    i32 first_sf_row[MAX_EXPERTS + 1];
    u32 warp_totals[SCAN_WARPS];
};

// The combination of the values of the threads before this one (`identity`
// for thread 0) under `op`, associative and commutative on u32. Every thread
// of the CTA calls it; `totals` is free again once the next __syncthreads()
// has passed.
template <typename Op>
FP4Q_DEVICE u32 block_exclusive_scan(u32 v, u32 identity, Op op, u32 (&totals)[SCAN_WARPS]) {
    const u32 lane = threadIdx.x % 32;
    const u32 warp = threadIdx.x / 32;
    u32 inclusive = v;
#pragma unroll
    for (u32 delta = 1; delta < 32; delta <<= 1) {
        const u32 other = shfl_sync_up_b32(inclusive, delta);
        if (lane >= delta) inclusive = op(inclusive, other);
    }
    const u32 lanes_before = shfl_sync_up_b32(inclusive, 1);
    if (lane == 31) totals[warp] = inclusive;
    __syncthreads();
    u32 before = lane == 0 ? identity : lanes_before;
    for (u32 w = 0; w < warp; ++w) before = op(before, totals[w]);
    return before;
}

// Fills the table from `experts` + 1 offsets (experts <= MAX_EXPERTS) of x's
// `rows` rows. Every thread of the CTA calls it; the table is read after it
// returns. The offsets are read after pdl_wait(): the previous kernel may
// write them (as the counts of load_batches).
FP4Q_DEVICE void load_experts(SegmentTable& t, const i32* __restrict__ offsets, int experts, i32 rows) {
    const int first = static_cast<int>(threadIdx.x) * SEGMENT_ITEMS;
    // Offsets below 0 count as 0, so the running maximum runs over u32.
    u32 running = 0;
    u32 item_max[SEGMENT_ITEMS];
#pragma unroll
    for (int i = 0; i < SEGMENT_ITEMS; ++i) {
        const int e = first + i;
        const i32 off = e <= experts ? static_cast<i32>(ld_global_nc_u32(offsets + e)) : 0;
        const u32 clamped = off > 0 ? static_cast<u32>(off) : 0u;
        running = running > clamped ? running : clamped;
        item_max[i] = running;
    }
    const u32 max_before = block_exclusive_scan(running, 0u, [](u32 a, u32 b) { return a > b ? a : b; }, t.warp_totals);
#pragma unroll
    for (int i = 0; i < SEGMENT_ITEMS; ++i) {
        const int e = first + i;
        const u32 row = max_before > item_max[i] ? max_before : item_max[i];
        if (e <= experts) t.first_row[e] = static_cast<i32>(row < static_cast<u32>(rows) ? row : static_cast<u32>(rows));
    }
    __syncthreads();
    u32 blocks = 0;
    u32 blocks_before_item[SEGMENT_ITEMS];
#pragma unroll
    for (int i = 0; i < SEGMENT_ITEMS; ++i) {
        const int e = first + i;
        blocks_before_item[i] = blocks;
        if (e < experts) blocks += static_cast<u32>(t.first_row[e + 1] - t.first_row[e] + 127) / 128;
    }
    const u32 blocks_before = block_exclusive_scan(blocks, 0u, [](u32 a, u32 b) { return a + b; }, t.warp_totals);
#pragma unroll
    for (int i = 0; i < SEGMENT_ITEMS; ++i) {
        const int e = first + i;
        if (e <= experts) t.first_sf_row[e] = static_cast<i32>(128 * (blocks_before + blocks_before_item[i]));
        if (e < experts) t.end_row[e] = t.first_row[e + 1];
    }
    __syncthreads();
}

// Fills the table for `batches` batches of `batch_rows` rows each
// (batches <= MAX_EXPERTS, batches * batch_rows < 2^31), with the counts
// `valid_rows` (nullptr: every row is valid). As load_experts.
FP4Q_DEVICE void load_batches(SegmentTable& t, const i32* __restrict__ valid_rows, int batches, i32 batch_rows) {
    const i32 sf_rows = (batch_rows + 127) / 128 * 128;
    for (int b = threadIdx.x; b <= batches; b += SIMT_THREADS) {
        t.first_row[b] = b * batch_rows;
        t.first_sf_row[b] = b * sf_rows;
        if (b < batches) {
            const i32 count = valid_rows == nullptr ? batch_rows : static_cast<i32>(ld_global_nc_u32(valid_rows + b));
            t.end_row[b] = b * batch_rows + (count < 0 ? 0 : count < batch_rows ? count : batch_rows);
        }
    }
    __syncthreads();
}

// The last e in [0, n) with a[e] <= v, for a non-decreasing a with a[0] <= v:
// a binary search, every thread reading the same entries (broadcasts).
FP4Q_DEVICE int last_at_most(const i32* a, int n, i64 v) {
    int lo = 0;
    int hi = n;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (a[mid] <= v) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return lo;
}

// The segment whose rows start at or before `row`, for a row at or past the
// first segment's first row: the segment owns `row` if row < end_row[e].
FP4Q_DEVICE int segment_of_row(const SegmentTable& t, int segments, i64 row) {
    return last_at_most(t.first_row, segments, row);
}

// The rows of 128-row scale block `block` that hold scales of a segment's
// rows: those of the segment whose blocks it is in, up to its last row; none
// past the last segment's blocks. The rest of the block is padding.
FP4Q_DEVICE u32 filled_rows(const SegmentTable& t, int segments, i32 block) {
    const i32 row = 128 * block;
    if (row >= t.first_sf_row[segments]) return 0;
    const int e = last_at_most(t.first_sf_row, segments, row);
    const i32 filled = t.first_sf_row[e] + (t.end_row[e] - t.first_row[e]) - row;
    return filled <= 0 ? 0u : filled < 128 ? static_cast<u32>(filled) : 128u;
}
