"""Configs of the two kernels of the dynamic global scale: the amax pass
(partial maxima of |x| per CTA) and the scale pass (one CTA turns them into
``min(2688 / amax, 2**100)``). Frozen and validated at construction;
``input_dtype``, ``vector_loads`` and ``arch`` are set from each call."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .archs import check_arch
from .quantize import INPUT_DTYPES
from .rules import check_choice, require

BLOCK_SIZES = (128, 256, 512, 1024)


@dataclass(frozen=True)
class AmaxConfig:
    """The amax pass. ``vector_loads`` reads 16 bytes at a time, which needs
    a 16-byte aligned base and a row stride of a multiple of 8 elements."""

    threads: int = 512
    vector_loads: bool = True
    input_dtype: str = "bfloat16"
    arch: str = "sm_90a"

    def __post_init__(self) -> None:
        check_arch(self.arch)
        check_choice("input_dtype", self.input_dtype, INPUT_DTYPES)
        check_choice("threads", self.threads, BLOCK_SIZES)
        require(isinstance(self.vector_loads, bool), f"vector_loads must be a bool, got {self.vector_loads!r}")

    def replace(self, **changes) -> "AmaxConfig":
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class GlobalScaleConfig:
    """The scale pass: one CTA of ``threads`` threads."""

    threads: int = 256
    arch: str = "sm_90a"

    def __post_init__(self) -> None:
        check_arch(self.arch)
        check_choice("threads", self.threads, BLOCK_SIZES)

    def replace(self, **changes) -> "GlobalScaleConfig":
        return dataclasses.replace(self, **changes)
