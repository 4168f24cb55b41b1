"""The serving quantizers of the numpy reference: NVFP4/MXFP4 of ``x`` itself, of SiLU·mul of
``x`` and of (add+)RMSNorm of ``x``, with per-row tensor scales, the 8x4 layout and padded
outputs (NVFP4_SPEC.md, "The project's exact sequences: fused serving quantizers").

A fused quantizer is, by the spec's definition, its unfused prologue (``prologues``: the
intermediate ``h`` rounded to ``x``'s dtype) followed by the quantizer of ``h``, so the
functions here compose the two literally. What they add to the spec's steps 1-6:

- ``tensor_sf``: a scalar (as before); a float32 array with one value per flattened row, of
  shape ``(M,)`` or ``x.shape[:-1]``, which row ``m`` uses in steps 3 and 5; ``"dynamic"``,
  the global scale of the whole ``h``, returned as a third output (a float32 scalar); or
  ``"dynamic_per_row"``, each row's global scale of that row alone, returned as a float32
  array of shape ``x.shape[:-1]``.
- ``sf_layout="8x4"`` besides ``"swizzled"`` and ``"linear"``.
- ``padded_k``: the row width of the outputs (vLLM's ``padded_n``), ``>= K`` and a multiple
  of the group size; ``q``'s columns beyond ``K`` and the scale groups beyond ``K / group``
  are 0x00, as is every padding byte of every layout.
"""

from __future__ import annotations

import numpy as np

from .formats import E8M0_BIAS, GROUP_SIZE, MX_MODES, e2m1_encode, e8m0_exponent, input_float32, pack_nibbles
from .groups import (
    SF_LAYOUTS,
    global_scale_of_amax,
    group_amax,
    padded_width,
    quantize_groups,
    require_choice,
    row_groups,
    scales_out,
    tensor_sf_float32,
)
from .prologues import rms_norm_args, rms_norm_values, silu_and_mul_args, silu_and_mul_values

__all__ = [
    "quantize_nvfp4",
    "quantize_mxfp4",
    "silu_and_mul_quantize_nvfp4",
    "silu_and_mul_quantize_mxfp4",
    "rms_norm_quantize_nvfp4",
    "rms_norm_quantize_mxfp4",
]

NVFP4_GROUP = GROUP_SIZE["nvfp4"]
MXFP4_GROUP = GROUP_SIZE["mxfp4"]
DYNAMIC_MODES = ("dynamic", "dynamic_per_row")
TENSOR_SF_RULE = ("a Python float or a numpy float32 scalar, a float32 array of one value per row "
                  "(shape (M,) or x.shape[:-1]), 'dynamic' or 'dynamic_per_row'")


