// FP4 quantization of whole rows: the kernel of the prologues that need a
// statistic of the row before any of its elements is quantized (RMSNorm,
// add+RMSNorm). A CTA takes one row at a time (a grid-stride loop over
// rows) and holds it in registers: unit u of a row (SF_VEC elements, one
// group) is thread u % SIMT_THREADS's unit u / SIMT_THREADS, so a warp's
// loads are contiguous; ROW_UNITS units per thread cover the row's scale
// domain. Per row:
//
//   load       x's units (add+RMSNorm: r = dtype(x + residual), stored back
//              to residual); weight's, unit by unit, once the row's rinv is
//              known (every row reads the same, from cache, and the
//              registers stay free for the row)
//   reduce     the row's sum of squares in the spec's fixed tree: each unit
//              is an aligned run of SF_VEC elements (a node of the tree),
//              the units of one slot (one per thread) combine by butterfly
//              shuffles across the warp and through shared memory across
//              warps, the slots pairwise in order; units past K add +0
//   transform  h = dtype(dtype(r * rinv) * w) (RmsNorm)
//   quantize   RoundToNearest, the other kernels' step
//   store      RowwiseStore (vector_quantize.cuh): codes, scale bytes,
//              zeros for the swizzled layout's padding groups and rows
//
// Needs x's rows, weight, residual, out and a swizzled sf_out 16-byte
// aligned (the host's rule).
#define VEC_ELEMS SF_VEC
#include "kernels/simt_quantize.cuh"
#include "kernels/vector_quantize.cuh"
#include "numerics/rms_norm.cuh"
#include "ptx/shared_memory.cuh"

constexpr int WORDS = SF_VEC / 2;  // packed pairs of one unit
constexpr int WARPS = SIMT_THREADS / 32;
constexpr bool ADD_RESIDUAL = PROLOGUE == 3;  // kernels.call.PROLOGUES: 2 rms_norm, 3 add_rms_norm
static_assert(PROLOGUE == 2 || PROLOGUE == 3, "the row kernel runs RMSNorm or add+RMSNorm");
static_assert((WARPS & (WARPS - 1)) == 0 && (ROW_UNITS & (ROW_UNITS - 1)) == 0, "tree levels are powers of two");

// A unit of the row the CTA holds: its row and its index in the row.
struct RowUnit {
    i64 row;
    int col;
};

FP4Q_DEVICE void load_unit(const u16* p, u32 (&w)[WORDS]) {
#pragma unroll
    for (int v = 0; v < WORDS / 4; ++v) ld_global_nc_v4(p + 8 * v, w[4 * v], w[4 * v + 1], w[4 * v + 2], w[4 * v + 3]);
}

// The load step of a row: x's units, or r = dtype(x + residual), which
// goes back to residual; zeros past the row's units.
FP4Q_DEVICE void load_row(const u16* __restrict__ x, u16* __restrict__ residual, i64 x_row_stride, i64 row,
                          i32 cols, u32 (&r)[ROW_UNITS][WORDS]) {
    const int units = cols / SF_VEC;
#pragma unroll
    for (int s = 0; s < ROW_UNITS; ++s) {
        const int u = s * SIMT_THREADS + static_cast<int>(threadIdx.x);
#pragma unroll
        for (int i = 0; i < WORDS; ++i) r[s][i] = 0u;
        if (u < units) load_unit(x + row * x_row_stride + u * SF_VEC, r[s]);
    }
    if constexpr (ADD_RESIDUAL) {
#pragma unroll
        for (int s = 0; s < ROW_UNITS; ++s) {
            const int u = s * SIMT_THREADS + static_cast<int>(threadIdx.x);
            if (u >= units) continue;
            u16* p = residual + row * cols + u * SF_VEC;
            u32 res[WORDS];
#pragma unroll
            for (int v = 0; v < WORDS / 4; ++v) ld_global_v4(p + 8 * v, res[4 * v], res[4 * v + 1], res[4 * v + 2], res[4 * v + 3]);
#pragma unroll
            for (int i = 0; i < WORDS; ++i) r[s][i] = add_x2(r[s][i], res[i]);
#pragma unroll
            for (int v = 0; v < WORDS / 4; ++v) st_global_v4(p + 8 * v, r[s][4 * v], r[s][4 * v + 1], r[s][4 * v + 2], r[s][4 * v + 3]);
        }
    }
}

