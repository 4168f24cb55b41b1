"""``quantize_nvfp4`` and ``quantize_mxfp4``: their declarations and their kernel choice.

The kernel (TMA, vector or plain) is chosen once per kind of call, tensor-
scale mode and pointer alignment: the caller's config (checked against what
it needs) or the tuned choice. ``tensor_sf="dynamic"`` takes one launch that
computes the scale and quantizes (``FusedDynamicConfig``) where it applies,
else ``global_scale``'s two kernels and then the quantize kernel reading the
scale they wrote, chained with PDL.
"""

from __future__ import annotations

from ..cuda import driver
from ..jit.loader import get_kernel
from ..kernels.global_scale import FusedDynamicConfig
from ..kernels.quantize import QuantizeConfig, SimtConfig
from ..kernels.tuning import FUSED_DYNAMIC_MAX_ELEMENTS, choose_config, fused_dynamic_block
from ..kernels.variants import fitted
from ..kernels.walk import unit_divisor
from ..kernels.call import FLOAT32_INPUT, ROW_TENSOR_SF_MODES, SF_LAYOUTS, TMA_SF_LAYOUTS
from ..numerics.formats import MX_MODES
from .declare import DYNAMIC, Array, Op, Rows, TensorScale
from .options import Choice, Width
from .arrays import QUANTIZE_INPUT_DTYPES
from .global_scale import ScaleLaunch
from .plans import NO_LAUNCH, KernelLaunch
from .rows import ROW_KERNELS, alignment_obstacle

X = Rows("x", QUANTIZE_INPUT_DTYPES, "bfloat16, float16 or float32 values (uint16 holds bf16 bits)",
         field="input_dtype", doc="bf16, fp16 or float32 values ``(..., K)``; rows may be strided")
SF_LAYOUT = Choice("sf_layout", SF_LAYOUTS, "swizzled", "sf_layout",
                   doc='``"swizzled"`` (the 128x4 layout block-scaled GEMMs read), ``"linear"`` or ``"8x4"`` '
                       '(FlashInfer\'s layout for few rows)')
MX_MODE = Choice("mode", MX_MODES, "rceil", "mx_mode", doc='the scale exponent\'s rounding, ``"rceil"`` or '
                                                          '``"floor"``')
PADDED_K = Width(doc="the outputs' row width in values (vLLM's ``padded_n``): ``None`` (K) or an int ``>= K``, a "
                      "multiple of the group; codes and scales past K are zeros")
OUT = Array("out", "codes", doc="packed e2m1 pairs, uint8 ``(..., K // 2)``: element ``2i`` in the low nibble "
                                "of byte ``i``")
# Two passes: global_scale writes the scale on the device, and the quantize kernel reads it there.
TWO_PASS_MODE = "pointer"


def tma_obstacle(plan) -> str | None:
    """Why the TMA kernel cannot serve ``plan``'s kind of call whatever its pointers, or None."""
    g, layout = plan.geometry, plan.call["sf_layout"]
    if g.k % 32:
        return f"K={g.k} is not a multiple of 32, so a packed output row is not a multiple of 16 bytes"
    if layout not in TMA_SF_LAYOUTS:
        return f"it stores its scales as 128x4 blocks or rows, not in sf_layout={layout!r}"
    if g.out_k != g.k:
        return f"it writes rows of K values, not padded to padded_k={g.out_k}"
    return None


