// Second pass of the dynamic global scale (NVFP4_SPEC.md "Global scale"):
// one CTA reduces the `count` partial maxima of the amax pass and writes the
// scale of their maximum (NaN never reaches here: the amax pass drops it);
// FP4Q_FOUR_OVER_SIX: 4/6's scale, 1536 / amax.
#include "numerics/global_scale.cuh"
#include "pipeline/pdl.cuh"

extern "C" __global__ void __launch_bounds__(SCALE_THREADS)
fp4q_global_scale(const float* __restrict__ partial, i32 count, float* __restrict__ scale) {
    pdl_wait();
    pdl_launch_dependents();
    u32 m = 0;
    for (int i = threadIdx.x; i < count; i += SCALE_THREADS) {
        const u32 v = f32_bits(partial[i]);
        m = v > m ? v : m;
    }
    m = block_max_u32<SCALE_THREADS>(m);
    if (threadIdx.x == 0) *scale = global_scale_of_amax(m, FP4Q_FOUR_OVER_SIX ? 1536.0f : 2688.0f);
}
