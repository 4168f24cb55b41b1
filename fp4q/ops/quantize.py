"""``quantize_nvfp4`` and ``quantize_mxfp4``: the call's rules, the kernel choice, the launch.

Every call runs the rules in the documented order (``x``, ``tensor_sf``,
``stream``, ``out``, ``sf_out``, ``pdl``, ``config``); the rules on ``x``
run once per kind of call, whose plan then keeps the view they produced.
The kernel (TMA, vector or plain) is chosen once per plan, pointer
alignment and tensor-scale mode.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

from ..cuda import driver
from ..jit.loader import get_kernel
from ..kernels.global_scale import FusedDynamicConfig
from ..kernels.quantize import MX_MODES, SF_LAYOUTS, QuantizeConfig, SimtConfig
from ..kernels.tuning import FUSED_DYNAMIC_MAX_ELEMENTS, choose_config, fused_dynamic_block
from ..kernels.walk import unit_divisor
from .arrays import (
    INPUT_DTYPES,
    NO_TENSOR_SCALE,
    PTR,
    Q_DTYPES,
    SF_DTYPES,
    RowsView,
    as_operand,
    check_choice,
    check_element_aligned,
    check_operand,
    check_pdl,
    device_scale,
    rows_view,
    sf_shape,
    stride_key,
    tensor_scale,
)
from .global_scale import global_scale
from .outputs import cupy_outputs
from .plans import KernelLaunch, plans
from .streams import stream_handle


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one object per format, cheap in plan keys
class Format:
    """What a public function quantizes to: NVFP4 (groups of 16, e4m3 scales, a
    tensor scale) or MXFP4 (groups of 32, e8m0 scales rounded by ``mx_mode``)."""

    name: str
    sf_vec_size: int
    mx_mode: str = "rceil"

    @property
    def sf_role(self) -> str:
        """The output role of this format's scales (``ops.outputs``)."""
        return f"sf{self.sf_vec_size}"


NVFP4 = Format("quantize_nvfp4", 16)
MXFP4 = {mode: Format("quantize_mxfp4", 32, mode) for mode in MX_MODES}
_INPUT_WHAT = "bfloat16 or float16 values (uint16 holds bf16 bits)"


class _Plan:
    """What the rules on ``x`` derived for one kind of call (its view, the outputs' shapes),
    and the kernel launches chosen for it so far."""

    __slots__ = ("config", "view", "device", "rows", "cols", "row_stride", "x_extent", "empty", "q_shape", "sf_shape",
                 "q_bytes", "sf_bytes", "sf_dtypes", "sf_role", "tensor_scaled", "swizzled", "rows_aligned",
                 "launches", "fused_dynamic", "lock")

    def __init__(self, config, view: RowsView, fmt: Format, sf_layout: str) -> None:
        self.config = config  # the caller's object (or None): keeps its id unique while the plan is stored
        self.view = view
        self.device, self.rows, self.cols, self.row_stride = view.device, view.rows, view.width, view.row_stride
        self.x_extent = view.span(0)[1]  # bytes from x's base address that x may touch
        self.empty = view.empty
        self.sf_role, self.tensor_scaled = fmt.sf_role, fmt.sf_vec_size == 16
        self.q_shape, self.sf_shape = output_shapes(view, fmt, sf_layout)
        self.q_bytes, self.sf_bytes = math.prod(self.q_shape), math.prod(self.sf_shape)
        self.sf_dtypes = SF_DTYPES[fmt.sf_vec_size]
        self.swizzled = sf_layout == "swizzled"
        self.rows_aligned = (view.row_stride * view.itemsize) % 16 == 0
        self.launches: dict[tuple, KernelLaunch] = {}
        self.fused_dynamic: KernelLaunch | str | None = None  # its launch, TWO_PASS, or not chosen yet
        self.lock = threading.Lock()


def input_view(xa, fmt: Format) -> RowsView:
    return rows_view(xa, "x", INPUT_DTYPES, _INPUT_WHAT, 1, fmt.sf_vec_size, f" for {fmt.name}")