def resolve_config(config, plan, pointers: list[int], mode: str, arch: str):
    """The config a call launches: the caller's (checked against what it needs) or the
    tuned choice (a TMA config fitted to its prologue's stages), with the call's fields;
    for float32 x the plain SIMT kernel, the one that reads it."""
    call = dict(plan.call, tensor_sf_mode=mode, arch=arch)
    if plan.call["input_dtype"] == FLOAT32_INPUT:
        if config is None:
            return SimtConfig(**call)
        if not isinstance(config, SimtConfig) or config.vector:
            raise ValueError(f"config must be None or a SimtConfig with vector=False for float32 x (the plain SIMT "
                             f"kernel alone reads it), got {config!r}")
        return config.replace(**call)
    view, k = plan.view, plan.geometry.k
    obstacle = alignment_obstacle(plan, pointers)
    if isinstance(config, SimtConfig):
        if config.vector and obstacle is not None:
            raise ValueError(f"config is a vector SimtConfig, but its 16-byte loads cannot serve this call: "
                             f"{obstacle}")
        elements = config.elements_per_unit
        for what, width in (("K", k), ("padded_k", plan.geometry.out_k)):
            if config.vector and elements > config.sf_vec_size and width % elements:
                raise ValueError(f"config.vector_elements={elements} quantizes {elements // config.sf_vec_size} "
                                 f"whole groups per unit: {what}={width} is not a multiple of {elements}")
        return config.replace(**call)
    if isinstance(config, QuantizeConfig):
        obstacle = tma_obstacle(plan) or obstacle
        if obstacle is not None:
            raise ValueError(f"config is a TMA QuantizeConfig, but TMA cannot serve this call: {obstacle}")
        return config.replace(**call)
    if obstacle is not None:
        return SimtConfig(**call)
    chosen = choose_config(view.rows, k, arch, plan.op.fmt)
    if isinstance(chosen, QuantizeConfig):
        fit = fitted(chosen, **call) if tma_obstacle(plan) is None else None
        return fit or SimtConfig(vector=True, **call)
    return chosen.replace(**call)


def kernel_launch(cfg, plan, dev, slots) -> KernelLaunch:
    """The launch of quantize config ``cfg`` for ``plan``'s kind of call."""
    kernel = get_kernel(cfg.spec, dev.ordinal)
    rows, cols = plan.view.rows, plan.geometry.out_k
    if isinstance(cfg, QuantizeConfig):
        grid, dynamic = cfg.spec.grid.size(rows, cols, dev.sm_count, kernel.ctas_per_sm)
        return KernelLaunch(cfg, kernel, grid, slots, plan.fixed, dynamic, plan.extents)
    grid = cfg.spec.grid.size(cfg.work_items(rows, cols), dev.sm_count, kernel.ctas_per_sm)
    return KernelLaunch(cfg, kernel, grid, slots, {**plan.fixed, **dict(unit_divisor(cfg.units_per_row(cols)))})


class TwoPasses:
    """``tensor_sf="dynamic"`` as global_scale's two kernels, then the quantize kernel
    reading the scale from the device (``quantize``: None for an empty input)."""

    __slots__ = ("scale", "quantize", "workspace", "config")

    def __init__(self, scale: ScaleLaunch, quantize: KernelLaunch | None) -> None:
        self.scale, self.quantize, self.workspace = scale, quantize, scale.workspace
        self.config = None if quantize is None else quantize.config

    def on(self, stream: int) -> tuple["TwoPasses", None]:
        """The launch a call on ``stream`` takes, and its tile counter: these two passes, none."""
        return self, None

    def __call__(self, stream: int, pdl: bool, values, tickets: None = None) -> None:
        """``values``: the op's dynamic slots (x, out, sf_out, tensor_sf_value, tensor_sf_ptr, tensor_sf_out)."""
        self.scale(stream, pdl, values)
        if self.quantize is not None:
            self.quantize(stream, pdl, (*values[:3], 0.0, values[5]))


class OneLaunch:
    """``tensor_sf="dynamic"`` in one launch (``FusedDynamicConfig``), or the two passes
    while a stream is being captured and the launch, of more than one CTA, would need a
    counter the capture cannot have (``tile_tickets``)."""

    __slots__ = ("fused", "two_passes", "config")

    def __init__(self, fused: KernelLaunch, two_passes: TwoPasses) -> None:
        self.fused, self.two_passes, self.config = fused, two_passes, fused.config

    def on(self, stream: int) -> tuple:
        """The launch a call on ``stream`` takes and the tile counter it took now (its
        ``workspace``: what it needs after the scale): the fused kernel (none), or the
        two passes (their partial maxima) where a grid of CTAs gets no counter."""
        if not self.fused.dynamic:
            return self.fused, 0
        tickets = self.fused.tickets(stream)
        return (self.fused, tickets) if tickets else (self.two_passes, None)


