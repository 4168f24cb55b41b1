// What every wrapper and kernel builds on. No CUDA header is included
// anywhere: NVRTC from the pip wheel ships none, so the integer types and the
// tensor-map struct are declared here.
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

// Reinterpretations, no instruction: the numerics work on float32 bits.
FP4Q_DEVICE u32 f32_bits(float v) { return __float_as_uint(v); }
FP4Q_DEVICE float f32_from_bits(u32 b) { return __uint_as_float(b); }
