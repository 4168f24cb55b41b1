"""The public entry points: validate the call, choose a kernel, launch it."""

from __future__ import annotations

import ctypes
import math

from . import driver
from .arrays import InputView, as_input, as_tensor_sf, output, sf_shape, stream_handle
from .config import SF_LAYOUTS, QuantizeConfig, SimtConfig
from .global_scale import global_scale
from .kernels import get_kernel
from .launch import TensorMapArg, launch
from .tma import TensorMapCache, TensorMapSpec
from .tuning import choose_config

_tensor_maps = TensorMapCache()
_MAX_ROWS = 2**31 - 1


def tensor_map_cache() -> TensorMapCache:
    return _tensor_maps


def _tma_obstacle(view: InputView, q, sf, sf_layout: str) -> str | None:
    """Why the TMA kernel cannot serve this call, or None when it can."""
    if view.cols % 32:
        return f"K={view.cols} is not a multiple of 32, so a packed output row is not a multiple of 16 bytes"
    if view.ptr % 16:
        return f"x's base address {view.ptr:#x} is not 16-byte aligned"
    if (view.row_stride * 2) % 16:
        return f"x's row stride of {view.row_stride * 2} bytes is not a multiple of 16"
    if q.data.ptr % 16:
        return f"out's base address {q.data.ptr:#x} is not 16-byte aligned"
    if sf_layout == "swizzled" and sf.data.ptr % 16:
        return f"sf_out's base address {sf.data.ptr:#x} is not 16-byte aligned"
    return None


def _resolve_config(config, view: InputView, q, sf, sf_layout: str, tensor_sf_mode: str, arch: str):
    call = dict(sf_layout=sf_layout, tensor_sf_mode=tensor_sf_mode, input_dtype=view.dtype, arch=arch)
    if config is not None and not isinstance(config, (QuantizeConfig, SimtConfig)):
        raise TypeError(f"config must be None, a QuantizeConfig or a SimtConfig, got {type(config).__name__}")
    if isinstance(config, SimtConfig):
        return config.replace(**call)
    obstacle = _tma_obstacle(view, q, sf, sf_layout)
    if isinstance(config, QuantizeConfig):
        if obstacle is not None:
            raise ValueError(f"config is a TMA QuantizeConfig, but TMA cannot serve this call: {obstacle}")
        return config.replace(**call)
    if obstacle is not None:
        return SimtConfig(**call)
    return choose_config(view.rows, view.cols, arch).replace(**call)