def dynamic_launch(plan, pointers: list[int], config, dev):
    """The launch of ``tensor_sf="dynamic"``: one launch for inputs of up to
    FUSED_DYNAMIC_MAX_ELEMENTS with 16-byte aligned pointers and no explicit config,
    else two passes."""
    view = plan.view
    scale = ScaleLaunch(plan, pointers[0] % 16 == 0 and view.row_stride % 8 == 0)
    if plan.empty:
        return TwoPasses(scale, None)
    quantize = kernel_launch(resolve_config(config, plan, pointers, TWO_PASS_MODE, dev.arch), plan, dev,
                             plan.op.slots)
    two_passes = TwoPasses(scale, quantize)
    if (config is not None or alignment_obstacle(plan, pointers) is not None
            or view.rows * plan.geometry.k > FUSED_DYNAMIC_MAX_ELEMENTS):
        return two_passes
    cfg = FusedDynamicConfig(**dict(plan.call, arch=dev.arch))
    per_row = cfg.units_per_row(plan.geometry.out_k)
    work_items = cfg.work_items(view.rows, plan.geometry.out_k)
    threads, one_cta = fused_dynamic_block(view.rows * per_row, work_items, dev.sm_count)
    cfg = cfg.replace(threads=threads)
    kernel = get_kernel(cfg.spec, dev.ordinal)
    grid = 1 if one_cta else cfg.spec.grid.size(work_items, dev.sm_count, kernel.ctas_per_sm)
    # Its grid barrier counts on the stream's tile counter; one CTA needs none.
    fused = KernelLaunch(cfg, kernel, grid, plan.op.dynamic_slots, {**plan.fixed, **dict(unit_divisor(per_row))},
                         dynamic=not one_cta)
    return OneLaunch(fused, two_passes)


def check_no_config(plan, config) -> None:
    """A tensor scale per row takes the row kernel, which a quantize op's config cannot name."""
    if config is not None:
        raise ValueError(f"config must be None with a tensor scale per row (the row kernel takes it, and "
                         f"{plan.op.name} takes no RowConfig), got a {type(config).__name__}")


class QuantizeKernels:
    """The kernels of the quantize ops: TMA (``QuantizeConfig``) or SIMT (``SimtConfig``)."""

    def check_config(self, op: Op, config) -> None:
        if not isinstance(config, (QuantizeConfig, SimtConfig)):
            raise TypeError(f"config must be None, a QuantizeConfig or a SimtConfig, got {type(config).__name__}")
        if config.fmt != op.fmt:
            raise ValueError(f"config.fmt is {config.fmt!r}, but {op.name} quantizes to {op.fmt.upper()}: pass a "
                             f"config with fmt={op.fmt!r}")

    def resolve(self, plan, mode: str, pointers: list[int], config):
        if plan.call["input_dtype"] == FLOAT32_INPUT and (mode in ROW_TENSOR_SF_MODES or mode is DYNAMIC):
            scale = "a tensor scale per row" if mode in ROW_TENSOR_SF_MODES else 'tensor_sf="dynamic"'
            raise ValueError(f"{scale} needs bf16 or fp16 x (float32 x is read by the plain SIMT kernel alone, which "
                             f"takes a float or a device float32 scalar as tensor_sf)")
        if mode in ROW_TENSOR_SF_MODES:
            check_no_config(plan, config)
            return ROW_KERNELS.resolve(plan, mode, pointers, None)
        dev = driver.device(plan.view.device)
        if mode is DYNAMIC:
            return dynamic_launch(plan, pointers, config, dev)
        if plan.empty:
            return NO_LAUNCH
        return kernel_launch(resolve_config(config, plan, pointers, mode, dev.arch), plan, dev, plan.op.slots)


