"""``fake_quantize_nvfp4``: ``dequantize(quantize(x))`` in one kernel, with the training
quantizer's options (NVFP4_SPEC.md, "Fake quantization", "Combinations"), declared, and
its kernel choice (``kernels.fake_quantize``)."""

from __future__ import annotations

from ..cuda import driver
from ..jit.loader import get_kernel
from ..kernels.fake_quantize import FakeQuantizeConfig
from ..kernels.walk import unit_divisor
from ..numerics.hadamard import TE_WGRAD_SIGN_MASK
from .declare import Array, Flag, Geometry, Integer, Op, TensorScale
from .global_scale import X
from .plans import NO_LAUNCH, KernelLaunch

GROUP = 16


class FakeQuantizeKernels:
    """The fake quantization kernel: a thread per group, or per 16x16 block."""

    def check_config(self, op: Op, config) -> None:
        if not isinstance(config, FakeQuantizeConfig):
            raise TypeError(f"config must be None or a FakeQuantizeConfig, got {type(config).__name__}")

    def resolve(self, plan, mode: str, pointers: list[int], config):
        if plan.empty:
            return NO_LAUNCH
        dev = driver.device(plan.view.device)
        call = dict(plan.call, tensor_sf_mode=mode, arch=dev.arch)
        cfg = FakeQuantizeConfig(**call) if config is None else config.replace(**call)
        kernel = get_kernel(cfg.spec, dev.ordinal)
        per_row = cfg.units_per_row(plan.geometry.k)
        units = plan.view.rows // (GROUP if cfg.block_2d else 1) * per_row
        grid = cfg.spec.grid.size(units, dev.sm_count, kernel.ctas_per_sm)
        return KernelLaunch(cfg, kernel, grid, plan.op.slots, {**plan.fixed, **dict(unit_divisor(per_row))})


def check_combination(g: Geometry) -> None:
    """The spec's refusals: 2D blocks need whole blocks of rows, and take no Hadamard transform."""
    if g.options["block_2d"] and g.view.rows % GROUP:
        raise ValueError(f"block_2d=True needs M (x's rows, leading dimensions flattened) to be a multiple of 16, "
                         f"got M={g.view.rows}")
    if g.options["block_2d"] and g.options["hadamard"] is not None:
        raise ValueError(f"hadamard={g.options['hadamard']!r} cannot be combined with block_2d=True: the transform "
                         "mixes the values of a group along K, which 16x16 blocks do not follow")


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
    tensor_scale=TensorScale(doc="``448 * 6 / amax`` (``256 * 6 / amax`` under 4/6, post-Hadamard under "
                                 "``hadamard``): a float or a device float32 scalar"),
    options=(Flag("block_2d", "block_2d", doc="one scale per 16x16 block of ``x`` (M a multiple of 16)"),
             Flag("stochastic", "stochastic", doc="round stochastically (Philox4x32-10 of ``seed``, ``offset``)"),
             Integer("seed", 64, doc="the stochastic rounding's key, ``0 <= seed < 2**64``"),
             Integer("offset", 64, doc="the stochastic rounding's counter base, ``0 <= offset < 2**64``: "
                                       "a new one per call"),
             Integer("hadamard", 16, default=None, optional=True, field="hadamard",
                     doc="``None`` or a 16-bit sign mask: the random Hadamard transform of each group, "
                         "inverted after dequantization"),
             Flag("four_over_six", "four_over_six", doc="4/6: per group (block), the scale mapping its amax to "
                                                        "4 where its squared error is smaller")),
    outputs=(Array("out", "like_main", doc="the fake-quantized values, ``x``'s shape and dtype"),),
    kernels=FakeQuantizeKernels(),
    rules=check_combination,
)
