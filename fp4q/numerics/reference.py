"""Bit-exact numpy reference for fp4q: the executable form of NVFP4_SPEC.md.

Every kernel is tested byte for byte against these functions, so they follow
the spec's formulas literally, for any input (NaN, Inf, subnormals, and any
float32 ``tensor_sf``, with no range check). All arithmetic is numpy float32,
which is IEEE round-to-nearest-even without denormal flushing, as the spec
requires. The element formats are in ``formats``, the steps every quantizer
shares in ``groups``; the quantizers (of ``x`` and fused after SiLU·mul or
RMSNorm) in ``serving`` and their float32 prologues in ``prologues``.
"""

from __future__ import annotations

import numpy as np

from .experts import (
    experts_sf_shape,
    quantize_nvfp4_batched,
    quantize_nvfp4_experts,
    resolve_expert_offsets,
    silu_and_mul_quantize_nvfp4_batched,
    silu_and_mul_quantize_nvfp4_experts,
)
from .formats import (
    e2m1_decode,
    e2m1_encode,
    e4m3_decode,
    e4m3_encode,
    e8m0_decode,
    input_float32,
    round_to,
    unpack_nibbles,
)
from .groups import (
    SF_LAYOUTS,
    nvfp4_multipliers,
    require_choice,
    require_codes_array,
    row_groups,
    scales_in,
    tensor_sf_float32,
)
from .hadamard import TE_WGRAD_SIGN_MASK, hadamard16
from .philox import philox4x32_10
from .stochastic import e2m1_encode_stochastic
from .training import NVFP4TrainingQuantized, fake_quantize_nvfp4, quantize_nvfp4_training
from .prologues import rms_norm, silu_and_mul
from .serving import (
    quantize_mxfp4,
    quantize_nvfp4,
    rms_norm_quantize_mxfp4,
    rms_norm_quantize_nvfp4,
    silu_and_mul_quantize_mxfp4,
    silu_and_mul_quantize_nvfp4,
)

__all__ = [
    "e2m1_encode",
    "e2m1_decode",
    "e4m3_encode",
    "e4m3_decode",
    "quantize_nvfp4",
    "dequantize_nvfp4",
    "global_scale",
    "quantize_mxfp4",
    "dequantize_mxfp4",
    "quantize_nvfp4_training",
    "fake_quantize_nvfp4",
    "NVFP4TrainingQuantized",
    "philox4x32_10",
    "e2m1_encode_stochastic",
    "hadamard16",
    "TE_WGRAD_SIGN_MASK",
    "silu_and_mul",
    "rms_norm",
    "silu_and_mul_quantize_nvfp4",
    "silu_and_mul_quantize_mxfp4",
    "rms_norm_quantize_nvfp4",
    "rms_norm_quantize_mxfp4",
    "quantize_nvfp4_experts",
    "quantize_nvfp4_batched",
    "silu_and_mul_quantize_nvfp4_experts",
    "silu_and_mul_quantize_nvfp4_batched",
    "experts_sf_shape",
    "resolve_expert_offsets",
]

NVFP4_GROUP = 16
MXFP4_GROUP = 32
OUT_DTYPES = ("bfloat16", "float32")
DEFAULT_OUT_DTYPE = "bfloat16"  # as fp4q.dequantize_nvfp4 / dequantize_mxfp4


def dequantize_nvfp4(q, sf, tensor_sf, sf_layout="swizzled", dtype=DEFAULT_OUT_DTYPE):
    """``y = e2m1_value(q) * d`` of shape ``(..., 2 * q.shape[-1])``: the bf16 bits as uint16
    (``dtype="bfloat16"``, round to nearest even, as the kernels return them) or float32."""
    require_codes_array(q, "q")
    k = 2 * q.shape[-1]
    lead, m, groups = row_groups(q.shape, k, NVFP4_GROUP, "K = 2 * q.shape[-1]")
    require_choice(sf_layout, "sf_layout", SF_LAYOUTS)
    require_choice(dtype, "dtype", OUT_DTYPES)
    d, _ = nvfp4_multipliers(scales_in(sf, lead, groups, sf_layout), tensor_sf_float32(tensor_sf))
    values = e2m1_decode(unpack_nibbles(q.reshape(m, k // 2))).reshape(m, groups, NVFP4_GROUP)
    with np.errstate(all="ignore"):
        y = values * d[..., None]
    return round_to(y.reshape(lead + (k,)), dtype)


def global_scale(x):
    """``min(2688 / amax(|x|), 2**100)`` as float32; 1.0 when amax is 0 or not finite."""
    xf = input_float32(x)
    amax = np.fmax.reduce(np.abs(xf), axis=None, initial=np.float32(0))
    if amax == 0 or not np.isfinite(amax):
        return np.float32(1)
    with np.errstate(over="ignore"):
        return np.minimum(np.float32(2688) / amax, np.float32(2.0**100))


def dequantize_mxfp4(q, sf, sf_layout="swizzled", dtype=DEFAULT_OUT_DTYPE):
    """``y = e2m1_value(q) * 2**(sf - 127)`` as bf16 bits in uint16 (or float32); sf byte 0xFF is NaN."""
    require_codes_array(q, "q")
    k = 2 * q.shape[-1]
    lead, m, groups = row_groups(q.shape, k, MXFP4_GROUP, "K = 2 * q.shape[-1]")
    require_choice(sf_layout, "sf_layout", SF_LAYOUTS)
    require_choice(dtype, "dtype", OUT_DTYPES)
    scale = e8m0_decode(scales_in(sf, lead, groups, sf_layout))
    values = e2m1_decode(unpack_nibbles(q.reshape(m, k // 2))).reshape(m, groups, MXFP4_GROUP)
    with np.errstate(all="ignore"):
        y = values * scale[..., None]
    return round_to(y.reshape(lead + (k,)), dtype)
