// Synchronizing instructions: a named CTA barrier and whole-warp exchanges.
#pragma once
#include "ptx/types.cuh"

FP4Q_DEVICE void bar_sync(u32 id, u32 threads) {
    asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(threads) : "memory");
}

// Maximum over the 32 lanes of a full warp, in one instruction.
FP4Q_DEVICE u32 redux_sync_max_u32(u32 v) {
    u32 d;
    asm volatile("redux.sync.max.u32 %0, %1, 0xffffffff;" : "=r"(d) : "r"(v));
    return d;
}

// Butterfly exchange across the lanes of a full warp (lane ^ lane_mask).
FP4Q_DEVICE float shfl_sync_bfly_b32(float v, u32 lane_mask) {
    float d;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(d) : "f"(v), "r"(lane_mask));
    return d;
}

// The value of lane - delta of a full warp (lanes below delta keep their own).
FP4Q_DEVICE u32 shfl_sync_up_b32(u32 v, u32 delta) {
    u32 d;
    asm volatile("shfl.sync.up.b32 %0, %1, %2, 0, 0xffffffff;" : "=r"(d) : "r"(v), "r"(delta));
    return d;
}

// Whether `p` holds on any lane of a full warp.
FP4Q_DEVICE bool vote_sync_any_pred(bool p) {
    u32 d;
    asm volatile("{\n\t.reg .pred p, q;\n\tsetp.ne.u32 p, %1, 0;\n\tvote.sync.any.pred q, p, 0xffffffff;\n\t"
                 "selp.u32 %0, 1, 0, q;\n\t}" : "=r"(d) : "r"(static_cast<u32>(p)));
    return d != 0;
}
