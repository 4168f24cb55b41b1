// NVFP4 / MXFP4 dequantization, TMA loads + warp specialization + PDL.
//
// Warp 0 is the producer: one thread streams tiles of packed codes
// (TILE_M rows x TILE_K/2 bytes) into a ring of NUM_STAGES shared-memory
// buffers with TMA, guarded by full/empty mbarriers. The other warps are
// consumers: each copies its units' codes out of the stage, releases it, and
// writes 16 bytes of output per unit with one vector store, consecutive
// lanes on consecutive 16-byte pieces of a row. Scales are read from global
// memory (a byte per unit, shared by the lanes of a group). The grid is
// persistent when launched with fewer CTAs than tiles; the producer names
// each stage's tile, in the order next_tile() gives.
#include "layout/scale_layout.cuh"
#include "numerics/dequantize.cuh"
#include "pipeline/tma_producer.cuh"
#include "ptx/tma.cuh"

constexpr int THREADS = 32 + CONSUMER_THREADS;
constexpr int Q_ROW_BYTES = TILE_K / 2;
constexpr u32 STAGE_BYTES = TILE_M * Q_ROW_BYTES;
constexpr int UNITS_PER_ROW = TILE_K / UNIT;
constexpr int ITEMS = TILE_M * UNITS_PER_ROW / CONSUMER_THREADS;

static_assert(TILE_M * UNITS_PER_ROW % CONSUMER_THREADS == 0, "consumers must split a tile evenly");
static_assert(TILE_K % GROUP == 0 && Q_ROW_BYTES % 16 == 0, "a tile row is whole groups and whole TMA chunks");

extern "C" __global__ void __launch_bounds__(THREADS, MIN_CTAS_PER_SM)
fp4q_dequantize_tma(const __grid_constant__ TensorMap q_map,
                    const u8* __restrict__ sf,
                    u8* __restrict__ out,
                    FP4Q_TMA_TAIL_PARAMS) {
    const TmaCta cta = tma_cta_setup<128>(rows, cols);

    if (threadIdx.x < 32) {
        if (threadIdx.x == 0) {
            prefetch_tensormap(&q_map);
            produce_tiles(cta.ring, cta.stage_tiles, cta.tiles, tickets, STAGE_BYTES, [&](int stage, int tile) {
                cp_async_bulk_tensor_2d_global_to_shared(cta.smem + stage * STAGE_BYTES, &q_map,
                                                         tile_k0(cta.tiles, tile) / 2, tile_m0(cta.tiles, tile),
                                                         &cta.ring.full[stage]);
            });
        }
        return;
    }

    const int ctid = threadIdx.x - 32;
    // The scales and tensor_sf may be written, and the output still read, by
    // the previous kernel.
    pdl_wait();
    const float rcp_tsf = rcp_tensor_sf(tensor_sf_value, tensor_sf_ptr);
    const int groups = cols / GROUP;

    consume_tiles(cta, [&](int i, int stage, int m0, int k0) {
        const u8* tile_codes = cta.smem + stage * STAGE_BYTES;
        u32 codes[ITEMS];
#pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            const int unit = it * CONSUMER_THREADS + ctid;
            const int byte = (unit / UNITS_PER_ROW) * Q_ROW_BYTES + (unit % UNITS_PER_ROW) * (UNIT / 2);
            // A float32 unit is half a word: both halves' lanes read the word.
            codes[it] = ld_shared_u32(tile_codes + (byte & ~3)) >> (8 * (byte & 3));
        }
        // The codes are in registers: the producer may refill the stage.
        ring_release(cta.ring, stage);

#pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            const int unit = it * CONSUMER_THREADS + ctid;
            const int row = m0 + unit / UNITS_PER_ROW;
            const int col = k0 + (unit % UNITS_PER_ROW) * UNIT;
            // Out-of-range units hold TMA's zero fill; K % UNIT == 0, so a unit is all in or all out.
            if (row < rows && col < cols) {
                const float d = group_scale(sf[sf_index(row, col / GROUP, groups)], rcp_tsf);
                u32 w[4];
                dequantize_unit(codes[it], d, w);
                st_global_v4(out + (static_cast<i64>(row) * cols + col) * (16 / UNIT), w[0], w[1], w[2], w[3]);
            }
        }
    });
}
