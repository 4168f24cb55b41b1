"""Configs of the kernels of the dynamic global scale: the amax pass
(partial maxima of |x| per CTA) and the scale pass (one CTA turns them into
``min(2688 / amax, 2**100)``), and the single-pass NVFP4 quantizer that
computes the scale and quantizes in one launch. Frozen and validated at
construction; the call's fields (``call.CallFields``) and ``vector_loads``
are set from each call."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from .archs import target
from .call import ELEMENTWISE_PROLOGUES, CallFields
from .quantize import SimtConfig
from .rules import check_bool, check_choice, require
from .spec import KernelSpec, StrideGrid, params, simt_spec
from .walk import UNIT_DIVISOR_PARAMS

BLOCK_SIZES = (128, 256, 512, 1024)
AMAX_UNROLL = 4  # load units per thread per loop trip in the amax kernel
AMAX_CTAS_PER_SM = 4  # partial maxima per SM at most: the scale pass reads them all

AMAX_PARAMS = params(("x", "ptr"), ("x_row_stride", "i64"), ("rows", "i32"), ("cols", "i32"), ("partial", "ptr"))
GLOBAL_SCALE_PARAMS = params(("partial", "ptr"), ("count", "i32"), ("scale", "ptr"))


@dataclass(frozen=True)
class AmaxConfig(CallFields):
    """The amax pass. ``vector_loads`` reads 16 bytes at a time, which needs
    a 16-byte aligned base and a row stride of a multiple of 8 elements."""

    threads: int = 512
    vector_loads: bool = True

    def check(self) -> None:
        check_choice("threads", self.threads, BLOCK_SIZES)
        check_bool("vector_loads", self.vector_loads)
        self.check_prologue(ELEMENTWISE_PROLOGUES)

    @property
    def elements_per_unit(self) -> int:
        return 8 if self.vector_loads else 1

    @functools.cached_property
    def spec(self) -> KernelSpec[StrideGrid]:
        flags = (*self.input_flags, ("FP4Q_VECTOR_LOADS", self.vector_loads))
        return simt_spec("amax", self.arch, (("AMAX_THREADS", self.threads), self.prologue_constant), flags,
                         AMAX_PARAMS, self.threads,
                         StrideGrid(self.threads * AMAX_UNROLL, max_ctas_per_sm=AMAX_CTAS_PER_SM))


@dataclass(frozen=True)
class GlobalScaleConfig(CallFields):
    """The scale pass: one CTA of ``threads`` threads; ``four_over_six``: 4/6's scale,
    ``1536 / amax`` (fake quantization's ``"dynamic"`` under 4/6)."""

    threads: int = 256
    four_over_six: bool = False

    def check(self) -> None:
        check_choice("threads", self.threads, BLOCK_SIZES)
        check_bool("four_over_six", self.four_over_six)

    @functools.cached_property
    def spec(self) -> KernelSpec[StrideGrid]:
        return simt_spec("global_scale", self.arch, (("SCALE_THREADS", self.threads),),
                         (("FP4Q_FOUR_OVER_SIX", self.four_over_six),), GLOBAL_SCALE_PARAMS, self.threads,
                         StrideGrid(self.threads, max_ctas_per_sm=1))


FUSED_DYNAMIC_PARAMS = (
    *params(("x", "ptr"), ("x_row_stride", "i64"), ("out", "ptr"), ("sf_out", "ptr"), ("tensor_sf_out", "ptr"),
            ("rows", "i32"), ("cols", "i32"), ("out_cols", "i32")),
    *UNIT_DIVISOR_PARAMS,
    *params(("tickets", "ptr")),
)


@dataclass(frozen=True)
class FusedDynamicConfig(CallFields):
    """NVFP4 with the dynamic tensor scale in one launch: the amax of x, a barrier of
    the whole grid, then the vector kernel's work (``vector``: the
    ``SimtConfig(vector=True)`` of 16 elements per thread whose rules the other
    fields follow) with the scale just derived. Its grid is one wave, all of it
    resident at once, or one CTA, which skips the barrier; the call path takes it
    for inputs up to ``tuning.FUSED_DYNAMIC_MAX_ELEMENTS``, with the block size and
    grid ``tuning.fused_dynamic_block`` picks."""

    threads: int = 128
    vector: SimtConfig = dataclasses.field(init=False, repr=False, compare=False)

    def check(self) -> None:
        check_choice("threads", self.threads, BLOCK_SIZES)
        self.check_prologue(ELEMENTWISE_PROLOGUES)
        require(self.fmt == "nvfp4" and self.tensor_sf_mode == "value",
                f"the one-launch dynamic quantizer is NVFP4 with the scale it derives (fmt='nvfp4', "
                f"tensor_sf_mode='value'), got fmt={self.fmt!r}, tensor_sf_mode={self.tensor_sf_mode!r}")
        object.__setattr__(self, "vector", SimtConfig(threads=self.threads, vector=True, vector_elements=16,
                                                      sf_layout=self.sf_layout, input_dtype=self.input_dtype,
                                                      prologue=self.prologue, arch=self.arch))

    @functools.cached_property
    def spec(self) -> KernelSpec[StrideGrid]:
        # The vector kernel's constants and flags: its quantize step is that kernel's. Every thread of
        # an SM resident (registers permitting), so that the one-wave grid has as many threads as can be;
        # half of them under a prologue, whose float32 sequence needs more registers than that leaves.
        share = 1 if self.prologue == "none" else 2
        constants = self.vector.spec.constants + (
            ("MIN_CTAS_PER_SM", target(self.arch).max_threads_per_sm // self.threads // share),)
        return simt_spec("quantize_fp4_dynamic", self.arch, constants, self.vector.spec.flags,
                         FUSED_DYNAMIC_PARAMS, self.threads, StrideGrid(self.threads))

    def units_per_row(self, cols: int) -> int:
        return self.vector.units_per_row(cols)

    def work_items(self, rows: int, cols: int) -> int:
        return self.vector.work_items(rows, cols)
