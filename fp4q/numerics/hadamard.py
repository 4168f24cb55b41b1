"""The 16-point random Hadamard transform of NVFP4 training (NVFP4_SPEC.md, "The
project's exact sequences: training quantizers", "Random Hadamard transform").

``y = H16 · (s ⊙ v) / 4`` with ``H16[i][j] = (-1)**popcount(i & j)`` (Sylvester order)
and ``s_i = -1`` where bit ``i`` of the 16-bit sign mask is set: Transformer Engine's
``diag(s) @ H / 4`` applied as ``v @ (diag(s) H / 4)``. TE multiplies by that matrix on
tensor cores, whose float32 accumulation order is not specified; here it is the fast
Walsh-Hadamard butterfly in a fixed order, so every kernel can reproduce the bits:
the sign flips (exact), then four stages ``h = 1, 2, 4, 8`` that replace each pair
``(v[i], v[i + h])`` with bit ``h`` of ``i`` clear by ``(v[i] + v[i + h], v[i] - v[i + h])``,
each sum and difference rounded to float32, then ``* 0.25`` (exact for every sum of
16-bit inputs: their values are multiples of 2**-133, which stay float32 after /4).
"""

from __future__ import annotations

import numbers

import numpy as np

from .formats import require_float32

__all__ = ["HADAMARD_SIZE", "TE_WGRAD_SIGN_MASK", "hadamard16"]

HADAMARD_SIZE = 16
# Transformer Engine's hard-coded wgrad sign vector (transformer_engine/pytorch/tensor/
# nvfp4_tensor.py, get_wgrad_sign_vector: [1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1,
# 1, -1, -1]) as its bitmask (get_sign_from_vector: bit i set where the sign is -1).
TE_WGRAD_SIGN_MASK = 0xD7E8
_STAGES = (1, 2, 4, 8)


def require_sign_mask(mask, name: str = "sign_mask") -> int:
    if isinstance(mask, bool) or not isinstance(mask, numbers.Integral):
        raise TypeError(f"{name} must be an int (a 16-bit sign mask), got {mask!r} of type "
                        f"{type(mask).__name__}")
    if not 0 <= int(mask) <= 0xFFFF:
        raise ValueError(f"{name} must be a 16-bit sign mask in [0, 0xFFFF], got {mask}")
    return int(mask)


def _flip(v: np.ndarray, mask: int) -> np.ndarray:
    negate = ((mask >> np.arange(HADAMARD_SIZE)) & 1).astype(bool)
    return np.where(negate, -v, v)


def _butterfly(v: np.ndarray) -> np.ndarray:
    lead = v.shape[:-1]
    with np.errstate(over="ignore", invalid="ignore"):
        for h in _STAGES:
            # Index i = block * 2h + half * h + t: half is bit h of i, so [..., 0, :] and
            # [..., 1, :] are the pairs (i, i + h).
            pairs = v.reshape(lead + (HADAMARD_SIZE // (2 * h), 2, h))
            a, b = pairs[..., 0, :], pairs[..., 1, :]
            v = np.stack([a + b, a - b], axis=-2).reshape(lead + (HADAMARD_SIZE,))
    return v


def hadamard16(v, sign_mask: int = 0, *, inverse: bool = False) -> np.ndarray:
    """The random Hadamard transform of each 16 values along the last axis of float32 ``v``.

    ``inverse=False``: ``H16 · (s ⊙ v) / 4`` (flip, butterfly, ``* 0.25``).
    ``inverse=True``: ``s ⊙ (H16 · v) / 4`` (butterfly, ``* 0.25``, flip), the exact
    inverse wherever no sum rounds, since ``H16 · H16 = 16 I``. With ``sign_mask=0`` both
    are the same map, which is then its own inverse.
    """
    v = require_float32(v, "v")
    if v.ndim == 0 or v.shape[-1] % HADAMARD_SIZE:
        raise ValueError(f"v must have shape (..., 16n) (groups of 16 values), got {v.shape}")
    mask = require_sign_mask(sign_mask)
    if not isinstance(inverse, bool):
        raise TypeError(f"inverse must be a bool, got {inverse!r}")
    groups = v.reshape(v.shape[:-1] + (v.shape[-1] // HADAMARD_SIZE, HADAMARD_SIZE))
    if not inverse:
        groups = _flip(groups, mask)
    y = _butterfly(groups) * np.float32(0.25)
    if inverse:
        y = _flip(y, mask)
    return y.reshape(v.shape)
