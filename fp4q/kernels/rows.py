"""The row kernel's config: quantization of whole rows held in one CTA, for the
prologues that need a statistic of the row first (``call.ROW_PROLOGUES``: RMSNorm,
add+RMSNorm), for the tensor scales taken per row (``call.ROW_TENSOR_SF_MODES``,
after any prologue) and for the rows of experts, each expert under its own tensor
scale (``segments="experts"``; ``ptx_templates/kernels/quantize_fp4_rows.cu``).

A CTA of ``threads`` threads takes one row at a time; each thread holds
``row_units`` units of one group (16 elements for NVFP4, 32 for MXFP4) of the
row in registers, so a row of up to ``threads * row_units`` groups, the scale
domain's padding groups included, fits one CTA. ``for_row`` picks the smallest
CTA that holds a row of K elements: 128 threads of one unit where no row
reduction needs the CTA's shape (short rows, which would leave half of 256
threads idle), else 256 threads of the fewest units.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .call import ELEMENTWISE_PROLOGUES, PER_EXPERT, PROLOGUES, ROW_PROLOGUES, ROW_TENSOR_SF_MODES, CallFields
from .rules import ConfigError, check_choice, require
from .spec import KernelSpec, StrideGrid, params, simt_spec
from .quantize import quantize_flags

ROW_THREADS = 256
# Rows of at most 128 groups without a row reduction: twice the CTAs per SM, each thread busy.
SHORT_ROW_THREADS = 128
# Units per thread: a thread holds row_units units of x (or r) and of weight, SF_VEC / 2 registers
# each; MXFP4's units are twice as wide, so it stops at half as many.
ROW_UNITS = {"nvfp4": (1, 2, 4, 8), "mxfp4": (1, 2, 4)}
# The grid-stride loop's CTAs: one per row, at most this many rounds of the CTAs that fit. A CTA
# of experts or batches first reads and scans their offsets or counts, so their grid is one round
# of the CTAs that fit, each walking its share of the rows after one scan.
ROW_WAVES = 4
SEGMENT_WAVES = 1

ROW_QUANTIZE_PARAMS = params(
    ("x", "ptr"), ("weight", "ptr"), ("residual", "ptr"), ("expert_offsets", "ptr"), ("valid_rows", "ptr"),
    ("out", "ptr"), ("sf_out", "ptr"), ("x_row_stride", "i64"), ("rows", "i32"), ("cols", "i32"),
    ("out_cols", "i32"), ("experts", "i32"), ("batch_rows", "i32"), ("sf_blocks", "i32"), ("eps", "f32"),
    ("tensor_sf_value", "f32"), ("tensor_sf_ptr", "ptr"),
)
# The templates' ROW_SCALE per tensor_sf_mode: the launch's scale (by value or pointer), a float32
# per row (or per expert) read, each row's dynamic scale written.
ROW_SCALES = {"value": 0, "pointer": 0, ROW_TENSOR_SF_MODES[0]: 1, ROW_TENSOR_SF_MODES[1]: 2, PER_EXPERT: 1}
# How the rows are grouped (the templates' SEGMENTS): the rows of one tensor, of experts (by
# offsets) or of batches (of equal rows, with counts), each segment's rows consecutive and its
# scales in 128-row blocks of its own (pipeline/segments.cuh).
SEGMENTS = ("none", "experts", "batches")
# The most experts (or batches) a launch resolves: every CTA holds their rows in shared memory.
MAX_EXPERTS = 1024


@dataclass(frozen=True)
class RowConfig(CallFields):
    """One row kernel: ``threads`` per CTA (one row at a time) and ``row_units`` groups of
    the row per thread (128 threads: one unit, no row reduction). The call's fields (``CallFields``) are set from each call: any
    prologue, the tensor scale per row or per expert as well, and how the rows are grouped
    (``segments``)."""

    threads: int = ROW_THREADS
    row_units: int = 1
    segments: str = "none"
    row_scales = True

    def check(self) -> None:
        self.check_prologue(PROLOGUES)
        check_choice("threads", self.threads, (SHORT_ROW_THREADS, ROW_THREADS))
        check_choice("row_units", self.row_units, ROW_UNITS[self.fmt])
        if self.threads == SHORT_ROW_THREADS:
            require(self.row_units == 1 and self.prologue not in ROW_PROLOGUES,
                    f"threads={SHORT_ROW_THREADS} takes row_units=1 and no row reduction (the tree of RMSNorm's "
                    f"sum spans {ROW_THREADS} threads), got row_units={self.row_units} and "
                    f"prologue={self.prologue!r}")
        check_choice("segments", self.segments, SEGMENTS)
        segmented = self.segments != "none"
        require(segmented == (self.tensor_sf_mode == PER_EXPERT),
                f"tensor_sf_mode={PER_EXPERT!r} goes with segments 'experts' or 'batches' and only with them, got "
                f"tensor_sf_mode={self.tensor_sf_mode!r} with segments={self.segments!r}")
        if segmented:
            require(self.sf_layout == "swizzled" and self.prologue in ELEMENTWISE_PROLOGUES,
                    f"segments={self.segments!r} take sf_layout='swizzled' and an element-wise prologue, got "
                    f"sf_layout={self.sf_layout!r} and prologue={self.prologue!r}")

    @property
    def max_k(self) -> int:
        """The longest row (K) one CTA holds: a group per unit (the threads' units are a
        multiple of 4, so the swizzled layout's padding groups fit as well)."""
        return self.threads * self.row_units * self.sf_vec_size

    @property
    def min_ctas_per_sm(self) -> int:
        """The launch bounds' CTAs per SM: 0, ptxas's choice, which holds each row in
        registers, except SiLU·mul's longest rows with a dynamic scale per row, which ptxas
        would cap at 128 registers and spill on sm_90a: one CTA per SM gives them their 167;
        and SiLU·mul's rows of two and four units over experts or batches, which ptxas would
        cap at 48 (two units, sm_120f) or 64 registers with 8 bytes on the stack (batches):
        three CTAs per SM give them up to 80."""
        if self.prologue != "silu_mul":
            return 0
        if self.row_units == 8 and self.tensor_sf_mode == "dynamic_per_row":
            return 1
        return 3 if self.row_units in (2, 4) and self.segments != "none" else 0

    @functools.cached_property
    def spec(self) -> KernelSpec[StrideGrid]:
        constants = (("SIMT_THREADS", self.threads), ("SF_VEC", self.sf_vec_size), ("ROW_UNITS", self.row_units),
                     self.prologue_constant, ("ROW_SCALE", ROW_SCALES[self.tensor_sf_mode]),
                     ("ROW_MIN_CTAS", self.min_ctas_per_sm), ("SEGMENTS", SEGMENTS.index(self.segments)),
                     ("MAX_EXPERTS", MAX_EXPERTS))
        return simt_spec("quantize_fp4_rows", self.arch, constants, quantize_flags(self), ROW_QUANTIZE_PARAMS,
                         self.threads, StrideGrid(1, ROW_WAVES if self.segments == "none" else SEGMENT_WAVES))


def longest_row(fmt: str) -> int:
    """The longest row (K) any row kernel of ``fmt`` holds."""
    return RowConfig(fmt=fmt, row_units=ROW_UNITS[fmt][-1]).max_k


def row_shapes(fmt: str, prologue: str) -> tuple[tuple[int, int], ...]:
    """The (threads, row_units) of the row kernels of ``fmt`` with ``prologue``, smallest
    row first."""
    short = () if prologue in ROW_PROLOGUES else ((SHORT_ROW_THREADS, 1),)
    return short + tuple((ROW_THREADS, units) for units in ROW_UNITS[fmt])


def for_row(k: int, **call) -> RowConfig:
    """The row kernel for rows of ``k`` elements with these call fields: the smallest CTA
    shape (``row_shapes``) that holds a row."""
    fmt = call.get("fmt", "nvfp4")
    for threads, units in row_shapes(fmt, call.get("prologue", "none")):
        cfg = RowConfig(threads=threads, row_units=units, **call)
        if k <= cfg.max_k:
            return cfg
    raise ConfigError(f"a row of K={k} does not fit one CTA of the row kernel (at most {longest_row(fmt)})")
