// Thin wrappers around the PTX instructions the fp4q kernels use, one tiny
// inline function per instruction, named after it. No CUDA header is
// included anywhere: NVRTC from the pip wheel ships none, so the integer
// types and the tensor-map struct are declared here.
#pragma once

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;
typedef long long i64;

// Opaque 128-byte TMA descriptor, laid out as the driver's CUtensorMap.
struct alignas(64) TensorMap {
    u64 opaque[16];
};

#define FP4Q_DEVICE __device__ __forceinline__

// ---------------------------------------------------------------- registers
FP4Q_DEVICE u32 f32_bits(float v) { return __float_as_uint(v); }
FP4Q_DEVICE float f32_from_bits(u32 b) { return __uint_as_float(b); }

// Bytes picked from the eight of {b, a} (a is bytes 0-3); a selector nibble
// with bit 3 set replicates the picked byte's sign bit over the byte.
FP4Q_DEVICE u32 prmt_b32(u32 a, u32 b, u32 selector) {
    u32 d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
    return d;
}

FP4Q_DEVICE u32 smem_addr(const void* p) {
    return static_cast<u32>(__cvta_generic_to_shared(p));
}

// ---------------------------------------------------------------- float math
// Explicit rounding modes: the spec's bits depend on each rounding, so none
// of these may be contracted into an FMA or replaced by an approximation.
FP4Q_DEVICE float mul_rn(float a, float b) {
    float d;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}

FP4Q_DEVICE float fma_rn(float a, float b, float c) {
    float d;
    asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(d) : "f"(a), "f"(b), "f"(c));
    return d;
}

FP4Q_DEVICE float add_rn(float a, float b) {
    float d;
    asm("add.rn.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}

FP4Q_DEVICE float rcp_rn(float a) {
    float d;
    asm("rcp.rn.f32 %0, %1;" : "=f"(d) : "f"(a));
    return d;
}

FP4Q_DEVICE float div_rn(float a, float b) {
    float d;
    asm("div.rn.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}

// NaN-dropping maximum/minimum (IEEE maxNum), what the spec's amax needs.
FP4Q_DEVICE float max_f32(float a, float b) {
    float d;
    asm("max.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}

FP4Q_DEVICE float min_f32(float a, float b) {
    float d;
    asm("min.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}

// Packed maxima of two 16-bit floats; like max.f32, a NaN lane loses.
FP4Q_DEVICE u32 max_bf16x2(u32 a, u32 b) {
    u32 d;
    asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

FP4Q_DEVICE u32 max_f16x2(u32 a, u32 b) {
    u32 d;
    asm("max.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

// max(|a|, |b|) per 16-bit lane with NaN propagating (a NaN lane wins). The
// result's sign is the XOR of the inputs' signs: callers mask it off.
FP4Q_DEVICE u32 max_nan_xorsign_abs_bf16x2(u32 a, u32 b) {
    u32 d;
    asm("max.NaN.xorsign.abs.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

FP4Q_DEVICE u32 max_nan_xorsign_abs_f16x2(u32 a, u32 b) {
    u32 d;
    asm("max.NaN.xorsign.abs.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

// NaN-propagating maximum: a NaN operand gives NaN.
FP4Q_DEVICE float max_nan_f32(float a, float b) {
    float d;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}

FP4Q_DEVICE float abs_f32(float a) {
    float d;
    asm("abs.f32 %0, %1;" : "=f"(d) : "f"(a));
    return d;
}

// Two floats to two e4m3 bytes: `hi` lands in bits 8..15, `lo` in 0..7.
// satfinite clamps |x| > 448 (and Inf) to 448 and keeps NaN as 0x7F.
FP4Q_DEVICE u32 cvt_rn_satfinite_e4m3x2_f32(float hi, float lo) {
    u16 d;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
    return d;
}

// Two e4m3 bytes (in the low 16 bits) to two halves, exactly.
FP4Q_DEVICE u32 cvt_rn_f16x2_e4m3x2(u32 packed) {
    u32 d;
    u16 s = static_cast<u16>(packed);
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(d) : "h"(s));
    return d;
}

// Two floats to two bf16 (round to nearest even): `hi` in bits 16..31, `lo` in 0..15.
FP4Q_DEVICE u32 cvt_rn_bf16x2_f32(float hi, float lo) {
    u32 d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}

FP4Q_DEVICE float cvt_f32_f16(u16 h) {
    float d;
    asm("cvt.f32.f16 %0, %1;" : "=f"(d) : "h"(h));
    return d;
}

#if defined(FP4Q_HAS_CVT_E2M1)
// Two floats to one byte of e2m1 codes: `hi` in bits 4..7, `lo` in 0..3.
FP4Q_DEVICE u32 cvt_rn_satfinite_e2m1x2_f32(float hi, float lo) {
    u32 d;
    asm("{\n\t.reg .b8 t;\n\t"
        "cvt.rn.satfinite.e2m1x2.f32 t, %1, %2;\n\t"
        "cvt.u32.u8 %0, t;\n\t}"
        : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}
#endif

// ---------------------------------------------------------------- mbarrier
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

// ---------------------------------------------------------------- TMA
FP4Q_DEVICE void prefetch_tensormap(const TensorMap* map) {
    asm volatile("prefetch.tensormap [%0];" :: "l"(map) : "memory");
}

FP4Q_DEVICE void cp_async_bulk_tensor_2d_global_to_shared(
        void* dst, const TensorMap* map, i32 c0, i32 c1, u64* bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
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

FP4Q_DEVICE void cp_async_bulk_commit_group() {
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

template <int N>
FP4Q_DEVICE void cp_async_bulk_wait_group_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory");
}

template <int N>
FP4Q_DEVICE void cp_async_bulk_wait_group() {
    asm volatile("cp.async.bulk.wait_group %0;" :: "n"(N) : "memory");
}

// Makes generic-proxy writes to shared memory visible to the TMA engine.
FP4Q_DEVICE void fence_proxy_async_shared_cta() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// ---------------------------------------------------------------- sync
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

// ---------------------------------------------------------------- PDL
FP4Q_DEVICE void griddepcontrol_wait() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
}

FP4Q_DEVICE void griddepcontrol_launch_dependents() {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// ---------------------------------------------------------------- registers
template <int N>
FP4Q_DEVICE void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(N));
}

template <int N>
FP4Q_DEVICE void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(N));
}

// ---------------------------------------------------------------- memory
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

FP4Q_DEVICE float ld_global_f32(const float* p) {
    float v;
    asm volatile("ld.global.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
}

// Read-only (non-coherent) 16-byte load, for inputs no thread of the grid writes.
FP4Q_DEVICE void ld_global_nc_v4(const void* p, u32& a, u32& b, u32& c, u32& d) {
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(p));
}

// ---------------------------------------------------------------- global atomics
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

FP4Q_DEVICE void st_global_u32(void* p, u32 a) {
    asm volatile("st.global.u32 [%0], %1;" :: "l"(p), "r"(a) : "memory");
}

FP4Q_DEVICE void st_global_v4(void* p, u32 a, u32 b, u32 c, u32 d) {
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};"
                 :: "l"(p), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
