// The TMA kernel's work (NVFP4, or MXFP4 when SF_VEC is 32), by the steps
// of kernels/steps.cuh: TMA + warp specialization + PDL.
//
// Warpgroup 0 is the producer (produce_tma): one thread streams input tiles
// into a ring of NUM_STAGES shared-memory buffers with TMA, guarded by
// full/empty mbarriers, and names each stage's tile; a stage holds one
// TILE_M x TILE_K tile per read of the load step, loaded as IN_BOXES boxes
// of that read's map. The other warpgroups are consumers (consume_tma):
// each of their items (a 64-element chunk of one row) is read back from the
// stage, transformed and quantized, and the store step (RowwiseTileStore)
// gathers codes and scales in shared memory, which one consumer TMA-stores
// per tile. The grid is persistent when launched with fewer CTAs than
// tiles, so the ring runs across tiles, in the order next_tile() gives. The
// kernel entry sets up the CTA (tma_cta_setup) and splits the warpgroups;
// it defines the config's constants.
#pragma once
#include "kernels/steps.cuh"
#include "layout/scale_layout.cuh"
#include "layout/tma_swizzle.cuh"
#include "pipeline/tma_producer.cuh"
#include "ptx/bulk_group.cuh"
#include "ptx/setmaxnreg.cuh"
#include "ptx/sync.cuh"
#include "ptx/tma.cuh"

constexpr int THREADS = 128 + CONSUMER_THREADS;
constexpr int CHUNKS_K = TILE_K / 64;
constexpr int ITEMS = TILE_M * CHUNKS_K / CONSUMER_THREADS;
constexpr int IN_BOXES = TILE_K / IN_BOX_K;
constexpr u32 IN_BOX_BYTES = TILE_M * IN_BOX_K * 2;
constexpr u32 IN_TILE_BYTES = TILE_M * TILE_K * 2;
constexpr int OUT_BOXES = (TILE_K / 2) / OUT_BOX_K;
constexpr u32 OUT_BOX_BYTES = TILE_M * OUT_BOX_K;
constexpr u32 Q_TILE_BYTES = TILE_M * TILE_K / 2;
constexpr u32 SF_TILE_BYTES = TILE_M * TILE_K / SF_VEC;
constexpr int SF_PER_CHUNK = 64 / SF_VEC;       // scale bytes one consumer step makes
constexpr int SF_BLOCK_K = 4 * SF_VEC;           // K elements of one 128x4 scale block
constexpr u32 CONSUMER_BARRIER = 1;

static_assert(TILE_M * CHUNKS_K % CONSUMER_THREADS == 0, "consumers must split a tile evenly");
static_assert(TILE_K % IN_BOX_K == 0 && (TILE_K / 2) % OUT_BOX_K == 0, "boxes must tile the tile");

// Byte offsets of (row, element column) in an input tile and of (row,
// byte column) in an output tile, both laid out as TMA boxes.
FP4Q_DEVICE u32 in_offset(int row, int col) {
    return (col / IN_BOX_K) * IN_BOX_BYTES +
           swizzle<IN_SWIZZLE>(row * (IN_BOX_K * 2) + (col % IN_BOX_K) * 2);
}

FP4Q_DEVICE u32 q_offset(int row, int byte_col) {
    return (byte_col / OUT_BOX_K) * OUT_BOX_BYTES +
           swizzle<OUT_SWIZZLE>(row * OUT_BOX_K + (byte_col % OUT_BOX_K));
}

// Where the scale bytes of (row, 64-column chunk) sit inside the tile's
// slice of the 128x4 layout.
FP4Q_DEVICE u32 sf_offset(int row, int chunk) {
    return sf_128x4_offset<SF_PER_CHUNK, int>(row, TILE_K / SF_BLOCK_K, chunk);
}

// Bytes of a scale word that belong to real groups; padding stays 0x00 even
// when a device tensor_sf would turn an all-zero group into something else.
FP4Q_DEVICE u32 valid_sf_mask(int row, int rows, int group, int groups) {
    if (row >= rows || group >= groups) return 0u;
    const int n = groups - group;
    return n >= SF_PER_CHUNK ? 0xFFFFFFFFu : (0xFFFFFFFFu >> (32 - 8 * n));
}

