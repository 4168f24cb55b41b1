// FP4 quantization (NVFP4, or MXFP4 when SF_VEC is 32), TMA + warp
// specialization + PDL.
//
// Warpgroup 0 is the producer: one thread streams input tiles into a ring of
// NUM_STAGES shared-memory buffers with TMA, guarded by full/empty mbarriers,
// and names each stage's tile. The other warpgroups are consumers: they turn
// each tile into e2m1 codes and e4m3 scales in shared memory and one of them
// TMA-stores the result. The grid is persistent when launched with fewer
// CTAs than tiles, so the ring runs across tiles, in the order next_tile()
// gives. The constants before the #includes come from the config.
#include "layout/scale_layout.cuh"
#include "layout/tma_swizzle.cuh"
#include "numerics/quantize_group.cuh"
#include "numerics/tensor_scale.cuh"
#include "pipeline/tma_producer.cuh"
#include "ptx/bulk_group.cuh"
#include "ptx/setmaxnreg.cuh"
#include "ptx/sync.cuh"
#include "ptx/tma.cuh"

constexpr int THREADS = 128 + CONSUMER_THREADS;
constexpr int CHUNKS_K = TILE_K / 64;
constexpr int ITEMS = TILE_M * CHUNKS_K / CONSUMER_THREADS;
constexpr int IN_BOXES = TILE_K / IN_BOX_K;
constexpr u32 IN_BOX_BYTES = TILE_M * IN_BOX_K * 2;
constexpr u32 IN_STAGE_BYTES = TILE_M * TILE_K * 2;
constexpr int OUT_BOXES = (TILE_K / 2) / OUT_BOX_K;
constexpr u32 OUT_BOX_BYTES = TILE_M * OUT_BOX_K;
constexpr u32 Q_TILE_BYTES = TILE_M * TILE_K / 2;
constexpr u32 SF_TILE_BYTES = TILE_M * TILE_K / SF_VEC;
constexpr int SF_PER_CHUNK = 64 / SF_VEC;       // scale bytes one consumer step makes
constexpr int SF_BLOCK_K = 4 * SF_VEC;           // K elements of one 128x4 scale block
constexpr u32 CONSUMER_BARRIER = 1;

static_assert(TILE_M * CHUNKS_K % CONSUMER_THREADS == 0, "consumers must split a tile evenly");
static_assert(TILE_K % IN_BOX_K == 0 && (TILE_K / 2) % OUT_BOX_K == 0, "boxes must tile the tile");

// Byte offsets of (row, element column) in an input stage and of (row,
// byte column) in an output tile, both laid out as TMA boxes.
FP4Q_DEVICE u32 in_offset(int row, int col) {
    return (col / IN_BOX_K) * IN_BOX_BYTES +
           swizzle<IN_SWIZZLE>(row * (IN_BOX_K * 2) + (col % IN_BOX_K) * 2);
}

FP4Q_DEVICE u32 q_offset(int row, int byte_col) {
    return (byte_col / OUT_BOX_K) * OUT_BOX_BYTES +
           swizzle<OUT_SWIZZLE>(row * OUT_BOX_K + (byte_col % OUT_BOX_K));
}

// Where the scale bytes of (row, 64-column chunk) sit inside the tile's
// slice of the 128x4 layout.
FP4Q_DEVICE u32 sf_offset(int row, int chunk) {
    return sf_128x4_offset<SF_PER_CHUNK, int>(row, TILE_K / SF_BLOCK_K, chunk);
}

