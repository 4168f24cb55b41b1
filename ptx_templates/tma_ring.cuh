// The pipeline both TMA kernels run. The i-th tile a CTA works on goes
// through stage i % NUM_STAGES of a ring of shared-memory buffers. Each stage
// has a "full" mbarrier (armed by the producer with the stage's byte count,
// completed by the TMA loads) and an "empty" one (one arrival from every
// consumer thread). Tiles are numbered in row-major order of (row block,
// K block). The including kernel defines NUM_STAGES, CONSUMER_THREADS,
// TILE_M and TILE_K.
#pragma once
#include "ptx.cuh"

struct Ring {
    u64* full;
    u64* empty;
};

// Every thread of the CTA calls this: thread 0 initialises the barriers
// at `barriers` (2 * NUM_STAGES words), and all wait for it.
FP4Q_DEVICE Ring ring_init(u8* barriers) {
    Ring ring{reinterpret_cast<u64*>(barriers), reinterpret_cast<u64*>(barriers) + NUM_STAGES};
    if (threadIdx.x == 0) {
        for (int s = 0; s < NUM_STAGES; ++s) {
            mbarrier_init(&ring.full[s], 1);
            mbarrier_init(&ring.empty[s], CONSUMER_THREADS);
        }
        fence_mbarrier_init();
    }
    __syncthreads();
    return ring;
}

// Producer: wait until the consumers have released the stage of the CTA's
// i-th tile (the first round passes at once), name the tile in `stage_tiles`
// (the consumers read it once the stage is full; the arrive orders the write
// before that), then arm the stage's full barrier for `bytes`.
FP4Q_DEVICE int ring_produce_tile(const Ring& ring, int* stage_tiles, int i, int tile, u32 bytes) {
    const int stage = i % NUM_STAGES;
    mbarrier_wait_parity(&ring.empty[stage], ((i / NUM_STAGES) & 1) ^ 1);
    stage_tiles[stage] = tile;
    mbarrier_arrive_expect_tx(&ring.full[stage], bytes);
    return stage;
}

// Producer: the CTA has no i-th tile; its consumers stop there.
FP4Q_DEVICE void ring_close(const Ring& ring, int* stage_tiles, int i) {
    const int stage = i % NUM_STAGES;
    mbarrier_wait_parity(&ring.empty[stage], ((i / NUM_STAGES) & 1) ^ 1);
    stage_tiles[stage] = -1;
    mbarrier_arrive(&ring.full[stage]);
}

// Consumer: wait until the loads of tile i have landed in its stage.
FP4Q_DEVICE int ring_consume(const Ring& ring, int i) {
    const int stage = i % NUM_STAGES;
    mbarrier_wait_parity(&ring.full[stage], (i / NUM_STAGES) & 1);
    return stage;
}

// Consumer: this thread has read what it needs from the stage; the arrive
// orders those reads before the producer's refill.
FP4Q_DEVICE void ring_release(const Ring& ring, int stage) {
    mbarrier_arrive(&ring.empty[stage]);
}

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
