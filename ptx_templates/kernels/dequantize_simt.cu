// NVFP4 / MXFP4 dequantization without TMA: one thread per output unit of
// 16 bytes. With FP4Q_VECTOR (q's rows 4-byte aligned, out 16-byte aligned)
// a unit's codes are one load and its output one 16-byte store: the kernel
// for small inputs, and for K % 32 != 0 at any size. Without it, byte loads
// and element stores serve the pointers nothing else can address (unaligned
// bases or row strides). Same numerics header as the TMA kernel, so the same
// bits.
#include "layout/scale_layout.cuh"
#include "numerics/dequantize.cuh"
#include "pipeline/pdl.cuh"
#include "pipeline/row_walk.cuh"
#include "ptx/global_memory.cuh"

// The UNIT codes of the unit at src, code i in bits 4i..4i+3.
FP4Q_DEVICE u32 load_codes(const u8* src) {
    if constexpr (FP4Q_VECTOR) {
        if constexpr (UNIT == 8) {
            return ld_global_nc_u32(src);
        } else {
            return ld_global_nc_u16(src);
        }
    } else {
        u32 codes = 0;
#pragma unroll
        for (int b = 0; b < UNIT / 2; ++b) codes |= static_cast<u32>(src[b]) << (8 * b);
        return codes;
    }
}

// The unit's 16 bytes of output at element `element` of out.
FP4Q_DEVICE void store_unit(u8* out, i64 element, const u32 (&w)[4]) {
    if constexpr (FP4Q_VECTOR) {
        st_global_v4(out + element * (16 / UNIT), w[0], w[1], w[2], w[3]);
    } else if constexpr (FP4Q_OUT_F32) {
        u32* dst = reinterpret_cast<u32*>(out) + element;
#pragma unroll
        for (int e = 0; e < 4; ++e) dst[e] = w[e];
    } else {
        u16* dst = reinterpret_cast<u16*>(out) + element;
#pragma unroll
        for (int e = 0; e < 8; ++e) dst[e] = static_cast<u16>(w[e / 2] >> (16 * (e % 2)));
    }
}

extern "C" __global__ void __launch_bounds__(SIMT_THREADS)
fp4q_dequantize_simt(const u8* __restrict__ q, i64 q_row_stride,
                     const u8* __restrict__ sf,
                     u8* __restrict__ out,
                     float tensor_sf_value,
                     const float* __restrict__ tensor_sf_ptr,
                     i32 rows, i32 cols, u32 unit_magic, u32 unit_shift) {
    // unit_magic and unit_shift divide by the units per row (the host's DequantizeSimtConfig.units_per_row).
    RowWalk unit(grid_thread(), grid_threads(), Divisor{static_cast<u32>(cols / UNIT), unit_magic, unit_shift});
    pdl_wait();
    pdl_launch_dependents();
    const float rcp_tsf = rcp_tensor_sf(tensor_sf_value, tensor_sf_ptr);
    const int groups = cols / GROUP;
    for (; unit.row < rows; unit.advance()) {
        const int col = unit.col * UNIT;
        const u32 codes = load_codes(q + unit.row * q_row_stride + col / 2);
        u32 w[4];
        dequantize_unit(codes, group_scale(sf[sf_index(unit.row, col / GROUP, groups)], rcp_tsf), w);
        store_unit(out, unit.row * cols + col, w);
    }
}
