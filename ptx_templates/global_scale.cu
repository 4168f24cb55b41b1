// Second pass of the dynamic global scale (NVFP4_SPEC.md "Global scale"):
// one CTA reduces the `count` partial maxima of the amax pass and writes
// min(float32(2688 / amax), 2^100), correctly rounded, or 1.0 when amax is 0
// or infinite (NaN never reaches here: the amax pass drops it).
#include "block_max.cuh"

extern "C" __global__ void __launch_bounds__(SCALE_THREADS)
fp4q_global_scale(const float* __restrict__ partial, i32 count, float* __restrict__ scale) {
    griddepcontrol_wait();
    griddepcontrol_launch_dependents();
    u32 m = 0;
    for (int i = threadIdx.x; i < count; i += SCALE_THREADS) {
        const u32 v = f32_bits(partial[i]);
        m = v > m ? v : m;
    }
    m = block_max_u32<SCALE_THREADS>(m);
    if (threadIdx.x == 0) {
        const float amax = f32_from_bits(m);
        const bool degenerate = amax == 0.0f || m == 0x7F800000u;
        *scale = degenerate ? 1.0f : min_f32(div_rn(2688.0f, amax), 0x1p100f);
    }
}
