"""Dequantization on the device: NVFP4 or MXFP4 codes and scales back to
bf16 or float32 values, bit-exact to ``fp4q.reference``.

Without a config, a call whose ``q`` and ``out`` base addresses are 16-byte
aligned (and ``q``'s row stride 4-byte aligned) takes the vector form of the
kernel without TMA (a load of a unit's codes, one 16-byte store) below
``VECTOR_MAX_ELEMENTS`` output elements and the TMA kernel from there on
(where TMA can address the rows); other pointers take the plain kernel,
with the same numerics. The rules run in the documented order (``q``, ``sf``,
``tensor_sf``, ``stream``, ``out``, ``pdl``, ``config``), those on ``q``
once per kind of call.
"""

from __future__ import annotations

import math
import threading

from ..cuda import driver
from ..jit.loader import get_kernel
from ..kernels.archs import target
from ..kernels.dequantize import GROUP_SIZE, OUT_BYTES, OUT_DTYPES, DequantizeConfig, DequantizeSimtConfig
from ..kernels.quantize import SF_LAYOUTS
from ..kernels.walk import unit_divisor
from .arrays import (
    DTYPE,
    Q_DTYPES,
    SF_DTYPES,
    VALUE_DTYPES,
    RowsView,
    as_operand,
    check_choice,
    check_element_aligned,
    check_operand,
    check_pdl,
    rows_view,
    sf_shape,
    stride_key,
    tensor_scale,
)
from .outputs import cupy_outputs
from .plans import KernelLaunch, plans
from .streams import stream_handle

# MXFP4 has no tensor scale: its kernels' tensor_sf mode is "none".
MXFP4_SCALE = ("none", 0.0, 0)

# Outputs of at least this many elements take the TMA kernel when no config is given and
# the pointers allow it: on the H200 the vector kernel won up to 8192x8192 (2**26) and lost
# from 8192x16384 (2**27: 1.21x against 1.20x of a copy; 16384x16384: 1.25x against 1.18x).
VECTOR_MAX_ELEMENTS = 1 << 27


class _Plan:
    __slots__ = ("config", "view", "sf_shape", "sf_bytes", "sf_dtypes", "y_shape", "y_bytes", "y_dtypes", "launches",
                 "lock")

    def __init__(self, config, view: RowsView, fmt: str, sf_layout: str, dtype: str) -> None:
        self.config = config
        self.view = view
        self.sf_shape, self.y_shape = output_shapes(view, fmt, sf_layout)
        self.sf_bytes, self.sf_dtypes = math.prod(self.sf_shape), SF_DTYPES[GROUP_SIZE[fmt]]
        self.y_bytes, self.y_dtypes = math.prod(self.y_shape) * OUT_BYTES[dtype], VALUE_DTYPES[dtype]
        self.launches: dict[tuple, KernelLaunch] = {}
        self.lock = threading.Lock()


def codes_view(qa, fmt: str) -> RowsView:
    return rows_view(qa, "q", Q_DTYPES, "uint8 bytes (two e2m1 codes each)", 2, GROUP_SIZE[fmt], f" for {fmt.upper()}")


