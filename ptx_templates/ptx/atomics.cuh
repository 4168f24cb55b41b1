// Global atomics and acquire loads, for the counters the CTAs of one grid share.
#pragma once
#include "ptx/types.cuh"

FP4Q_DEVICE u32 atom_global_add_u32(u32* p, u32 v) {
    u32 old;
    asm volatile("atom.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}

FP4Q_DEVICE u32 atom_acq_rel_gpu_global_add_u32(u32* p, u32 v) {
    u32 old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}

// Reductions: no value comes back, so the thread does not wait for them.
FP4Q_DEVICE void red_global_max_u32(u32* p, u32 v) {
    asm volatile("red.global.max.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}

FP4Q_DEVICE void red_release_gpu_global_add_u32(u32* p, u32 v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}

// Release only: the thread waits for the old value where it uses it, not
// before its next memory access (an acquiring atomic would).
FP4Q_DEVICE u32 atom_release_gpu_global_add_u32(u32* p, u32 v) {
    u32 old;
    asm volatile("atom.release.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}

// After an atomic whose value says that other threads' releases came
// before it: acquires them, like an acquiring atomic would have.
FP4Q_DEVICE void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

FP4Q_DEVICE u32 atom_global_max_u32(u32* p, u32 v) {
    u32 old;
    asm volatile("atom.global.max.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}

FP4Q_DEVICE u32 ld_acquire_gpu_global_u32(const u32* p) {
    u32 v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
