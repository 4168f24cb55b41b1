// Loads and stores of global memory.
#pragma once
#include "ptx/types.cuh"

FP4Q_DEVICE float ld_global_f32(const float* p) {
    float v;
    asm volatile("ld.global.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
}

// Read-only (non-coherent) loads, for inputs no thread of the grid writes.
FP4Q_DEVICE u32 ld_global_nc_u16(const void* p) {
    u16 v;
    asm volatile("ld.global.nc.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}

FP4Q_DEVICE u32 ld_global_nc_u32(const void* p) {
    u32 v;
    asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

FP4Q_DEVICE void ld_global_nc_v4(const void* p, u32& a, u32& b, u32& c, u32& d) {
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(p));
}

// A coherent load, for memory this kernel also writes (add+RMSNorm's residual).
FP4Q_DEVICE void ld_global_v4(const void* p, u32& a, u32& b, u32& c, u32& d) {
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(p));
}

FP4Q_DEVICE void st_global_u16(void* p, u32 a) {
    asm volatile("st.global.u16 [%0], %1;" :: "l"(p), "h"(static_cast<u16>(a)) : "memory");
}

FP4Q_DEVICE void st_global_u32(void* p, u32 a) {
    asm volatile("st.global.u32 [%0], %1;" :: "l"(p), "r"(a) : "memory");
}

FP4Q_DEVICE void st_global_v2(void* p, u32 a, u32 b) {
    asm volatile("st.global.v2.u32 [%0], {%1, %2};" :: "l"(p), "r"(a), "r"(b) : "memory");
}

FP4Q_DEVICE void st_global_v4(void* p, u32 a, u32 b, u32 c, u32 d) {
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};"
                 :: "l"(p), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