def output_shapes(view: RowsView, fmt: str, sf_layout: str) -> tuple[tuple, tuple]:
    """(the scales' shape, the values' shape) of dequantizing ``view``."""
    cols = 2 * view.width
    return sf_shape(view.lead_shape, view.rows, cols // GROUP_SIZE[fmt], sf_layout), view.lead_shape + (cols,)


def _alignment_obstacle(view: RowsView, q_ptr: int, y_ptr: int, q_align: int) -> str | None:
    """Why a kernel that needs q's base and row stride ``q_align``-byte aligned and out's base
    16-byte aligned cannot serve this call, or None."""
    if q_ptr % q_align:
        return f"q's base address {q_ptr:#x} is not {q_align}-byte aligned"
    if view.row_stride % q_align:
        return f"q's row stride of {view.row_stride} bytes is not a multiple of {q_align}"
    if y_ptr % 16:
        return f"out's base address {y_ptr:#x} is not 16-byte aligned"
    return None


def _tma_obstacle(view: RowsView, q_ptr: int, y_ptr: int) -> str | None:
    """Why the TMA kernel cannot serve this call, or None when it can."""
    if view.width % 16:
        return f"K={2 * view.width} is not a multiple of 32, so a row of q is not a multiple of 16 bytes"
    return _alignment_obstacle(view, q_ptr, y_ptr, 16)


def _vector_obstacle(view: RowsView, q_ptr: int, y_ptr: int) -> str | None:
    """Why the vector kernel (a load of a unit's codes, a 16-byte store) cannot serve this call, or None."""
    return _alignment_obstacle(view, q_ptr, y_ptr, 4)


def check_config_type(config) -> None:
    if config is not None and not isinstance(config, (DequantizeConfig, DequantizeSimtConfig)):
        raise TypeError(
            f"config must be None, a DequantizeConfig or a DequantizeSimtConfig, got {type(config).__name__}"
        )


def resolve_config(config, view: RowsView, q_ptr: int, y_ptr: int, call: dict):
    if isinstance(config, DequantizeSimtConfig):
        vector_obstacle = _vector_obstacle(view, q_ptr, y_ptr) if config.vector else None
        if vector_obstacle is not None:
            raise ValueError(f"config is a vector DequantizeSimtConfig, but it cannot serve this call: "
                             f"{vector_obstacle}")
        return config.replace(**call)
    if isinstance(config, DequantizeConfig):
        obstacle = _tma_obstacle(view, q_ptr, y_ptr)
        if obstacle is not None:
            raise ValueError(f"config is a TMA DequantizeConfig, but TMA cannot serve this call: {obstacle}")
        return config.replace(**call)
    # The choice depends on the pointers only through their low four bits (the launch's key)
    # and on the row stride and K (the plan's).
    vector = q_ptr % 16 == 0 and _vector_obstacle(view, q_ptr, y_ptr) is None
    if (vector and view.rows * 2 * view.width >= VECTOR_MAX_ELEMENTS and target(call["arch"]).features.tma
            and _tma_obstacle(view, q_ptr, y_ptr) is None):
        return DequantizeConfig(**call)
    return DequantizeSimtConfig(vector=vector, **call)


# What each kernel takes per call, in the order the call passes it (the launch checks the names).
TMA_ARGS = ("sf", "out", "tensor_sf_value", "tensor_sf_ptr", "rows", "cols", "tickets")
SIMT_ARGS = ("q", "q_row_stride", "sf", "out", "tensor_sf_value", "tensor_sf_ptr", "rows", "cols")


def _kernel_launch(cfg, view: RowsView, dev) -> KernelLaunch:
    kernel = get_kernel(cfg.spec, dev.ordinal)
    rows, cols = view.rows, 2 * view.width
    if isinstance(cfg, DequantizeSimtConfig):
        grid = cfg.spec.grid.size(rows * cols // cfg.unit, dev.sm_count, kernel.ctas_per_sm)
        return KernelLaunch(cfg, kernel, grid, SIMT_ARGS, fixed=unit_divisor(cfg.units_per_row(cols)))
    grid, dynamic = cfg.spec.grid.size(rows, cols, dev.sm_count, kernel.ctas_per_sm)
    return KernelLaunch(cfg, kernel, grid, TMA_ARGS, dynamic, (("q", (view.width, rows), (view.row_stride,)),))


def dequantize(fmt, q, sf, tensor_sf, sf_layout, dtype, out, stream, config, pdl, outputs=cupy_outputs):
    """The call path of both dequantize functions; ``outputs`` allocates ``out`` when it is None."""
    check_choice("sf_layout", sf_layout, SF_LAYOUTS)
    check_choice("dtype", dtype, OUT_DTYPES)
    qa = as_operand(q, "q")
    q_obj, q_ptr, q_shape, q_dtype, device, q_torch = qa
    key = ("dequantize", fmt, q_shape, stride_key(q_obj, q_torch), q_torch, q_dtype, device, sf_layout, dtype,
           id(config))
    plan = plans.get(key)
    if plan is None or plan.config is not config:
        plan = plans.put(key, _Plan(config, codes_view(qa, fmt), fmt, sf_layout, dtype))
    view = plan.view
    _, sf_ptr = check_operand(as_operand(sf, "sf"), "sf", plan.sf_shape, plan.sf_dtypes, device, plan.sf_bytes)
    mode, value, scale_ptr = tensor_scale(tensor_sf, device) if fmt == "nvfp4" else MXFP4_SCALE
    handle = stream_handle(stream, device, q_torch)
    if out is None:
        y, y_ptr = outputs(dtype, plan.y_shape, device, handle)
    else:
        ya = as_operand(out, "out")
        y, y_ptr = check_operand(ya, "out", plan.y_shape, plan.y_dtypes, device, plan.y_bytes,
                                 (("q", view.span(q_ptr)), ("sf", (sf_ptr, sf_ptr + plan.sf_bytes))))
        if y_ptr & 3:  # out holds 2- or 4-byte values; the test is inline, the rule and its message are not
            check_element_aligned(y_ptr, ya[DTYPE], "out")
    check_pdl(pdl)
    if config is not None:  # None is always valid
        check_config_type(config)
    if view.empty:
        return y
    # Every kernel's alignment rule reads the pointers' low four bits (and the plan's row stride):
    # a launch resolved for one pair of them serves every call with the same pair.
    launch_key = (mode, q_ptr & 15, y_ptr & 15)
    launch = plan.launches.get(launch_key)
    if launch is None:
        dev = driver.device(view.device)
        call = dict(fmt=fmt, out_dtype=dtype, sf_layout=sf_layout, tensor_sf_mode=mode, arch=dev.arch)
        launch = _kernel_launch(resolve_config(config, view, q_ptr, y_ptr, call), view, dev)
        with plan.lock:
            plan.launches[launch_key] = launch
    if launch.map_names:
        launch(handle, pdl, (sf_ptr, y_ptr, value, scale_ptr, view.rows, 2 * view.width,
                             launch.tickets(handle)), (q_ptr,))
    else:
        launch(handle, pdl, (q_ptr, view.row_stride, sf_ptr, y_ptr, value, scale_ptr, view.rows,
                             2 * view.width))
    return y


def dequantize_nvfp4(q, sf, tensor_sf, *, sf_layout="swizzled", dtype="bfloat16", out=None, stream=None,
                     config=None, pdl=True):
    """NVFP4 codes ``q`` (uint8 ``(..., K // 2)``) and e4m3 scales ``sf`` back to values.

    ``y = e2m1_value(q) * (float32(sf) * (1 / tensor_sf))`` in float32, each
    product correctly rounded, as ``fp4q.reference.dequantize_nvfp4``;
    ``dtype="bfloat16"`` rounds it to nearest even and returns the bf16 bits
    as a ``uint16`` array (CuPy has no bf16 type; ``.view`` it as bf16 in
    torch or ml_dtypes), ``"float32"`` returns float32. Shape ``(..., K)``.
    ``sf`` is in ``sf_layout`` (``"swizzled"``: ``(ceil(M/128), ceil(K/64),
    32, 4, 4)``; ``"linear"``: ``(..., K // 16)``). ``tensor_sf`` is a float
    (passed by value) or a device float32 scalar (read by the kernel; the
    ``tensor_sf_device`` that ``quantize_nvfp4(x, "dynamic")`` returns).
    ``out`` is an optional C-contiguous output of that shape and dtype;
    ``stream``, ``config`` (``DequantizeConfig`` or ``DequantizeSimtConfig``)
    and ``pdl`` work as in ``quantize_nvfp4``.
    """
    return dequantize("nvfp4", q, sf, tensor_sf, sf_layout, dtype, out, stream, config, pdl)


def dequantize_mxfp4(q, sf, *, sf_layout="swizzled", dtype="bfloat16", out=None, stream=None, config=None,
                     pdl=True):
    """MXFP4 codes ``q`` (uint8 ``(..., K // 2)``) and e8m0 scales ``sf`` back to values.

    ``y = e2m1_value(q) * 2**(sf - 127)`` (scale byte ``0xFF`` is NaN), as
    ``fp4q.reference.dequantize_mxfp4``; ``K`` is a multiple of 32 and ``sf``
    holds ``K // 32`` scales per row in ``sf_layout``. Everything else as in
    ``dequantize_nvfp4``.
    """
    return dequantize("mxfp4", q, sf, None, sf_layout, dtype, out, stream, config, pdl)
