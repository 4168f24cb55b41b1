"""The fields a call fixes on every kernel config, apart from the tuning knobs.

A config class (``QuantizeConfig``, ``SimtConfig``, ``DequantizeConfig``, ...)
inherits ``CallFields`` and adds its own knobs (tiles, stages, threads, load
widths). A user builds a config from knobs alone; the ops layer sets the
call's fields (``replace``) from the arguments and the device: the format,
the MXFP4 rounding mode, the scale layout, how the tensor scale arrives, the
input and output dtypes, the compile target. They are checked here, once,
for every config class.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from ..numerics.formats import FORMATS, MX_MODES
from ..numerics.layouts import SF_TILE
from ..numerics.reference import OUT_DTYPES
from .archs import check_arch
from .rules import align_up, check_choice, require

INPUT_DTYPES = ("bfloat16", "float16")
# float32 x, which the plain SIMT quantizer alone reads (SimtConfig.float32_input).
FLOAT32_INPUT = "float32"
# The scale layouts the kernels write: the spec's (numerics.groups.SF_LAYOUTS). The TMA quantize
# kernel writes the first two (its scales go out as 128x4 blocks or rows).
SF_LAYOUTS = ("swizzled", "linear", "8x4")
TMA_SF_LAYOUTS = SF_LAYOUTS[:2]
# What a quantize kernel computes from x before quantizing it (none: x itself), and the public
# op name's prefix for each. The element-wise ones run in every quantize kernel; the row
# prologues need a statistic of the whole row first, and run in the row kernel (rows.py).
ELEMENTWISE_PROLOGUES = ("none", "silu_mul")
ROW_PROLOGUES = ("rms_norm", "add_rms_norm")
PROLOGUES = ELEMENTWISE_PROLOGUES + ROW_PROLOGUES
PROLOGUE_OPS = {"silu_mul": "silu_and_mul", "rms_norm": "rms_norm", "add_rms_norm": "add_rms_norm"}
# How a kernel gets the tensor scale: a launch argument or a device float32. MXFP4 has none:
# its kernels take the by-value argument and never read it.
TENSOR_SF_MODES = {"nvfp4": ("value", "pointer"), "mxfp4": ("value",)}
# The NVFP4 tensor scales taken per row, which the row kernel alone takes: a device float32
# per row, or each row's global scale computed and written out (rows.py).
ROW_TENSOR_SF_MODES = ("per_row", "dynamic_per_row")
# The tensor scale of the experts' quantizers (the row kernel's too): a device float32 per expert.
PER_EXPERT = "per_expert"

C = TypeVar("C", bound="CallFields")


@dataclass(frozen=True)
class CallFields:
    """The per-call fields of a kernel: each config reads those its kernel depends on
    and carries the others unchanged."""

    fmt: str = "nvfp4"
    mx_mode: str = "rceil"
    sf_layout: str = "swizzled"
    tensor_sf_mode: str = "value"
    input_dtype: str = "bfloat16"
    out_dtype: str = "bfloat16"
    prologue: str = "none"
    arch: str = "sm_90a"
    # Whether the kernel takes ROW_TENSOR_SF_MODES and PER_EXPERT as well (the row kernel).
    row_scales: ClassVar[bool] = False
    # The scale layouts the kernel writes or reads.
    sf_layouts: ClassVar[tuple[str, ...]] = SF_LAYOUTS
    # Whether the config class may read float32 x (its own check says which of its kernels do).
    float32_input: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_arch(self.arch)
        check_choice("prologue", self.prologue, PROLOGUES)
        check_choice("fmt", self.fmt, FORMATS)
        check_choice("mx_mode", self.mx_mode, MX_MODES)
        check_choice("sf_layout", self.sf_layout, SF_LAYOUTS)
        require(self.sf_layout in self.sf_layouts,
                f"sf_layout={self.sf_layout!r} is not written by a {type(self).__name__}, which writes "
                f"{' or '.join(map(repr, self.sf_layouts))}")
        check_choice("input_dtype", self.input_dtype, INPUT_DTYPES + (FLOAT32_INPUT,) * self.float32_input)
        check_choice("out_dtype", self.out_dtype, OUT_DTYPES)
        modes = TENSOR_SF_MODES[self.fmt] + (ROW_TENSOR_SF_MODES + (PER_EXPERT,)
                                             if self.row_scales and self.fmt == "nvfp4" else ())
        require(self.tensor_sf_mode in modes,
                f"tensor_sf_mode must be one of {', '.join(map(repr, modes))} for fmt={self.fmt!r}, "
                f"got {self.tensor_sf_mode!r}")
        self.check()

    def check(self) -> None:
        """The config's own rules on its knobs (and their combination with the call's fields)."""

    def check_prologue(self, prologues: tuple[str, ...]) -> None:
        """The prologues this config's kernel runs are ``prologues``."""
        require(self.prologue in prologues,
                f"prologue must be one of {', '.join(map(repr, prologues))} for a {type(self).__name__}, "
                f"got {self.prologue!r}")

    @property
    def reads(self) -> int:
        """The input rows a quantize kernel's unit reads: x's, or SiLU·mul's two halves."""
        return 2 if self.prologue == "silu_mul" else 1

    @property
    def prologue_op(self) -> str:
        """The public op name's prefix of the prologue (``silu_and_mul``)."""
        return PROLOGUE_OPS[self.prologue]

    @property
    def prologue_constant(self) -> tuple[str, int]:
        """The templates' PROLOGUE (kernels/steps.cuh: the prologue's load and transform steps)."""
        return ("PROLOGUE", PROLOGUES.index(self.prologue))

    @property
    def sf_vec_size(self) -> int:
        """The elements one scale covers: 16 (NVFP4) or 32 (MXFP4)."""
        return 16 if self.fmt == "nvfp4" else 32

    def domain_groups(self, cols: int) -> int:
        """The groups per row of the scale domain a kernel writes: a row of ``cols`` values'
        groups up to whole tiles of the layout (layout/scale_layout.cuh)."""
        return align_up(cols // self.sf_vec_size, SF_TILE[self.sf_layout][1])

    @property
    def input_flags(self) -> tuple[tuple[str, bool], ...]:
        """The templates' input type (numerics/input.cuh): fp16, float32, else bf16."""
        return (("FP4Q_INPUT_FP16", self.input_dtype == "float16"),
                ("FP4Q_INPUT_F32", self.input_dtype == FLOAT32_INPUT))

    @property
    def layout_flags(self) -> tuple[tuple[str, bool], ...]:
        """The templates' scale layout (layout/scale_layout.cuh): 128x4, 8x4, else row-major."""
        return (("FP4Q_SF_SWIZZLED", self.sf_layout == "swizzled"), ("FP4Q_SF_8X4", self.sf_layout == "8x4"))

    def replace(self: C, **changes) -> C:
        return dataclasses.replace(self, **changes)
