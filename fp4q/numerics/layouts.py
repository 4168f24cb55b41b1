"""Scale-factor layouts of NVFP4_SPEC.md: linear ``(M, G)``, swizzled and 8x4.

The swizzled layout is the 128x4 tiling that cuBLAS, TensorRT-LLM and vLLM
block-scaled GEMMs read: scale ``(m, j)`` sits at
``[m // 128, j // 4, m % 32, (m % 128) // 32, j % 4]`` of an array of shape
``(ceil(M/128), ceil(G/4), 32, 4, 4)``, and every padding byte is 0x00.

The 8x4 layout is FlashInfer's ``SfLayout.layout_8x4`` (TensorRT-LLM's
``SWIZZLED_8x4``), which pads the rows to 8 instead of 128 for small batches:
scale ``(m, j)`` sits at ``[m // 8, j // 4, m % 8, j % 4]`` of an array of shape
``(ceil(M/8), ceil(G/4), 8, 4)``, padding bytes 0x00.

The conversions work on numpy and cupy arrays alike and stay on the array's
device; cupy is only looked up when a cupy array is passed in, so numpy users
do not need it installed.
"""

from __future__ import annotations

import math
import numbers
import sys

import numpy as np

from .formats import GROUP_SIZE

__all__ = ["swizzled_sf_shape", "swizzled_sf_offset", "swizzle_sf", "unswizzle_sf",
           "sf_8x4_shape", "sf_8x4_offset", "swizzle_sf_8x4", "unswizzle_sf_8x4"]

ROWS_PER_TILE = 128
GROUPS_PER_TILE = 4
TILE_BYTES = 512
ROWS_PER_TILE_8X4 = 8
TILE_BYTES_8X4 = ROWS_PER_TILE_8X4 * GROUPS_PER_TILE
# Rows and groups of one tile of each layout: a kernel writes the scales of whole tiles,
# their padding bytes included.
SF_TILE = {"linear": (1, 1), "swizzled": (ROWS_PER_TILE, GROUPS_PER_TILE), "8x4": (ROWS_PER_TILE_8X4, GROUPS_PER_TILE)}


def _array_module(a, name):
    if isinstance(a, np.ndarray):
        return np
    # A cupy array can only exist if cupy is already imported, so looking in
    # sys.modules never imports cupy on behalf of a numpy caller.
    cp = sys.modules.get("cupy")
    if cp is not None and isinstance(a, cp.ndarray):
        return cp
    raise TypeError(
        f"{name} must be a numpy or cupy array, got {type(a).__module__}.{type(a).__qualname__}"
    )


