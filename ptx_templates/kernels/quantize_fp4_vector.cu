// FP4 quantization with plain 16-byte loads and no shared memory
// (kernels/vector_quantize.cuh): the kernel for small and serving-size
// inputs, where the TMA kernel's pipeline never fills and its fixed latency
// (barrier setup, descriptor fetch, load, store) shows, and for rows the
// TMA store cannot address (K not a multiple of 32). Composed of the
// prologue's load and transform (x itself, or SiLU·mul of its two halves),
// rounding to nearest and the rowwise store. Same numerics headers as the
// other kernels, so the same bits.
#include "kernels/simt_quantize.cuh"
#include "kernels/vector_quantize.cuh"

extern "C" __global__ void __launch_bounds__(SIMT_THREADS)
fp4q_quantize_fp4_vector(FP4Q_SIMT_QUANTIZE_PARAMS) {
    using Steps = Prologue<PROLOGUE, GlobalRows>;
    quantize_vector(typename Steps::Load{{x, x_row_stride}}, typename Steps::Transform{},
                    [&] { return RoundToNearest{tensor_scale(tensor_sf_value, tensor_sf_ptr)}; },
                    RowwiseStore{out, sf_out}, rows, cols, out_cols, unit_magic, unit_shift,
                    [] { simt_quantize_prologue(); });
}
