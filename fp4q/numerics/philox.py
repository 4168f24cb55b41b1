"""Philox4x32-10 and the random bits of NVFP4 stochastic rounding (NVFP4_SPEC.md,
"The project's exact sequences: training quantizers", "Stochastic rounding").

Philox4x32-10 is the counter-based generator of Salmon et al. (SC'11) as Random123,
cuRAND and Transformer Engine's ``curanddx.hpp`` compute it: a 128-bit counter and a
64-bit key give 128 random bits, with no state carried between calls. That is what
makes the bytes of a stochastically rounded tensor a function of ``(seed, offset)``
and the shape alone: the counter of every NVFP4 group is built from the group's
index, never from the thread or CTA that happens to quantize it.

The mapping (one Philox block per group of 16 elements): key ``(seed mod 2**32,
seed >> 32)``; counter ``(offset mod 2**32, offset >> 32, g mod 2**32, (g >> 32) |
direction << 31)`` with ``g`` the group's row-major index in the output of its
direction (0 rowwise, 1 columnwise). This is ``curanddx``'s ``init(seed,
subsequence, offset)`` followed by one ``generate4()``, with the subsequence the group
instead of TE's launch-dependent thread index. Output word ``j`` feeds the
``cvt.rs.satfinite.e2m1x4.f32`` of the group's elements ``4j .. 4j+3``.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = ["philox4x32_10", "group_random_words"]

PHILOX_ROUNDS = 10
# Random123's multipliers and Weyl key increments for Philox4x32 (the same constants
# as cuRAND's curand_philox4x32_x.h and Transformer Engine's curanddx.hpp).
PHILOX_M0 = np.uint64(0xD2511F53)
PHILOX_M1 = np.uint64(0xCD9E8D57)
PHILOX_W0 = np.uint64(0x9E3779B9)
PHILOX_W1 = np.uint64(0xBB67AE85)

_WORD = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(32)
U64_LIMIT = 1 << 64
DIRECTIONS = {"rowwise": 0, "columnwise": 1}


def _words(a, name: str, count: int) -> np.ndarray:
    """``a`` as uint64 words (shape ``(..., count)``) after the rule that every value is a
    32-bit unsigned integer."""
    arr = np.asarray(a)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array (uint32 words), got dtype {arr.dtype}")
    if arr.ndim == 0 or arr.shape[-1] != count:
        raise ValueError(f"{name} must have shape (..., {count}), got {arr.shape}")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) > 0xFFFFFFFF):
        bad = int(arr.min()) if int(arr.min()) < 0 else int(arr.max())
        raise ValueError(f"{name} words must lie in [0, 2**32), got {bad}")
    return arr.astype(np.uint64)


def philox4x32_10(counter, key) -> np.ndarray:
    """Philox4x32 with 10 rounds: ``counter`` ``(..., 4)`` and ``key`` ``(..., 2)`` uint32
    words (broadcast together) to the ``(..., 4)`` uint32 output words.

    Word order is Random123's: ``counter[..., 0]`` is the low word ``c0``. One round maps
    ``(c0, c1, c2, c3)`` to ``(hi(M1*c2) ^ c1 ^ k0, lo(M1*c2), hi(M0*c0) ^ c3 ^ k1,
    lo(M0*c0))``; the key gains ``(W0, W1)`` (mod 2**32) between rounds.
    """
    c = _words(counter, "counter", 4)
    k = _words(key, "key", 2)
    shape = np.broadcast_shapes(c.shape[:-1], k.shape[:-1])
    c0, c1, c2, c3 = (np.broadcast_to(c[..., i], shape) for i in range(4))
    k0, k1 = (np.broadcast_to(k[..., i], shape) for i in range(2))
    for round_index in range(PHILOX_ROUNDS):
        if round_index:
            k0 = (k0 + PHILOX_W0) & _WORD
            k1 = (k1 + PHILOX_W1) & _WORD
        # Both factors are below 2**32, so the 64-bit products are exact.
        p0 = PHILOX_M0 * c0
        p1 = PHILOX_M1 * c2
        c0, c1, c2, c3 = (p1 >> _SHIFT) ^ c1 ^ k0, p1 & _WORD, (p0 >> _SHIFT) ^ c3 ^ k1, p0 & _WORD
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def require_u64(value, name: str) -> int:
    """A Python int in ``[0, 2**64)`` (seed and offset are 64-bit unsigned, like TE's
    ``rng_state``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r} of type {type(value).__name__}")
    if not 0 <= int(value) < U64_LIMIT:
        raise ValueError(f"{name} must satisfy 0 <= {name} < 2**64, got {value}")
    return int(value)


def group_random_words(seed, offset, group_index, direction: str) -> np.ndarray:
    """The four uint32 Philox words (shape ``group_index.shape + (4,)``) of the NVFP4 groups
    with these row-major indices in the output of ``direction`` (``"rowwise"`` or
    ``"columnwise"``), under ``(seed, offset)``: the spec's counter and key above."""
    seed = require_u64(seed, "seed")
    offset = require_u64(offset, "offset")
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be 'rowwise' or 'columnwise', got {direction!r}")
    g = np.asarray(group_index, dtype=np.uint64)
    high = (g >> _SHIFT) | np.uint64(DIRECTIONS[direction] << 31)
    counter = np.stack(
        [np.full(g.shape, offset & 0xFFFFFFFF, np.uint64), np.full(g.shape, offset >> 32, np.uint64),
         g & _WORD, high], axis=-1)
    return philox4x32_10(counter, np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint64))
