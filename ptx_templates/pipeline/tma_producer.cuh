// The producer of both TMA kernels: one thread walks the CTA's tiles in the
// order next_tile() gives, arms each tile's ring stage and issues its loads.
// The including kernel defines TILE_M, TILE_K, NUM_STAGES and
// CONSUMER_THREADS.
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
