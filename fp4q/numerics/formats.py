"""The element formats of NVFP4_SPEC.md as numpy functions: e2m1 codes, e4m3
and e8m0 scale bytes, the 16-bit input types, and rounding float32 results to
a storage dtype.

Written here rather than taken from ml_dtypes, whose casts differ from the
spec (e4m3fn NaN above 464, float4 NaN to 0x8), and so that importing fp4q
loads no extension beyond numpy. All arithmetic is numpy float32 (IEEE,
round to nearest even, no flush of denormals) or exact in float64.
"""

from __future__ import annotations

import numpy as np

# The formats by their one name, and the elements each scale covers.
GROUP_SIZE = {"nvfp4": 16, "mxfp4": 32}
FORMATS = tuple(GROUP_SIZE)
MX_MODES = ("rceil", "floor")  # how e8m0_exponent rounds (spec "MXFP4")

R6 = np.array(0x3E2AAAAB, dtype=np.uint32).view(np.float32)[()]  # float32(1/6)
E4M3_MAX = np.float32(448)
E8M0_BIAS = 127

# The inputs by numpy's dtype name: ml_dtypes' bfloat16, its bits as uint16, float16, and
# float32 (torchao quantizes float32 weights).
INPUT_DTYPE_NAMES = ("bfloat16", "uint16", "float16", "float32")
INPUT_DTYPE_RULE = "bfloat16, uint16 (bf16 bits), float16 or float32"
# The storage dtypes float32 results are rounded to (``round_to``).
VALUE_DTYPES = ("float32", "bfloat16", "float16")
BF16_CANONICAL_NAN = 0x7FFF  # what cvt.rn.bf16.f32 writes for any NaN
F16_CANONICAL_NAN = 0x7FFF

_E2M1_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)


def _e4m3_table() -> np.ndarray:
    code = np.arange(256)
    exponent = (code >> 3) & 0xF
    mantissa = code & 0x7
    magnitude = np.where(
        exponent == 0,
        np.ldexp(mantissa.astype(np.float64), -9),
        np.ldexp((8 + mantissa).astype(np.float64), exponent - 10),
    )
    value = np.where(code & 0x80, -magnitude, magnitude)
    value[(code & 0x7F) == 0x7F] = np.nan
    return value.astype(np.float32)


_E4M3_VALUES = _e4m3_table()


def require_float32(v, name: str) -> np.ndarray:
    v = np.asarray(v)
    if v.dtype != np.float32:
        raise TypeError(f"{name} must have dtype float32, got {v.dtype}")
    return v


def require_codes(codes, name: str) -> np.ndarray:
    codes = np.asarray(codes)
    if codes.dtype != np.uint8:
        raise TypeError(f"{name} must have dtype uint8, got {codes.dtype}")
    return codes


def e2m1_encode(v) -> np.ndarray:
    """E2M1 codes (uint8, 0..15) of float32 ``v``: spec step 6.

    Round to nearest even over {0, 0.5, 1, 1.5, 2, 3, 4, 6}, saturate above 6
    and Inf, sign bit from ``v`` (so -0 and small negatives give 0x8), NaN 0x7.
    """
    v = require_float32(v, "v")
    with np.errstate(invalid="ignore"):
        a = np.minimum(np.abs(v), np.float32(6))
        # The grid is uniform on [0, 2] (step 0.5), [2, 4] (step 1) and [4, 6]
        # (step 2), and its codes are consecutive there, so code = offset +
        # rint(a / step). An even step count is an even code (mantissa bit 0),
        # so rint's ties-to-even is the spec's round-to-nearest-even.
        upper = np.where(a < 4, np.rint(a) + np.float32(2), np.rint(a * np.float32(0.5)) + 4)
        magnitude = np.where(a < 2, np.rint(a * np.float32(2)), upper)
        nan = np.isnan(v)
        code = np.where(nan, np.float32(0x7), magnitude).astype(np.uint8)
    return code | ((np.signbit(v) & ~nan).astype(np.uint8) << 3)


def e2m1_decode(codes) -> np.ndarray:
    """float32 values of E2M1 codes (uint8, 0..15)."""
    codes = require_codes(codes, "codes")
    if codes.size and int(codes.max()) > 15:
        raise ValueError(f"codes must be E2M1 codes in 0..15, got {int(codes.max())}")
    return _E2M1_VALUES[codes]


def e4m3_encode(s) -> np.ndarray:
    """E4M3FN bytes (uint8) of float32 ``s``: spec step 4, sign-aware.

    Round to nearest even; |s| >= 448 and Inf give 0x7E with the sign of
    ``s``; NaN gives 0x7F; subnormals have step 2**-9 and |s| <= 2**-10 gives
    a zero carrying the sign.
    """
    s = require_float32(s, "s")
    # Widening a signaling NaN raises "invalid"; NaN is handled explicitly below.
    with np.errstate(invalid="ignore"):
        a = np.abs(s).astype(np.float64)
        saturated = a >= E4M3_MAX
        nan = np.isnan(a)
        finite = np.where(saturated | nan, 0.0, a)
        # Binade exponent, clamped at the smallest normal binade (2**-6):
        # subnormals share its step of 2**-9.
        exponent = np.where(finite < 2.0**-6, -6, np.frexp(finite)[1] - 1)
        # Step count in the binade, 8..16 for normals (0..8 for subnormals);
        # scaling a float64 by a power of two is exact, and rint rounds ties
        # to even, which is the even mantissa. Codes run on monotonically
        # across binades (count 16 is the next binade's count 8), so the code
        # is 8 per binade above the subnormals plus the count.
        count = np.rint(np.ldexp(finite, 3 - exponent))
        code = (exponent + 6) * 8 + count
    code = np.where(saturated, 0x7E, code)
    code = np.where(nan, 0x7F, code).astype(np.uint8)
    return code | ((np.signbit(s) & ~nan).astype(np.uint8) << 7)


