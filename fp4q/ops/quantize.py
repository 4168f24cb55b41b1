"""The public entry points: validate the call, choose a kernel, launch it.

A call first tries its stored plan (``plans.py``), which re-checks only what
varies between calls of one kind; a call without a plan, or one that fails
any of those checks, takes the checked path, which runs every check in the
documented order and stores the plan for the next call.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from . import arrays
from ..cuda import driver
from . import plans
from .arrays import (
    TENSOR_SF_MAX,
    TENSOR_SF_MIN,
    InputView,
    TensorScale,
    as_input,
    as_tensor_sf,
    empty_on,
    output,
    sf_shape,
    stream_handle,
)
from ..kernels.quantize import QuantizeConfig, SF_LAYOUTS, SimtConfig
from .global_scale import global_scale
from ..jit.loader import get_kernel
from .plans import SimtLauncher, TmaLauncher
from ..cuda.tma import TensorMapCache
from ..kernels.tuning import choose_config

_MAX_ROWS = 2**31 - 1


def tensor_map_cache() -> TensorMapCache:
    """The encoded tensor maps shared by every plan (``plans.tensor_maps``)."""
    return plans.tensor_maps


def _alignment_obstacle(view: InputView, q, sf, sf_layout: str) -> str | None:
    """Why neither the TMA nor the vector kernel can serve this call's pointers, or None.

    The same 16-byte rule for both kernels, which is what a stored plan keys its
    launchers on (plans.Plan.aligned)."""
    if view.ptr % 16:
        return f"x's base address {view.ptr:#x} is not 16-byte aligned"
    if (view.row_stride * 2) % 16:
        return f"x's row stride of {view.row_stride * 2} bytes is not a multiple of 16"
    if q.data.ptr % 16:
        return f"out's base address {q.data.ptr:#x} is not 16-byte aligned"
    if sf_layout == "swizzled" and sf.data.ptr % 16:
        return f"sf_out's base address {sf.data.ptr:#x} is not 16-byte aligned"
    return None


def _tma_obstacle(view: InputView, q, sf, sf_layout: str) -> str | None:
    """Why the TMA kernel cannot serve this call, or None when it can."""
    if view.cols % 32:
        return f"K={view.cols} is not a multiple of 32, so a packed output row is not a multiple of 16 bytes"
    return _alignment_obstacle(view, q, sf, sf_layout)


@dataclass(frozen=True)
class _Format:
    """What a public function quantizes to: NVFP4 (groups of 16, e4m3 scales, a
    tensor scale) or MXFP4 (groups of 32, e8m0 scales rounded by ``mx_mode``)."""

    name: str
    sf_vec_size: int
    mx_mode: str = "rceil"


NVFP4 = _Format("quantize_nvfp4", 16)


@functools.lru_cache(maxsize=1024, typed=True)
def _replaced(config, sf_layout: str, tensor_sf_mode: str, input_dtype: str, arch: str, mx_mode: str):
    return config.replace(sf_layout=sf_layout, tensor_sf_mode=tensor_sf_mode, input_dtype=input_dtype, arch=arch,
                          mx_mode=mx_mode)


def _for_call(config, sf_layout: str, tensor_sf_mode: str, input_dtype: str, arch: str, mx_mode: str):
    """``config.replace(...)`` with a call's fields. Memoized by value and type for the two
    config classes themselves: they are frozen and validated on construction, so equal inputs
    give an equal, valid config (or the same ConfigError, which is not memoized)."""
    if type(config) is QuantizeConfig or type(config) is SimtConfig:
        return _replaced(config, sf_layout, tensor_sf_mode, input_dtype, arch, mx_mode)
    return config.replace(sf_layout=sf_layout, tensor_sf_mode=tensor_sf_mode, input_dtype=input_dtype, arch=arch,
                          mx_mode=mx_mode)


def _check_config_type(config, fmt: _Format) -> None:
    if config is not None and not isinstance(config, (QuantizeConfig, SimtConfig)):
        raise TypeError(f"config must be None, a QuantizeConfig or a SimtConfig, got {type(config).__name__}")
    if config is not None and config.sf_vec_size != fmt.sf_vec_size:
        raise ValueError(
            f"config.sf_vec_size is {config.sf_vec_size}, but {fmt.name} quantizes groups of "
            f"{fmt.sf_vec_size}: pass a config with sf_vec_size={fmt.sf_vec_size}"
        )


def _resolve_config(config, view: InputView, q, sf, sf_layout: str, tensor_sf_mode: str, arch: str,
                    fmt: _Format = NVFP4):
    call = (sf_layout, tensor_sf_mode, view.dtype, arch, fmt.mx_mode)
    _check_config_type(config, fmt)
    if isinstance(config, SimtConfig):
        if config.vector:
            obstacle = _alignment_obstacle(view, q, sf, sf_layout)
            if obstacle is not None:
                raise ValueError(f"config is a vector SimtConfig, but its 16-byte loads cannot serve this call: "
                                 f"{obstacle}")
        return _for_call(config, *call)
    if isinstance(config, QuantizeConfig):
        obstacle = _tma_obstacle(view, q, sf, sf_layout)
        if obstacle is not None:
            raise ValueError(f"config is a TMA QuantizeConfig, but TMA cannot serve this call: {obstacle}")
        return _for_call(config, *call)
    if _alignment_obstacle(view, q, sf, sf_layout) is not None:
        return _for_call(SimtConfig(sf_vec_size=fmt.sf_vec_size), *call)
    chosen = choose_config(view.rows, view.cols, arch, fmt.sf_vec_size)
    if isinstance(chosen, QuantizeConfig) and view.cols % 32:
        chosen = SimtConfig(sf_vec_size=fmt.sf_vec_size, vector=True)
    return _for_call(chosen, *call)


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
    return _quantize(x, tensor_sf, sf_layout, out, sf_out, stream, config, pdl, NVFP4)


def quantize_mxfp4(x, *, mode="rceil", sf_layout="swizzled", out=None, sf_out=None, stream=None, config=None,
                   pdl=True):
    """Quantize bf16 (or fp16) ``x`` of shape ``(..., K)``, ``K % 32 == 0``, to MXFP4.

    Groups of 32 elements share one e8m0 scale byte (``e + 127`` for the
    power of two ``2**e``); ``mode`` picks the exponent: ``"rceil"`` (the
    smallest ``e`` with ``2**e >= amax / 6``, what NVIDIA's libraries use) or
    ``"floor"`` (OCP: ``floor(log2(amax)) - 2``). Returns ``(q, sf)``: ``q``
    uint8 ``(..., K // 2)`` as for NVFP4, ``sf`` uint8
    ``(ceil(M/128), ceil(K/128), 32, 4, 4)`` (swizzled, the same 128x4 layout
    with ``G = K // 32``) or ``(..., K // 32)`` (linear). No tensor scale.
    """
    if mode not in _MX_FORMATS:
        raise ValueError(f"mode must be 'rceil' or 'floor', got {mode!r}")
    if sf_layout not in SF_LAYOUTS:
        raise ValueError(f"sf_layout must be 'swizzled' or 'linear', got {sf_layout!r}")
    return _quantize(x, None, sf_layout, out, sf_out, stream, config, pdl, _MX_FORMATS[mode])


_MX_FORMATS = {mode: _Format("quantize_mxfp4", 32, mode) for mode in ("rceil", "floor")}
_NO_TENSOR_SCALE = TensorScale("value", 0.0, 0, None)


def _quantize(x, tensor_sf, sf_layout, out, sf_out, stream, config, pdl, fmt: _Format):
    cupy = arrays._cupy()
    if type(x) is not cupy.ndarray:
        x = arrays._as_cupy(x, "x")  # as_input's first step, with its errors
    done = _planned_call(cupy, x, tensor_sf, sf_layout, out, sf_out, stream, config, pdl, fmt)
    if done is not None:
        return done
    return _checked_call(x, tensor_sf, sf_layout, out, sf_out, stream, config, pdl, fmt)


def _checked_call(x, tensor_sf, sf_layout, out, sf_out, stream, config, pdl, fmt: _Format = NVFP4):
    """Every check in order, each failure with its own message; then launch and store the call's plan."""
    view = as_input(x)
    if view.cols % fmt.sf_vec_size:
        raise ValueError(f"K (the last dimension of x) must be a multiple of {fmt.sf_vec_size} for "
                         f"{fmt.name}, got {view.cols}")
    if view.rows > _MAX_ROWS:
        raise ValueError(f"x has {view.rows} rows; at most {_MAX_ROWS} are supported")
    scale = as_tensor_sf(tensor_sf, view.device) if fmt.sf_vec_size == 16 else _NO_TENSOR_SCALE
    handle = stream_handle(stream, view.device)
    alloc_stream = None if stream is None else handle
    groups = view.cols // fmt.sf_vec_size
    q = output(out, "out", view.lead_shape + (view.cols // 2,), view, stream=alloc_stream)
    sf = output(sf_out, "sf_out", sf_shape(view.lead_shape, view.rows, groups, sf_layout), view, (("out", q),),
                stream=alloc_stream)
    if not isinstance(pdl, bool):
        raise TypeError(f"pdl must be a bool, got {pdl!r}")
    _check_config_type(config, fmt)
    plan = _plan_for(view, q, sf, sf_layout, scale.mode, config, fmt)
    if view.rows == 0 or view.cols == 0:
        return q, sf
    dev = driver.device(view.device)
    cfg = _resolve_config(config, view, q, sf, sf_layout, scale.mode, dev.arch, fmt)
    kernel = get_kernel(cfg, dev.ordinal)
    aligned = plan.aligned(view.ptr, q.data.ptr, sf.data.ptr) if plan is not None else None
    launcher = plan.launchers[aligned] if plan is not None else None
    if launcher is None or launcher.kernel is not kernel:
        launcher_type = TmaLauncher if isinstance(cfg, QuantizeConfig) else SimtLauncher
        launcher = launcher_type(cfg, kernel, view.rows, view.cols, view.row_stride, sf_layout == "swizzled")
        if plan is not None:
            plan.launchers[aligned] = launcher
    launcher(view.ptr, q.data.ptr, sf.data.ptr, scale.value, scale.ptr, handle, pdl)
    return q, sf


def _plan_for(view: InputView, q, sf, sf_layout: str, mode: str, config, fmt: _Format) -> plans.Plan | None:
    """The stored plan for this (fully checked) call, made if missing; None where calls of this kind
    never take the planned path."""
    arr = view.array
    if type(arr) is not arrays._cupy().ndarray or type(sf_layout) is not str:
        return None
    key = plans.plan_key(arr, view.device, sf_layout, mode, config, fmt)
    plan = plans.lookup(key)
    if plan is None or plan.config is not config:
        plan = plans.remember(key, plans.Plan(config, view, q.shape, sf.shape, sf_layout))
    return plan


# tensor_sf types whose float32 rounding the argument packing reproduces exactly
# (a C double -> float cast, as numpy's), and the int range that converts to a
# double exactly (so to float32 with one rounding).
_FLOAT_TYPES = frozenset({float, np.float64, np.float32, np.float16})
_EXACT_INT = 2**53
_F32 = np.dtype(np.float32)
_U8 = np.dtype(np.uint8)


def _planned_output(cupy, buf, shape, dev: int, alloc_stream):
    """A new output, or the caller's buffer when it passes arrays.output's type, dtype, shape,
    device and contiguity rules; None sends the call to the checked path."""
    if buf is None:
        return empty_on(shape, _U8, dev, alloc_stream)
    if (type(buf) is cupy.ndarray and buf.dtype == _U8 and buf.shape == shape and buf.data.device_id == dev
            and buf.flags.c_contiguous):
        return buf
    return None


def _planned_call(cupy, x, tensor_sf, sf_layout, out, sf_out, stream, config, pdl, fmt: _Format):
    """The call through its stored plan, or None when the checked path must take it.

    Runs only where the stored plan proves the checks on ``x``, the config
    and the kernel already passed; the checks that depend on this call's
    values are repeated here, and any that would fail sends the call to the
    checked path, which raises the message in the documented order.
    """
    if type(sf_layout) is not str or (pdl is not True and pdl is not False):
        return None
    data = x.data
    dev = data.device_id
    kind = type(tensor_sf)
    if fmt.sf_vec_size == 32:
        mode, value, scale_ptr = "value", 0.0, 0  # MXFP4: no tensor scale
    elif kind in _FLOAT_TYPES or (kind is int and -_EXACT_INT <= tensor_sf <= _EXACT_INT):
        value = float(tensor_sf)  # exact for these types; compared as a double, not in numpy's float16
        # float32 rounding is monotonic and both bounds are float32 values, so a value in range
        # rounds into range; one just outside that would round into it takes the checked path.
        if not TENSOR_SF_MIN <= value <= TENSOR_SF_MAX:  # also rejects nan and inf
            return None
        mode, scale_ptr = "value", 0  # packed as a C float, so rounded as np.float32 rounds it
    elif kind is cupy.ndarray:
        if not (tensor_sf.dtype == _F32 and tensor_sf.size == 1 and tensor_sf.ndim <= 1
                and tensor_sf.data.device_id == dev):
            return None
        mode, value, scale_ptr = "pointer", 0.0, tensor_sf.data.ptr
    else:
        return None
    plan = plans._plans.get((x.shape, x.strides, x.dtype, dev, sf_layout, mode, id(config), fmt))  # plans.plan_key
    if plan is None or plan.config is not config:
        return None
    handle = cupy.cuda.get_current_stream(dev).ptr if stream is None else stream_handle(stream, dev)
    alloc_stream = None if stream is None else handle
    x_ptr = data.ptr
    x_end = x_ptr + plan.x_span
    q = _planned_output(cupy, out, plan.q_shape, dev, alloc_stream)
    sf = _planned_output(cupy, sf_out, plan.sf_shape, dev, alloc_stream)
    if q is None or sf is None:
        return None
    q_ptr, q_size = q.data.ptr, plan.q_size
    sf_ptr, sf_size = sf.data.ptr, plan.sf_size
    # arrays.output's aliasing rules: a non-empty output overlaps neither x nor the other output.
    if q_size and q_ptr < x_end and x_ptr < q_ptr + q_size:
        return None
    if sf_size and ((sf_ptr < x_end and x_ptr < sf_ptr + sf_size)
                    or (q_size and sf_ptr < q_ptr + q_size and q_ptr < sf_ptr + sf_size)):
        return None
    if plan.empty:
        return q, sf
    aligned = not ((x_ptr | q_ptr | (sf_ptr if plan.swizzled else 0)) & 15)  # Plan.aligned
    launcher = plan.launchers[aligned]
    if launcher is None:
        return None
    launcher(x_ptr, q_ptr, sf_ptr, value, scale_ptr, handle, pdl)
    return q, sf
