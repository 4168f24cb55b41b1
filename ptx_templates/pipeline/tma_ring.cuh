// The pipeline both TMA kernels run. The i-th tile a CTA works on goes
// through stage i % NUM_STAGES of a ring of shared-memory buffers. Each stage
// has a "full" mbarrier (armed by the producer with the stage's byte count,
// completed by the TMA loads) and an "empty" one (one arrival from every
// consumer thread). The including kernel defines NUM_STAGES and
// CONSUMER_THREADS.
#pragma once
#include "ptx/mbarrier.cuh"

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
