"""The steps of NVFP4_SPEC.md that every reference function is built from: the rules
on shapes and arguments, the scale layouts, a group's amax, scale and codes. The
public reference functions (``reference``, and the fused, training and expert
quantizers beside it) compose these; nothing here is specific to one of them."""

from __future__ import annotations

import math
import numbers

import numpy as np

from . import layouts
from .formats import R6, e2m1_encode, e4m3_decode, e4m3_encode

SF_LAYOUTS = ("swizzled", "linear", "8x4")
# The spec's global scale: min(2688 / amax, 2**100), so that 6 * 448 maps to the tensor's amax.
GLOBAL_SCALE_NUMERATOR = np.float32(448 * 6)
GLOBAL_SCALE_MAX = np.float32(2.0**100)


def require_codes_array(a, name: str) -> None:
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(a).__module__}.{type(a).__name__}")
    if a.dtype != np.uint8:
        raise TypeError(f"{name} must have dtype uint8, got {a.dtype}")
    if a.ndim < 1:
        raise ValueError(f"{name} must have rank >= 1, got shape {a.shape}")


def require_choice(value, name: str, choices, error: type[Exception] = ValueError) -> None:
    """``value`` is one of ``choices``, of the same type too (128.0 == 128 would otherwise
    pass, and a config field's value is written into the kernel's source); else ``error``
    naming the argument, the value and the choices."""
    if not any(type(value) is type(c) and value == c for c in choices):
        names = [repr(c) for c in choices]
        allowed = " or ".join(names) if len(names) <= 2 else f"one of {', '.join(names)}"
        raise error(f"{name} must be {allowed}, got {value!r}")


def row_groups(shape, k: int, group: int, what: str) -> tuple[tuple, int, int]:
    """After the rule that ``what`` (K, the values per row) is a multiple of ``group``:
    the leading shape, the row count and the groups per row of an array of ``shape``."""
    if k % group:
        raise ValueError(f"{what} must be a multiple of {group}, got {k}")
    lead = tuple(shape[:-1])
    return lead, math.prod(lead), k // group


def require_padded_k(padded_k) -> None:
    """``padded_k`` (the outputs' row width) is None or an int."""
    if padded_k is not None and (isinstance(padded_k, bool) or not isinstance(padded_k, numbers.Integral)):
        raise TypeError(f"padded_k must be an int or None, got {padded_k!r} of type {type(padded_k).__name__}")


def padded_width(padded_k, k: int, group: int, what: str) -> int:
    """The outputs' row width: ``padded_k``, after its rules (None or an int, ``>= K`` (``what``
    names K) and a multiple of the ``group``), or K where it is None."""
    require_padded_k(padded_k)
    if padded_k is None:
        return k
    if padded_k < k:
        raise ValueError(f"padded_k must be >= {what} = {k}, got {padded_k}")
    if padded_k % group:
        raise ValueError(f"padded_k must be a multiple of {group}, got {padded_k}")
    return int(padded_k)


def tensor_sf_float32(tensor_sf) -> np.float32:
    """A scalar ``tensor_sf`` (Python or numpy real, or a 0-d array) as float32."""
    if isinstance(tensor_sf, np.ndarray) and tensor_sf.ndim == 0:
        tensor_sf = tensor_sf[()]
    if isinstance(tensor_sf, bool) or not isinstance(tensor_sf, numbers.Real):
        raise TypeError("tensor_sf must be a Python float or a numpy float32 scalar, "
                        f"got {tensor_sf!r} of type {type(tensor_sf).__name__}")
    with np.errstate(over="ignore"):
        return np.float32(tensor_sf)


def scales_out(sf_linear: np.ndarray, lead: tuple, sf_layout: str) -> np.ndarray:
    """Scale bytes ``(M, G)`` in ``sf_layout``: ``lead + (G,)`` linear, swizzled, or 8x4."""
    if sf_layout == "linear":
        return sf_linear.reshape(lead + sf_linear.shape[-1:])
    if sf_layout == "8x4":
        return layouts.swizzle_sf_8x4(sf_linear)
    return layouts.swizzle_sf(sf_linear)


def scales_in(sf, lead: tuple, groups: int, sf_layout: str) -> np.ndarray:
    """Scale bytes given in ``sf_layout`` as ``(M, G)``."""
    require_codes_array(sf, "sf")
    m = math.prod(lead)
    if sf_layout == "swizzled":
        return layouts.unswizzle_groups(sf, m, groups)
    if sf_layout == "8x4":
        return layouts.unswizzle_groups_8x4(sf, m, groups)
    if sf.shape != lead + (groups,):
        raise ValueError(f"sf must have shape q.shape[:-1] + (G,) = {lead + (groups,)} for "
                         f"sf_layout='linear', got {sf.shape}")
    return sf.reshape(m, groups)


def group_amax(xg: np.ndarray) -> np.ndarray:
    """Spec step 2: NaN-ignoring max of |x| over the last axis; 0 for an all-NaN (or empty) group."""
    # fmax drops NaN like the kernels' fmaxf; the 0 start value makes all-NaN groups 0.
    return np.fmax.reduce(np.abs(xg), axis=-1, initial=np.float32(0))


def global_scale_of_amax(amax):
    """Spec "Global scale" of float32 ``amax`` (a scalar or an array): ``min(2688 / amax,
    2**100)`` correctly rounded, and 1.0 where ``amax`` is 0 or not finite."""
    with np.errstate(all="ignore"):
        scale = np.minimum(GLOBAL_SCALE_NUMERATOR / amax, GLOBAL_SCALE_MAX)
    return np.where((amax == 0) | ~np.isfinite(amax), np.float32(1), scale).astype(np.float32)


def nvfp4_multipliers(sf: np.ndarray, tsf) -> tuple[np.ndarray, np.ndarray]:
    """Spec step 5: ``d`` and ``inv`` of e4m3 bytes ``sf`` under float32 tensor scale(s)
    ``tsf`` (a scalar, or an array that broadcasts against ``sf``)."""
    with np.errstate(all="ignore"):
        d = e4m3_decode(sf) * (np.float32(1) / tsf)
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d)
    return d, inv


def nvfp4_scales(amax: np.ndarray, tsf, r=R6) -> tuple[np.ndarray, np.ndarray]:
    """Spec steps 3-5: the e4m3 scale bytes of groups of this ``amax`` and their ``inv``;
    ``r`` is the multiplier that maps amax to the largest code (R6, or R4 = 0.25 for 4/6)."""
    with np.errstate(all="ignore"):
        sf = e4m3_encode(tsf * (amax * r))
    return sf, nvfp4_multipliers(sf, tsf)[1]


def quantize_groups(xg: np.ndarray, tsf) -> tuple[np.ndarray, np.ndarray]:
    """Spec steps 2-6 on float32 groups ``xg`` of shape ``(..., G, 16)``: the codes (same
    shape) and the scale bytes ``(..., G)``; ``tsf`` broadcasts against ``(..., G)``."""
    sf, inv = nvfp4_scales(group_amax(xg), tsf)
    with np.errstate(all="ignore"):
        codes = e2m1_encode(xg * inv[..., None])
    return codes, sf