def e4m3_decode(sf) -> np.ndarray:
    """float32 values of E4M3FN bytes (uint8); 0x7F and 0xFF are NaN."""
    return _E4M3_VALUES[require_codes(sf, "sf")]


def e8m0_exponent(amax: np.ndarray, mode: str) -> np.ndarray:
    """The MXFP4 scale exponent ``e`` (int64, in [-127, 127]) of each group's float32
    ``amax``, by ``mode`` (spec "MXFP4": ``"floor"`` or ``"rceil"``)."""
    with np.errstate(all="ignore"):
        if mode == "floor":
            mantissa, exp = np.frexp(amax)
            # amax = mantissa * 2**exp with mantissa in [0.5, 1): floor(log2) = exp - 1.
            e = exp.astype(np.int64) - 1 - 2
        else:
            mantissa, exp = np.frexp(amax * R6)
            # t = mantissa * 2**exp; t is a power of two exactly when mantissa is 0.5.
            e = np.where(mantissa == 0.5, exp - 1, exp).astype(np.int64)
        # mantissa 0: amax == 0, or amax * R6 underflowed; both are below the clamp.
        e = np.where(mantissa == 0, -E8M0_BIAS, np.clip(e, -E8M0_BIAS, E8M0_BIAS))
    return np.where(np.isinf(amax), E8M0_BIAS, e)


def e8m0_decode(sf: np.ndarray) -> np.ndarray:
    """float32 powers of two of e8m0 bytes; 0xFF is NaN (OCP MX)."""
    return np.where(sf == 0xFF, np.nan, np.ldexp(1.0, sf.astype(np.int64) - E8M0_BIAS)).astype(np.float32)


def input_float32(x, name: str = "x") -> np.ndarray:
    """``x`` (bf16, bf16 bits as uint16, fp16 or float32) as float32, exactly; a float32
    ``x`` is returned as is."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy array of {INPUT_DTYPE_RULE}, "
                        f"got {type(x).__module__}.{type(x).__name__}")
    if x.ndim < 1:
        raise ValueError(f"{name} must have rank >= 1 (shape (..., K)), got shape {x.shape}")
    dtype = x.dtype.name
    if dtype not in INPUT_DTYPE_NAMES:
        raise TypeError(f"{name} must have dtype {INPUT_DTYPE_RULE}, got {x.dtype}")
    if dtype == "float32":
        return x
    if dtype == "float16":
        return x.astype(np.float32)
    # bf16 is the top half of a float32, so widening the bits is the exact conversion.
    return (x.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def value_dtype(x: np.ndarray) -> str:
    """The ``round_to`` dtype of an input accepted by ``input_float32``: what a result
    computed from ``x`` is stored as (bf16 bits for either bf16 spelling)."""
    return {"uint16": "bfloat16"}.get(x.dtype.name, x.dtype.name)


def round_to(y: np.ndarray, dtype: str) -> np.ndarray:
    """float32 ``y`` rounded to nearest even into ``dtype``'s storage, as the kernels store
    it: ``"float32"`` as is, ``"bfloat16"`` as bf16 bits in uint16, ``"float16"`` as
    float16. Overflow gives the signed infinity; every NaN gives the canonical NaN
    (0x7FFF), which ``cvt.rn`` writes."""
    y = require_float32(y, "y")
    if dtype == "float32":
        return y
    nan = np.isnan(y)
    if dtype == "float16":
        with np.errstate(all="ignore"):
            bits = y.astype(np.float16).view(np.uint16)
        return np.where(nan, np.uint16(F16_CANONICAL_NAN), bits).view(np.float16)
    u = y.view(np.uint32)
    # Add half a bf16 ulp, plus one more where the kept lowest bit is set (ties to even); a
    # carry into the exponent is the correct rounding up, up to infinity.
    rounded = ((u + np.uint32(0x7FFF) + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(nan, np.uint16(BF16_CANONICAL_NAN), rounded)


def pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """Codes (..., 2n) to bytes (..., n), element 2i in the low nibble of byte i."""
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_nibbles(q: np.ndarray) -> np.ndarray:
    """Bytes (..., n) to codes (..., 2n): the inverse of ``pack_nibbles``."""
    codes = np.empty(q.shape[:-1] + (2 * q.shape[-1],), dtype=np.uint8)
    codes[..., 0::2] = q & 0xF
    codes[..., 1::2] = q >> 4
    return codes
