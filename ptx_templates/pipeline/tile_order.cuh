// The tiles a TMA kernel walks and the order its CTAs take them in. Tiles
// are numbered in row-major order of (row block, K block). The including
// kernel defines TILE_M and TILE_K.
#pragma once
#include "ptx/atomics.cuh"
#include "ptx/global_memory.cuh"

// The tiles of a rows x cols problem.
struct Tiles {
    int per_row_block;  // tiles along K
    int count;
};

FP4Q_DEVICE Tiles tiles_of(int rows, int cols) {
    const int k = (cols + TILE_K - 1) / TILE_K;
    return Tiles{k, ((rows + TILE_M - 1) / TILE_M) * k};
}

// Which tile a CTA takes after `tile`. Without a counter the order is
// static: blockIdx.x, then steps of gridDim.x. With one, every CTA starts
// at blockIdx.x and then takes tickets from `tickets[0]`, so CTAs on SMs
// that move data faster take more tiles and all finish at about the same
// time. SMs differ by several percent in the bandwidth they get, and a
// static order turns that into a tail of several tiles (8192x8192 on an
// H200: CTAs finished between 40 and 48 us).
FP4Q_DEVICE int next_tile(int tile, u32* tickets) {
    if (tickets == nullptr) return tile + static_cast<int>(gridDim.x);
    return static_cast<int>(gridDim.x + atom_global_add_u32(tickets, 1u));
}

// Called once per CTA after its last ticket. The counter is zero at launch
// and is left zero for the next launch: the last CTA to finish taking
// tickets resets it. Each CTA's last ticket is taken before its
// acquire-release count in tickets[1], so the reset comes after every
// ticket of this launch; the next launch on the stream starts taking
// tickets only after this grid has completed.
FP4Q_DEVICE void tickets_retire(u32* tickets) {
    if (tickets == nullptr) return;
    if (atom_acq_rel_gpu_global_add_u32(tickets + 1, 1u) == gridDim.x - 1) {
        st_global_u32(tickets, 0u);
        st_global_u32(tickets + 1, 0u);
    }
}

FP4Q_DEVICE int tile_m0(const Tiles& tiles, int tile) { return (tile / tiles.per_row_block) * TILE_M; }
FP4Q_DEVICE int tile_k0(const Tiles& tiles, int tile) { return (tile % tiles.per_row_block) * TILE_K; }