KERNELS = QuantizeKernels()

QUANTIZE_NVFP4 = Op(
    name="quantize_nvfp4",
    summary="Quantize bf16, fp16 or float32 ``x`` of shape ``(..., K)`` to NVFP4.",
    doc="""Returns ``(q, sf)``: ``q`` packed e2m1 pairs and ``sf`` e4m3 scale bytes,
``(ceil(M/128), ceil(K/64), 32, 4, 4)`` when ``sf_layout="swizzled"``,
``(..., K // 16)`` when ``"linear"`` or ``(ceil(M/8), ceil(K/64), 8, 4)`` when
``"8x4"``; a 1-D ``x`` of shape ``(K,)`` is one row.
``tensor_sf`` is a float (passed by value) or a device float32 scalar (read by
the kernel: no host sync, graph-safe), or a device float32 array of one scale per
row, shape ``(M,)`` or ``x.shape[:-1]`` (row ``m`` quantized with its own).

``tensor_sf="dynamic"`` computes the tensor scale on the device
(``global_scale(x)``'s value, no host sync) and returns ``(q, sf,
tensor_sf_device)``, the last a float32 device scalar of shape ``()``. Inputs
of up to ``2**24`` elements with 16-byte aligned pointers and ``config=None``
take one launch that reduces the amax over the whole grid and quantizes;
larger inputs, other pointers, an explicit config and stream capture of a
launch of more than one CTA take ``global_scale`` and then the quantize
kernel, chained with PDL. ``tensor_sf="dynamic_per_row"`` computes each row's
scale (its ``global_scale``) in the same pass and returns them as a float32
array of shape ``x.shape[:-1]``, after ``(q, sf)``.

A tensor scale per row takes the row kernel (a row held in one CTA): ``K`` at
most 32768, 16-byte aligned rows and outputs, ``config=None``. float32 ``x``
(weights) takes the plain SIMT kernel, with a float or a device float32 scalar
as ``tensor_sf``.""",
    fmt="nvfp4",
    main=X,
    tensor_scale=TensorScale(dynamic=True, per_row=True,
                             doc="``448 * 6 / amax``: a float, a device float32 scalar (shape ``()`` or "
                                 "``(1,)``), a device float32 array of one per row, ``\"dynamic\"`` or "
                                 "``\"dynamic_per_row\"``"),
    options=(SF_LAYOUT, PADDED_K),
    outputs=(OUT, Array("sf_out", "scales", doc="e4m3 scale bytes in ``sf_layout``")),
    kernels=KERNELS,
)

QUANTIZE_MXFP4 = Op(
    name="quantize_mxfp4",
    summary="Quantize bf16, fp16 or float32 ``x`` of shape ``(..., K)``, ``K % 32 == 0``, to MXFP4.",
    doc="""Groups of 32 elements share one e8m0 scale byte (``e + 127`` for the power of
two ``2**e``); ``mode`` picks the exponent: ``"rceil"`` (the smallest ``e`` with
``2**e >= amax / 6``, what NVIDIA's libraries use) or ``"floor"`` (OCP:
``floor(log2(amax)) - 2``). Returns ``(q, sf)``: ``q`` as for NVFP4, ``sf``
``(ceil(M/128), ceil(K/128), 32, 4, 4)`` (swizzled), ``(..., K // 32)``
(linear) or ``(ceil(M/8), ceil(K/128), 8, 4)`` (8x4). No tensor scale. float32
``x`` takes the plain SIMT kernel.""",
    fmt="mxfp4",
    main=X,
    options=(MX_MODE, SF_LAYOUT, PADDED_K),
    outputs=(OUT, Array("sf_out", "scales", doc="e8m0 scale bytes in ``sf_layout``")),
    kernels=KERNELS,
)