def output_shapes(view: RowsView, fmt: Format, sf_layout: str) -> tuple[tuple, tuple]:
    """(q's shape, the scales' shape) of quantizing ``view``."""
    return (view.lead_shape + (view.width // 2,),
            sf_shape(view.lead_shape, view.rows, view.width // fmt.sf_vec_size, sf_layout))


def check_config_type(config, fmt: Format) -> None:
    if config is not None and not isinstance(config, (QuantizeConfig, SimtConfig)):
        raise TypeError(f"config must be None, a QuantizeConfig or a SimtConfig, got {type(config).__name__}")
    if config is not None and config.sf_vec_size != fmt.sf_vec_size:
        raise ValueError(
            f"config.sf_vec_size is {config.sf_vec_size}, but {fmt.name} quantizes groups of "
            f"{fmt.sf_vec_size}: pass a config with sf_vec_size={fmt.sf_vec_size}"
        )


def alignment_obstacle(view: RowsView, x_ptr: int, q_ptr: int, sf_ptr: int, swizzled: bool) -> str | None:
    """Why neither the TMA nor the vector kernel can serve these pointers, or None."""
    if x_ptr % 16:
        return f"x's base address {x_ptr:#x} is not 16-byte aligned"
    if (view.row_stride * view.itemsize) % 16:
        return f"x's row stride of {view.row_stride * view.itemsize} bytes is not a multiple of 16"
    if q_ptr % 16:
        return f"out's base address {q_ptr:#x} is not 16-byte aligned"
    if swizzled and sf_ptr % 16:
        return f"sf_out's base address {sf_ptr:#x} is not 16-byte aligned"
    return None


def resolve_config(config, view: RowsView, x_ptr: int, q_ptr: int, sf_ptr: int, sf_layout: str, mode: str, arch: str,
                   fmt: Format):
    """The config a call launches: the caller's (checked against what it needs) or the
    tuned choice, with the call's layout, scale mode, dtype and target."""
    call: dict[str, Any] = dict(sf_layout=sf_layout, tensor_sf_mode=mode, input_dtype=INPUT_DTYPES[view.dtype],
                                arch=arch, mx_mode=fmt.mx_mode)
    obstacle = alignment_obstacle(view, x_ptr, q_ptr, sf_ptr, sf_layout == "swizzled")
    if isinstance(config, SimtConfig):
        if config.vector and obstacle is not None:
            raise ValueError(f"config is a vector SimtConfig, but its 16-byte loads cannot serve this call: "
                             f"{obstacle}")
        elements = config.elements_per_unit
        if config.vector and elements > config.sf_vec_size and view.width % elements:
            raise ValueError(f"config.vector_elements={elements} quantizes {elements // config.sf_vec_size} whole "
                             f"groups per unit: K={view.width} is not a multiple of {elements}")
        return config.replace(**call)
    if isinstance(config, QuantizeConfig):
        if view.width % 32:
            obstacle = f"K={view.width} is not a multiple of 32, so a packed output row is not a multiple of 16 bytes"
        if obstacle is not None:
            raise ValueError(f"config is a TMA QuantizeConfig, but TMA cannot serve this call: {obstacle}")
        return config.replace(**call)
    if obstacle is not None:
        return SimtConfig(sf_vec_size=fmt.sf_vec_size, **call)
    chosen = choose_config(view.rows, view.width, arch, fmt.sf_vec_size)
    if isinstance(chosen, QuantizeConfig) and view.width % 32:
        chosen = SimtConfig(sf_vec_size=fmt.sf_vec_size, vector=True)
    return chosen.replace(**call)


# What each kernel takes per call, in the order the call passes it (the launch checks the names).
TMA_ARGS = ("sf_linear", "tensor_sf_value", "tensor_sf_ptr", "rows", "cols", "tickets")
SIMT_ARGS = ("x", "q", "sf", "x_row_stride", "rows", "cols", "tensor_sf_value", "tensor_sf_ptr")
FUSED_DYNAMIC_ARGS = ("x", "x_row_stride", "q", "sf", "scale", "rows", "cols", "sync")

# tensor_sf="dynamic" inside the call path: the scale is computed on the device.
DYNAMIC = ("dynamic", 0.0, 0)  # a (mode, value, ptr) of its own, compared by identity
TWO_PASS = "two passes"  # a plan's fused_dynamic where the single-pass kernel cannot serve its kind of call
# Two passes: global_scale writes the scale on the device, and the quantize kernel reads it there.
TWO_PASS_MODE = "pointer"


def _kernel_launch(cfg, view: RowsView, swizzled: bool, dev) -> KernelLaunch:
    kernel = get_kernel(cfg.spec, dev.ordinal)
    rows, cols = view.rows, view.width
    if isinstance(cfg, SimtConfig):
        grid = cfg.spec.grid.size(cfg.work_items(rows, cols, swizzled), dev.sm_count, kernel.ctas_per_sm)
        return KernelLaunch(cfg, kernel, grid, SIMT_ARGS, fixed=unit_divisor(cfg.units_per_row(cols, swizzled)))
    grid, dynamic = cfg.spec.grid.size(rows, cols, dev.sm_count, kernel.ctas_per_sm)
    k_blocks, m_blocks = math.ceil(cols / (4 * cfg.sf_vec_size)), math.ceil(rows / 128)
    map_shapes = (
        ("x", (cols, rows), (view.row_stride * view.itemsize,)),
        ("out", (cols // 2, rows), (cols // 2,)),
        ("sf_out", (16, 32, k_blocks, m_blocks), (16, 512, 512 * k_blocks)) if swizzled else 1,
    )
    return KernelLaunch(cfg, kernel, grid, TMA_ARGS, dynamic, map_shapes)


def _fused_dynamic_launch(plan: _Plan, sf_layout: str, dev) -> KernelLaunch | str:
    """The single-pass dynamic kernel for this kind of call, or TWO_PASS where it does not
    apply: inputs above FUSED_DYNAMIC_MAX_ELEMENTS, where two passes are faster."""
    if plan.rows * plan.cols > FUSED_DYNAMIC_MAX_ELEMENTS:
        return TWO_PASS
    cfg = FusedDynamicConfig(sf_layout=sf_layout, input_dtype=INPUT_DTYPES[plan.view.dtype], arch=dev.arch)
    per_row = cfg.units_per_row(plan.cols, plan.swizzled)
    work_items = cfg.work_items(plan.rows, plan.cols, plan.swizzled)
    threads, one_cta = fused_dynamic_block(plan.rows * per_row, work_items, dev.sm_count)
    cfg = cfg.replace(threads=threads)
    kernel = get_kernel(cfg.spec, dev.ordinal)
    grid = 1 if one_cta else cfg.spec.grid.size(work_items, dev.sm_count, kernel.ctas_per_sm)
    # dynamic: the launch takes its stream's counter (tile_tickets) as the grid barrier's; one CTA needs none.
    return KernelLaunch(cfg, kernel, grid, FUSED_DYNAMIC_ARGS, dynamic=not one_cta, fixed=unit_divisor(per_row))


def _fused_dynamic(plan: _Plan, x_ptr: int, q_ptr: int, sf_ptr: int, aligned: bool, handle: int, sf_layout, config,
                   pdl, outputs):
    """``tensor_sf="dynamic"`` in one launch that computes the scale and quantizes
    (FusedDynamicConfig), returning the scale's array; None where it does not apply
    (an explicit config, unaligned pointers, an empty or large input, stream capture
    of a launch of more than one CTA)."""
    if config is not None or not aligned or plan.empty:
        return None
    launch = plan.fused_dynamic
    if launch is None:
        launch = _fused_dynamic_launch(plan, sf_layout, driver.device(plan.device))
        with plan.lock:
            plan.fused_dynamic = launch
    if not isinstance(launch, KernelLaunch):  # TWO_PASS
        return None
    sync = launch.tickets(handle)
    if launch.dynamic and not sync:  # no counter while the stream is captured into a graph: two passes then
        return None
    scale, scale_ptr = outputs("scale", (), plan.device, handle)
    launch(handle, pdl, (x_ptr, plan.row_stride, q_ptr, sf_ptr, scale_ptr, plan.rows, plan.cols, sync))
    return scale


def quantize(x, tensor_sf, sf_layout, out, sf_out, stream, config, pdl, fmt: Format, outputs=cupy_outputs):
    """The call path of both quantize functions; ``outputs`` allocates what the caller did not pass.
    ``tensor_sf`` DYNAMIC (NVFP4 only) returns ``(q, sf, scale)``."""
    check_choice("sf_layout", sf_layout, SF_LAYOUTS)
    xa = as_operand(x, "x")
    x_obj, x_ptr, x_shape, x_dtype, device, x_torch = xa
    key = ("quantize", fmt, x_shape, stride_key(x_obj, x_torch), x_torch, x_dtype, device, sf_layout, id(config))
    plan = plans.get(key)
    if plan is None or plan.config is not config:
        plan = plans.put(key, _Plan(config, input_view(xa, fmt), fmt, sf_layout))
    if x_ptr & 1:  # every input dtype is 2 bytes wide; the test is inline, the rule and its message are not
        check_element_aligned(x_ptr, x_dtype, "x")
    if tensor_sf is DYNAMIC:
        mode, value, scale_ptr = DYNAMIC
    else:
        mode, value, scale_ptr = tensor_scale(tensor_sf, device) if plan.tensor_scaled else NO_TENSOR_SCALE
    handle = stream_handle(stream, device, x_torch)
    x_span = (x_ptr, x_ptr + plan.x_extent)
    if out is None:
        q, q_ptr = outputs("q", plan.q_shape, device, handle)
    else:
        q, q_ptr = check_operand(as_operand(out, "out"), "out", plan.q_shape, Q_DTYPES, device, plan.q_bytes,
                                 (("x", x_span),))
    if sf_out is None:
        sf, sf_ptr = outputs(plan.sf_role, plan.sf_shape, device, handle)
    else:
        sf, sf_ptr = check_operand(as_operand(sf_out, "sf_out"), "sf_out", plan.sf_shape, plan.sf_dtypes, device,
                                   plan.sf_bytes, (("x", x_span), ("out", (q_ptr, q_ptr + plan.q_bytes))))
    check_pdl(pdl)
    if config is not None:  # None is always valid
        check_config_type(config, fmt)
    aligned = plan.rows_aligned and not ((x_ptr | q_ptr | (sf_ptr if plan.swizzled else 0)) & 15)
    if tensor_sf is DYNAMIC:
        scale = _fused_dynamic(plan, x_ptr, q_ptr, sf_ptr, aligned, handle, sf_layout, config, pdl, outputs)
        if scale is not None:
            return q, sf, scale
        mode = TWO_PASS_MODE
    if not plan.empty:
        launch = plan.launches.get((mode, aligned))
        if launch is None:  # the config's rules, which must hold before global_scale below is launched
            dev = driver.device(device)
            cfg = resolve_config(config, plan.view, x_ptr, q_ptr, sf_ptr, sf_layout, mode, dev.arch, fmt)
            launch = _kernel_launch(cfg, plan.view, plan.swizzled, dev)
            with plan.lock:
                plan.launches[(mode, aligned)] = launch
    dynamic_scale = None
    if tensor_sf is DYNAMIC:
        dynamic_scale = global_scale(x, stream=stream, pdl=pdl, outputs=outputs)
        _, value, scale_ptr = device_scale(as_operand(dynamic_scale, "tensor_sf"), device)
    if plan.empty:
        return (q, sf) if dynamic_scale is None else (q, sf, dynamic_scale)
    if launch.map_names:
        launch(handle, pdl, (0 if plan.swizzled else sf_ptr, value, scale_ptr, plan.rows, plan.cols,
                             launch.tickets(handle)), (x_ptr, q_ptr, sf_ptr))
    else:
        launch(handle, pdl, (x_ptr, q_ptr, sf_ptr, plan.row_stride, plan.rows, plan.cols, value, scale_ptr))
    return (q, sf) if dynamic_scale is None else (q, sf, dynamic_scale)


def check_dynamic(tensor_sf: str) -> None:
    """The one string tensor_sf may be."""
    if tensor_sf != "dynamic":
        raise ValueError(f"tensor_sf must be a float, a device float32 scalar or 'dynamic', got {tensor_sf!r}")


def quantize_nvfp4(x, tensor_sf, *, sf_layout="swizzled", out=None, sf_out=None, stream=None, config=None, pdl=True):
    """Quantize bf16 (or fp16) ``x`` of shape ``(..., K)`` to NVFP4.

    Returns ``(q, sf)``: ``q`` uint8 ``(..., K // 2)`` packed e2m1 pairs and
    ``sf`` uint8 e4m3 scales, ``(ceil(M/128), ceil(K/64), 32, 4, 4)`` when
    ``sf_layout="swizzled"`` (the 128x4 GEMM layout) or ``(..., K // 16)``
    when ``"linear"``; a 1-D ``x`` of shape ``(K,)`` is one row. ``tensor_sf``
    is a float (passed by value) or a device float32 scalar (read by the
    kernel: no host sync, graph-safe). The work is queued on ``stream``
    (default: torch's current stream for a torch ``x``, else CuPy's).

    ``tensor_sf="dynamic"`` computes the tensor scale on the device
    (``fp4q.global_scale(x)``'s value, no host sync) and returns the 3-tuple
    ``(q, sf, tensor_sf_device)``, the last a float32 device scalar of shape
    ``()`` (what ``dequantize_nvfp4`` takes). Inputs of up to ``2**24``
    elements (``FUSED_DYNAMIC_MAX_ELEMENTS``) with 16-byte aligned pointers
    and ``config=None`` take one launch that reduces the amax over the whole
    grid and quantizes, reading x from DRAM once (a thread's first unit stays
    in registers; its later ones are read again from L2); larger inputs,
    other pointers, an explicit config and stream capture into a CUDA graph
    take ``global_scale`` and then the quantize kernel, chained with PDL.
    """
    if type(tensor_sf) is str:
        check_dynamic(tensor_sf)
        return quantize(x, DYNAMIC, sf_layout, out, sf_out, stream, config, pdl, NVFP4)
    return quantize(x, tensor_sf, sf_layout, out, sf_out, stream, config, pdl, NVFP4)


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
    check_choice("mode", mode, MX_MODES)
    return quantize(x, None, sf_layout, out, sf_out, stream, config, pdl, MXFP4[mode])


def config_for(x, tensor_sf=1.0, *, fmt="nvfp4", mode="rceil", sf_layout="swizzled", out=None, sf_out=None,
               config=None):
    """The config (``QuantizeConfig`` or ``SimtConfig``) that ``quantize_nvfp4`` (``fmt="nvfp4"``)
    or ``quantize_mxfp4`` (``fmt="mxfp4"``) with these arguments would launch on ``x``'s
    device; ``None`` for an empty ``x``. Outputs it would allocate count as aligned."""
    check_choice("fmt", fmt, ("nvfp4", "mxfp4"))
    check_choice("sf_layout", sf_layout, SF_LAYOUTS)
    if fmt == "mxfp4":
        check_choice("mode", mode, MX_MODES)
    spec_format = NVFP4 if fmt == "nvfp4" else MXFP4[mode]
    xa = as_operand(x, "x")
    view = input_view(xa, spec_format)
    scale_mode = (tensor_scale(tensor_sf, view.device) if fmt == "nvfp4" else NO_TENSOR_SCALE)[0]
    check_config_type(config, spec_format)
    if view.empty:
        return None
    pointers = [xa[PTR], 0, 0]
    for i, (buf, name) in enumerate(((out, "out"), (sf_out, "sf_out")), start=1):
        if buf is not None:
            pointers[i] = as_operand(buf, name)[PTR]
    arch = driver.device(view.device).arch
    return resolve_config(config, view, *pointers, sf_layout, scale_mode, arch, spec_format)

