// NVFP4 quantization with the dynamic tensor scale in one launch, for
// inputs that fit in L2: every thread takes the NaN-ignoring amax of its
// units of x, the grid agrees on the maximum (pipeline/grid_barrier.cuh),
// each CTA derives the global scale from it (NVFP4_SPEC.md "Global scale";
// CTA 0 also stores it), and the vector kernel's work follows
// (kernels/vector_quantize.cuh) in the same walk, by the same steps: the
// amax is taken of the transformed words, and a thread's first unit stays
// in registers across the barrier, so x is read once where the grid has a
// thread per unit, and the later units are read again from L2.
// Same numerics headers as the other kernels, so the same bits as
// global_scale followed by quantize_nvfp4.
#include "kernels/vector_quantize.cuh"
#include "numerics/global_scale.cuh"
#include "pipeline/grid_barrier.cuh"
#include "pipeline/pdl.cuh"

// MIN_CTAS_PER_SM fills an SM's threads: the first unit, held across the
// barrier, must not cost the one-wave grid threads through registers.
extern "C" __global__ void __launch_bounds__(SIMT_THREADS, MIN_CTAS_PER_SM)
fp4q_quantize_fp4_dynamic(const u16* __restrict__ x, i64 x_row_stride, u8* __restrict__ out,
                          u8* __restrict__ sf_out, float* __restrict__ tensor_sf_out, i32 rows, i32 cols,
                          i32 out_cols, u32 unit_magic, u32 unit_shift, u32* __restrict__ tickets) {
    const int groups = cols / SF_VEC;
    using Steps = Prologue<PROLOGUE, GlobalRows>;
    using Load = typename Steps::Load;
    const Load load{{x, x_row_stride}};
    const typename Steps::Transform transform{};
    const RowwiseStore store{out, sf_out};
    bool live;
    UnitWords<Load> w;
    // The previous kernel may write x, still read out, sf_out or tensor_sf_out, and use the counter.
    const RowWalk first = load_first_unit(load, transform, rows, cols, out_cols, unit_magic, unit_shift,
                                          [] { pdl_wait(); }, live, w);
    float amax = amax_packed(w[0]);
    RowWalk unit = first;
    for (unit.advance(); unit.row < rows; unit.advance()) {
        UnitWords<Load> more;
        load_unit(load, transform, unit, cols, unit_live(unit, rows, groups), more);
        amax = max_f32(amax, amax_packed(more[0]));
    }
    GridMax barrier;
    const u32 amax_bits = barrier.max(tickets, block_max_u32<SIMT_THREADS>(f32_bits(amax)));
    // Only now: a dependent grid started earlier could take the SM slots a CTA still waits for.
    pdl_launch_dependents();
    const float tensor_sf = global_scale_of_amax(amax_bits);
    if (blockIdx.x == 0 && threadIdx.x == 0) *tensor_sf_out = tensor_sf;
    store.padding(rows, cols, out_cols);
    // Built in value mode (FP4Q_TENSOR_SF_BY_POINTER false): the scale and its reciprocal as every kernel takes them.
    quantize_units(load, transform, RoundToNearest{tensor_scale(tensor_sf, nullptr)}, store, rows, cols, out_cols,
                   first, live, w);
    barrier.leave(tickets);
}
