// The launch's tensor scale, shared by the quantize and dequantize kernels:
// the by-value kernel argument, or the device scalar under
// FP4Q_TENSOR_SF_BY_POINTER. Read it only after griddepcontrol.wait: the
// previous kernel in the stream may be the one that writes it.
#pragma once
#include "ptx.cuh"

FP4Q_DEVICE float launch_tensor_sf(float value, const float* ptr) {
#if FP4Q_TENSOR_SF_BY_POINTER
    return ld_global_f32(ptr);
#else
    return value;
#endif
}
