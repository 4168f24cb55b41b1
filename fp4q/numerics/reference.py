"""Bit-exact numpy reference for fp4q: the executable form of NVFP4_SPEC.md.

Every kernel is tested byte for byte against these functions, so they follow
the spec's formulas literally, for any input (NaN, Inf, subnormals, and any
float32 ``tensor_sf``, with no range check). All arithmetic is numpy float32,
which is IEEE round-to-nearest-even without denormal flushing, as the spec
requires. The float8/float4 encoders are written here rather than taken from
ml_dtypes, whose casts differ from the spec (e4m3fn NaN above 464, float4
NaN to 0x8).
"""

from __future__ import annotations

import math
import numbers

import ml_dtypes
import numpy as np

from . import layouts

__all__ = [
    "e2m1_encode",
    "e2m1_decode",
    "e4m3_encode",
    "e4m3_decode",
    "quantize_nvfp4",
    "dequantize_nvfp4",
    "global_scale",
    "quantize_mxfp4",
    "dequantize_mxfp4",
]

NVFP4_GROUP = 16
MXFP4_GROUP = 32
R6 = np.array(0x3E2AAAAB, dtype=np.uint32).view(np.float32)[()]
E4M3_MAX = np.float32(448)
E8M0_BIAS = 127
SF_LAYOUTS = ("swizzled", "linear")
MX_MODES = ("rceil", "floor")
OUT_DTYPES = ("float32", "bfloat16")

_E2M1_VALUES = np.array(
    [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32
)


def _e4m3_table():
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


def _require_float32(v, name):
    v = np.asarray(v)
    if v.dtype != np.float32:
        raise TypeError(f"{name} must have dtype float32, got {v.dtype}")
    return v


def _require_uint8(a, name):
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(a).__module__}.{type(a).__name__}")
    if a.dtype != np.uint8:
        raise TypeError(f"{name} must have dtype uint8, got {a.dtype}")
    if a.ndim < 1:
        raise ValueError(f"{name} must have rank >= 1, got shape {a.shape}")


def _require_choice(value, name, choices):
    if not isinstance(value, str) or value not in choices:
        allowed = " or ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be {allowed}, got {value!r}")


def _require_multiple(k, group, what):
    if k % group:
        raise ValueError(f"{what} must be a multiple of {group}, got {k}")


def _input_float32(x, name="x"):
    """``x`` (bf16, bf16 bits as uint16, or fp16) as float32, exactly."""
    if not isinstance(x, np.ndarray):
        raise TypeError(
            f"{name} must be a numpy array of bfloat16, uint16 (bf16 bits) or float16, "
            f"got {type(x).__module__}.{type(x).__name__}"
        )
    if x.ndim < 1:
        raise ValueError(f"{name} must have rank >= 1 (shape (..., K)), got shape {x.shape}")
    if x.dtype == np.float16:
        return x.astype(np.float32)
    if x.dtype == ml_dtypes.bfloat16:
        bits = x.view(np.uint16)
    elif x.dtype == np.uint16:
        bits = x
    else:
        raise TypeError(
            f"{name} must have dtype bfloat16, uint16 (bf16 bits) or float16, got {x.dtype}"
        )
    # bf16 is the top half of a float32, so widening the bits is the exact conversion.
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _tensor_sf_float32(tensor_sf):
    if isinstance(tensor_sf, np.ndarray) and tensor_sf.ndim == 0:
        tensor_sf = tensor_sf[()]
    if isinstance(tensor_sf, bool) or not isinstance(tensor_sf, numbers.Real):
        raise TypeError(
            "tensor_sf must be a Python float or a numpy float32 scalar, "
            f"got {tensor_sf!r} of type {type(tensor_sf).__name__}"
        )
    with np.errstate(over="ignore"):
        return np.float32(tensor_sf)


def _group_amax(xg):
    """NaN-ignoring max of |x| over the last axis; 0 for an all-NaN (or empty) group."""
    # fmax drops NaN like the kernels' fmaxf; the 0 start value makes all-NaN groups 0.
    return np.fmax.reduce(np.abs(xg), axis=-1, initial=np.float32(0))


def _pack_nibbles(codes):
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def _unpack_nibbles(q):
    codes = np.empty(q.shape[:-1] + (2 * q.shape[-1],), dtype=np.uint8)
    codes[..., 0::2] = q & 0xF
    codes[..., 1::2] = q >> 4
    return codes


