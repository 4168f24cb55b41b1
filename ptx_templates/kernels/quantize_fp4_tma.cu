// FP4 quantization (NVFP4, or MXFP4 when SF_VEC is 32) with TMA, warp
// specialization and PDL (kernels/tma_quantize.cuh), composed of the
// prologue's load and transform over x_map (x itself, or SiLU·mul of its two
// halves), rounding to nearest and the rowwise store (codes
// through out_map; scales through sf_out_map when swizzled, else to
// sf_out). The constants before the #includes come from the config.
#include "kernels/tma_quantize.cuh"

extern "C" __global__ void __launch_bounds__(THREADS, MIN_CTAS_PER_SM)
fp4q_quantize_fp4_tma(const __grid_constant__ TensorMap x_map,
                        const __grid_constant__ TensorMap out_map,
                        const __grid_constant__ TensorMap sf_out_map,
                        u8* __restrict__ sf_out,
                        FP4Q_TMA_TAIL_PARAMS) {
    const TmaCta cta = tma_cta_setup<1024>(rows, cols);
    const int groups = cols / SF_VEC;
    using Steps = Prologue<PROLOGUE, const TensorMap*>;
    const typename Steps::Load load{&x_map};
    // Warpgroup 0 loads, the others transform, quantize and store.
    if (threadIdx.x < 128) {
        produce_tma(cta, load, cols, tickets);
        return;
    }
    consume_tma(cta, threadIdx.x, load, typename Steps::Transform{},
                [&] { return RoundToNearest{tensor_scale(tensor_sf_value, tensor_sf_ptr)}; },
                RowwiseTileStore{&out_map, &sf_out_map, sf_out}, rows, groups);
}
