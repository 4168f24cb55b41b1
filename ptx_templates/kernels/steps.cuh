// The steps a quantize kernel is composed of, and today's steps. A kernel
// body walks its units, a unit being WORDS packed pairs of one row (a vector
// thread's 8 to 32 elements, a TMA consumer's 64-element chunk, a plain
// thread's group), and runs four steps on each; a kernel entry file names
// its steps and hands them to its body (vector_quantize.cuh for the vector
// and dynamic kernels, tma_quantize.cuh for the TMA kernel; the plain
// kernel runs the load and transform steps in its own loop).
//
//   load       Which tensors a unit reads, and where: READS reads, read r
//              taking the elements of input(r) at the unit's row from the
//              unit's column + shift(r, cols) on (cols: the width that is
//              quantized). Input is the body's handle on a tensor
//              (GlobalRows, or a TensorMap pointer for TMA); the body reads
//              on its own path into u32 in[READS][WORDS]: global loads, or,
//              for TMA, the producer loads each read of a tile (its map's
//              boxes, shifted) into the stage and the consumers read their
//              items back.
//   transform  Rewrites in[0] from in[READS][WORDS]: the packed 16-bit
//              words of x's dtype that are quantized (the spec rounds every
//              fused prologue to x's dtype).
//   quantize   in[0] -> QuantizedRun (numerics/quantize_group.cuh): codes
//              and scale bytes, by the tensor scale the step holds; the
//              body builds it once the previous kernel's writes are visible.
//   store      The run -> the outputs, at the unit's place, on the body's
//              path: RowwiseStore (global stores), RowwiseTileStore (shared
//              tiles, then TMA stores).
//
// How the next steps fit:
// - SiLU·mul: a load TwoHalves (READS 2: input 0 at the column and at
//   column + cols; two tiles per TMA stage) and a transform that writes
//   dtype(silu(gate) * up) into in[0].
// - RMSNorm, add+RMSNorm: a load of x (and residual: READS 2, two maps)
//   and of w, a read whose row is 0 for every unit (the load step gains a
//   row for it; TMA: a one-row box); the body first reduces each row's sum
//   of squares of x (of dtype(x + residual)) in a fixed order, with a walk
//   that keeps a row in one CTA (TMA: TILE_K >= K), and hands the transform
//   the row's rinv; add+RMSNorm's store step also writes dtype(x + residual)
//   to residual.
// - Per-expert tensor scales: a quantize step that takes the scale of the
//   unit's row's expert, given the row.
// - Stochastic rounding: a quantize step holding (seed, offset), given the
//   run's first group index as its Philox counter.
// - Columnwise output: a second pass of the four steps over a TMA stage
//   before it is released, its load reading 16 rows of one column, its
//   store writing q_t and sf_t through their own maps. Dequantized output:
//   a store step that turns the run back into x's dtype
//   (numerics/dequantize.cuh) and stores those words.
// - Hadamard (columnwise groups): its y stays float32 (the spec does not
//   round it), so the transform's output and the quantize step's input
//   become float32 values for it, not packed words.
// The including kernel defines SF_VEC.
#pragma once
#include "numerics/quantize_group.cuh"
#include "numerics/silu.cuh"
#include "numerics/tensor_scale.cuh"

// A tensor in global memory: rows of 16-bit elements, row_stride elements
// apart.
struct GlobalRows {
    const u16* ptr;
    i64 row_stride;
};

// Load: one input, read where the unit is.
template <typename Input>
struct OneInput {
    static constexpr int READS = 1;
    Input x;

    FP4Q_DEVICE const Input& input(int) const { return x; }
    FP4Q_DEVICE int shift(int, int) const { return 0; }
};

// Load: the two halves of each row of one input, gate at the unit's column
// and up `cols` elements after it (SiLU·mul's x of 2 * cols per row).
template <typename Input>
struct TwoHalves {
    static constexpr int READS = 2;
    Input x;

    FP4Q_DEVICE const Input& input(int) const { return x; }
    FP4Q_DEVICE int shift(int r, int cols) const { return r * cols; }
};

// Transform: x's words as they are.
struct Identity {
    template <int WORDS>
    FP4Q_DEVICE void operator()(u32 (&)[1][WORDS]) const {}
};

// Transform: h = dtype(silu(gate) * up) (numerics/silu.cuh) into in[0], from
// TwoHalves' gate (in[0]) and up (in[1]).
struct SiluMul {
    template <int WORDS>
    FP4Q_DEVICE void operator()(u32 (&in)[2][WORDS]) const {
#pragma unroll
        for (int i = 0; i < WORDS; ++i) in[0][i] = silu_mul_x2(in[0][i], in[1][i]);
    }
};

// The load and transform steps of the config's prologue (PROLOGUE: 0 none,
// 1 SiLU·mul; kernels.call.PROLOGUES on the host), over inputs of type Input.
template <int P, typename Input>
struct Prologue;

template <typename Input>
struct Prologue<0, Input> {
    using Load = OneInput<Input>;
    using Transform = Identity;
};

template <typename Input>
struct Prologue<1, Input> {
    using Load = TwoHalves<Input>;
    using Transform = SiluMul;
};

// Quantize: round to nearest (NVFP4_SPEC.md steps 2-6) with the tensor
// scale tsf. `combine` as in quantize_run: a group's amax from this run's
// share of it.
struct RoundToNearest {
    TensorScale tsf;

    template <int WORDS, typename Combine = WholeGroups>
    FP4Q_DEVICE QuantizedRun<SF_VEC, WORDS> operator()(const u32 (&w)[WORDS], Combine combine = {}) const {
        return quantize_run<SF_VEC, WORDS>(w, tsf.value, tsf.rcp, combine);
    }
};
