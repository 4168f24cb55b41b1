// NVFP4 rowwise and columnwise in one pass (NVFP4_SPEC.md, "The project's
// exact sequences: training quantizers"): x is read once, and its rowwise
// codes q (M x K/2), its columnwise codes q_t (the rowwise codes of x^T,
// K x M/2) and their scales are written from it. One CTA per TILE_M x
// TILE_K tile of x (128 x 128), no TMA, so the same kernel runs on every
// target. Per tile:
//
//   load       each thread 16-byte loads of 8 elements: thread t takes
//              chunk t % 16 of the tile's rows t / 16 + 16 j, so a warp
//              reads two whole 256-byte rows per load and a lane pair holds
//              one rowwise group; the chunks go to shared memory too (the
//              columnwise direction and 2D blocks read columns)
//   rowwise    quantize each lane's half group from registers, the pair
//              agreeing on its amax by a shuffle (or taking its 16x16
//              block's amax); store: a warp writes 64 contiguous bytes of
//              two q rows per store
//   columnwise lane (g, p) of warp w reads the two columns 16 w + 2 p, +1
//              of the rows 16 (g + 4 h) .. + 15 as 16 words, one per row,
//              repacks them into two groups of 16 (one per column) and
//              quantizes them; store: the lanes g of a column write 32
//              contiguous bytes of its q_t row per store. The tile's rows
//              hold 16 chunks of 16 bytes, chunk c stored at c ^ 2 (r / 16
//              % 4) of row r: a warp's 32 words of one row offset are then
//              in 32 banks, and a quarter warp's 16-byte stores of one row
//              too.
//
// BLOCK_2D: the columnwise pass first takes each 16x16 block's amax
// (NaN ignored) from its 8 lanes' columns by shuffles; every group of the
// block, rowwise and columnwise, is quantized with it, so q_t is q
// transposed, code for code.
//
// STOCHASTIC: each group's codes round stochastically
// (numerics/stochastic.cuh) with the four Philox words of its own index
// and direction (numerics/philox.cuh), a rowwise lane the two words of its
// half (a lane pair computes its groups' words in two rows, one row's each,
// and exchanges them: pair_random_words). With BLOCK_2D every element is
// rounded once, with its rowwise bits: the rowwise pass also puts its codes
// in shared memory, and the columnwise pass then transposes them into q_t
// (a column's byte of each row holds the codes of its two columns).
//
// HADAMARD (1D columnwise only): each column group's 16 values, widened to
// float32, take the 16-point transform under the launch's sign mask
// (numerics/hadamard.cuh) and are quantized as floats: amax, scale and
// codes of the transformed y.
//
// FOUR_OVER_SIX: each group (16x16 block) keeps the scale mapping its amax
// to 4 where that candidate's round-to-nearest squared error is smaller
// (numerics/four_over_six.cuh), summed in the spec's order. A column group
// is one lane's; a rowwise group's two halves are a lane pair's, the first
// lane's partial sum continued by the second. A 2D block's scale is chosen
// before any code: once the blocks' amax are known, four lanes take each
// block, a pair per candidate, each lane 8 of its rows' errors (rows in
// element order, then the row sums top row first across the pair), and
// the kept scale goes to shared memory for both directions.
//
// Scales of tile groups past the last real group up to the layout's whole
// tiles are written as zeros here; rows of scales past the last row, by
// write_padding_scales. Needs x's rows, out and out_t 16-byte aligned, K
// a multiple of 16, and M too where WRITES_COLUMNWISE or BLOCK_2D (the host's
// rules).
// A thread's chunk is the vector walk's unit of 8 elements (half a group).
#define VEC_ELEMS 8
#include "layout/scale_layout.cuh"
#include "kernels/simt_quantize.cuh"
#include "kernels/vector_quantize.cuh"
#include "numerics/four_over_six.cuh"
#include "numerics/hadamard.cuh"
#include "numerics/philox.cuh"
#include "numerics/stochastic.cuh"
#include "ptx/permute.cuh"
#include "ptx/shared_memory.cuh"
#include "ptx/sync.cuh"

