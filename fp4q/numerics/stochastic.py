"""Stochastic rounding to e2m1 with the semantics of PTX ``cvt.rs.satfinite.e2m1x4.f32``
(NVFP4_SPEC.md, "The project's exact sequences: training quantizers").

The PTX ISA defines ``.rs`` as rounding toward or away from zero by the carry out of
the integer addition of the random bits to the discarded mantissa bits. For e2m1 each
value gets 8 random bits, added at the top of its discarded field, so only the 8
discarded bits just below the kept e2m1 bit matter: with ``D`` those bits (an integer
0..255) and ``r`` the value's random byte, the magnitude rounds away from zero exactly
when ``D + r >= 256`` (probability ``D / 256``). Above 6 ``.satfinite`` clamps to 6,
NaN gives +6 (code 0x7), and the sign is kept (``-0`` and negative values that round to
zero give 0x8), all as in step 6 of the spec.

Which byte of the 32-bit ``rbits`` operand rounds which value: the ISA text says the
upper bytes of the two 16-bit halves serve operands ``a, b`` and the lower bytes
``e, f``; the instruction is called as Transformer Engine calls it, with the four
consecutive values ``x0..x3`` passed as ``{a, b, e, f} = {x3, x2, x1, x0}`` so that
``x0`` lands in the low nibble. The remaining freedom (which half, and the bit order
within a byte) is fixed by the only public hardware probe (``quack/rounding.py`` of
Dao-AILab/quack as in thakkarV/quack, exhaustive sweeps on sm_103a; sm_100a is not
probed): ``x0 <- rbits[23:16]``,
``x1 <- bitrev8(rbits[7:0])``, ``x2 <- rbits[31:24]``, ``x3 <- bitrev8(rbits[15:8])``.
"""

from __future__ import annotations

import numpy as np

from .formats import e2m1_encode, require_float32

__all__ = ["cvt_rs_random_bytes", "e2m1_encode_stochastic", "e2m1_round_stochastic"]

E2M1_MAX = np.float32(6)
# bitrev8[b] is b with its 8 bits in reverse order.
_BITREV8 = np.array([int(f"{b:08b}"[::-1], 2) for b in range(256)], dtype=np.uint8)


def cvt_rs_random_bytes(rbits) -> np.ndarray:
    """The random byte of each of the four values ``x0..x3`` (shape ``rbits.shape + (4,)``,
    uint8) that one ``cvt.rs.satfinite.e2m1x4.f32`` takes from its uint32 ``rbits``."""
    w = np.asarray(rbits)
    if w.dtype != np.uint32:
        raise TypeError(f"rbits must have dtype uint32, got {w.dtype}")
    byte = [((w >> np.uint32(8 * i)) & np.uint32(0xFF)).astype(np.uint8) for i in range(4)]
    return np.stack([byte[2], _BITREV8[byte[0]], byte[3], _BITREV8[byte[1]]], axis=-1)


def e2m1_round_stochastic(v, r) -> np.ndarray:
    """E2M1 codes of float32 ``v`` rounded with random byte ``r`` (uint8, same shape): one
    value of ``cvt.rs.satfinite``.

    For ``|v| < 6`` the neighbours are ``lo`` and ``lo + step`` with ``step`` 0.5 below
    2, 1 below 4 and 2 below 6; ``D = floor((|v| - lo) / step * 256)``, and the magnitude
    is ``lo + step`` when ``D + r >= 256``, else ``lo``. Every step is exact in float32.
    """
    v = require_float32(v, "v")
    r = np.asarray(r)
    if r.dtype != np.uint8:
        raise TypeError(f"r must have dtype uint8 (one random byte per value), got {r.dtype}")
    if r.shape != v.shape:
        raise ValueError(f"r must have the shape of v, {v.shape}, got {r.shape}")
    with np.errstate(invalid="ignore"):
        a = np.abs(v)
        in_range = a < E2M1_MAX  # False for NaN, >= 6 and Inf: those keep their RN code
        a = np.where(in_range, a, np.float32(0))
        step = np.where(a < 2, np.float32(0.5), np.where(a < 4, np.float32(1), np.float32(2)))
        # a / step and the * 256 are exact (powers of two, no underflow below 2**-149 * 512).
        units = a / step
        lo = np.floor(units)
        d = np.floor((units - lo) * np.float32(256)).astype(np.int32)
        up = d + r.astype(np.int32) >= 256
        magnitude = (lo + up.astype(np.float32)) * step
    # magnitude is an e2m1 value, so round to nearest encodes it exactly; copysign keeps -0.
    rounded = e2m1_encode(np.copysign(magnitude, v).astype(np.float32))
    return np.where(in_range, rounded, e2m1_encode(v))


def e2m1_encode_stochastic(v, rbits) -> np.ndarray:
    """E2M1 codes of float32 ``v`` (shape ``(..., 4n)``) rounded stochastically, each run of
    four values ``x0..x3`` by one ``cvt.rs.satfinite.e2m1x4.f32`` with the uint32 word
    ``rbits[..., j]`` (shape ``(..., n)``) for values ``4j .. 4j+3``."""
    v = require_float32(v, "v")
    words = np.asarray(rbits)
    if v.ndim == 0 or v.shape[-1] % 4:
        raise ValueError(f"v must have shape (..., 4n) (four values per cvt.rs), got {v.shape}")
    if words.shape != v.shape[:-1] + (v.shape[-1] // 4,):
        raise ValueError(f"rbits must have shape v.shape[:-1] + (v.shape[-1] // 4,) = "
                         f"{v.shape[:-1] + (v.shape[-1] // 4,)}, got {words.shape}")
    r = cvt_rs_random_bytes(words).reshape(v.shape)
    return e2m1_round_stochastic(v, r)
