// The dynamic global scale (NVFP4_SPEC.md "Global scale"): the tensor scale
// 2688 / amax of the whole input, reduced in two passes.
#pragma once
#include "ptx/float_math.cuh"
#include "ptx/sync.cuh"

// The maximum of one u32 per thread over a CTA, valid in thread 0. The
// passes reduce float32 bits of non-negative, non-NaN values, which order
// like the unsigned integers, so an integer maximum is the float maximum
// (and exact, so the result does not depend on the order). THREADS is a
// multiple of 32, at most 1024.
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

// The scale from the bits of the non-NaN amax: min(float32(numerator / amax),
// 2^100), correctly rounded, or 1.0 when amax is 0 or infinite. The numerator
// is 448 * 6, or 256 * 6 under 4/6, whose map-to-4 candidate would otherwise
// need scales up to 448 * 1.5 (NVFP4_SPEC.md, training quantizers: "Tensor scales").
FP4Q_DEVICE float global_scale_of_amax(u32 amax_bits, float numerator = 2688.0f) {
    const float amax = f32_from_bits(amax_bits);
    const bool degenerate = amax == 0.0f || amax_bits == 0x7F800000u;
    return degenerate ? 1.0f : min_f32(div_rn(numerator, amax), 0x1p100f);
}