def _row_groups(shape, k: int, group: int, what: str) -> tuple[tuple, int, int]:
    """After the rule that ``what`` (K, the values per row) is a multiple of ``group``:
    the leading shape, the row count and the groups per row of an array of ``shape``."""
    _require_multiple(k, group, what)
    lead = shape[:-1]
    return lead, math.prod(lead), k // group


def _sf_out(sf_linear, lead, sf_layout):
    if sf_layout == "linear":
        return sf_linear.reshape(lead + sf_linear.shape[-1:])
    return layouts.swizzle_sf(sf_linear)


def _sf_in(sf, lead, groups, sf_layout):
    _require_uint8(sf, "sf")
    m = math.prod(lead)
    if sf_layout == "swizzled":
        return layouts.unswizzle_sf(sf, m, groups)
    if sf.shape != lead + (groups,):
        raise ValueError(
            f"sf must have shape q.shape[:-1] + (G,) = {lead + (groups,)} for "
            f"sf_layout='linear', got {sf.shape}"
        )
    return sf.reshape(m, groups)


def _to_out_dtype(y, dtype):
    # bf16 as its bits in uint16, as the kernels return it (CuPy has no bf16 type).
    if dtype == "bfloat16":
        return y.astype(ml_dtypes.bfloat16).view(np.uint16)
    return y


def e2m1_encode(v):
    """E2M1 codes (uint8, 0..15) of float32 ``v``: spec step 6.

    Round to nearest even over {0, 0.5, 1, 1.5, 2, 3, 4, 6}, saturate above 6
    and Inf, sign bit from ``v`` (so -0 and small negatives give 0x8), NaN 0x7.
    """
    v = _require_float32(v, "v")
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


def e2m1_decode(codes):
    """float32 values of E2M1 codes (uint8, 0..15)."""
    codes = np.asarray(codes)
    if codes.dtype != np.uint8:
        raise TypeError(f"codes must have dtype uint8, got {codes.dtype}")
    if codes.size and int(codes.max()) > 15:
        raise ValueError(f"codes must be E2M1 codes in 0..15, got {int(codes.max())}")
    return _E2M1_VALUES[codes]


def e4m3_encode(s):
    """E4M3FN bytes (uint8) of float32 ``s``: spec step 4, sign-aware.

    Round to nearest even; |s| >= 448 and Inf give 0x7E with the sign of
    ``s``; NaN gives 0x7F; subnormals have step 2**-9 and |s| <= 2**-10 gives
    a zero carrying the sign.
    """
    s = _require_float32(s, "s")
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


def e4m3_decode(sf):
    """float32 values of E4M3FN bytes (uint8); 0x7F and 0xFF are NaN."""
    sf = np.asarray(sf)
    if sf.dtype != np.uint8:
        raise TypeError(f"sf must have dtype uint8, got {sf.dtype}")
    return _E4M3_VALUES[sf]


def _nvfp4_group_scale(sf, tsf):
    """d and inv of spec step 5 for e4m3 bytes ``sf`` and float32 ``tsf``."""
    with np.errstate(all="ignore"):
        d = e4m3_decode(sf) * (np.float32(1) / tsf)
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d)
    return d, inv


