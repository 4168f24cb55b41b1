// A one-shot barrier of the whole grid that also takes the maximum of one
// u32 per CTA, on the two-word counter of the launch's stream
// (tile_tickets): {arrivals, then departures; the running maximum}. The
// counter is zero at launch and is left zero for the next launch on the
// stream, which touches it only after this grid has completed. Every CTA
// of the grid must be resident at the same time: the host sizes the grid
// to one wave, and the kernel lets no dependent grid start (PDL) before it
// has passed the barrier. A grid of one CTA needs no counter and touches
// none.
#pragma once
#include "ptx/atomics.cuh"
#include "ptx/global_memory.cuh"

class GridMax {
  public:
    // The maximum of `cta_value` (thread 0's) over every CTA of the grid, in
    // every thread of the CTA. Thread 0's critical path is the arrival, the
    // wait for the last arrival and the read of the maximum; its departure
    // (which lets the last CTA out reset the counter) is issued here but
    // waited for only in leave(), so its round trip overlaps the caller's
    // work.
    FP4Q_DEVICE u32 max(u32* sync, u32 cta_value) {
        __shared__ u32 grid_value;
        if (threadIdx.x == 0) {
            if (gridDim.x == 1) {
                grid_value = cta_value;
            } else {
                const u32 ctas = gridDim.x;
                red_global_max_u32(sync + 1, cta_value);
                // Release: this CTA's maximum is in before its arrival counts.
                red_release_gpu_global_add_u32(sync, 1u);
                while (ld_acquire_gpu_global_u32(sync) < ctas) {
                }
                // Every CTA's maximum is in; an atomic read gets the last of them.
                grid_value = atom_global_max_u32(sync + 1, 0u);
                // Release: the read above is done before this CTA counts as gone.
                departure_ = atom_release_gpu_global_add_u32(sync, 1u);
            }
        }
        __syncthreads();
        return grid_value;
    }

    // Every thread, after max(): the last CTA to leave resets the counter,
    // once every CTA has read the maximum.
    FP4Q_DEVICE void leave(u32* sync) const {
        if (threadIdx.x == 0 && gridDim.x > 1 && departure_ == 2 * gridDim.x - 1) {
            fence_acq_rel_gpu();  // every other CTA's read of the maximum came before
            st_global_u32(sync + 1, 0u);
            st_global_u32(sync, 0u);
        }
    }

  private:
    u32 departure_ = 0;  // thread 0's place among the departures
};