def _count(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r} of type {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return int(value)


def _index(value, name):
    """An int, or an integer array widened to int64 so the offset cannot overflow."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    try:
        xp = _array_module(value, name)
    except TypeError:
        xp = None
    if xp is None or value.dtype.kind not in "iu":
        kind = f"dtype {value.dtype}" if xp is not None else f"{value!r} of type {type(value).__name__}"
        raise TypeError(f"{name} must be an int or an integer array, got {kind}")
    return value.astype(xp.int64)


def _any(cond):
    return bool(cond.any()) if hasattr(cond, "any") else bool(cond)


def _first(values, bad):
    if isinstance(values, int):
        return values
    return int(values[bad].ravel()[0])


def _require_uint8(a, name):
    if a.dtype != np.uint8:
        raise TypeError(f"{name} must have dtype uint8 (e4m3/e8m0 scale bytes), got {a.dtype}")


def tiles_shape(m, groups) -> tuple:
    """``(ceil(m/128), ceil(groups/4), 32, 4, 4)``, unchecked: sizes may be symbolic (torch's
    fake tensors trace through it)."""
    return (-(-m // ROWS_PER_TILE), -(-groups // GROUPS_PER_TILE), 32, 4, GROUPS_PER_TILE)


def tiles_shape_8x4(m, groups) -> tuple:
    """``(ceil(m/8), ceil(groups/4), 8, 4)``, unchecked as ``tiles_shape``."""
    return (-(-m // ROWS_PER_TILE_8X4), -(-groups // GROUPS_PER_TILE), ROWS_PER_TILE_8X4, GROUPS_PER_TILE)


def scales_shape(sf_layout: str, lead: tuple, m, groups) -> tuple:
    """The shape of the scales of ``m`` rows of leading shape ``lead`` with ``groups``
    scales each, in ``sf_layout``; unchecked as ``tiles_shape``."""
    if sf_layout == "linear":
        return tuple(lead) + (groups,)
    return tiles_shape(m, groups) if sf_layout == "swizzled" else tiles_shape_8x4(m, groups)


def block_shape(m: int, groups: int) -> tuple:
    """Shape ``(ceil(m/128), ceil(groups/4), 32, 4, 4)`` of the swizzled scales of ``groups``
    scales per row."""
    return tiles_shape(_count(m, "m"), _count(groups, "groups"))


def _groups(k, fmt: str) -> int:
    k = _count(k, "k")
    group = GROUP_SIZE.get(fmt) if isinstance(fmt, str) else None
    if group is None:
        raise ValueError(f"fmt must be {' or '.join(map(repr, GROUP_SIZE))}, got {fmt!r}")
    if k % group:
        raise ValueError(f"k must be a multiple of {group} for fmt={fmt!r}, got {k}")
    return k // group


def swizzled_sf_shape(m: int, k: int, fmt: str = "nvfp4") -> tuple:
    """Shape of the swizzled scales of an ``m x k`` input quantized to ``fmt`` (``"nvfp4"``:
    ``(ceil(m/128), ceil(k/64), 32, 4, 4)``; ``"mxfp4"``: ``(ceil(m/128), ceil(k/128), 32, 4, 4)``)."""
    return block_shape(m, _groups(k, fmt))


def _offset_args(m, j, groups):
    groups = _count(groups, "groups")
    m = _index(m, "m")
    j = _index(j, "j")
    if _any(m < 0):
        raise ValueError(f"m must be >= 0, got {_first(m, m < 0)}")
    if _any((j < 0) | (j >= groups)):
        raise ValueError(
            f"j must satisfy 0 <= j < groups={groups}, got {_first(j, (j < 0) | (j >= groups))}"
        )
    return m, j, -(-groups // GROUPS_PER_TILE)


def swizzled_sf_offset(m, j, groups):
    """Byte offset of scale ``(m, j)`` in the swizzled layout for ``groups`` scales per row.

    ``m`` and ``j`` are ints or integer arrays (numpy or cupy; broadcast
    together); the result is an int or an int64 array.
    """
    m, j, tiles_per_row_block = _offset_args(m, j, groups)
    return (
        ((m // ROWS_PER_TILE) * tiles_per_row_block + j // GROUPS_PER_TILE) * TILE_BYTES
        + (m % 32) * 16
        + ((m % ROWS_PER_TILE) // 32) * 4
        + j % GROUPS_PER_TILE
    )


def _linear_scales(linear) -> tuple:
    """``(xp, M, G)`` of linear uint8 scales of shape ``(..., G)`` (the leading dimensions
    flatten to ``M`` rows), after their rules."""
    xp = _array_module(linear, "linear")
    _require_uint8(linear, "linear")
    if linear.ndim < 1:
        raise ValueError(f"linear must have rank >= 1 (shape (..., G)), got shape {linear.shape}")
    return xp, math.prod(linear.shape[:-1]), linear.shape[-1]


def swizzle_sf(linear):
    """Linear uint8 scales of shape ``(..., G)`` to the swizzled layout.

    The leading dimensions flatten to ``M`` rows. The result is a new
    contiguous uint8 array of shape ``block_shape(M, G)`` on the input's
    device, padding bytes 0x00.
    """
    xp, m, groups = _linear_scales(linear)
    row_tiles, group_tiles = block_shape(m, groups)[:2]
    padded = xp.zeros((row_tiles * ROWS_PER_TILE, group_tiles * GROUPS_PER_TILE), dtype=xp.uint8)
    padded[:m, :groups] = linear.reshape(m, groups)
    # Padded row m = 128*a + 32*r + c and group j = 4*b + e land at [a, b, c, r, e].
    tiled = padded.reshape(row_tiles, 4, 32, group_tiles, GROUPS_PER_TILE)
    return xp.ascontiguousarray(tiled.transpose(0, 3, 2, 1, 4))


def unswizzle_groups(swizzled, m: int, groups: int):
    """Swizzled scales of ``groups`` scales per row back to a contiguous ``(m, groups)``
    uint8 array on the same device."""
    xp = _array_module(swizzled, "swizzled")
    _require_uint8(swizzled, "swizzled")
    expected = block_shape(m, groups)
    if tuple(swizzled.shape) != expected:
        raise ValueError(f"swizzled must have shape {expected} for m={m}, groups={groups}, "
                         f"got {tuple(swizzled.shape)}")
    row_tiles, group_tiles = expected[:2]
    # Swapping axes 1 and 3 is its own inverse, so this undoes swizzle_sf.
    padded = swizzled.transpose(0, 3, 2, 1, 4).reshape(row_tiles * ROWS_PER_TILE, group_tiles * GROUPS_PER_TILE)
    return xp.ascontiguousarray(padded[:m, :groups])


def unswizzle_sf(swizzled, m: int, k: int, fmt: str = "nvfp4"):
    """The swizzled scales of an ``m x k`` input quantized to ``fmt`` as a contiguous
    ``(m, k // 16)`` (NVFP4) or ``(m, k // 32)`` (MXFP4) uint8 array on the same device."""
    return unswizzle_groups(swizzled, m, _groups(k, fmt))


def block_shape_8x4(m: int, groups: int) -> tuple:
    """Shape ``(ceil(m/8), ceil(groups/4), 8, 4)`` of the 8x4 scales of ``groups`` scales per row."""
    return tiles_shape_8x4(_count(m, "m"), _count(groups, "groups"))


def sf_8x4_shape(m: int, k: int, fmt: str = "nvfp4") -> tuple:
    """Shape of the 8x4 scales of an ``m x k`` input quantized to ``fmt``."""
    return block_shape_8x4(m, _groups(k, fmt))


def sf_8x4_offset(m, j, groups):
    """Byte offset of scale ``(m, j)`` in the 8x4 layout for ``groups`` scales per row:
    ``((m // 8) * ceil(groups/4) + j // 4) * 32 + (m % 8) * 4 + j % 4``. Arguments and
    result as for ``swizzled_sf_offset``."""
    m, j, tiles_per_row_block = _offset_args(m, j, groups)
    return (
        ((m // ROWS_PER_TILE_8X4) * tiles_per_row_block + j // GROUPS_PER_TILE) * TILE_BYTES_8X4
        + (m % ROWS_PER_TILE_8X4) * GROUPS_PER_TILE
        + j % GROUPS_PER_TILE
    )


def swizzle_sf_8x4(linear):
    """Linear uint8 scales of shape ``(..., G)`` to the 8x4 layout: a new contiguous uint8
    array of shape ``block_shape_8x4(M, G)`` on the input's device, padding bytes 0x00."""
    xp, m, groups = _linear_scales(linear)
    row_tiles, group_tiles = block_shape_8x4(m, groups)[:2]
    padded = xp.zeros((row_tiles * ROWS_PER_TILE_8X4, group_tiles * GROUPS_PER_TILE), dtype=xp.uint8)
    padded[:m, :groups] = linear.reshape(m, groups)
    # Padded row m = 8*a + c and group j = 4*b + e land at [a, b, c, e].
    tiled = padded.reshape(row_tiles, ROWS_PER_TILE_8X4, group_tiles, GROUPS_PER_TILE)
    return xp.ascontiguousarray(tiled.transpose(0, 2, 1, 3))


def unswizzle_groups_8x4(tiled, m: int, groups: int):
    """8x4 scales of ``groups`` scales per row back to a contiguous ``(m, groups)`` uint8
    array on the same device."""
    xp = _array_module(tiled, "tiled")
    _require_uint8(tiled, "tiled")
    expected = block_shape_8x4(m, groups)
    if tuple(tiled.shape) != expected:
        raise ValueError(f"tiled must have shape {expected} for m={m}, groups={groups}, "
                         f"got {tuple(tiled.shape)}")
    row_tiles, group_tiles = expected[:2]
    padded = tiled.transpose(0, 2, 1, 3).reshape(row_tiles * ROWS_PER_TILE_8X4, group_tiles * GROUPS_PER_TILE)
    return xp.ascontiguousarray(padded[:m, :groups])


def unswizzle_sf_8x4(tiled, m: int, k: int, fmt: str = "nvfp4"):
    """The 8x4 scales of an ``m x k`` input quantized to ``fmt`` as a contiguous
    ``(m, k // 16)`` (NVFP4) or ``(m, k // 32)`` (MXFP4) uint8 array on the same device."""
    return unswizzle_groups_8x4(tiled, m, _groups(k, fmt))
