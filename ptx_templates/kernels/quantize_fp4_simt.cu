// FP4 quantization without TMA: one thread per group (16 elements for
// NVFP4, 32 for MXFP4), plain loads and stores. Serves the pointers that
// neither TMA nor the vector kernel can address (a base or row stride of x,
// or a base of q or of tiled scales, that is not 16-byte aligned), and
// any shape; and the one kernel that reads float32 x (FP4Q_INPUT_F32, no
// prologue: spec step 1 is then the identity).
// Its load and transform steps are those of kernels/steps.cuh, the reads
// done by 2-byte loads. It quantizes a group by the general sequence below
// rather than the quantize step (quantize_run picks an e2m1 variant per
// run, more code for the kernel of last resort) and stores each word of
// codes, byte by byte, as it is converted.
// Same numerics headers as the TMA kernel, so the same bits.
#include "kernels/simt_quantize.cuh"
#include "kernels/steps.cuh"

constexpr int WORDS = SF_VEC / 2;

FP4Q_DEVICE u32 load_pair(const u16* p) {
    return static_cast<u32>(p[0]) | (static_cast<u32>(p[1]) << 16);
}

// Codes, bytes at dst, of 8 * N float32 values times inv.
template <int N>
FP4Q_DEVICE void store_codes_f32(const float (&v)[8 * N], float inv, u8* dst) {
#pragma unroll
    for (int word = 0; word < N; ++word) {
        float prod[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) prod[i] = mul_rn(v[8 * word + i], inv);
        const u32 codes = e2m1x8(prod);
#pragma unroll
        for (int b = 0; b < 4; ++b) dst[4 * word + b] = static_cast<u8>(codes >> (8 * b));
    }
}

// One group of float32 x at p: its codes to dst, its scale byte returned.
// max.f32 drops a NaN operand: the spec's NaN-ignoring amax, from +0.
FP4Q_DEVICE u32 quantize_f32_group(const float* p, const TensorScale& tsf, u8* dst) {
    float v[SF_VEC];
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < SF_VEC; ++i) {
        v[i] = f32_from_bits(ld_global_nc_u32(p + i));
        amax = max_f32(amax, abs_f32(v[i]));
    }
    float inv;
    const u32 sf_byte = group_scale_byte<SF_VEC>(amax, tsf.value, tsf.rcp, inv);
    store_codes_f32<SF_VEC / 8>(v, inv, dst);
    return sf_byte;
}

extern "C" __global__ void __launch_bounds__(SIMT_THREADS)
fp4q_quantize_fp4_simt(FP4Q_SIMT_QUANTIZE_PARAMS) {
    simt_quantize_prologue();
    using Steps = Prologue<PROLOGUE, GlobalRows>;
    const typename Steps::Load load{{x, x_row_stride}};
    const typename Steps::Transform transform{};
    const TensorScale tsf = tensor_scale(tensor_sf_value, tensor_sf_ptr);
    const int groups = cols / SF_VEC;
    const int out_groups = out_cols / SF_VEC;
    const i64 domain_rows = sf_domain_rows(rows);
    const Divisor per_row{static_cast<u32>(sf_domain_groups(out_groups)), unit_magic, unit_shift};
    write_padding_codes<1>(out, rows, cols, out_cols);
    for (RowWalk unit(grid_thread(), grid_threads(), per_row); unit.row < domain_rows; unit.advance()) {
        const i64 m = unit.row;
        const int j = unit.col;
        u8* dst = out + m * (out_cols / 2) + static_cast<i64>(j) * (SF_VEC / 2);
        u32 sf_byte = 0;
        if (FP4Q_INPUT_F32 && m < rows && j < groups) {
            const float* p = reinterpret_cast<const float*>(x) + m * x_row_stride + static_cast<i64>(j) * SF_VEC;
            sf_byte = quantize_f32_group(p, tsf, dst);
        } else if (m < rows && j < groups) {
            u32 in[load.READS][WORDS];
#pragma unroll
            for (int r = 0; r < load.READS; ++r) {
                const GlobalRows& src = load.input(r);
                const u16* p = src.ptr + m * src.row_stride + static_cast<i64>(j) * SF_VEC + load.shift(r, cols);
#pragma unroll
                for (int i = 0; i < WORDS; ++i) in[r][i] = load_pair(p + 2 * i);
            }
            transform(in);
            const u32(&w)[WORDS] = in[0];
            float inv;
            sf_byte = group_scale_byte<SF_VEC>(amax_packed(w), tsf.value, tsf.rcp, inv);
#pragma unroll
            for (int word = 0; word < WORDS / 4; ++word) {
                const u32 codes = quantize_e2m1x8(w[4 * word], w[4 * word + 1], w[4 * word + 2], w[4 * word + 3], inv);
#pragma unroll
                for (int b = 0; b < 4; ++b) dst[4 * word + b] = static_cast<u8>(codes >> (8 * b));
            }
        }
        sf_out[sf_index(m, j, out_groups)] = static_cast<u8>(sf_byte);
    }
}
