// Maximum of one u32 per thread over a CTA, for the global-scale kernels.
// They reduce float32 bits of non-negative, non-NaN values, which order
// like the unsigned integers, so an integer maximum is the float maximum
// (and exact, so the result does not depend on the order).
#pragma once
#include "ptx.cuh"

// The CTA's maximum, valid in thread 0. THREADS is a multiple of 32, at most 1024.
template <int THREADS>
FP4Q_DEVICE u32 block_max_u32(u32 v) {
    static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps, at most 32 of them");
    __shared__ u32 warp_max[THREADS / 32];
    v = redux_sync_max_u32(v);
    if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = redux_sync_max_u32(threadIdx.x < THREADS / 32 ? warp_max[threadIdx.x] : 0u);
    }
    return v;
}