constexpr int TILE_M = TILE;  // kernels.training.TRAINING_TILE
constexpr int TILE_K = TILE;
constexpr int CHUNKS = TILE_K / 8;  // 16-byte chunks of a tile row
constexpr int ROW_STEP = SIMT_THREADS / CHUNKS;  // rows between a thread's chunks
constexpr int LOADS = TILE_M / ROW_STEP;  // a thread's chunks
constexpr int ROW_GROUPS = TILE_M / 16;
constexpr int BLOCK_COLS = TILE_K / 16;
constexpr int WARPS = SIMT_THREADS / 32;
// The columnwise codes are the rowwise ones transposed (2D blocks, stochastic rounding).
constexpr bool TRANSPOSE_CODES = BLOCK_2D && STOCHASTIC && WRITES_COLUMNWISE;
constexpr bool ROWWISE_PASS = WRITES_ROWWISE || TRANSPOSE_CODES;
// Column groups quantized from float32 values (transformed, or for 4/6's errors).
constexpr bool FLOAT_COLUMNS = HADAMARD || FOUR_OVER_SIX;
// 2D 4/6: the blocks' scales are chosen, from all their rows, before any code.
constexpr bool CHOOSE_BLOCKS = BLOCK_2D && FOUR_OVER_SIX;
static_assert(!HADAMARD || (WRITES_COLUMNWISE && !BLOCK_2D), "the transform is the 1D columnwise direction's");
static_assert(SIMT_THREADS == 4 * ROW_GROUPS * BLOCK_COLS, "four lanes per 16x16 block to choose its scale");
static_assert(SF_VEC == 16 && !FP4Q_MX_RCEIL && ROW_STEP == 16 && LOADS == ROW_GROUPS && WARPS == BLOCK_COLS,
              "NVFP4 (no MXFP4 rounding mode); a thread's chunk j in row group j; a warp per block column");
static_assert(ROW_GROUPS % SF_TILE_GROUPS == 0 && BLOCK_COLS % SF_TILE_GROUPS == 0,
              "a tile's padding groups of either layout are its own");

// The byte offset of chunk c of tile row r in shared memory.
FP4Q_DEVICE u32 tile_chunk(int r, int c) { return r * (TILE_K * 2) + ((c ^ (2 * (r / 16 % 4))) * 16); }

// The scale byte of group `group` of output row `row` (groups per row
// `groups`, rows `rows`): its byte where live, zero in the layout's padding
// groups, nothing past the domain.
FP4Q_DEVICE void store_scale(u8* __restrict__ sf, i64 row, int group, int groups, bool live, u32 byte) {
    if (group < sf_domain_groups(groups)) sf[sf_index(row, group, groups)] = static_cast<u8>(live ? byte : 0u);
}

// The 16 words of the two columns 2 p, 2 p + 1 of block column bc, rows
// 16 rg .. 16 rg + 15, as two groups of packed pairs (column 2 p in col[0]).
FP4Q_DEVICE void load_columns(const u8* tile, int rg, int bc, int p, u32 (&col)[2][8]) {
    u32 w[16];
    const int c = 2 * bc + p / 4;
#pragma unroll
    for (int i = 0; i < 16; ++i) w[i] = ld_shared_u32(tile + tile_chunk(16 * rg + i, c) + 4 * (p % 4));
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        col[0][i] = prmt_b32(w[2 * i], w[2 * i + 1], 0x5410u);
        col[1][i] = prmt_b32(w[2 * i], w[2 * i + 1], 0x7632u);
    }
}

// The 16 values of row r of the tile, columns 16 bc .. 16 bc + 15, as float32.
FP4Q_DEVICE void load_row_group(const u8* tile, int r, int bc, float (&v)[16]) {
    u32 w[8];
    ld_shared_v4(tile + tile_chunk(r, 2 * bc), w[0], w[1], w[2], w[3]);
    ld_shared_v4(tile + tile_chunk(r, 2 * bc + 1), w[4], w[5], w[6], w[7]);
    input_values(w, v);
}