// The store step: the codes of a tile, and its scales in the swizzled
// layout, go to output buffers in shared memory (NUM_OUT_BUFFERS of them,
// used in turn), which consumer 0 TMA-stores through q_map and sf_map once
// every consumer has put its items (flush); the linear layout's scales go
// straight to sf, a byte each.
struct RowwiseTileStore {
    const TensorMap* q_map;
    const TensorMap* sf_map;
    u8* sf;

    // The output buffers of the CTA's i-th tile, whose first row and column
    // are m0 and k0.
    struct Tile {
        u8* q;
        u8* sf;  // swizzled layout only
        int m0;
        int k0;
    };

    FP4Q_DEVICE Tile tile(u8* smem, int i, int m0, int k0) const {
        return Tile{smem + OFF_Q + (i % NUM_OUT_BUFFERS) * Q_TILE_BYTES,
                    smem + OFF_SF + (i % NUM_OUT_BUFFERS) * SF_TILE_BYTES, m0, k0};
    }

    FP4Q_DEVICE void prefetch() const {
        prefetch_tensormap(q_map);
        if constexpr (FP4Q_SF_SWIZZLED) prefetch_tensormap(sf_map);
    }

    // Item (r, c) of the tile: row r, chunk c.
    FP4Q_DEVICE void put(const Tile& t, int r, int c, i32 rows, int groups, const QuantizedRun<SF_VEC, 32>& out) const {
        st_shared_v4(t.q + q_offset(r, c * 32), out.q[0], out.q[1], out.q[2], out.q[3]);
        st_shared_v4(t.q + q_offset(r, c * 32 + 16), out.q[4], out.q[5], out.q[6], out.q[7]);
        const int row = t.m0 + r;
        const int group = t.k0 / SF_VEC + c * SF_PER_CHUNK;
        const u32 bytes = out.sf & valid_sf_mask(row, rows, group, groups);
        if constexpr (FP4Q_SF_SWIZZLED) {
            if constexpr (SF_PER_CHUNK == 4) {
                st_shared_u32(t.sf + sf_offset(r, c), bytes);
            } else {
                st_shared_u16(t.sf + sf_offset(r, c), static_cast<u16>(bytes));
            }
        } else if (row < rows) {
            u8* dst = sf + static_cast<i64>(row) * groups + group;
#pragma unroll
            for (int b = 0; b < SF_PER_CHUNK; ++b) {
                if (group + b < groups) dst[b] = static_cast<u8>(bytes >> (8 * b));
            }
        }
    }

    // Every consumer, once its items are in the tile's buffers: consumer 0
    // stores them.
    FP4Q_DEVICE void flush(const Tile& t, int ctid) const {
        fence_proxy_async_shared_cta();
        if (ctid == 0) {
            // The output buffer written next iteration was last stored
            // NUM_OUT_BUFFERS - 1 tiles ago: it must be read out by now.
            cp_async_bulk_wait_group_read<NUM_OUT_BUFFERS - 2>();
        }
        bar_sync(CONSUMER_BARRIER, CONSUMER_THREADS);
        if (ctid == 0) {
#pragma unroll
            for (int b = 0; b < OUT_BOXES; ++b) {
                cp_async_bulk_tensor_2d_shared_to_global(q_map, t.k0 / 2 + b * OUT_BOX_K, t.m0, t.q + b * OUT_BOX_BYTES);
            }
            if constexpr (FP4Q_SF_SWIZZLED) {
                cp_async_bulk_tensor_4d_shared_to_global(sf_map, 0, 0, t.k0 / SF_BLOCK_K, t.m0 / 128, t.sf);
            }
            cp_async_bulk_commit_group();
        }
    }

    // After the last tile: consumer 0 waits until its stores are done.
    FP4Q_DEVICE void drain(int ctid) const {
        if (ctid == 0) cp_async_bulk_wait_group<0>();
    }
};