// The reduce step: the row's sum of squares, every thread getting it.
// `partial` holds one sum per (slot, warp); two of them, used by
// alternate rows, so that a warp writing the next row's sums never
// overwrites ones a slower warp still reads (it cannot pass that row's
// barrier before the slow warp reaches it).
FP4Q_DEVICE float row_sum_of_squares(const u32 (&r)[ROW_UNITS][WORDS], float (&partial)[ROW_UNITS][WARPS]) {
    float slot[ROW_UNITS];
#pragma unroll
    for (int s = 0; s < ROW_UNITS; ++s) {
        float v = sum_of_squares(r[s]);
#pragma unroll
        for (int lane_mask = 1; lane_mask < 32; lane_mask <<= 1) v = add_rn(v, shfl_sync_bfly_b32(v, lane_mask));
        slot[s] = v;
    }
    if (threadIdx.x % 32 == 0) {
#pragma unroll
        for (int s = 0; s < ROW_UNITS; ++s) partial[s][threadIdx.x / 32] = slot[s];
    }
    __syncthreads();
#pragma unroll
    for (int s = 0; s < ROW_UNITS; ++s) {
        float warps[WARPS];
#pragma unroll
        for (int i = 0; i < WARPS; ++i) warps[i] = partial[s][i];
        slot[s] = pairwise_sum(warps);
    }
    return pairwise_sum(slot);
}

// The transform step: h from r (in[0]) and weight (in[1]) into in[0].
struct RmsNorm {
    float rinv;

    FP4Q_DEVICE void operator()(u32 (&in)[2][WORDS]) const {
#pragma unroll
        for (int i = 0; i < WORDS; ++i) in[0][i] = rms_norm_x2(in[0][i], rinv, in[1][i]);
    }
};

extern "C" __global__ void __launch_bounds__(SIMT_THREADS)
fp4q_quantize_fp4_rows(const u16* __restrict__ x, const u16* __restrict__ weight, u16* __restrict__ residual,
                       u8* __restrict__ out, u8* __restrict__ sf_out, i64 x_row_stride, i32 rows, i32 cols,
                       float eps, float tensor_sf_value, const float* __restrict__ tensor_sf_ptr) {
    __shared__ float partial[2][ROW_UNITS][WARPS];
    simt_quantize_prologue();
    const RowwiseStore store{out, sf_out};
    store.padding(rows, cols / SF_VEC);
    const int units = cols / SF_VEC;
    const int domain_units = sf_domain_groups(units);
    const RoundToNearest quantize{tensor_scale(tensor_sf_value, tensor_sf_ptr)};
    int parity = 0;
    for (i64 row = blockIdx.x; row < rows; row += gridDim.x, parity ^= 1) {
        u32 r[ROW_UNITS][WORDS];
        load_row(x, residual, x_row_stride, row, cols, r);
        const RmsNorm transform{rms_inverse(row_sum_of_squares(r, partial[parity]), cols, eps)};
#pragma unroll
        for (int s = 0; s < ROW_UNITS; ++s) {
            const RowUnit unit{row, s * SIMT_THREADS + static_cast<int>(threadIdx.x)};
            if (unit.col >= domain_units) continue;
            const bool live = unit.col < units;
            u32 in[2][WORDS];
#pragma unroll
            for (int i = 0; i < WORDS; ++i) {
                in[0][i] = r[s][i];
                in[1][i] = 0u;
            }
            if (live) load_unit(weight + unit.col * SF_VEC, in[1]);
            transform(in);
            store(unit, live, rows, cols, quantize(in[0]));
        }
    }
}
