// Shared-memory mbarriers: the full/empty handshake of the TMA ring.
#pragma once
#include "ptx/shared_memory.cuh"

FP4Q_DEVICE void mbarrier_init(u64* bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_addr(bar)), "r"(count) : "memory");
}

FP4Q_DEVICE void fence_mbarrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

FP4Q_DEVICE void mbarrier_arrive(u64* bar) {
    asm volatile("{\n\t.reg .b64 state;\n\t"
                 "mbarrier.arrive.shared::cta.b64 state, [%0];\n\t}"
                 :: "r"(smem_addr(bar)) : "memory");
}

FP4Q_DEVICE void mbarrier_arrive_expect_tx(u64* bar, u32 bytes) {
    asm volatile("{\n\t.reg .b64 state;\n\t"
                 "mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n\t}"
                 :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
}

FP4Q_DEVICE bool mbarrier_try_wait_parity(u64* bar, u32 parity) {
    u32 done;
    asm volatile("{\n\t.reg .pred p;\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                 "selp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
    return done != 0;
}

FP4Q_DEVICE void mbarrier_wait_parity(u64* bar, u32 parity) {
    while (!mbarrier_try_wait_parity(bar, parity)) {
    }
}
