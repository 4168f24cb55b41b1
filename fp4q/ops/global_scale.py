"""The dynamic global scale on the device: ``min(2688 / amax(|x|), 2**100)``.

Two kernels on the caller's stream, chained with programmatic dependent
launch: the amax pass writes one partial maximum per CTA, the scale pass
(one CTA) reduces them and writes the scale. Maxima are exact, so the result
does not depend on how the work was split: it is deterministic. The partial
maxima live in the same allocation as the returned scalar (after its first
element), so the buffer lives exactly as long as the result and a captured
CUDA graph never writes memory that was handed back to the pool.
"""

from __future__ import annotations

import threading

from ..cuda import driver
from ..jit.loader import get_kernel
from ..kernels.global_scale import AmaxConfig, GlobalScaleConfig
from .arrays import INPUT_DTYPES, RowsView, as_operand, check_element_aligned, check_pdl, rows_view, stride_key
from .outputs import cupy_outputs
from .plans import KernelLaunch, plans
from .streams import stream_handle


class _Launches:
    """The two kernels of one kind of call and the partial maxima between them."""

    __slots__ = ("amax", "scale", "partials")

    def __init__(self, view: RowsView, vector_loads: bool, ordinal: int) -> None:
        dev = driver.device(ordinal)
        scale_kernel = get_kernel(GlobalScaleConfig(arch=dev.arch).spec, ordinal)
        self.amax, self.partials = None, 0
        if not view.empty:
            cfg = AmaxConfig(vector_loads=vector_loads, input_dtype=INPUT_DTYPES[view.dtype], arch=dev.arch)
            kernel = get_kernel(cfg.spec, ordinal)
            units = view.rows * view.width // cfg.elements_per_unit
            self.partials = cfg.spec.grid.size(units, dev.sm_count, kernel.ctas_per_sm)
            self.amax = KernelLaunch(cfg, kernel, self.partials, ("x", "row_stride", "rows", "cols", "partial"))
        self.scale = KernelLaunch(None, scale_kernel, 1, ("partial", "count", "scale"))


class _Plan:
    __slots__ = ("view", "launches", "lock")

    def __init__(self, view: RowsView) -> None:
        self.view = view
        self.launches: dict[bool, _Launches] = {}
        self.lock = threading.Lock()


def input_view(xa) -> RowsView:
    return rows_view(xa, "x", INPUT_DTYPES, "bfloat16 or float16 values (uint16 holds bf16 bits)", 1, 16, "")


def global_scale(x, *, stream=None, pdl=True, outputs=cupy_outputs):
    """The NVFP4 global scale of bf16 (or fp16) ``x``, as a device float32 scalar.

    Returns a float32 array of shape ``()`` (CuPy; a torch tensor from
    ``fp4q.torch``): ``min(float32(2688 / amax), 2**100)`` with ``amax`` the
    maximum of ``|x|`` over the whole tensor, NaN ignored, correctly
    rounded; ``1.0`` when ``amax`` is 0 or infinite (and for an empty
    ``x``). It is computed on ``stream`` (default: as ``quantize_nvfp4``)
    without a host sync, so it can be passed straight to
    ``quantize_nvfp4(x, tensor_sf=...)`` and captured in a CUDA graph.
    ``x`` follows ``quantize_nvfp4``'s rules (``K`` a multiple of 16, rows
    strided or not).
    """
    xa = as_operand(x, "x")
    x_obj, x_ptr, x_shape, x_dtype, device, x_torch = xa
    key = ("global_scale", x_shape, stride_key(x_obj, x_torch), x_torch, x_dtype, device)
    plan = plans.get(key)
    if plan is None:
        plan = plans.put(key, _Plan(input_view(xa)))
    if x_ptr & 1:  # every input dtype is 2 bytes wide; the test is inline, the rule and its message are not
        check_element_aligned(x_ptr, x_dtype, "x")
    view = plan.view
    handle = stream_handle(stream, device, x_torch)
    check_pdl(pdl)
    vector_loads = x_ptr % 16 == 0 and view.row_stride % 8 == 0
    launches = plan.launches.get(vector_loads)
    if launches is None:
        launches = _Launches(view, vector_loads, view.device)
        with plan.lock:
            plan.launches[vector_loads] = launches
    buffer, buffer_ptr = outputs("scale", (1 + launches.partials,), device, handle)
    partial_ptr = buffer_ptr + 4
    if launches.amax is not None:
        launches.amax(handle, pdl, (x_ptr, view.row_stride, view.rows, view.width, partial_ptr))
    launches.scale(handle, pdl, (partial_ptr, launches.partials, buffer_ptr))
    return buffer[0]