class Rows:
    """The rows an op quantizes: the leading shape of ``x``, the row count ``M``, the values
    per row ``K`` and the row width ``padded`` of the outputs, after the rules on ``K`` (a
    multiple of the format's group) and on ``padded_k``."""

    def __init__(self, lead: tuple, k: int, group: int, what: str, padded_k):
        self.lead, self.m, self.groups = row_groups(lead + (k,), k, group, what)
        self.k, self.group = k, group
        self.padded = padded_width(padded_k, k, group, what)

    def outputs(self, codes: np.ndarray, sf: np.ndarray, sf_layout: str) -> tuple[np.ndarray, np.ndarray]:
        """``q`` and the scales in ``sf_layout`` from codes ``(M, K)`` and scale bytes ``(M, G)``,
        zero-padded to the row width: padding is 0x00 whatever the formulas would give for it."""
        q = np.zeros((self.m, self.padded // 2), dtype=np.uint8)
        q[:, : self.k // 2] = pack_nibbles(codes)
        sf_padded = np.zeros((self.m, self.padded // self.group), dtype=np.uint8)
        sf_padded[:, : self.groups] = sf
        return q.reshape(self.lead + (self.padded // 2,)), scales_out(sf_padded, self.lead, sf_layout)


class TensorScale:
    """A checked ``tensor_sf``: a float32 scalar, per-row float32 values, or a dynamic mode,
    resolved against the float32 values it scales only once they exist (after every argument
    of an op is checked, so a bad argument leaves a residual untouched)."""

    def __init__(self, tensor_sf, rows: Rows):
        self.rows = rows
        self.value: np.ndarray | np.float32
        self.mode = tensor_sf if isinstance(tensor_sf, str) and tensor_sf in DYNAMIC_MODES else None
        if self.mode is not None:
            return
        if isinstance(tensor_sf, np.ndarray) and tensor_sf.ndim > 0:
            if tensor_sf.dtype != np.float32:
                raise TypeError(f"tensor_sf must have dtype float32 as an array of one value per row, "
                                f"got {tensor_sf.dtype}")
            if tensor_sf.shape not in ((rows.m,), rows.lead):
                raise ValueError(f"tensor_sf must have shape (M,) = {(rows.m,)} or x.shape[:-1] = {rows.lead} "
                                 f"as an array of one value per row, got {tensor_sf.shape}")
            self.value = tensor_sf.reshape(rows.m, 1)
        elif isinstance(tensor_sf, (str, bytes)):
            raise ValueError(f"tensor_sf must be {TENSOR_SF_RULE}, got {tensor_sf!r}")
        else:
            try:
                self.value = tensor_sf_float32(tensor_sf)
            except TypeError:
                raise TypeError(f"tensor_sf must be {TENSOR_SF_RULE}, got {tensor_sf!r} "
                                f"of type {type(tensor_sf).__name__}") from None

    def resolve(self, xf: np.ndarray):
        """The scale(s) for rows ``xf`` of shape ``(M, K)`` (broadcasting against ``(M, G)``),
        and the dynamic scale to return, or None for a given ``tensor_sf``."""
        if self.mode == "dynamic":
            scale = global_scale_of_amax(group_amax(xf.reshape(1, -1))[0])[()]
            return scale, scale
        if self.mode == "dynamic_per_row":
            scales = global_scale_of_amax(group_amax(xf))
            return scales[:, None], scales.reshape(self.rows.lead)
        return self.value, None


def _nvfp4(xf: np.ndarray, rows: Rows, scale: TensorScale, sf_layout: str) -> tuple:
    tsf, dynamic = scale.resolve(xf)
    codes, sf = quantize_groups(xf.reshape(rows.m, rows.groups, NVFP4_GROUP), tsf)
    out = rows.outputs(codes.reshape(rows.m, rows.k), sf, sf_layout)
    return out if dynamic is None else out + (dynamic,)


def _mxfp4(xf: np.ndarray, rows: Rows, mode: str, sf_layout: str) -> tuple[np.ndarray, np.ndarray]:
    xg = xf.reshape(rows.m, rows.groups, MXFP4_GROUP)
    e = e8m0_exponent(group_amax(xg), mode)
    # 2**-e for e in [-127, 127] is a float32 (2**-127 a subnormal), so this is exact.
    scale = np.ldexp(1.0, -e).astype(np.float32)
    with np.errstate(all="ignore"):
        codes = e2m1_encode(xg * scale[..., None])
    return rows.outputs(codes.reshape(rows.m, rows.k), (e + E8M0_BIAS).astype(np.uint8), sf_layout)


def _rows_2d(xf: np.ndarray, rows: Rows) -> np.ndarray:
    return xf.reshape(rows.m, rows.k)


# -------------------------------------------------------------- quantize x itself


def quantize_nvfp4(x, tensor_sf, sf_layout="swizzled", *, padded_k=None):
    """Quantize ``x`` of shape ``(..., K)`` (bf16, bf16 bits as uint16, fp16 or float32) to
    NVFP4: ``(q, sf)``, or ``(q, sf, tensor_sf)`` for a dynamic ``tensor_sf``.

    ``q``: uint8 ``(..., padded_k // 2)``, element 2i in the low nibble of byte i.
    ``sf``: e4m3 bytes of ``G = padded_k // 16`` groups per row, ``(..., G)`` for
    ``sf_layout="linear"``, ``swizzled_sf_shape(M, padded_k)`` for ``"swizzled"``,
    ``sf_8x4_shape(M, padded_k)`` for ``"8x4"``. ``padded_k`` defaults to ``K``.
    ``tensor_sf``: see the module docstring.
    """
    xf = input_float32(x)
    rows = Rows(xf.shape[:-1], xf.shape[-1], NVFP4_GROUP, "K", padded_k)
    require_choice(sf_layout, "sf_layout", SF_LAYOUTS)
    scale = TensorScale(tensor_sf, rows)
    return _nvfp4(_rows_2d(xf, rows), rows, scale, sf_layout)


def quantize_mxfp4(x, mode="rceil", sf_layout="swizzled", *, padded_k=None):
    """Quantize ``x`` of shape ``(..., K)`` to MXFP4 (groups of 32, e8m0 scales): ``(q, sf)``,
    shaped as by ``quantize_nvfp4`` with ``G = padded_k // 32``."""
    xf = input_float32(x)
    rows = Rows(xf.shape[:-1], xf.shape[-1], MXFP4_GROUP, "K", padded_k)
    require_choice(mode, "mode", MX_MODES)
    require_choice(sf_layout, "sf_layout", SF_LAYOUTS)
    return _mxfp4(_rows_2d(xf, rows), rows, mode, sf_layout)


# ----------------------------------------------------------------- SiLU·mul fused


def silu_and_mul_quantize_nvfp4(x, tensor_sf, sf_layout="swizzled", *, padded_k=None):
    """NVFP4 of ``h = silu_and_mul(x)`` for ``x`` of shape ``(..., 2N)``, ``N`` a multiple of 16:
    the outputs of ``quantize_nvfp4(h, tensor_sf, sf_layout, padded_k=padded_k)``, a dynamic
    ``tensor_sf`` taken over ``h``."""
    gate, up, dtype = silu_and_mul_args(x)
    rows = Rows(gate.shape[:-1], gate.shape[-1], NVFP4_GROUP, "N = x.shape[-1] // 2", padded_k)
    require_choice(sf_layout, "sf_layout", SF_LAYOUTS)
    scale = TensorScale(tensor_sf, rows)
    return _nvfp4(_rows_2d(silu_and_mul_values(gate, up, dtype), rows), rows, scale, sf_layout)


def silu_and_mul_quantize_mxfp4(x, mode="rceil", sf_layout="swizzled", *, padded_k=None):
    """MXFP4 of ``h = silu_and_mul(x)`` for ``x`` of shape ``(..., 2N)``, ``N`` a multiple of 32:
    the outputs of ``quantize_mxfp4(h, mode, sf_layout, padded_k=padded_k)``."""
    gate, up, dtype = silu_and_mul_args(x)
    rows = Rows(gate.shape[:-1], gate.shape[-1], MXFP4_GROUP, "N = x.shape[-1] // 2", padded_k)
    require_choice(mode, "mode", MX_MODES)
    require_choice(sf_layout, "sf_layout", SF_LAYOUTS)
    return _mxfp4(_rows_2d(silu_and_mul_values(gate, up, dtype), rows), rows, mode, sf_layout)


# ------------------------------------------------------------------ RMSNorm fused


def rms_norm_quantize_nvfp4(x, weight, tensor_sf, eps=1e-6, residual=None, sf_layout="swizzled", *,
                            padded_k=None):
    """NVFP4 of ``h = rms_norm(x, weight, eps, residual)`` for ``x`` of shape ``(..., K)``: the
    outputs of ``quantize_nvfp4(h, tensor_sf, sf_layout, padded_k=padded_k)``, a dynamic
    ``tensor_sf`` taken over ``h``. With ``residual``, it is updated in place with
    ``dtype(x + residual)`` (only once every argument has passed its checks)."""
    xf, wf, eps32, dtype = rms_norm_args(x, weight, eps, residual)
    rows = Rows(xf.shape[:-1], xf.shape[-1], NVFP4_GROUP, "K", padded_k)
    require_choice(sf_layout, "sf_layout", SF_LAYOUTS)
    scale = TensorScale(tensor_sf, rows)
    return _nvfp4(_rows_2d(rms_norm_values(xf, wf, eps32, residual, dtype), rows), rows, scale, sf_layout)


def rms_norm_quantize_mxfp4(x, weight, eps=1e-6, residual=None, mode="rceil", sf_layout="swizzled", *,
                            padded_k=None):
    """MXFP4 of ``h = rms_norm(x, weight, eps, residual)``: the outputs of
    ``quantize_mxfp4(h, mode, sf_layout, padded_k=padded_k)``; ``residual`` as for
    ``rms_norm_quantize_nvfp4``."""
    xf, wf, eps32, dtype = rms_norm_args(x, weight, eps, residual)
    rows = Rows(xf.shape[:-1], xf.shape[-1], MXFP4_GROUP, "K", padded_k)
    require_choice(mode, "mode", MX_MODES)
    require_choice(sf_layout, "sf_layout", SF_LAYOUTS)
    return _mxfp4(_rows_2d(rms_norm_values(xf, wf, eps32, residual, dtype), rows), rows, mode, sf_layout)
