"""The float32 prologues of the fused serving quantizers: exp, SiLU·mul and (add+)RMSNorm.

NVFP4_SPEC.md, "The project's exact sequences: fused serving quantizers", defines
each of them as a fixed sequence of correctly rounded IEEE float32 operations
(``+ - * /`` and ``sqrt``, no fma, no flush of denormals) and exact integer
operations on a float's bits. The functions here are that sequence in numpy,
operation for operation, so that a kernel executing the same instructions (PTX
``add.rn``/``mul.rn``/``div.rn``/``sqrt.rn``, ``min.NaN``/``max.NaN``, integer
shifts and adds) produces the same bits, and the unfused helpers ``silu_and_mul``
and ``rms_norm`` return exactly what the fused quantizers quantize.

The intermediate ``h`` is rounded to ``x``'s dtype (bf16, fp16, or float32,
where the rounding is the identity), as the unfused torch/vLLM composition
stores it. Every reduction (a row's sum of squares) runs in an order fixed by
the row length alone.
"""

from __future__ import annotations

import numbers

import numpy as np

from .formats import input_float32, require_float32, round_to, value_dtype

__all__ = ["exp_f32", "silu_and_mul", "rms_norm", "row_sum_of_squares"]


def _f32(bits: int) -> np.float32:
    return np.float32(np.array(bits, dtype=np.uint32).view(np.float32)[()])


ONE = np.float32(1)
# exp: the clamp bounds. exp(-104) < 2**-150 rounds to +0 and exp(89) > FLT_MAX to +Inf,
# and every input beyond them gives the same; inside, k = round(x / ln 2) stays in
# [-150, 128], which the two-step scale below covers.
EXP_LO = _f32(0xC2D00000)  # -104
EXP_HI = _f32(0x42B20000)  # 89
LOG2E = _f32(0x3FB8AA3B)  # float32(log2(e))
# Adding 1.5 * 2**23 to |t| < 2**22 rounds t to the nearest integer (ties to even) and
# leaves it in the low bits of the sum: bits(j) = 0x4B400000 + k.
ROUND_MAGIC = _f32(0x4B400000)
# Cody-Waite: LN2_HI has 15 significant bits, so k * LN2_HI is exact for |k| <= 512 and
# x - k * LN2_HI is exact (Sterbenz); LN2_LO = float32(ln 2 - LN2_HI).
LN2_HI = _f32(0x3F317200)
LN2_LO = _f32(0x35BFBE8E)
# e**r ~ 1 + r + c2 r**2 + ... + c6 r**6 on |r| <= 0.3466, by Horner from c6 down: a
# minimax fit of the relative error (about 0.05 ulp); the rounding of the twelve
# operations dominates the total error (1.1704 ulp at most over every float32 input).
EXP_HORNER = tuple(_f32(b) for b in (0x3AB5121D, 0x3C091CF0, 0x3D2AAC79, 0x3E2AAA49, 0x3EFFFFFE)) + (ONE, ONE)
FLOAT32_ONE_BITS = np.uint32(0x3F800000)
EXPONENT_SHIFT = np.uint32(23)


def exp_f32(x) -> np.ndarray:
    """e**x for float32 ``x``, by the spec's sequence (max error 1.1704 ulp against the exact
    value, over every float32 input; +Inf above the float32 range, +0 below it, correct
    rounding into the subnormals; NaN gives NaN, -Inf +0, +Inf +Inf)."""
    x = require_float32(x, "x")
    with np.errstate(all="ignore"):
        # min/max that propagate NaN (PTX min.NaN/max.NaN): NaN stays NaN throughout.
        xc = np.minimum(np.maximum(x, EXP_LO), EXP_HI)
        j = xc * LOG2E + ROUND_MAGIC
        kf = j - ROUND_MAGIC
        r = (xc - kf * LN2_HI) - kf * LN2_LO
        p = EXP_HORNER[0]
        for c in EXP_HORNER[1:]:
            p = p * r + c
        # 2**k in two normal factors 2**floor(k/2) and 2**ceil(k/2), built in the exponent
        # field from bits(j) = 0x4B400000 + k (the 0x4B400000 part shifts out): p * 2**k1
        # is exact and the second product is the one rounding, into the subnormals or
        # to +Inf when the result leaves the normal range.
        u = np.asarray(j).view(np.uint32)
        v = u >> np.uint32(1)
        s1 = ((v << EXPONENT_SHIFT) + FLOAT32_ONE_BITS).view(np.float32)
        s2 = (((u - v) << EXPONENT_SHIFT) + FLOAT32_ONE_BITS).view(np.float32)
        return np.asarray((p * s1) * s2, dtype=np.float32)


def rounded(y: np.ndarray, dtype: str) -> np.ndarray:
    """float32 ``y`` rounded to ``dtype`` (``round_to``), as float32 again: what a kernel
    holds after storing ``y`` in ``dtype`` and reading it back."""
    return input_float32(round_to(y, dtype), "y")


def stored(h: np.ndarray, x: np.ndarray) -> np.ndarray:
    """float32 values ``h`` (already rounded to ``x``'s dtype) in ``x``'s dtype."""
    return round_to(h, value_dtype(x)).view(x.dtype)


# ------------------------------------------------------------------------ SiLU·mul