// Bytes of a scale word that belong to real groups; padding stays 0x00 even
// when a device tensor_sf would turn an all-zero group into something else.
FP4Q_DEVICE u32 valid_sf_mask(int row, int rows, int group, int groups) {
    if (row >= rows || group >= groups) return 0u;
    const int n = groups - group;
    return n >= SF_PER_CHUNK ? 0xFFFFFFFFu : (0xFFFFFFFFu >> (32 - 8 * n));
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_CTAS_PER_SM)
fp4q_quantize_fp4_tma(const __grid_constant__ TensorMap x_map,
                        const __grid_constant__ TensorMap out_map,
                        const __grid_constant__ TensorMap sf_out_map,
                        u8* __restrict__ sf_out,
                        FP4Q_TMA_TAIL_PARAMS) {
    const TmaCta cta = tma_cta_setup<1024>(rows, cols);
    const int groups = cols / SF_VEC;

    if (threadIdx.x < 128) {
// A preprocessor guard: PRODUCER_REGS and CONSUMER_REGS are only rendered
// when the config moves registers.
#if FP4Q_SETMAXNREG
        setmaxnreg_dec<PRODUCER_REGS>();
#endif
        if (threadIdx.x == 0) {
            prefetch_tensormap(&x_map);
            produce_tiles(cta.ring, cta.stage_tiles, cta.tiles, tickets, IN_STAGE_BYTES, [&](int stage, int tile) {
                const int m0 = tile_m0(cta.tiles, tile);
                const int k0 = tile_k0(cta.tiles, tile);
                u8* dst = cta.smem + OFF_IN + stage * IN_STAGE_BYTES;
#pragma unroll
                for (int b = 0; b < IN_BOXES; ++b) {
                    cp_async_bulk_tensor_2d_global_to_shared(dst + b * IN_BOX_BYTES, &x_map,
                                                             k0 + b * IN_BOX_K, m0, &cta.ring.full[stage]);
                }
            });
        }
        return;
    }

#if FP4Q_SETMAXNREG
    setmaxnreg_inc<CONSUMER_REGS>();
#endif
    const int ctid = threadIdx.x - 128;
    // Our outputs may still be read, and tensor_sf written, by the previous kernel.
    pdl_wait();
    const TensorScale tsf = tensor_scale(tensor_sf_value, tensor_sf_ptr);
    if (ctid == 0) {
        prefetch_tensormap(&out_map);
        if constexpr (FP4Q_SF_SWIZZLED) prefetch_tensormap(&sf_out_map);
    }

    consume_tiles(cta, [&](int i, int stage, int m0, int k0) {
        u8* q_tile = cta.smem + OFF_Q + (i % NUM_OUT_BUFFERS) * Q_TILE_BYTES;
        u8* sf_tile = cta.smem + OFF_SF + (i % NUM_OUT_BUFFERS) * SF_TILE_BYTES;  // swizzled layout only

        const u8* in = cta.smem + OFF_IN + stage * IN_STAGE_BYTES;
#pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            const int item = it * CONSUMER_THREADS + ctid;
            const int r = item % TILE_M;
            const int c = item / TILE_M;
            u32 w[32];
#pragma unroll
            for (int v = 0; v < 8; ++v) {
                ld_shared_v4(in + in_offset(r, c * 64 + v * 8), w[4 * v], w[4 * v + 1], w[4 * v + 2],
                             w[4 * v + 3]);
            }
            const auto out = quantize_run<SF_VEC, 32>(w, tsf.value, tsf.rcp);
            st_shared_v4(q_tile + q_offset(r, c * 32), out.q[0], out.q[1], out.q[2], out.q[3]);
            st_shared_v4(q_tile + q_offset(r, c * 32 + 16), out.q[4], out.q[5], out.q[6], out.q[7]);
            const int row = m0 + r;
            const int group = k0 / SF_VEC + c * SF_PER_CHUNK;
            const u32 sf = out.sf & valid_sf_mask(row, rows, group, groups);
            if constexpr (FP4Q_SF_SWIZZLED) {
                if constexpr (SF_PER_CHUNK == 4) {
                    st_shared_u32(sf_tile + sf_offset(r, c), sf);
                } else {
                    st_shared_u16(sf_tile + sf_offset(r, c), static_cast<u16>(sf));
                }
            } else if (row < rows) {
                u8* dst = sf_out + static_cast<i64>(row) * groups + group;
#pragma unroll
                for (int b = 0; b < SF_PER_CHUNK; ++b) {
                    if (group + b < groups) dst[b] = static_cast<u8>(sf >> (8 * b));
                }
            }
        }
        ring_release(cta.ring, stage);
        fence_proxy_async_shared_cta();
        if (ctid == 0) {
            // The output buffer written next iteration was last stored
            // NUM_OUT_BUFFERS - 1 tiles ago: it must be read out by now.
            cp_async_bulk_wait_group_read<NUM_OUT_BUFFERS - 2>();
        }
        bar_sync(CONSUMER_BARRIER, CONSUMER_THREADS);
        if (ctid == 0) {
#pragma unroll
            for (int b = 0; b < OUT_BOXES; ++b) {
                cp_async_bulk_tensor_2d_shared_to_global(&out_map, k0 / 2 + b * OUT_BOX_K, m0,
                                                         q_tile + b * OUT_BOX_BYTES);
            }
            if constexpr (FP4Q_SF_SWIZZLED) {
                cp_async_bulk_tensor_4d_shared_to_global(&sf_out_map, 0, 0, k0 / SF_BLOCK_K, m0 / 128, sf_tile);
            }
            cp_async_bulk_commit_group();
        }
    });
    if (ctid == 0) cp_async_bulk_wait_group<0>();
}
