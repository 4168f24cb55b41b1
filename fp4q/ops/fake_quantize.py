"""``fake_quantize_nvfp4``: ``dequantize(quantize(x))`` in one kernel, with the training
quantizer's options (NVFP4_SPEC.md, "Fake quantization", "Combinations"), declared, and
its kernel choice (``kernels.fake_quantize``)."""

from __future__ import annotations

from ..cuda import driver
from ..jit.loader import get_kernel
from ..kernels.fake_quantize import FakeQuantizeConfig
from ..kernels.walk import unit_divisor
from ..numerics.hadamard import TE_WGRAD_SIGN_MASK
from ..numerics.training import GROUP, check_combination
from .declare import DYNAMIC, Array, Geometry, Op, TensorScale
from .options import Flag, Integer, PerCall
from .global_scale import X, scale_pass
from .plans import NO_LAUNCH, KernelLaunch
from .rows import alignment_obstacle



def _launch(cfg: FakeQuantizeConfig, plan, dev, slots) -> KernelLaunch:
    kernel = get_kernel(cfg.spec, dev.ordinal)
    per_row = cfg.units_per_row(plan.geometry.k)
    units = plan.view.rows // (GROUP if cfg.block_2d else 1) * per_row
    grid = cfg.spec.grid.size(units, dev.sm_count, kernel.ctas_per_sm)
    # What a pass does not take is 0: the partial maxima, or the output, scale and random bits' seed
    # and offset of the amax pass.
    fixed = {"partial": 0, "out": 0, "tensor_sf_value": 0.0, "tensor_sf_ptr": 0, "seed": 0, "offset": 0, **plan.fixed,
             **dict(unit_divisor(per_row))}
    return KernelLaunch(cfg, kernel, grid, slots, fixed)


class DynamicPasses:
    """``tensor_sf="dynamic"``: the amax pass (the values the kernel quantizes, post-Hadamard),
    the scale pass (``global_scale``'s, 1536 / amax under 4/6) and the fake quantization
    reading the scale from the device; the partial maxima right after the scale."""

    __slots__ = ("amax", "scale", "quantize", "workspace", "config")

    def __init__(self, plan, config: FakeQuantizeConfig, dev) -> None:
        self.amax = self.quantize = None
        self.workspace = 0
        if not plan.empty:
            amax_cfg = FakeQuantizeConfig(amax_pass=True, hadamard=config.hadamard, input_dtype=config.input_dtype,
                                          vector=config.vector, arch=dev.arch)
            self.amax = _launch(amax_cfg, plan, dev, (("x", "ptr"), ("partial", "ptr")))
            self.workspace = self.amax.grid
            self.quantize = _launch(config, plan, dev, plan.op.slots)
        self.scale = scale_pass(dev, config.four_over_six, self.workspace)
        self.config = None if self.quantize is None else self.quantize.config

    def on(self, stream: int) -> tuple["DynamicPasses", None]:
        """The launch a call on ``stream`` takes, and its tile counter: these passes, none."""
        return self, None

    def __call__(self, stream: int, pdl: bool, values, tickets: None = None) -> None:
        """``values``: the op's dynamic slots (x, out, tensor_sf_value, tensor_sf_ptr, seed, offset,
        tensor_sf_out)."""
        x, out, _, _, seed, offset, scale = values
        partial = scale + 4
        if self.amax is not None:
            self.amax(stream, pdl, (x, partial))
        self.scale(stream, pdl, (partial, scale))
        if self.quantize is not None:
            self.quantize(stream, pdl, (x, out, 0.0, scale, seed, offset))


