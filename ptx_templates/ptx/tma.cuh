// Tensor copies by the TMA engine between global and shared memory, as
// described by a TensorMap. Loads complete on an mbarrier; stores join the
// thread's bulk async-group (ptx/bulk_group.cuh).
#pragma once
#include "ptx/shared_memory.cuh"

FP4Q_DEVICE void prefetch_tensormap(const TensorMap* map) {
    asm volatile("prefetch.tensormap [%0];" :: "l"(map) : "memory");
}

// The destination is this CTA's own shared memory (fp4q launches no
// clusters); ptxas inlines this form on every TMA target, where it lowers the
// shared::cluster form to a call on some (sm_120f).
FP4Q_DEVICE void cp_async_bulk_tensor_2d_global_to_shared(
        void* dst, const TensorMap* map, i32 c0, i32 c1, u64* bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3}], [%4];"
        :: "r"(smem_addr(dst)), "l"(map), "r"(c0), "r"(c1), "r"(smem_addr(bar))
        : "memory");
}

FP4Q_DEVICE void cp_async_bulk_tensor_2d_shared_to_global(
        const TensorMap* map, i32 c0, i32 c1, const void* src) {
    asm volatile(
        "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
        :: "l"(map), "r"(c0), "r"(c1), "r"(smem_addr(src)) : "memory");
}

FP4Q_DEVICE void cp_async_bulk_tensor_4d_shared_to_global(
        const TensorMap* map, i32 c0, i32 c1, i32 c2, i32 c3, const void* src) {
    asm volatile(
        "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4}], [%5];"
        :: "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(src)) : "memory");
}