// Eight packed inputs w[0..3] times inv, rounded stochastically with the
// random words r0 (elements 0..3) and r1 (4..7): one word of eight codes.
FP4Q_DEVICE u32 stochastic_codes8(const u32* w, float inv, u32 r0, u32 r1) {
    float v[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        v[2 * i] = mul_rn(input_lo(w[i]), inv);
        v[2 * i + 1] = mul_rn(input_hi(w[i]), inv);
    }
    return e2m1x8_stochastic(v, r0, r1);
}

// The q_t words of columns 2 p, 2 p + 1 of block column bc, rows 16 rg ..
// 16 rg + 15, from the rowwise codes (8 per word, row-major) of the tile:
// t[c] holds column 2 p + c's 16 codes, row 16 rg in the low nibble.
// (A template over the rows: kernels without TRANSPOSE_CODES hold one.)
template <int ROWS>
FP4Q_DEVICE void transpose_codes(const u32 (&codes)[ROWS][CHUNKS], int rg, int bc, int p, u32 (&t)[2][2]) {
    t[0][0] = t[0][1] = t[1][0] = t[1][1] = 0u;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        const u32 pair = (codes[16 * rg + i][2 * bc + p / 4] >> (8 * (p % 4))) & 0xFFu;
        t[0][i / 8] |= (pair & 0xFu) << (4 * (i % 8));
        t[1][i / 8] |= (pair >> 4) << (4 * (i % 8));
    }
}

// A lane pair's rowwise random words of its groups in two rows (one group
// column): r[h] this lane's two of the four words of row h's group
// (NVFP4_SPEC.md, "Random bits": words 0, 1 the first lane's half, 2, 3 the
// second's). Rather than both lanes running the Philox rounds (stochastic
// rounding's costliest part) of both groups, the first lane runs those of
// row 0's group, the second those of row 1's (`index`: the group of the
// lane's own row), and each passes the other the two words of its half:
// one Philox block per group. Shuffles: all lanes of the warp call it together.
FP4Q_DEVICE void pair_random_words(u64 seed, u64 offset, u64 index, bool second, u32 (&r)[2][2]) {
    u32 words[4];
    group_random_words(seed, offset, index, ROWWISE, words);
    // Selected, not indexed (no local memory): the first lane's half is words 0, 1, the second's 2, 3.
    const u32 own_lo = second ? words[2] : words[0], own_hi = second ? words[3] : words[1];
    const u32 other_lo = f32_bits(shfl_sync_bfly_b32(f32_from_bits(second ? words[0] : words[2]), 1u));
    const u32 other_hi = f32_bits(shfl_sync_bfly_b32(f32_from_bits(second ? words[1] : words[3]), 1u));
    r[0][0] = second ? other_lo : own_lo;
    r[0][1] = second ? other_hi : own_hi;
    r[1][0] = second ? own_lo : other_lo;
    r[1][1] = second ? own_hi : other_hi;
}

