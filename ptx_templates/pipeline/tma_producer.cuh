// What both TMA kernels share: their CTA's setup; the producer, one
// thread that walks the CTA's tiles in the order next_tile() gives, arms
// each tile's ring stage and issues its loads; the consumers' walk over
// the same tiles. The including kernel defines
// TILE_M, TILE_K, NUM_STAGES, CONSUMER_THREADS, and the shared-memory
// offsets OFF_BARRIERS and OFF_TILES.
#pragma once
#include "pipeline/pdl.cuh"
#include "pipeline/tile_order.cuh"
#include "pipeline/tma_ring.cuh"

// The start of dynamic shared memory rounded up to ALIGN bytes (TMA
// destinations need 128, swizzled boxes 1024); the launch adds the slack.
template <u64 ALIGN>
FP4Q_DEVICE u8* align_smem(u8* smem_raw) {
    return reinterpret_cast<u8*>((reinterpret_cast<u64>(smem_raw) + (ALIGN - 1)) & ~(ALIGN - 1));
}

// The parameters every TMA kernel ends with: the tensor scale (by value or
// by pointer), the problem's shape, the tile counter (null: static order).
#define FP4Q_TMA_TAIL_PARAMS                                                                  \
    float tensor_sf_value, const float* __restrict__ tensor_sf_ptr, i32 rows, i32 cols, \
        u32* __restrict__ tickets

// A TMA kernel's CTA: its dynamic shared memory (aligned), the tiles of the
// problem, the ring's barriers and the tile number each stage holds.
struct TmaCta {
    u8* smem;
    Tiles tiles;
    Ring ring;
    int* stage_tiles;
};

template <u64 ALIGN>
FP4Q_DEVICE TmaCta tma_cta_setup(int rows, int cols) {
    extern __shared__ u8 smem_raw[];
    u8* smem = align_smem<ALIGN>(smem_raw);
    return TmaCta{smem, tiles_of(rows, cols), ring_init(smem + OFF_BARRIERS),
                  reinterpret_cast<int*>(smem + OFF_TILES)};
}

// `load_stage(stage, tile)` issues the TMA loads of `tile` into `stage`,
// completing on ring.full[stage] with `stage_bytes` in all. The previous
// kernel may still be writing our input until pdl_wait(); everything the
// caller did before this call overlapped it. Once every load is issued the
// next kernel may start its prologue, and the consumers learn where the
// CTA's tiles end.
template <typename LoadStage>
FP4Q_DEVICE void produce_tiles(const Ring& ring, int* stage_tiles, const Tiles& tiles, u32* tickets,
                               u32 stage_bytes, LoadStage load_stage) {
    pdl_wait();
    int i = 0;
    for (int tile = blockIdx.x; tile < tiles.count; tile = next_tile(tile, tickets), ++i) {
        load_stage(ring_produce_tile(ring, stage_tiles, i, tile, stage_bytes), tile);
    }
    tickets_retire(tickets);
    pdl_launch_dependents();
    ring_close(ring, stage_tiles, i);
}

// The consumers' side: `consume(i, stage, m0, k0)` for the CTA's i-th tile,
// whose first row and column are m0 and k0, once ring stage `stage` holds
// it; `consume` releases the stage as soon as it has read it out.
template <typename Consume>
FP4Q_DEVICE void consume_tiles(const TmaCta& cta, Consume consume) {
    for (int i = 0;; ++i) {
        const int stage = ring_consume(cta.ring, i);
        const int tile = cta.stage_tiles[stage];
        if (tile < 0) return;
        consume(i, stage, tile_m0(cta.tiles, tile), tile_k0(cta.tiles, tile));
    }
}
