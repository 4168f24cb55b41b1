"""``quantize_nvfp4_training``: NVFP4 rowwise and columnwise in one pass, declared, and
its kernel choice (``kernels.training``).

The columnwise outputs are the rowwise outputs of ``x``'s transpose, for the
weight-gradient GEMM of NVFP4 training; ``block_2d`` gives both directions one scale per
16x16 block; ``hadamard`` transforms each columnwise group before it is quantized;
``four_over_six`` chooses each group's (block's) scale between two candidates.
``tensor_sf="dynamic"`` (or ``columnwise_tensor_sf="dynamic"``) runs ``global_scale``'s two
kernels first (its 4/6 scale pass under ``four_over_six``) and the quantizer reads the scale
they wrote, chained with PDL; every dynamic direction takes that one scale, the values both
directions quantize being ``x``'s. With ``hadamard`` the columnwise direction quantizes the
transformed values, so its dynamic scale is their own (the post-RHT amax): one pass over ``x``
takes their maximum and, where the rowwise scale is dynamic too, ``x``'s, and a scale pass
turns each into its direction's scale. The numerics are NVFP4_SPEC.md's, "The project's exact
sequences: training quantizers".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..cuda import driver
from ..jit.loader import get_kernel
from ..kernels.training import HadamardAmaxConfig, TrainingConfig
from ..kernels.walk import unit_divisor
from ..numerics.hadamard import TE_WGRAD_SIGN_MASK
from ..numerics.training import GROUP, check_combination
from .declare import DYNAMIC, SAME_SCALE, Array, Geometry, Op, TensorScale
from .options import Flag, Integer, PerCall
from .global_scale import X, ScaleLaunch, scale_pass
from .plans import KernelLaunch
from .quantize import OUT, SF_LAYOUT
from .rows import alignment_obstacle

# The values' indices of the two scale pointers (the op's slots: x, four outputs, the scales' pairs).
SCALE_PTR, SCALE_PTR_T = 6, 8


@dataclass(frozen=True, eq=False)
class TrainingQuantized:
    """What ``quantize_nvfp4_training`` returns; a direction not asked for is ``None``
    (``fp4q.reference.NVFP4TrainingQuantized``'s fields). ``q``, ``sf``: the rowwise codes and
    scales; ``q_t``, ``sf_t``: the columnwise ones (of ``x``'s transpose, flattened to
    ``(M, K)``); ``tensor_sf``, ``tensor_sf_t``: the tensor scale each direction used, the
    device float32 scalar passed or computed (``"dynamic"``), or the float passed, as float32."""

    q: Any
    sf: Any
    q_t: Any
    sf_t: Any
    tensor_sf: Any
    tensor_sf_t: Any

    @property
    def outputs(self) -> tuple:
        """The outputs in the op's order (``out``, ``sf_out``, ``out_t``, ``sf_t_out``)."""
        return (self.q, self.sf, self.q_t, self.sf_t)

    @property
    def scales(self) -> tuple:
        """The tensor scale of each direction."""
        return (self.tensor_sf, self.tensor_sf_t)


def result(q, sf, q_t, sf_t, tensor_sf, tensor_sf_t) -> TrainingQuantized:
    return TrainingQuantized(q, sf, q_t, sf_t, tensor_sf if q is not None else None,
                             tensor_sf_t if q_t is not None else None)


def rules(g: Geometry) -> None:
    """The spec's "Combinations" on the directions, M and the Hadamard transform."""
    options = g.options
    check_combination(g.view.rows, block_2d=options["block_2d"], hadamard=options["hadamard"],
                      rowwise=options["rowwise"], columnwise=options["columnwise"])


class HadamardScales:
    """The dynamic scales of a call with the Hadamard transform: the columnwise direction's
    over its transformed column groups (the post-RHT amax) and, with ``rowwise``, the rowwise
    direction's over ``x``, both maxima taken by one pass over ``x``; then ``global_scale``'s
    scale pass (its 4/6 one under ``four_over_six``) for each. The call's scalar allocation
    holds the rowwise scale, the columnwise scale, the columnwise partial maxima, then the
    rowwise ones."""

    __slots__ = ("amax", "scale", "rowwise", "count", "workspace")

    def __init__(self, plan, rowwise: bool, four_over_six: bool, dev) -> None:
        self.amax, self.rowwise, self.count = None, rowwise, 0
        if not plan.view.empty:
            cfg = HadamardAmaxConfig(input_dtype=plan.call["input_dtype"], arch=dev.arch)
            kernel = get_kernel(cfg.spec, dev.ordinal)
            per_row = cfg.units_per_row(plan.geometry.k)
            self.count = cfg.spec.grid.size(plan.view.rows // GROUP * per_row, dev.sm_count, kernel.ctas_per_sm)
            # Without the rowwise maximum, partial_x is null.
            slots = (("x", "ptr"), ("partial", "ptr"), *((("partial_x", "ptr"),) if rowwise else ()))
            fixed = {**plan.fixed, **dict(unit_divisor(per_row)), **({} if rowwise else {"partial_x": 0})}
            self.amax = KernelLaunch(cfg, kernel, self.count, slots, fixed)
        self.scale = scale_pass(dev, four_over_six, self.count)
        self.workspace = 1 + self.count * (2 if rowwise else 1)

    def __call__(self, stream: int, pdl: bool, values) -> None:
        """``values``: x's pointer, the allocation's."""
        x, scales = values
        partial = scales + 8
        partial_x = partial + 4 * self.count
        if self.amax is not None:
            self.amax(stream, pdl, (x, partial, partial_x) if self.rowwise else (x, partial))
        self.scale(stream, pdl, (partial, scales + 4))
        if self.rowwise:
            self.scale(stream, pdl, (partial_x, scales))


class TrainingLaunch:
    """The launches of one kind of call and tensor-scale modes: where a direction's scale is
    ``"dynamic"``, the passes that compute it into the scalar allocation the call appends to
    the values (``global_scale``'s two kernels, one scale for every dynamic direction; or
    ``HadamardScales``, the columnwise scale apart: ``scale_t_apart``, the allocation's second
    element), then the quantizer (``None`` for an empty input), which reads them there."""

    __slots__ = ("scale", "quantize", "dynamic", "scale_t_apart", "workspace", "config")

    def __init__(self, scale: ScaleLaunch | HadamardScales | None, quantize: KernelLaunch | None,
                 dynamic: tuple[bool, bool]) -> None:
        self.scale, self.quantize, self.dynamic = scale, quantize, dynamic
        self.scale_t_apart = isinstance(scale, HadamardScales)
        self.workspace = scale.workspace if scale is not None else 0
        self.config = None if quantize is None else quantize.config

    def __call__(self, stream: int, pdl: bool, values) -> None:
        if self.scale is not None:
            computed = values[-1]
            self.scale(stream, pdl, (values[0], computed))
            values = list(values[:-1])
            for ptr, dynamic, offset in zip((SCALE_PTR, SCALE_PTR_T), self.dynamic, (0, 4 * self.scale_t_apart)):
                if dynamic:
                    values[ptr] = computed + offset
        if self.quantize is not None:
            self.quantize(stream, pdl, values)


class TrainingKernels:
    """The training quantizer's one kernel (``TrainingConfig``)."""

    def check_config(self, op: Op, config) -> None:
        if not isinstance(config, TrainingConfig):
            raise TypeError(f"config must be None or a TrainingConfig, got {type(config).__name__}")

    def resolve(self, plan, modes: tuple[str, str], pointers: list[int], config) -> TrainingLaunch:
        mode, mode_t = modes
        g = plan.geometry
        if g.options["block_2d"] and mode_t is not SAME_SCALE:
            raise ValueError("columnwise_tensor_sf cannot be combined with block_2d=True: both directions share the "
                             "2D blocks' scales and tensor_sf")
        obstacle = alignment_obstacle(plan, pointers)
        if obstacle is not None:
            raise ValueError(f"{plan.op.name} loads and stores 16 bytes at a time: {obstacle}")
        dev = driver.device(plan.view.device)
        four_over_six = g.options["four_over_six"]
        dynamic = (mode is DYNAMIC, mode_t is DYNAMIC or (mode_t is SAME_SCALE and mode is DYNAMIC))
        scale: ScaleLaunch | HadamardScales | None
        if dynamic[1] and g.options["hadamard"] is not None:
            # The rowwise scale is computed where it is dynamic and its direction written.
            dynamic = (dynamic[0] and g.options["rowwise"], True)
            scale = HadamardScales(plan, dynamic[0], four_over_six, dev)
        else:
            scale = ScaleLaunch(plan, True, four_over_six) if any(dynamic) else None
        if plan.empty:
            return TrainingLaunch(scale, None, dynamic)
        call = dict(plan.call, arch=dev.arch)
        cfg = TrainingConfig(**call) if config is None else config.replace(**call)
        kernel = get_kernel(cfg.spec, dev.ordinal)
        grid, _ = cfg.spec.grid.size(plan.view.rows, g.k, dev.sm_count, kernel.ctas_per_sm)
        return TrainingLaunch(scale, KernelLaunch(cfg, kernel, grid, plan.op.slots, plan.fixed), dynamic)


QUANTIZE_NVFP4_TRAINING = Op(
    name="quantize_nvfp4_training",
    summary="Quantize bf16 (or fp16) ``x`` to NVFP4 rowwise and columnwise (its transpose's rows), reading it once.",
    doc=f"""Returns a ``TrainingQuantized`` with fields ``q``, ``sf`` (rowwise: as
``quantize_nvfp4``), ``q_t`` (uint8 ``(K, M // 2)``, the codes of ``x.T``, ``x`` flattened to
``(M, K)``), ``sf_t`` (its scales over K rows of ``M // 16`` groups in ``sf_layout``),
``tensor_sf`` and ``tensor_sf_t`` (the scale each direction used: the device scalar passed or
computed, or the float passed, as float32); a direction not asked for is ``None``. Equal,
byte for byte, to ``fp4q.reference.quantize_nvfp4_training``. ``block_2d``: one scale per
16x16 block, shared by both directions, so ``q_t`` is ``q`` transposed code for code (the
recipe's weights). ``stochastic``: the codes round stochastically, deterministic in
``(seed, offset)`` and the shape (with ``block_2d`` each element is rounded once, with its
rowwise bits). ``hadamard``: a 16-bit sign mask (TE's is ``0x{TE_WGRAD_SIGN_MASK:04X}``), the
random Hadamard transform of each columnwise group before it is quantized (the
weight-gradient GEMM's operand; the rowwise direction quantizes ``x`` itself): it needs
``columnwise=True``, not with ``block_2d``. ``four_over_six``: each group (16x16 block) of
both directions keeps the scale mapping its amax to 4 where that loses less.
``columnwise=True`` and ``block_2d`` need ``M % 16 == 0``. ``tensor_sf="dynamic"``
(``columnwise_tensor_sf="dynamic"``) computes ``global_scale(x)`` on the device first
(``256 * 6 / amax`` under ``four_over_six``); with ``hadamard`` a dynamic columnwise scale is
taken over the transformed values (the post-RHT amax), so ``tensor_sf="dynamic"`` gives the
two directions two scales (Transformer Engine's forward input). Needs 16-byte aligned ``x``
rows and outputs.""",
    fmt="nvfp4",
    main=X,
    tensor_scale=TensorScale(dynamic=True, doc="``448 * 6 / amax`` (``256 * 6 / amax`` under 4/6): a float, a device "
                                               "float32 scalar (shape ``()`` or ``(1,)``) or ``\"dynamic\"``"),
    columnwise_scale=TensorScale("columnwise_tensor_sf", dynamic=True,
                                 doc="the columnwise direction's own tensor scale, as ``tensor_sf``; ``None``: "
                                     "``tensor_sf``'s (not with ``block_2d``)"),
    options=(Flag("rowwise", "rowwise", default=True, doc="write ``q`` and ``sf``"),
             Flag("columnwise", "columnwise", default=True, doc="write ``q_t`` and ``sf_t``"),
             Flag("block_2d", "block_2d", doc="one scale per 16x16 block, for both directions"),
             Flag("stochastic", "stochastic",
                  doc="stochastic rounding of both directions' codes, with Philox bits of ``(seed, offset)`` and "
                      "each group's index (NVFP4_SPEC.md, \"Stochastic rounding\")"),
             SF_LAYOUT,
             Integer("hadamard", 16, default=None, optional=True, field="hadamard",
                     doc="``None`` or a 16-bit sign mask: the random Hadamard transform of each columnwise group "
                         "(NVFP4_SPEC.md, \"Random Hadamard transform (16)\"); needs ``columnwise``, not with "
                         "``block_2d``"),
             Flag("four_over_six", "four_over_six",
                  doc="4/6: per group (16x16 block), the scale mapping its amax to 4 where its squared error is "
                      "smaller, both directions (NVFP4_SPEC.md, \"4/6 (Four Over Six)\")")),
    per_call=(PerCall("seed", doc="stochastic rounding's Philox key, an int in ``[0, 2**64)``"),
              PerCall("offset", doc="stochastic rounding's Philox counter base, an int in ``[0, 2**64)``: advance it "
                                    "(by at least 1) per call for fresh bits")),
    outputs=(Array(OUT.name, OUT.kind, when="rowwise", doc=OUT.doc),
             Array("sf_out", "scales", when="rowwise", doc="the rowwise e4m3 scale bytes in ``sf_layout``"),
             Array("out_t", "codes_t", when="columnwise",
                   doc="the columnwise codes, uint8 ``(K, M // 2)``: byte ``i`` of row ``k`` holds ``x[2i, k]`` in "
                       "the low nibble"),
             Array("sf_t_out", "scales_t", when="columnwise",
                   doc="the columnwise e4m3 scale bytes, of K rows of ``M // 16`` groups, in ``sf_layout``")),
    kernels=TrainingKernels(),
    rules=rules,
    result=result,
)
