// The launch's tensor scale (spec step 5), shared by the quantize and
// dequantize kernels: the by-value kernel argument, or the device scalar
// under FP4Q_TENSOR_SF_BY_POINTER. Read it only after pdl_wait():
// the previous kernel in the stream may be the one that writes it.
#pragma once
#include "ptx/float_math.cuh"
#include "ptx/global_memory.cuh"

FP4Q_DEVICE float launch_tensor_sf(float value, const float* ptr) {
    if constexpr (FP4Q_TENSOR_SF_BY_POINTER) {
        return ld_global_f32(ptr);
    } else {
        return value;
    }
}

// The tensor scale and its reciprocal.
struct TensorScale {
    float value;
    float rcp;
};

FP4Q_DEVICE TensorScale tensor_scale_of(float t) { return {t, rcp_rn(t)}; }

FP4Q_DEVICE TensorScale tensor_scale(float value, const float* ptr) { return tensor_scale_of(launch_tensor_sf(value, ptr)); }

// A tensor scale the launch passes either way, whatever the config's
// FP4Q_TENSOR_SF_BY_POINTER (the kernels that take two, one per direction):
// the device float32 where its pointer is not null, else the value.
FP4Q_DEVICE float given_tensor_sf(float value, const float* ptr) { return ptr != nullptr ? ld_global_f32(ptr) : value; }