// The producer warpgroup (threads 0 to 127): thread 0 loads each of the
// CTA's tiles into its stage, every read of the load step as IN_BOXES boxes
// of the read's map, shifted by the read's columns.
template <typename Load>
FP4Q_DEVICE void produce_tma(const TmaCta& cta, const Load& load, i32 cols, u32* tickets) {
    constexpr u32 STAGE_BYTES = Load::READS * IN_TILE_BYTES;
    static_assert(OFF_IN + NUM_STAGES * STAGE_BYTES <= OFF_Q, "the config's stages hold every read's tile");
// A preprocessor guard: PRODUCER_REGS and CONSUMER_REGS are only rendered
// when the config moves registers.
#if FP4Q_SETMAXNREG
    setmaxnreg_dec<PRODUCER_REGS>();
#endif
    if (threadIdx.x == 0) {
#pragma unroll
        for (int r = 0; r < Load::READS; ++r) prefetch_tensormap(load.input(r));
        produce_tiles(cta.ring, cta.stage_tiles, cta.tiles, tickets, STAGE_BYTES, [&](int stage, int tile) {
            const int m0 = tile_m0(cta.tiles, tile);
            const int k0 = tile_k0(cta.tiles, tile);
            u8* dst = cta.smem + OFF_IN + stage * STAGE_BYTES;
#pragma unroll
            for (int r = 0; r < Load::READS; ++r) {
#pragma unroll
                for (int b = 0; b < IN_BOXES; ++b) {
                    cp_async_bulk_tensor_2d_global_to_shared(dst + r * IN_TILE_BYTES + b * IN_BOX_BYTES, load.input(r),
                                                             k0 + load.shift(r, cols) + b * IN_BOX_K, m0,
                                                             &cta.ring.full[stage]);
                }
            }
        });
    }
}

// The consumer warpgroups (threads 128 on): each thread's items of every
// tile, read back from the stage as the load step's READS arrays (`load`
// says which reads a stage holds), transformed, quantized by the step
// make_quantize() returns once the previous kernel's writes are visible,
// and put to the store step. tid is the kernel's threadIdx.x: read in the
// kernel, where __launch_bounds__ bounds it, the items' offsets compile as
// they do there (read here, sm_100f adds instructions for items a launch
// cannot have). groups is taken by reference, as a lambda's capture: by
// value, its division moves into the consumers' path and one shipped
// variant's SASS changes.
template <typename Load, typename Transform, typename MakeQuantize, typename Store>
FP4Q_DEVICE void consume_tma(const TmaCta& cta, u32 tid, const Load& load, const Transform& transform,
                             MakeQuantize make_quantize, const Store& store, i32 rows, const int& groups) {
    constexpr u32 STAGE_BYTES = Load::READS * IN_TILE_BYTES;
#if FP4Q_SETMAXNREG
    setmaxnreg_inc<CONSUMER_REGS>();
#endif
    const int ctid = tid - 128;
    // Our outputs may still be read, and tensor_sf written, by the previous kernel.
    pdl_wait();
    const auto quantize = make_quantize();
    if (ctid == 0) store.prefetch();

    consume_tiles(cta, [&](int i, int stage, int m0, int k0) {
        const auto out = store.tile(cta.smem, i, m0, k0);
        const u8* in = cta.smem + OFF_IN + stage * STAGE_BYTES;
#pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            const int item = it * CONSUMER_THREADS + ctid;
            const int r = item % TILE_M;
            const int c = item / TILE_M;
            u32 words[Load::READS][32];
#pragma unroll
            for (int rd = 0; rd < Load::READS; ++rd) {
#pragma unroll
                for (int v = 0; v < 8; ++v) {
                    ld_shared_v4(in + rd * IN_TILE_BYTES + in_offset(r, c * 64 + v * 8), words[rd][4 * v],
                                 words[rd][4 * v + 1], words[rd][4 * v + 2], words[rd][4 * v + 3]);
                }
            }
            transform(words);
            store.put(out, r, c, rows, groups, quantize(words[0]));
        }
        ring_release(cta.ring, stage);
        store.flush(out, ctid);
    });
    store.drain(ctid);
}