class FakeQuantizeKernels:
    """The fake quantization kernel: a thread per group, or per 16x16 block, its loads and
    stores 16 bytes wide where the pointers allow (``vector``); for ``tensor_sf="dynamic"``
    after its amax pass and the scale pass."""

    def check_config(self, op: Op, config) -> None:
        if not isinstance(config, FakeQuantizeConfig):
            raise TypeError(f"config must be None or a FakeQuantizeConfig, got {type(config).__name__}")

    def resolve(self, plan, mode: str, pointers: list[int], config):
        dev = driver.device(plan.view.device)
        obstacle = alignment_obstacle(plan, pointers)
        # "dynamic": the kernel reads the scale its passes wrote.
        call = dict(plan.call, tensor_sf_mode="pointer" if mode is DYNAMIC else mode, arch=dev.arch)
        if config is None:
            cfg = FakeQuantizeConfig(vector=obstacle is None, **call)
        elif config.vector and obstacle is not None:
            raise ValueError(f"config is a vector FakeQuantizeConfig, but it cannot serve this call: {obstacle}")
        else:
            cfg = config.replace(**call)
        if mode is DYNAMIC:
            return DynamicPasses(plan, cfg, dev)
        if plan.empty:
            return NO_LAUNCH
        return _launch(cfg, plan, dev, plan.op.slots)


def rules(g: Geometry) -> None:
    """The spec's refusals: 2D blocks need whole blocks of rows, and take no Hadamard transform."""
    check_combination(g.view.rows, block_2d=g.options["block_2d"], hadamard=g.options["hadamard"])


FAKE_QUANTIZE_NVFP4 = Op(
    name="fake_quantize_nvfp4",
    summary="``dequantize(quantize(x))`` to NVFP4 and back, in ``x``'s dtype, in one kernel.",
    doc=f"""Each value of ``x`` quantized as the rowwise direction of the training quantizer
(``fp4q.reference.quantize_nvfp4_training(x, ..., columnwise=False)``), then
``e2m1_value(q) * d`` in float32, rounded to nearest even into ``x``'s dtype (bf16 bits
as ``uint16`` for ``uint16`` input; NaN to ``0x7FFF``), bit-exact to
``fp4q.reference.fake_quantize_nvfp4``: the quantization-aware training operand. The
codes and scales never go to memory. ``block_2d``: one scale per 16x16 block (weights;
``M % 16 == 0``). ``stochastic``: stochastic rounding with the Philox bits of ``(seed,
offset)`` (advance ``offset`` per call). ``hadamard``: a 16-bit sign mask (TE's is
``0x{TE_WGRAD_SIGN_MASK:04X}``): each group of 16 along K is transformed before and
transformed back after, to simulate the columnwise operand of ``x.T``; not with
``block_2d``. ``four_over_six``: each group (block) keeps the scale mapping its amax to
4 where that loses less.""",
    fmt="nvfp4",
    main=X,
    tensor_scale=TensorScale(dynamic=True,
                             doc="``448 * 6 / amax`` (``256 * 6 / amax`` under 4/6, ``amax`` of the transformed "
                                 "values under ``hadamard``): a float, a device float32 scalar or ``\"dynamic\"`` "
                                 "(computed on the device so, and returned after ``out``)"),
    options=(Flag("block_2d", "block_2d", doc="one scale per 16x16 block of ``x`` (M a multiple of 16)"),
             Flag("stochastic", "stochastic", doc="round stochastically (Philox4x32-10 of ``seed``, ``offset``)"),
             Integer("hadamard", 16, default=None, optional=True, field="hadamard",
                     doc="``None`` or a 16-bit sign mask: the random Hadamard transform of each group, "
                         "inverted after dequantization"),
             Flag("four_over_six", "four_over_six", doc="4/6: per group (block), the scale mapping its amax to "
                                                        "4 where its squared error is smaller")),
    outputs=(Array("out", "like_main", doc="the fake-quantized values, ``x``'s shape and dtype"),),
    per_call=(PerCall("seed", doc="the stochastic rounding's Philox key, an int in ``[0, 2**64)``"),
              PerCall("offset", doc="the stochastic rounding's Philox counter base, an int in ``[0, 2**64)``: a new "
                                    "one per call")),
    kernels=FakeQuantizeKernels(),
    rules=rules,
)
