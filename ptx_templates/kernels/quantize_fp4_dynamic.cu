// NVFP4 quantization with the dynamic tensor scale in one launch, for
// inputs that fit in L2: every thread takes the NaN-ignoring amax of its
// share of x, the grid agrees on the maximum (pipeline/grid_barrier.cuh),
// each CTA derives the global scale from it (NVFP4_SPEC.md "Global scale";
// CTA 0 also stores it), and the vector kernel's work follows
// (kernels/vector_quantize.cuh), its second read of x served by L2.
// Same numerics headers as the other kernels, so the same bits as
// global_scale followed by quantize_nvfp4.
#include "kernels/vector_quantize.cuh"
#include "numerics/global_scale.cuh"
#include "pipeline/grid_barrier.cuh"
#include "pipeline/pdl.cuh"

extern "C" __global__ void __launch_bounds__(SIMT_THREADS)
fp4q_quantize_fp4_dynamic(const u16* __restrict__ x, i64 x_row_stride, u8* __restrict__ q, u8* __restrict__ sf,
                          float* __restrict__ scale, i32 rows, i32 cols, u32* __restrict__ sync) {
    // The previous kernel may write x, still read q, sf or scale, and use the counter.
    pdl_wait();
    float amax = 0.0f;
    for (RowWalk unit(grid_thread(), grid_threads(), cols / VEC_ELEMS); unit.row < rows; unit.advance()) {
        u32 w[4 * VEC_LOADS];
        load_vector(x + unit.row * x_row_stride + unit.col * VEC_ELEMS, w);
        amax = max_f32(amax, amax_packed(w));
    }
    const u32 amax_bits = grid_max_u32(sync, block_max_u32<SIMT_THREADS>(f32_bits(amax)));
    // Only now: a dependent grid started earlier could take the SM slots a CTA still waits for.
    pdl_launch_dependents();
    const float tensor_sf = global_scale_of_amax(amax_bits);
    if (blockIdx.x == 0 && threadIdx.x == 0) *scale = tensor_sf;
    // Built in value mode (FP4Q_TENSOR_SF_BY_POINTER false): the scale and its reciprocal as every kernel takes them.
    quantize_vector(x, x_row_stride, q, sf, rows, cols, [] {}, [&] { return tensor_scale(tensor_sf, nullptr); });
}
