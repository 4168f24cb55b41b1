// The vector kernel's work, shared by the vector kernel and the dynamic
// (single-pass) kernel: each thread quantizes VEC_ELEMS (8 or 16)
// consecutive elements, one or two 16-byte loads issued before any
// arithmetic; the SF_VEC / VEC_ELEMS threads of a group sit in adjacent
// lanes and agree on its amax through butterfly shuffles; under the
// swizzled layout the padding rows' scales are written as zeros. Needs x
// rows and the outputs 16-byte aligned. The including kernel defines
// SF_VEC and VEC_ELEMS.
#pragma once
#include "layout/scale_layout.cuh"
#include "numerics/amax.cuh"
#include "numerics/quantize_group.cuh"
#include "numerics/tensor_scale.cuh"
#include "ptx/global_memory.cuh"
#include "ptx/sync.cuh"

constexpr int THREADS_PER_GROUP = SF_VEC / VEC_ELEMS;
constexpr int VEC_LOADS = VEC_ELEMS / 8;  // 16-byte loads per thread
static_assert((VEC_ELEMS == 8 || VEC_ELEMS == 16) && SF_VEC % VEC_ELEMS == 0, "8 or 16 elements of one group");

// The VEC_ELEMS elements at p, as packed pairs.
FP4Q_DEVICE void load_vector(const u16* p, u32 (&w)[4 * VEC_LOADS]) {
#pragma unroll
    for (int v = 0; v < VEC_LOADS; ++v) ld_global_nc_v4(p + 8 * v, w[4 * v], w[4 * v + 1], w[4 * v + 2], w[4 * v + 3]);
}

FP4Q_DEVICE void quantize_vector(const u16* __restrict__ x, i64 x_row_stride, u8* __restrict__ q,
                                 u8* __restrict__ sf, TensorScale tsf, i32 rows, i32 cols) {
    const int groups = cols / SF_VEC;
    const int domain_groups = sf_domain_groups(groups);
    const i64 per_row = static_cast<i64>(domain_groups) * THREADS_PER_GROUP;
    const i64 total = rows * per_row;
    const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
    const i64 first = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
    // The trip count is the same for every lane of a warp (the loop runs on
    // the warp's first index), so that every lane takes part in each shuffle.
    for (i64 base = first & ~static_cast<i64>(31); base < total; base += stride) {
        const i64 idx = base + (threadIdx.x & 31);
        const i64 m = idx / per_row;
        const int chunk = static_cast<int>(idx % per_row);  // VEC_ELEMS-element chunk of the row
        const int j = chunk / THREADS_PER_GROUP;
        const bool live = idx < total && j < groups;
        u32 w[4 * VEC_LOADS] = {};
        if (live) load_vector(x + m * x_row_stride + chunk * VEC_ELEMS, w);
        float amax = amax_packed(w);
#pragma unroll
        for (int lane_mask = 1; lane_mask < THREADS_PER_GROUP; lane_mask <<= 1) {
            amax = max_f32(amax, shfl_sync_bfly_b32(amax, lane_mask));
        }
        float inv;
        const u32 sf_byte = group_scale_byte<SF_VEC>(amax, tsf.value, tsf.rcp, inv);
        if (live) {
            u8* dst = q + m * (cols / 2) + chunk * (VEC_ELEMS / 2);
            if constexpr (VEC_LOADS == 1) {
                st_global_u32(dst, quantize_e2m1x8(w[0], w[1], w[2], w[3], inv));
            } else {
                st_global_v2(dst, quantize_e2m1x8(w[0], w[1], w[2], w[3], inv),
                             quantize_e2m1x8(w[4], w[5], w[6], w[7], inv));
            }
        }
        if (idx < total && chunk % THREADS_PER_GROUP == 0) {
            sf[sf_index(m, j, groups)] = static_cast<u8>(live ? sf_byte : 0u);
        }
    }
    if constexpr (FP4Q_SF_SWIZZLED) {
        // Rows from `rows` up to the next multiple of 128 hold zero scales: four
        // groups of one row are one aligned word of the swizzled layout.
        const int words_per_row = domain_groups / 4;
        const i64 pad_words = (sf_domain_rows(rows) - rows) * words_per_row;
        for (i64 i = first; i < pad_words; i += stride) {
            const i64 m = rows + i / words_per_row;
            const int j = static_cast<int>(i % words_per_row) * 4;
            st_global_u32(sf + sf_index(m, j, groups), 0u);
        }
    }
}
