// Loads and stores of shared memory, addressed by 32-bit shared-window
// addresses (what TMA and mbarrier operands take too).
#pragma once
#include "ptx/types.cuh"

FP4Q_DEVICE u32 smem_addr(const void* p) {
    return static_cast<u32>(__cvta_generic_to_shared(p));
}

FP4Q_DEVICE void ld_shared_v4(const void* p, u32& a, u32& b, u32& c, u32& d) {
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(smem_addr(p)));
}

FP4Q_DEVICE void st_shared_v4(void* p, u32 a, u32 b, u32 c, u32 d) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};"
                 :: "r"(smem_addr(p)), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

FP4Q_DEVICE void st_shared_u16(void* p, u16 a) {
    asm volatile("st.shared.u16 [%0], %1;" :: "r"(smem_addr(p)), "h"(a) : "memory");
}

FP4Q_DEVICE u32 ld_shared_u32(const void* p) {
    u32 a;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(a) : "r"(smem_addr(p)) : "memory");
    return a;
}

FP4Q_DEVICE void st_shared_u32(void* p, u32 a) {
    asm volatile("st.shared.u32 [%0], %1;" :: "r"(smem_addr(p)), "r"(a) : "memory");
}
