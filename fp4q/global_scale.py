"""The dynamic global scale on the device: ``min(2688 / amax(|x|), 2**100)``.

Two kernels on the caller's stream, chained with programmatic dependent
launch: the amax pass writes one partial maximum per CTA, the scale pass
(one CTA) reduces them and writes the scale. Maxima are exact, so the result
does not depend on how the work was split: it is deterministic. The partial
maxima live in the same allocation as the returned scalar (a view of its
first element), so the buffer lives exactly as long as the result and a
captured CUDA graph never writes memory that was handed back to the pool.
"""

from __future__ import annotations

import ctypes
import functools
import math

import numpy as np

from . import driver
from .arrays import InputView, _cupy, as_input, stream_handle
from .global_scale_config import AmaxConfig, GlobalScaleConfig
from .kernels import get_kernel
from .launch import launch

_MAX_ROWS = 2**31 - 1
_UNROLL = 4  # units per thread per loop trip in the amax kernel
_CTAS_PER_SM = 4


# Validated configs are built once per distinct call shape: a call should
# not pay for their validation.
@functools.lru_cache(maxsize=None)
def _config_of_amax(vector_loads: bool, input_dtype: str, arch: str) -> AmaxConfig:
    return AmaxConfig(vector_loads=vector_loads, input_dtype=input_dtype, arch=arch)


@functools.lru_cache(maxsize=None)
def _config_of_scale(arch: str) -> GlobalScaleConfig:
    return GlobalScaleConfig(arch=arch)


def _amax_config(view: InputView, arch: str) -> AmaxConfig:
    vector = view.ptr % 16 == 0 and view.row_stride % 8 == 0
    return _config_of_amax(vector, view.dtype, arch)


def global_scale(x, *, stream=None, pdl=True):
    """The NVFP4 global scale of bf16 (or fp16) ``x``, as a device float32 scalar.

    Returns a CuPy float32 array of shape ``()``: ``min(float32(2688 / amax), 2**100)``
    with ``amax`` the maximum of ``|x|`` over the whole tensor, NaN ignored,
    correctly rounded; ``1.0`` when ``amax`` is 0 or infinite (and for an empty
    ``x``). It is computed on ``stream`` (default: CuPy's current stream)
    without a host sync, so it can be passed straight to
    ``quantize_nvfp4(x, tensor_sf=...)`` and captured in a CUDA graph. ``x``
    follows ``quantize_nvfp4``'s rules (``K`` a multiple of 16, rows strided
    or not).
    """
    view = as_input(x)
    if view.rows > _MAX_ROWS:
        raise ValueError(f"x has {view.rows} rows; at most {_MAX_ROWS} are supported")
    handle = stream_handle(stream, view.device)
    if not isinstance(pdl, bool):
        raise TypeError(f"pdl must be a bool, got {pdl!r}")
    dev = driver.device(view.device)
    scale_kernel = get_kernel(_config_of_scale(dev.arch), dev.ordinal)
    amax_kernel = None
    partials = 0
    if view.rows and view.cols:
        amax_cfg = _amax_config(view, dev.arch)
        amax_kernel = get_kernel(amax_cfg, dev.ordinal)
        elements_per_unit = 8 if amax_cfg.vector_loads else 1
        units = view.rows * view.cols // elements_per_unit
        full_grid = math.ceil(units / (amax_cfg.threads * _UNROLL))
        partials = min(full_grid, dev.sm_count * min(amax_kernel.ctas_per_sm, _CTAS_PER_SM))
    cupy = _cupy()
    with cupy.cuda.Device(view.device):
        buffer = cupy.empty(1 + partials, dtype=np.float32)
    scale_ptr = buffer.data.ptr
    partial_ptr = scale_ptr + 4
    with driver.in_context(dev):
        if amax_kernel is not None:
            args = [ctypes.c_void_p(view.ptr), ctypes.c_int64(view.row_stride), ctypes.c_int32(view.rows),
                    ctypes.c_int32(view.cols), ctypes.c_void_p(partial_ptr)]
            launch(amax_kernel.function, partials, amax_kernel.threads, 0, handle, args, pdl)
        args = [ctypes.c_void_p(partial_ptr), ctypes.c_int32(partials), ctypes.c_void_p(scale_ptr)]
        launch(scale_kernel.function, 1, scale_kernel.threads, 0, handle, args, pdl)
    return buffer[0]