extern "C" __global__ void __launch_bounds__(SIMT_THREADS, MIN_CTAS)
fp4q_quantize_fp4_training(const u16* __restrict__ x, u8* __restrict__ out, u8* __restrict__ sf_out,
                           u8* __restrict__ out_t, u8* __restrict__ sf_t_out, i64 x_row_stride, i32 rows, i32 cols,
                           float tensor_sf_value, const float* __restrict__ tensor_sf_ptr, float columnwise_tensor_sf_value,
                           const float* __restrict__ columnwise_tensor_sf_ptr, u64 seed, u64 offset, u32 hadamard) {
    __shared__ alignas(16) u8 tile[TILE_M * TILE_K * 2];
    __shared__ float block_amax[ROW_GROUPS][BLOCK_COLS];
    __shared__ ScaleCandidate block_scale[CHOOSE_BLOCKS ? ROW_GROUPS : 1][CHOOSE_BLOCKS ? BLOCK_COLS : 1];
    __shared__ u32 codes[TRANSPOSE_CODES ? TILE_M : 1][CHUNKS];
    const int tiles_k = (cols + TILE_K - 1) / TILE_K;
    const i32 m0 = static_cast<i32>(blockIdx.x / tiles_k) * TILE_M;
    const i32 k0 = static_cast<i32>(blockIdx.x % tiles_k) * TILE_K;
    const int groups = cols / 16, groups_t = rows / 16;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int chunk = threadIdx.x % CHUNKS, row0 = threadIdx.x / CHUNKS;
    const bool chunk_live = k0 + 8 * chunk < cols;

    simt_quantize_prologue();
    u32 w[LOADS][4];
#pragma unroll
    for (int j = 0; j < LOADS; ++j) {
        const i32 row = m0 + row0 + ROW_STEP * j;
        w[j][0] = w[j][1] = w[j][2] = w[j][3] = 0u;
        if (chunk_live && row < rows) ld_global_nc_v4(x + row * x_row_stride + k0 + 8 * chunk, w[j][0], w[j][1], w[j][2], w[j][3]);
    }
    if constexpr (WRITES_ROWWISE) write_padding_scales(sf_out, rows, groups);
    if constexpr (WRITES_COLUMNWISE) write_padding_scales(sf_t_out, cols, groups_t);
    const TensorScale tsf = tensor_scale_of(given_tensor_sf(tensor_sf_value, tensor_sf_ptr));
    const TensorScale tsf_t = tensor_scale_of(given_tensor_sf(columnwise_tensor_sf_value, columnwise_tensor_sf_ptr));

    if constexpr (WRITES_COLUMNWISE || BLOCK_2D) {
#pragma unroll
        for (int j = 0; j < LOADS; ++j) st_shared_v4(tile + tile_chunk(row0 + ROW_STEP * j, chunk), w[j][0], w[j][1], w[j][2], w[j][3]);
    }

    // The rowwise pass. A group's amax: 1D, its two chunks' (a lane pair's);
    // 2D, its block's, from the columnwise pass (with 4/6, the block's kept
    // scale instead).
    const auto rowwise = [&] {
        static_assert(LOADS % 2 == 0, "a thread's chunks in pairs (j, j + 1) for their random words");
        u32 pair_words[2][2];  // STOCHASTIC: this lane's random words of chunks j - j % 2 and j - j % 2 + 1
#pragma unroll
        for (int j = 0; j < LOADS; ++j) {
            const i32 row = m0 + row0 + ROW_STEP * j;
            const int group = (k0 + 8 * chunk) / 16;
            const auto combine = [&](float amax) {
                if constexpr (BLOCK_2D) return block_amax[j][chunk / 2];
                else return max_f32(amax, shfl_sync_bfly_b32(amax, 1));
            };
            // This lane's half of the group's random words, computed for chunks j and j + 1 at once.
            const bool second = chunk % 2 == 1;
            u32 r_lo = 0u, r_hi = 0u;
            if constexpr (STOCHASTIC) {
                if (j % 2 == 0) {  // j is unrolled: all lanes, no divergence
                    const i32 own_row = row + (second ? ROW_STEP : 0);
                    pair_random_words(seed, offset, static_cast<u64>(own_row) * groups + group, second, pair_words);
                }
                r_lo = pair_words[j % 2][0];
                r_hi = pair_words[j % 2][1];
            }
            u32 code, byte;
            if constexpr (FOUR_OVER_SIX) {
                float v[8];
                input_values(w[j], v);
                ScaleCandidate c;
                if constexpr (BLOCK_2D) {
                    c = block_scale[j][chunk / 2];
                } else {
                    c = four_over_six_scale_pair(v, combine(amax_packed(w[j])), tsf.value, tsf.rcp, second);
                }
                if constexpr (STOCHASTIC) {
                    code = quantize_floats8_stochastic(v, c.inv, r_lo, r_hi);
                } else {
                    code = quantize_floats8(v, c.inv);
                }
                byte = c.byte;
            } else if constexpr (STOCHASTIC) {
                float inv;
                byte = group_scale_byte<16>(combine(amax_packed(w[j])), tsf.value, tsf.rcp, inv);
                code = stochastic_codes8(w[j], inv, r_lo, r_hi);
            } else {
                const auto run = quantize_run<16, 4>(w[j], tsf.value, tsf.rcp, combine);
                code = run.q[0];
                byte = run.sf;
            }
            if constexpr (TRANSPOSE_CODES) codes[row0 + ROW_STEP * j][chunk] = code;
            if constexpr (WRITES_ROWWISE) {
                const bool live = chunk_live && row < rows;
                if (live) st_global_u32(out + row * static_cast<i64>(cols / 2) + (k0 + 8 * chunk) / 2, code);
                if (row < rows && chunk % 2 == 0) store_scale(sf_out, row, group, groups, live, byte);
            }
        }
    };
    if constexpr (WRITES_ROWWISE && !BLOCK_2D) rowwise();

    // Lane (g, p) of warp w takes the columns 16 w + 2 p, + 1 (block column
    // bc = w) of the row groups g + 4 h.
    const int p = lane % 8, bc = warp;
    const i32 k = k0 + 16 * bc + 2 * p;
    const bool cols_live = k < cols;

    // The amax of the 16x16 block (rg, bc) from its 8 lanes' columns, stored
    // for the rowwise pass.
    const auto take_block_amax = [&](const u32 (&col)[2][8], int rg) {
        float block = max_f32(amax_packed(col[0]), amax_packed(col[1]));
#pragma unroll
        for (int lane_mask = 1; lane_mask < 8; lane_mask <<= 1) {
            block = max_f32(block, shfl_sync_bfly_b32(block, lane_mask));
        }
        if (p == 0) block_amax[rg][bc] = block;
        return block;
    };

    // 2D 4/6: block b = t / 4 of the tile takes lanes 4 b .. 4 b + 3, lane
    // 4 b + 2 c + h the candidate c (0: "6", 1: "4") over its rows 8 h ..
    // 8 h + 7; the pair h = 0, 1 sums them top row first, and the block's
    // first lane keeps "4" where its error is smaller.
    const auto choose_block_scales = [&] {
        const int b = threadIdx.x / 4, rg = b / BLOCK_COLS, block_col = b % BLOCK_COLS;
        const bool four = threadIdx.x / 2 % 2 == 1, second = threadIdx.x % 2 == 1;
        const float amax = block_amax[rg][block_col];
        const ScaleCandidate c = scale_candidate(amax, tsf.value, tsf.rcp, four ? R4 : r6());
        float row_errors[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            float v[16];
            load_row_group(tile, 16 * rg + 8 * second + i, block_col, v);
            row_errors[i] = squared_error16(v, c);
        }
        const float error = lane_pair_sum(row_errors, second);
        const float other = shfl_sync_bfly_b32(error, 2u);  // the other candidate's
        if (threadIdx.x % 4 == 0) {
            block_scale[rg][block_col] = keeps_four(other, error) ? scale_candidate(amax, tsf.value, tsf.rcp, R4) : c;
        }
    };

    // One column group's codes (two words) and scale byte: rows 16 rg ..
    // 16 rg + 15 of one column, `block` its 16x16 block's amax (2D); `index`
    // its columnwise group index. 2D blocks: both directions take the
    // block's amax (with 4/6 its kept scale) and tensor_sf.
    const auto quantize_column = [&](const u32(&words)[8], int rg, float block, u64 index, u32 (&q)[2]) {
        u32 r[4];
        if constexpr (STOCHASTIC) group_random_words(seed, offset, index, COLUMNWISE, r);
        if constexpr (FLOAT_COLUMNS) {
            float v[16];
            input_values(words, v);
            if constexpr (HADAMARD) hadamard16(v, hadamard);
            ScaleCandidate c;
            if constexpr (BLOCK_2D) {
                c = block_scale[rg][bc];
            } else if constexpr (FOUR_OVER_SIX) {
                c = four_over_six_scale(v, amax16(v), tsf_t.value, tsf_t.rcp);
            } else {
                c = scale_candidate(amax16(v), tsf_t.value, tsf_t.rcp, r6());
            }
            if constexpr (STOCHASTIC) {
                q[0] = quantize_floats8_stochastic(v, c.inv, r[0], r[1]);
                q[1] = quantize_floats8_stochastic(v + 8, c.inv, r[2], r[3]);
            } else {
                q[0] = quantize_floats8(v, c.inv);
                q[1] = quantize_floats8(v + 8, c.inv);
            }
            return c.byte;
        } else if constexpr (STOCHASTIC) {
            float inv;
            const u32 byte = group_scale_byte<16>(BLOCK_2D ? block : amax_packed(words), BLOCK_2D ? tsf.value : tsf_t.value,
                                                  BLOCK_2D ? tsf.rcp : tsf_t.rcp, inv);
            q[0] = stochastic_codes8(words, inv, r[0], r[1]);
            q[1] = stochastic_codes8(words + 4, inv, r[2], r[3]);
            return byte;
        } else if constexpr (BLOCK_2D) {
            const auto run = quantize_run<16, 8>(words, tsf.value, tsf.rcp, [block](float) { return block; });
            q[0] = run.q[0];
            q[1] = run.q[1];
            return run.sf;
        } else {
            const auto run = quantize_run<16, 8>(words, tsf_t.value, tsf_t.rcp);
            q[0] = run.q[0];
            q[1] = run.q[1];
            return run.sf;
        }
    };

    // The columnwise outputs of the lane's two columns in row group rg,
    // whose words are col: codes and scales, or (TRANSPOSE_CODES) the scales
    // alone, the codes coming from the rowwise pass.
    const auto store_columns = [&](const u32 (&col)[2][8], int rg, float block) {
        const i32 m = m0 + 16 * rg;
        const bool live = cols_live && m < rows;
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            u32 byte;
            if constexpr (TRANSPOSE_CODES && CHOOSE_BLOCKS) {
                byte = block_scale[rg][bc].byte;
            } else if constexpr (TRANSPOSE_CODES) {
                float inv;
                byte = group_scale_byte<16>(block, tsf.value, tsf.rcp, inv);
            } else {
                u32 q[2];
                byte = quantize_column(col[c], rg, block, static_cast<u64>(k + c) * groups_t + m / 16, q);
                if (live) st_global_v2(out_t + (k + c) * static_cast<i64>(rows / 2) + m / 2, q[0], q[1]);
            }
            if (cols_live) store_scale(sf_t_out, k + c, m0 / 16 + rg, groups_t, live, byte);
        }
    };

    if constexpr (WRITES_COLUMNWISE || BLOCK_2D) {
        __syncthreads();
        if constexpr (CHOOSE_BLOCKS) {
#pragma unroll
            for (int h = 0; h < ROW_GROUPS / 4; ++h) {
                const int rg = lane / 8 + 4 * h;
                u32 col[2][8];
                load_columns(tile, rg, bc, p, col);
                take_block_amax(col, rg);
            }
            __syncthreads();
            choose_block_scales();
            __syncthreads();
        }
        if constexpr (WRITES_COLUMNWISE || !CHOOSE_BLOCKS) {
#pragma unroll
            for (int h = 0; h < ROW_GROUPS / 4; ++h) {
                const int rg = lane / 8 + 4 * h;
                u32 col[2][8];  // not read where only the chosen blocks' scales are stored
                if constexpr (!(CHOOSE_BLOCKS && TRANSPOSE_CODES)) load_columns(tile, rg, bc, p, col);
                float block = 0.0f;
                if constexpr (BLOCK_2D && !CHOOSE_BLOCKS) block = take_block_amax(col, rg);
                if constexpr (WRITES_COLUMNWISE) store_columns(col, rg, block);
            }
        }
    }
    if constexpr (ROWWISE_PASS && BLOCK_2D) {
        __syncthreads();
        rowwise();
    }
    if constexpr (TRANSPOSE_CODES) {
        __syncthreads();
#pragma unroll
        for (int h = 0; h < ROW_GROUPS / 4; ++h) {
            const int rg = lane / 8 + 4 * h;
            const i32 m = m0 + 16 * rg;
            u32 t[2][2];
            transpose_codes(codes, rg, bc, p, t);
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                if (cols_live && m < rows) st_global_v2(out_t + (k + c) * static_cast<i64>(rows / 2) + m / 2, t[c][0], t[c][1]);
            }
        }
    }
}
