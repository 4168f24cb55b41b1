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
import math
import struct
import threading

import numpy as np

from ..cuda import driver
from .arrays import InputView, _cupy, as_input, empty_on, stream_handle
from ..kernels.archs import target
from ..kernels.global_scale import AmaxConfig, GlobalScaleConfig
from ..jit.loader import get_kernel
from ..cuda.launch import LaunchTemplate
from .plans import launch_in_context, put_bounded

_MAX_ROWS = 2**31 - 1
_UNROLL = 4  # units per thread per loop trip in the amax kernel
_CTAS_PER_SM = 4


def _amax_config(view: InputView, arch: str) -> AmaxConfig:
    vector = view.ptr % 16 == 0 and view.row_stride % 8 == 0
    return AmaxConfig(vector_loads=vector, input_dtype=view.dtype, arch=arch)


# One block per launch, as in plans.py: the void*[] the driver reads, then the scalars it points at.
_AMAX_ARGS = struct.Struct("<5Q" "Q q i i Q")  # x, row_stride, rows, cols, partials
_SCALE_ARGS = struct.Struct("<3Q" "Q i 4x Q")  # partials, count, scale
_AmaxBlock = ctypes.c_uint64 * (_AMAX_ARGS.size // 8)
_ScaleBlock = ctypes.c_uint64 * (_SCALE_ARGS.size // 8)
assert _AMAX_ARGS.size == 72 and _SCALE_ARGS.size == 48

PLAN_CAPACITY = 256
_plans: dict[tuple, "_Plan"] = {}
_plans_lock = threading.Lock()


class _Plan:
    """What one kind of call resolved (kernels, grid, buffer size), so that a later call of the
    same kind only allocates its buffer, packs its pointers and launches."""

    __slots__ = ("device", "partials", "row_stride", "rows", "cols", "amax", "scale", "pdl")

    def __init__(self, device, view: InputView, amax_kernel, partials: int, scale_kernel) -> None:
        self.device = device
        # Kernels built without griddepcontrol must not start before their predecessor ends.
        self.pdl = target(scale_kernel.config.arch).features.pdl
        self.partials = partials
        # Converted as the kernel's i64 / i32 parameters convert them.
        self.row_stride = ctypes.c_int64(view.row_stride).value
        self.rows = ctypes.c_int32(view.rows).value
        self.cols = ctypes.c_int32(view.cols).value
        self.amax = None if amax_kernel is None else LaunchTemplate(amax_kernel.function, partials,
                                                                     amax_kernel.threads, 0)
        self.scale = LaunchTemplate(scale_kernel.function, 1, scale_kernel.threads, 0)

    def __call__(self, x_ptr: int, stream: int, pdl: bool):
        pdl = pdl and self.pdl
        buffer = empty_on((1 + self.partials,), np.float32, self.device.ordinal, stream)
        scale_ptr = buffer.data.ptr
        partial_ptr = scale_ptr + 4
        if self.amax is not None:
            block = _AmaxBlock()
            base = ctypes.addressof(block)
            _AMAX_ARGS.pack_into(block, 0, base + 40, base + 48, base + 56, base + 60, base + 64,
                                 x_ptr, self.row_stride, self.rows, self.cols, partial_ptr)
            launch_in_context(self.device, self.amax, stream, base, pdl)
        block = _ScaleBlock()
        base = ctypes.addressof(block)
        _SCALE_ARGS.pack_into(block, 0, base + 24, base + 32, base + 40, partial_ptr, self.partials, scale_ptr)
        launch_in_context(self.device, self.scale, stream, base, pdl)
        del block
        return buffer[0]


def _plan_key(x, device: int, aligned: bool) -> tuple:
    return (x.shape, x.strides, x.dtype, device, aligned)


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
    cupy = _cupy()
    if type(x) is cupy.ndarray and (pdl is True or pdl is False):
        # A kind of call seen before: every check on x passed then, and the key fixes all it depended on.
        data = x.data
        plan = _plans.get(_plan_key(x, data.device_id, not data.ptr & 15))
        if plan is not None:
            handle = cupy.cuda.get_current_stream(data.device_id).ptr if stream is None else \
                stream_handle(stream, data.device_id)
            return plan(data.ptr, handle, pdl)
    view = as_input(x)
    if view.rows > _MAX_ROWS:
        raise ValueError(f"x has {view.rows} rows; at most {_MAX_ROWS} are supported")
    handle = stream_handle(stream, view.device)
    if not isinstance(pdl, bool):
        raise TypeError(f"pdl must be a bool, got {pdl!r}")
    dev = driver.device(view.device)
    scale_kernel = get_kernel(GlobalScaleConfig(arch=dev.arch), dev.ordinal)
    amax_kernel = None
    partials = 0
    if view.rows and view.cols:
        amax_cfg = _amax_config(view, dev.arch)
        amax_kernel = get_kernel(amax_cfg, dev.ordinal)
        elements_per_unit = 8 if amax_cfg.vector_loads else 1
        units = view.rows * view.cols // elements_per_unit
        full_grid = math.ceil(units / (amax_cfg.threads * _UNROLL))
        partials = min(full_grid, dev.sm_count * min(amax_kernel.ctas_per_sm, _CTAS_PER_SM))
    plan = _Plan(dev, view, amax_kernel, partials, scale_kernel)
    if type(x) is cupy.ndarray:
        with _plans_lock:
            put_bounded(_plans, _plan_key(x, view.device, not view.ptr & 15), plan, PLAN_CAPACITY)
    return plan(view.ptr, handle, pdl)