def silu_and_mul_args(x) -> tuple[np.ndarray, np.ndarray, str]:
    """``x`` of shape ``(..., 2N)`` as float32 ``gate``, ``up`` (each ``(..., N)``) and the
    intermediate's dtype; the rule that the last dimension is even."""
    xf = input_float32(x)
    width = xf.shape[-1]
    if width % 2:
        raise ValueError(f"x.shape[-1] = 2N must be even, got {width}")
    n = width // 2
    return xf[..., :n], xf[..., n:], value_dtype(x)


def silu_and_mul_values(gate: np.ndarray, up: np.ndarray, dtype: str) -> np.ndarray:
    """``h = dtype(silu(gate) * up)`` as float32 values, ``silu(g) = g / (1 + exp(-g))``."""
    with np.errstate(all="ignore"):
        silu = gate / (ONE + exp_f32(-gate))
        return rounded(silu * up, dtype)


def silu_and_mul(x) -> np.ndarray:
    """SiLU·mul of ``x`` (bf16, bf16 bits as uint16, fp16 or float32) of shape ``(..., 2N)``:
    ``h = dtype(silu(x[..., :N]) * x[..., N:])`` of shape ``(..., N)`` in ``x``'s dtype,
    exactly what ``silu_and_mul_quantize_*`` quantize."""
    gate, up, dtype = silu_and_mul_args(x)
    return stored(silu_and_mul_values(gate, up, dtype), x)


# ------------------------------------------------------------------------- RMSNorm


def row_sum_of_squares(rf: np.ndarray) -> np.ndarray:
    """Each row's sum of squares (the last axis) of float32 ``rf``: ``sq_i = rf_i * rf_i``,
    then a perfect pairwise tree over the index, the row padded with +0 to the next power
    of two: level 1 adds ``(sq_0 + sq_1), (sq_2 + sq_3), ...``, each level the adjacent
    results of the one before. An empty row sums to +0."""
    k = rf.shape[-1]
    width = 1 << max(k - 1, 0).bit_length()
    with np.errstate(all="ignore"):
        v: np.ndarray = np.zeros(rf.shape[:-1] + (width,), dtype=np.float32)
        v[..., :k] = rf * rf
        while v.shape[-1] > 1:
            v = v[..., 0::2] + v[..., 1::2]
    return v[..., 0]


def _same_dtype(a, name: str, dtype: str) -> np.ndarray:
    af = input_float32(a, name)
    if value_dtype(a) != dtype:
        raise TypeError(f"{name} must have x's dtype ({dtype}), got {a.dtype}")
    return af


def eps_float32(eps) -> np.float32:
    """``eps`` (a Python float or any real) rounded to float32; it must stay finite and >= 0."""
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"eps must be a Python float, got {eps!r} of type {type(eps).__name__}")
    with np.errstate(over="ignore", invalid="ignore"):
        eps32 = np.float32(eps)
    if not (np.isfinite(eps32) and eps32 >= 0):
        raise ValueError(f"eps must be finite and >= 0 in float32, got {eps!r}")
    return eps32


def rms_norm_args(x, weight, eps, residual) -> tuple[np.ndarray, np.ndarray, np.float32, str]:
    """The checked arguments of RMSNorm: float32 ``x`` and ``weight``, ``eps`` as float32 and
    the intermediate's dtype. ``weight`` has shape ``(K,)`` and ``residual`` (if given) the
    shape of ``x``, both in ``x``'s dtype; ``residual`` must be writeable."""
    xf = input_float32(x)
    dtype = value_dtype(x)
    k = xf.shape[-1]
    wf = _same_dtype(weight, "weight", dtype)
    if wf.shape != (k,):
        raise ValueError(f"weight must have shape (K,) = {(k,)}, got {wf.shape}")
    eps32 = eps_float32(eps)
    if residual is not None:
        _same_dtype(residual, "residual", dtype)
        if residual.shape != x.shape:
            raise ValueError(f"residual must have x's shape {x.shape}, got {residual.shape}")
        if not residual.flags.writeable:
            raise ValueError("residual must be writeable: it is updated in place with x + residual")
    return xf, wf, eps32, dtype


def rms_norm_values(xf: np.ndarray, wf: np.ndarray, eps32: np.float32, residual, dtype: str) -> np.ndarray:
    """RMSNorm of float32 rows ``xf`` as float32 values rounded to ``dtype``; with
    ``residual``, of ``r = dtype(x + residual)``, which is written back to ``residual``."""
    with np.errstate(all="ignore"):
        if residual is not None:
            r = round_to(xf + input_float32(residual, "residual"), dtype)
            residual.view(r.dtype)[...] = r
            xf = input_float32(r, "residual")
        k = np.float32(xf.shape[-1])
        rinv = ONE / np.sqrt(row_sum_of_squares(xf) / k + eps32)
        return rounded(rounded(xf * rinv[..., None], dtype) * wf, dtype)


def rms_norm(x, weight, eps=1e-6, residual=None) -> np.ndarray:
    """RMSNorm of ``x`` of shape ``(..., K)`` (bf16, bf16 bits as uint16, fp16 or float32) with
    ``weight`` of shape ``(K,)``: ``h = dtype(dtype(x * rinv) * weight)``, ``rinv = 1 /
    sqrt(ss / K + eps)`` per row, in ``x``'s dtype. With ``residual``, ``residual`` is
    first updated in place with ``dtype(x + residual)`` and the normalized row is that sum."""
    xf, wf, eps32, dtype = rms_norm_args(x, weight, eps, residual)
    return stored(rms_norm_values(xf, wf, eps32, residual, dtype), x)
