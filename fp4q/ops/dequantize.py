"""``dequantize_nvfp4`` and ``dequantize_mxfp4``: their declarations and their kernel choice.

Without a config, a call whose ``q`` and ``out`` base addresses are 16-byte
aligned (and ``q``'s row stride 4-byte aligned) takes the vector form of the
kernel without TMA (a load of a unit's codes, one 16-byte store) below
``VECTOR_MAX_ELEMENTS`` output elements and the TMA kernel from there on
(where TMA can address the rows); other pointers take the plain kernel,
with the same numerics.
"""

from __future__ import annotations

from ..cuda import driver
from ..jit.loader import get_kernel
from ..kernels.archs import target
from ..kernels.dequantize import DequantizeConfig, DequantizeSimtConfig
from ..kernels.walk import unit_divisor
from ..kernels.call import SF_LAYOUTS
from ..numerics.reference import DEFAULT_OUT_DTYPE, OUT_DTYPES
from .arrays import Q_DTYPES
from .checks import RowsView
from .declare import Array, Op, Rows, TensorScale
from .options import Choice
from .plans import NO_LAUNCH, KernelLaunch

# Outputs of at least this many elements take the TMA kernel when no config is given and
# the pointers allow it: on the H200 the vector kernel won up to 8192x8192 (2**26) and lost
# from 8192x16384 (2**27: 1.21x against 1.20x of a copy; 16384x16384: 1.25x against 1.18x).
VECTOR_MAX_ELEMENTS = 1 << 27


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


class DequantizeKernels:
    """The kernels of the dequantize ops: TMA (``DequantizeConfig``) or SIMT (``DequantizeSimtConfig``)."""

    def check_config(self, op: Op, config) -> None:
        if not isinstance(config, (DequantizeConfig, DequantizeSimtConfig)):
            raise TypeError(f"config must be None, a DequantizeConfig or a DequantizeSimtConfig, got "
                            f"{type(config).__name__}")

    def resolve(self, plan, mode: str, pointers: list[int], config):
        if plan.empty:
            return NO_LAUNCH
        dev = driver.device(plan.view.device)
        q_ptr, _, y_ptr = pointers
        cfg = resolve_config(config, plan.view, q_ptr, y_ptr, dict(plan.call, tensor_sf_mode=mode, arch=dev.arch))
        kernel = get_kernel(cfg.spec, dev.ordinal)
        rows, cols = plan.view.rows, plan.geometry.k
        if isinstance(cfg, DequantizeSimtConfig):
            grid = cfg.spec.grid.size(rows * cols // cfg.unit, dev.sm_count, kernel.ctas_per_sm)
            fixed = {**plan.fixed, **dict(unit_divisor(cfg.units_per_row(cols)))}
            return KernelLaunch(cfg, kernel, grid, plan.op.slots, fixed)
        grid, dynamic = cfg.spec.grid.size(rows, cols, dev.sm_count, kernel.ctas_per_sm)
        return KernelLaunch(cfg, kernel, grid, plan.op.slots, plan.fixed, dynamic, plan.extents)


KERNELS = DequantizeKernels()
Q = Rows("q", {name: name for name in Q_DTYPES}, "uint8 bytes (two e2m1 codes each)", per_element=2,
         doc="packed e2m1 pairs, uint8 ``(..., K // 2)``")
SF_LAYOUT = Choice("sf_layout", SF_LAYOUTS, "swizzled", "sf_layout", doc="the layout ``sf`` is in")
DTYPE = Choice("dtype", OUT_DTYPES, DEFAULT_OUT_DTYPE, "out_dtype",
               doc='``"bfloat16"`` (its bits as uint16 in CuPy) or ``"float32"``')
VALUES = Array("out", "values", doc="the values, ``(..., K)`` in ``dtype``")

DEQUANTIZE_NVFP4 = Op(
    name="dequantize_nvfp4",
    summary="NVFP4 codes ``q`` and e4m3 scales ``sf`` back to values.",
    doc="""``y = e2m1_value(q) * (float32(sf) * (1 / tensor_sf))`` in float32, each product
correctly rounded, as ``fp4q.reference.dequantize_nvfp4``; ``dtype="bfloat16"``
rounds it to nearest even and returns the bf16 bits as a ``uint16`` array in
CuPy (``.view`` it as bf16 in torch or ml_dtypes). ``tensor_sf`` is a float or a
device float32 scalar (the one ``quantize_nvfp4(x, "dynamic")`` returns).""",
    fmt="nvfp4",
    main=Q,
    inputs=(Array("sf", "scales", output=False, doc="e4m3 scale bytes in ``sf_layout``"),),
    tensor_scale=TensorScale(doc="the tensor scale ``q`` was quantized with"),
    options=(SF_LAYOUT, DTYPE),
    outputs=(VALUES,),
    kernels=KERNELS,
)

DEQUANTIZE_MXFP4 = Op(
    name="dequantize_mxfp4",
    summary="MXFP4 codes ``q`` and e8m0 scales ``sf`` back to values.",
    doc="""``y = e2m1_value(q) * 2**(sf - 127)`` (scale byte ``0xFF`` is NaN), as
``fp4q.reference.dequantize_mxfp4``; ``K`` is a multiple of 32 and ``sf`` holds
``K // 32`` scales per row in ``sf_layout``.""",
    fmt="mxfp4",
    main=Q,
    inputs=(Array("sf", "scales", output=False, doc="e8m0 scale bytes in ``sf_layout``"),),
    options=(SF_LAYOUT, DTYPE),
    outputs=(VALUES,),
    kernels=KERNELS,
)
