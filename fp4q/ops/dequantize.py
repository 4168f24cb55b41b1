"""Dequantization on the device: NVFP4 or MXFP4 codes and scales back to
bf16 or float32 values, bit-exact to ``fp4q.reference``.

The TMA kernel serves every call whose packed rows, base addresses and row
stride are 16-byte aligned (``K % 32 == 0``); the plain kernel, with the
same numerics, serves the rest.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass

import numpy as np

from ..cuda import driver
from .arrays import _as_cupy, _cupy, _overlaps, _span, as_tensor_sf, check_rows_flatten, empty_on, stream_handle
from ..kernels.quantize import SF_LAYOUTS
from ..kernels.spec import Swizzle
from ..kernels.archs import target
from ..kernels.dequantize import GROUP_SIZE, OUT_DTYPES, DequantizeConfig, DequantizeSimtConfig
from ..jit.loader import get_kernel
from ..cuda.launch import TensorMapArg, launch
from ..numerics.layouts import swizzled_sf_shape
from ..cuda.tile_tickets import counter_for
from ..cuda.tma import TensorMapCache, TensorMapSpec

_tensor_maps = TensorMapCache()
_MAX_ROWS = 2**31 - 1
_OUT_NUMPY_DTYPES = {"bfloat16": np.dtype(np.uint16), "float32": np.dtype(np.float32)}
_SIMT_WAVES = 4  # grid-stride CTAs per SM slot for the plain kernel


@dataclass(frozen=True)
class CodesView:
    """A validated, zero-copy view of packed codes: ``rows`` rows of ``cols // 2`` bytes."""

    array: object
    lead_shape: tuple[int, ...]
    rows: int
    cols: int  # K, elements per row
    row_stride: int  # bytes between consecutive rows
    device: int

    @property
    def ptr(self) -> int:
        return self.array.data.ptr

    @property
    def span(self) -> tuple[int, int]:
        """[start, end) bytes the codes may occupy."""
        if self.rows == 0 or self.cols == 0:
            return (self.ptr, self.ptr)
        return (self.ptr, self.ptr + (self.rows - 1) * self.row_stride + self.cols // 2)


def as_codes(q, fmt: str) -> CodesView:
    arr = _as_cupy(q, "q")
    if arr.dtype != np.uint8:
        raise TypeError(f"q must hold uint8 bytes (two e2m1 codes each), got dtype {arr.dtype.name}")
    if arr.ndim < 2:
        raise ValueError(f"q must have at least 2 dimensions (..., K // 2), got shape {tuple(arr.shape)}")
    shape, strides = tuple(arr.shape), tuple(arr.strides)
    width = shape[-1]
    cols = 2 * width
    group = GROUP_SIZE[fmt]
    if cols % group:
        raise ValueError(
            f"K = 2 * q.shape[-1] must be a multiple of {group} for {fmt.upper()}, got K={cols}"
        )
    rows = math.prod(shape[:-1])
    if rows == 0 or cols == 0:
        return CodesView(arr, shape[:-1], rows, cols, width, arr.device.id)
    if width > 1 and strides[-1] != 1:
        raise ValueError(f"the last dimension of q must be contiguous (stride 1 byte), got stride {strides[-1]}")
    row_stride = strides[-2] if shape[-2] > 1 else width
    if shape[-2] > 1 and row_stride < width:
        raise ValueError(f"the rows of q must not overlap: row stride {strides[-2]} bytes for rows of {width} bytes")
    check_rows_flatten("q", shape, strides, row_stride)
    return CodesView(arr, shape[:-1], rows, cols, row_stride, arr.device.id)


def as_scales(sf, view: CodesView, fmt: str, sf_layout: str):
    arr = _as_cupy(sf, "sf")
    if arr.dtype != np.uint8:
        kind = "e4m3" if fmt == "nvfp4" else "e8m0"
        raise TypeError(f"sf must hold uint8 {kind} scale bytes, got dtype {arr.dtype.name}")
    groups = view.cols // GROUP_SIZE[fmt]
    if sf_layout == "swizzled":
        shape = swizzled_sf_shape(view.rows, groups)
    else:
        shape = view.lead_shape + (groups,)
    if tuple(arr.shape) != shape:
        raise ValueError(f"sf must have shape {shape} for sf_layout={sf_layout!r} and q of shape "
                         f"{tuple(view.array.shape)}, got {tuple(arr.shape)}")
    if arr.device.id != view.device:
        raise ValueError(f"sf is on device {arr.device.id} but q is on device {view.device}")
    if not arr.flags.c_contiguous:
        raise ValueError("sf must be C-contiguous")
    return arr


def output(out, dtype: str, view: CodesView, sf, stream: int | None = None):
    """Allocate the output (from ``stream``'s pool), or validate the caller's ``out``."""
    cupy = _cupy()
    shape = view.lead_shape + (view.cols,)
    np_dtype = _OUT_NUMPY_DTYPES[dtype]
    if out is None:
        return empty_on(shape, np_dtype, view.device, stream)
    if not isinstance(out, cupy.ndarray):
        raise TypeError(f"out must be a CuPy {np_dtype.name} array, got {type(out).__name__}")
    if out.dtype != np_dtype:
        what = "uint16 (bf16 bits)" if dtype == "bfloat16" else "float32"
        raise TypeError(f"out must have dtype {what} for dtype={dtype!r}, got {out.dtype.name}")
    if tuple(out.shape) != shape:
        raise ValueError(f"out must have shape {shape}, got {tuple(out.shape)}")
    if out.device.id != view.device:
        raise ValueError(f"out is on device {out.device.id} but q is on device {view.device}")
    if not out.flags.c_contiguous:
        raise ValueError("out must be C-contiguous")
    if out.size and _overlaps(_span(out), view.span):
        raise ValueError("out overlaps q")
    if out.size and sf.size and _overlaps(_span(out), _span(sf)):
        raise ValueError("out overlaps sf")
    return out


# Outputs of fewer elements than this take the plain kernel when no config is
# given: on the H200 it beat every shipped TMA config by 0.7 to 1.5 us up to
# 2**19 elements, and lost from 2**20 on (docs/sweep_h200_dequantize*.csv).
SIMT_MAX_ELEMENTS = 1 << 20


def _tma_obstacle(view: CodesView, out) -> str | None:
    """Why the TMA kernel cannot serve this call, or None when it can."""
    if view.cols % 32:
        return f"K={view.cols} is not a multiple of 32, so a row of q is not a multiple of 16 bytes"
    if view.ptr % 16:
        return f"q's base address {view.ptr:#x} is not 16-byte aligned"
    if view.row_stride % 16:
        return f"q's row stride of {view.row_stride} bytes is not a multiple of 16"
    if out.data.ptr % 16:
        return f"out's base address {out.data.ptr:#x} is not 16-byte aligned"
    return None


def _resolve_config(config, view: CodesView, out, call: dict):
    if config is not None and not isinstance(config, (DequantizeConfig, DequantizeSimtConfig)):
        raise TypeError(
            f"config must be None, a DequantizeConfig or a DequantizeSimtConfig, got {type(config).__name__}"
        )
    if isinstance(config, DequantizeSimtConfig):
        return config.replace(**call)
    obstacle = _tma_obstacle(view, out)
    if isinstance(config, DequantizeConfig):
        if obstacle is not None:
            raise ValueError(f"config is a TMA DequantizeConfig, but TMA cannot serve this call: {obstacle}")
        return config.replace(**call)
    if obstacle is not None or view.rows * view.cols < SIMT_MAX_ELEMENTS or not target(call["arch"]).features.tma:
        return DequantizeSimtConfig(**call)
    return DequantizeConfig(**call)


def _dequantize(fmt, q, sf, tensor_sf, sf_layout, dtype, out, stream, config, pdl):
    if sf_layout not in SF_LAYOUTS:
        raise ValueError(f"sf_layout must be 'swizzled' or 'linear', got {sf_layout!r}")
    if dtype not in OUT_DTYPES:
        raise ValueError(f"dtype must be 'bfloat16' or 'float32', got {dtype!r}")
    view = as_codes(q, fmt)
    if view.rows > _MAX_ROWS:
        raise ValueError(f"q has {view.rows} rows; at most {_MAX_ROWS} are supported")
    scales = as_scales(sf, view, fmt, sf_layout)
    if fmt == "nvfp4":
        scale = as_tensor_sf(tensor_sf, view.device)
        mode, value, scale_ptr = scale.mode, scale.value, scale.ptr
    else:
        mode, value, scale_ptr = "none", 0.0, 0
    handle = stream_handle(stream, view.device)
    y = output(out, dtype, view, scales, handle)
    if not isinstance(pdl, bool):
        raise TypeError(f"pdl must be a bool, got {pdl!r}")
    if view.rows == 0 or view.cols == 0:
        return y
    dev = driver.device(view.device)
    call = dict(fmt=fmt, out_dtype=dtype, sf_layout=sf_layout, tensor_sf_mode=mode, arch=dev.arch)
    cfg = _resolve_config(config, view, y, call)
    kernel = get_kernel(cfg, dev.ordinal)
    scalars = [ctypes.c_void_p(scales.data.ptr), ctypes.c_void_p(y.data.ptr), ctypes.c_float(value),
               ctypes.c_void_p(scale_ptr), ctypes.c_int32(view.rows), ctypes.c_int32(view.cols)]
    if isinstance(cfg, DequantizeConfig):
        q_map = _tensor_maps.get(
            TensorMapSpec(view.ptr, 1, (view.cols // 2, view.rows), (view.row_stride,), tuple(reversed(cfg.q_box)),
                          Swizzle.NONE, l2_promotion=256),
            "q",
        )
        tiles = math.ceil(view.rows / cfg.tile_m) * math.ceil(view.cols / cfg.tile_k)
        grid = min(tiles, dev.sm_count * kernel.ctas_per_sm) if cfg.persistent else tiles
        tickets = counter_for(dev, handle) if grid < tiles else 0  # the dynamic tile order
        args = [TensorMapArg(q_map), *scalars, ctypes.c_void_p(tickets)]
    else:
        units = view.rows * view.cols // cfg.unit
        grid = max(1, min(math.ceil(units / cfg.threads), dev.sm_count * kernel.ctas_per_sm * _SIMT_WAVES))
        args = [ctypes.c_void_p(view.ptr), ctypes.c_int64(view.row_stride), *scalars]
    with driver.in_context(dev):
        # A kernel built without griddepcontrol must not start before its predecessor ends.
        launch(kernel.function, grid, kernel.threads, kernel.smem_bytes, handle, args,
               pdl and target(cfg.arch).features.pdl)
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
    return _dequantize("nvfp4", q, sf, tensor_sf, sf_layout, dtype, out, stream, config, pdl)


def dequantize_mxfp4(q, sf, *, sf_layout="swizzled", dtype="bfloat16", out=None, stream=None, config=None,
                     pdl=True):
    """MXFP4 codes ``q`` (uint8 ``(..., K // 2)``) and e8m0 scales ``sf`` back to values.

    ``y = e2m1_value(q) * 2**(sf - 127)`` (scale byte ``0xFF`` is NaN), as
    ``fp4q.reference.dequantize_mxfp4``; ``K`` is a multiple of 32 and ``sf``
    holds ``K // 32`` scales per row in ``sf_layout``. Everything else as in
    ``dequantize_nvfp4``.
    """
    return _dequantize("mxfp4", q, sf, None, sf_layout, dtype, out, stream, config, pdl)