def quantize_nvfp4(x, tensor_sf, *, sf_layout="swizzled", out=None, sf_out=None, stream=None, config=None, pdl=True):
    """Quantize bf16 (or fp16) ``x`` of shape ``(..., K)`` to NVFP4.

    Returns ``(q, sf)``: ``q`` uint8 ``(..., K // 2)`` packed e2m1 pairs and
    ``sf`` uint8 e4m3 scales, ``(ceil(M/128), ceil(K/64), 32, 4, 4)`` when
    ``sf_layout="swizzled"`` (the 128x4 GEMM layout) or ``(..., K // 16)``
    when ``"linear"``. ``tensor_sf`` is a float (passed by value) or a
    device float32 scalar (read by the kernel: no host sync, graph-safe).
    The work is queued on ``stream`` (default: CuPy's current stream).

    ``tensor_sf="dynamic"`` computes the tensor scale on the device first
    (``fp4q.global_scale(x)``: the same stream, chained with PDL, no host
    sync) and returns the 3-tuple ``(q, sf, tensor_sf_device)``, the last a
    float32 device scalar of shape ``()`` (what ``dequantize_nvfp4`` takes).
    """
    if sf_layout not in SF_LAYOUTS:
        raise ValueError(f"sf_layout must be 'swizzled' or 'linear', got {sf_layout!r}")
    if isinstance(tensor_sf, str):
        if tensor_sf != "dynamic":
            raise ValueError(f"tensor_sf must be a float, a device float32 scalar or 'dynamic', got {tensor_sf!r}")
        scale = global_scale(x, stream=stream, pdl=pdl)
        kwargs = dict(sf_layout=sf_layout, out=out, sf_out=sf_out, stream=stream, config=config, pdl=pdl)
        return (*quantize_nvfp4(x, scale, **kwargs), scale)
    view = as_input(x)
    if view.rows > _MAX_ROWS:
        raise ValueError(f"x has {view.rows} rows; at most {_MAX_ROWS} are supported")
    scale = as_tensor_sf(tensor_sf, view.device)
    groups = view.cols // 16
    q = output(out, "out", view.lead_shape + (view.cols // 2,), view)
    sf = output(sf_out, "sf_out", sf_shape(view.lead_shape, view.rows, groups, sf_layout), view, (("out", q),))
    handle = stream_handle(stream, view.device)
    if not isinstance(pdl, bool):
        raise TypeError(f"pdl must be a bool, got {pdl!r}")
    if view.rows == 0 or view.cols == 0:
        return q, sf
    dev = driver.device(view.device)
    cfg = _resolve_config(config, view, q, sf, sf_layout, scale.mode, dev.arch)
    kernel = get_kernel(cfg, dev.ordinal)
    if isinstance(cfg, QuantizeConfig):
        grid, args = _tma_launch(cfg, kernel, view, q, sf, scale)
    else:
        grid, args = _simt_launch(cfg, kernel, view, q, sf, scale)
    with driver.in_context(dev):
        launch(kernel.function, grid, kernel.threads, kernel.smem_bytes, handle, args, pdl)
    return q, sf


def _scale_args(scale):
    return [ctypes.c_float(scale.value), ctypes.c_void_p(scale.ptr)]


def _tma_launch(cfg: QuantizeConfig, kernel, view: InputView, q, sf, scale):
    rows, cols = view.rows, view.cols
    in_map = _tensor_maps.get(
        TensorMapSpec(view.ptr, 2, (cols, rows), (view.row_stride * 2,), (cfg.input_box_k, cfg.tile_m),
                      cfg.input_swizzle, l2_promotion=256),
        "x",
    )
    q_map = _tensor_maps.get(
        TensorMapSpec(q.data.ptr, 1, (cols // 2, rows), (cols // 2,), (cfg.output_box_k, cfg.tile_m),
                      cfg.output_swizzle),
        "out",
    )
    if cfg.sf_layout == "swizzled":
        k_blocks, m_blocks = math.ceil(cols / 64), math.ceil(rows / 128)
        sf_map = _tensor_maps.get(
            TensorMapSpec(sf.data.ptr, 1, (16, 32, k_blocks, m_blocks), (16, 512, 512 * k_blocks),
                          tuple(reversed(cfg.scales_box))),
            "sf_out",
        )
        sf_linear = 0
    else:
        sf_map, sf_linear = q_map, sf.data.ptr
    tiles = math.ceil(rows / cfg.tile_m) * math.ceil(cols / cfg.tile_k)
    grid = min(tiles, kernel.device.sm_count * kernel.ctas_per_sm) if cfg.persistent else tiles
    args = [TensorMapArg(in_map), TensorMapArg(q_map), TensorMapArg(sf_map), ctypes.c_void_p(sf_linear),
            *_scale_args(scale), ctypes.c_int32(rows), ctypes.c_int32(cols)]
    return grid, args


def _simt_launch(cfg: SimtConfig, kernel, view: InputView, q, sf, scale):
    groups = view.cols // 16
    if cfg.sf_layout == "swizzled":
        total = math.ceil(view.rows / 128) * 128 * math.ceil(groups / 4) * 4
    else:
        total = view.rows * groups
    grid = max(1, min(math.ceil(total / cfg.threads), kernel.device.sm_count * kernel.ctas_per_sm * 4))
    args = [ctypes.c_void_p(view.ptr), ctypes.c_int64(view.row_stride), ctypes.c_void_p(q.data.ptr),
            ctypes.c_void_p(sf.data.ptr), *_scale_args(scale), ctypes.c_int32(view.rows),
            ctypes.c_int32(view.cols)]
    return grid, args