def quantize_nvfp4(x, tensor_sf, sf_layout="swizzled"):
    """Quantize ``x`` of shape ``(..., K)`` to NVFP4: returns ``(q, sf)``.

    ``q``: uint8 ``(..., K // 2)``, element 2i in the low nibble of byte i.
    ``sf``: e4m3 bytes, ``(..., K // 16)`` for ``sf_layout="linear"`` or
    ``swizzled_sf_shape(M, K // 16)`` for ``"swizzled"``.
    """
    xf = _input_float32(x)
    k = xf.shape[-1]
    lead, m, groups = _row_groups(xf.shape, k, NVFP4_GROUP, "K")
    _require_choice(sf_layout, "sf_layout", SF_LAYOUTS)
    tsf = _tensor_sf_float32(tensor_sf)
    xg = xf.reshape(m, groups, NVFP4_GROUP)
    with np.errstate(all="ignore"):
        amax = _group_amax(xg)
        sf = e4m3_encode(tsf * (amax * R6))
        _, inv = _nvfp4_group_scale(sf, tsf)
        codes = e2m1_encode(xg * inv[..., None])
    q = _pack_nibbles(codes.reshape(m, k)).reshape(lead + (k // 2,))
    return q, _sf_out(sf, lead, sf_layout)


def dequantize_nvfp4(q, sf, tensor_sf, sf_layout="swizzled", dtype="float32"):
    """``y = e2m1_value(q) * d`` of shape ``(..., 2 * q.shape[-1])``: float32, or for
    ``dtype="bfloat16"`` the bf16 bits as uint16 (round to nearest even), as the kernels return them."""
    _require_uint8(q, "q")
    k = 2 * q.shape[-1]
    lead, m, groups = _row_groups(q.shape, k, NVFP4_GROUP, "K = 2 * q.shape[-1]")
    _require_choice(sf_layout, "sf_layout", SF_LAYOUTS)
    _require_choice(dtype, "dtype", OUT_DTYPES)
    tsf = _tensor_sf_float32(tensor_sf)
    sf_linear = _sf_in(sf, lead, groups, sf_layout)
    d, _ = _nvfp4_group_scale(sf_linear, tsf)
    values = e2m1_decode(_unpack_nibbles(q.reshape(m, k // 2))).reshape(m, groups, NVFP4_GROUP)
    with np.errstate(all="ignore"):
        y = values * d[..., None]
    return _to_out_dtype(y.reshape(lead + (k,)), dtype)


def global_scale(x):
    """``min(2688 / amax(|x|), 2**100)`` as float32; 1.0 when amax is 0 or not finite."""
    xf = _input_float32(x)
    amax = np.fmax.reduce(np.abs(xf), axis=None, initial=np.float32(0))
    if amax == 0 or not np.isfinite(amax):
        return np.float32(1)
    with np.errstate(over="ignore"):
        return np.minimum(np.float32(2688) / amax, np.float32(2.0**100))


def _mx_exponent(amax, mode):
    """The e8m0 exponent ``e`` (int64, in [-127, 127]) of each group's float32 ``amax``."""
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


def quantize_mxfp4(x, mode="rceil", sf_layout="swizzled"):
    """Quantize ``x`` of shape ``(..., K)`` to MXFP4 (groups of 32, e8m0 scales): ``(q, sf)``."""
    xf = _input_float32(x)
    k = xf.shape[-1]
    lead, m, groups = _row_groups(xf.shape, k, MXFP4_GROUP, "K")
    _require_choice(mode, "mode", MX_MODES)
    _require_choice(sf_layout, "sf_layout", SF_LAYOUTS)
    xg = xf.reshape(m, groups, MXFP4_GROUP)
    amax = _group_amax(xg)
    e = _mx_exponent(amax, mode)
    # 2**-e for e in [-127, 127] is a float32 (2**-127 a subnormal), so this is exact.
    scale = np.ldexp(1.0, -e).astype(np.float32)
    with np.errstate(all="ignore"):
        codes = e2m1_encode(xg * scale[..., None])
    q = _pack_nibbles(codes.reshape(m, k)).reshape(lead + (k // 2,))
    sf = (e + E8M0_BIAS).astype(np.uint8)
    return q, _sf_out(sf, lead, sf_layout)


def dequantize_mxfp4(q, sf, sf_layout="swizzled", dtype="float32"):
    """``y = e2m1_value(q) * 2**(sf - 127)`` in float32 (or bf16 bits as uint16); sf byte 0xFF is NaN."""
    _require_uint8(q, "q")
    k = 2 * q.shape[-1]
    lead, m, groups = _row_groups(q.shape, k, MXFP4_GROUP, "K = 2 * q.shape[-1]")
    _require_choice(sf_layout, "sf_layout", SF_LAYOUTS)
    _require_choice(dtype, "dtype", OUT_DTYPES)
    sf_linear = _sf_in(sf, lead, groups, sf_layout)
    # OCP MX: 0xFF is the e8m0 NaN; the others are exact float32 powers of two.
    scale = np.where(
        sf_linear == 0xFF, np.nan, np.ldexp(1.0, sf_linear.astype(np.int64) - E8M0_BIAS)
    ).astype(np.float32)
    values = e2m1_decode(_unpack_nibbles(q.reshape(m, k // 2))).reshape(m, groups, MXFP4_GROUP)
    with np.errstate(all="ignore"):
        y = values * scale[..., None]
    return _to_out_dtype(y.reshape(lead + (k,)), dtype)
