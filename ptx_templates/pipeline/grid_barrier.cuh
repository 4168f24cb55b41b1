// A one-shot barrier of the whole grid that also takes the maximum of one
// u32 per CTA, on the two-word counter of the launch's stream
// (tile_tickets): {arrivals, then departures; the running maximum}. The
// counter is zero at launch and is left zero for the next launch on the
// stream, which touches it only after this grid has completed. Every CTA
// of the grid must be resident at the same time: the host sizes the grid
// to one wave, and the kernel lets no dependent grid start (PDL) before it
// has passed the barrier.
#pragma once
#include "ptx/atomics.cuh"
#include "ptx/global_memory.cuh"

// The maximum of `cta_value` (thread 0's) over every CTA of the grid, in
// every thread of the CTA.
FP4Q_DEVICE u32 grid_max_u32(u32* sync, u32 cta_value) {
    __shared__ u32 grid_value;
    if (threadIdx.x == 0) {
        const u32 ctas = gridDim.x;
        atom_global_max_u32(sync + 1, cta_value);
        // Release: this CTA's maximum is in before its arrival counts.
        atom_acq_rel_gpu_global_add_u32(sync, 1u);
        while (ld_acquire_gpu_global_u32(sync) < ctas) {
        }
        // Every CTA's maximum is in; an atomic read gets the last of them.
        grid_value = atom_global_max_u32(sync + 1, 0u);
        // The last CTA to leave resets the counter: every CTA has read the maximum.
        if (atom_acq_rel_gpu_global_add_u32(sync, 1u) == 2 * ctas - 1) {
            st_global_u32(sync + 1, 0u);
            st_global_u32(sync, 0u);
        }
    }
    __syncthreads();
    return grid_value;
}
