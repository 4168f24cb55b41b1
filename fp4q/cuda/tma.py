"""TMA tensor-map (descriptor) encoding, with the driver's rules checked first.

``cuTensorMapEncodeTiled`` answers a broken rule with a bare
CUDA_ERROR_INVALID_VALUE; checking each rule here turns that into a message
that says which dimension, stride, box or alignment is wrong.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass

from ..kernels.spec import MAX_BOX_DIM, Swizzle
from .driver import check

MAX_RANK = 5
MAX_DIM = 1 << 32
MAX_STRIDE = 1 << 40


class TmaError(ValueError):
    """A tensor-map request breaks a TMA rule; the message names the rule."""


@dataclass(frozen=True)
class TensorMapSpec:
    """Everything that defines one tensor map; dimensions innermost first."""

    address: int
    element_bytes: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]  # bytes, for dims[1:]
    box: tuple[int, ...]
    swizzle: Swizzle = Swizzle.NONE
    l2_promotion: int = 0  # bytes: 0, 64, 128 or 256

    def validate(self, what: str) -> None:
        rank = len(self.dims)
        if not 1 <= rank <= MAX_RANK:
            raise TmaError(f"{what}: rank must be 1..{MAX_RANK}, got {rank}")
        if len(self.strides) != rank - 1 or len(self.box) != rank:
            raise TmaError(f"{what}: need {rank - 1} strides and {rank} box dims, got {self.strides} and {self.box}")
        if self.address % 16:
            raise TmaError(f"{what}: the base address must be 16-byte aligned, got {self.address:#x}")
        for i, d in enumerate(self.dims):
            if not 1 <= d <= MAX_DIM:
                raise TmaError(f"{what}: dimension {i} must be in [1, 2**32], got {d}")
        for i, s in enumerate(self.strides, start=1):
            if s % 16 or not 0 < s < MAX_STRIDE:
                raise TmaError(
                    f"{what}: the stride of dimension {i} must be a positive multiple of 16 bytes "
                    f"below 2**40, got {s}"
                )
        for i, b in enumerate(self.box):
            if not 1 <= b <= MAX_BOX_DIM:
                raise TmaError(f"{what}: box dimension {i} must be in [1, {MAX_BOX_DIM}], got {b}")
        inner = self.box[0] * self.element_bytes
        if inner % 16:
            raise TmaError(f"{what}: the inner box must span a multiple of 16 bytes, got {inner}")
        if self.swizzle != Swizzle.NONE and inner > self.swizzle.value:
            raise TmaError(
                f"{what}: the inner box spans {inner} bytes, more than the {self.swizzle.value}-byte swizzle span"
            )


def _enums():
    from cuda.bindings import driver as cu

    dtype = {1: cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8,
             2: cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT16}
    swz = {
        Swizzle.NONE: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
        Swizzle.B32: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_32B,
        Swizzle.B64: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_64B,
        Swizzle.B128: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
    }
    l2 = {
        0: cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE,
        64: cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
        128: cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        256: cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
    }
    return cu, dtype, swz, l2


def encode(spec: TensorMapSpec, what: str):
    """Validate and encode ``spec``; returns a ``CUtensorMap``."""
    spec.validate(what)
    cu, dtype, swz, l2 = _enums()
    rank = len(spec.dims)
    return check(
        cu.cuTensorMapEncodeTiled(
            dtype[spec.element_bytes],
            rank,
            spec.address,
            [cu.cuuint64_t(d) for d in spec.dims],
            [cu.cuuint64_t(s) for s in spec.strides],
            [cu.cuuint32_t(b) for b in spec.box],
            [cu.cuuint32_t(1)] * rank,
            cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            swz[spec.swizzle],
            l2[spec.l2_promotion],
            # Out-of-bounds elements read as zero: ragged tiles quantize zeros.
            cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        ),
        f"cuTensorMapEncodeTiled ({what})",
    )


class TensorMapCache:
    """Reuses encoded maps when the same pointers and shapes come back (LRU)."""

    def __init__(self, capacity: int = 512) -> None:
        self._capacity = capacity
        self._maps: collections.OrderedDict[TensorMapSpec, object] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, spec: TensorMapSpec, what: str):
        with self._lock:
            found = self._maps.get(spec)
            if found is not None:
                self._maps.move_to_end(spec)
                self.hits += 1
                return found
        tensor_map = encode(spec, what)
        with self._lock:
            self.misses += 1
            self._maps[spec] = tensor_map
            if len(self._maps) > self._capacity:
                self._maps.popitem(last=False)
        return tensor_map
