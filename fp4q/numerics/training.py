"""Bit-exact numpy reference of the NVFP4 training quantizers: the executable form of
NVFP4_SPEC.md, "The project's exact sequences: training quantizers".

NVFP4 training (NVIDIA's NVFP4 pretraining recipe as Transformer Engine ships it)
quantizes every GEMM operand in two directions: rowwise (groups of 16 along K, for
the forward GEMM) and columnwise (groups of 16 along M, the rowwise output of
``x^T``, for the weight-gradient GEMM). On top of the spec's steps 1-6 it adds 16x16
block scales (weights), stochastic rounding (gradients), a 16-point random Hadamard
transform before the columnwise quantization (the weight-gradient GEMM's inputs),
and 4/6 block scaling; fake quantization applies any of them and dequantizes again.
Each of these is a float32 sequence fixed by the spec, so a kernel reproduces the
bytes whatever its launch: stochastic rounding draws its bits from Philox keyed by
``(seed, offset)`` and the group's index (``philox``), rounds like
``cvt.rs.satfinite.e2m1x4.f32`` (``stochastic``), and the Hadamard transform is a
fixed butterfly (``hadamard``). The functions here compose those and the shared steps
of ``groups``; like ``reference`` they follow the formulas for any input and any
float32 scalar ``tensor_sf``.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from .formats import GROUP_SIZE, e2m1_decode, e2m1_encode, input_float32, pack_nibbles, round_to
from .groups import (
    SF_LAYOUTS,
    group_amax,
    nvfp4_multipliers,
    nvfp4_scales,
    require_choice,
    row_groups,
    scales_out,
)
from .hadamard import hadamard16, require_sign_mask
from .philox import group_random_words, require_u64
from .stochastic import cvt_rs_random_bytes, e2m1_round_stochastic

__all__ = ["NVFP4TrainingQuantized", "quantize_nvfp4_training", "fake_quantize_nvfp4"]

GROUP = GROUP_SIZE["nvfp4"]
R4 = np.float32(0.25)  # maps a group's amax to 4, as R6 maps it to 6
DYNAMIC = "dynamic"
# The dynamic tensor scale is NUMERATOR / amax: 448 * 6 (global_scale), or 256 * 6 under
# 4/6, which leaves the map-to-4 candidate's scale (amax * 1.5 / 6 * 256 = 384 at most)
# below 448 (fouroversix's E4M3_MAX_FOUROVERSIX, TE's nvfp4_4over6_e4m3_use_256).
NUMERATOR = np.float32(2688)
NUMERATOR_FOUR_OVER_SIX = np.float32(1536)
TENSOR_SF_MAX = np.float32(2.0**100)


@dataclass(frozen=True, eq=False)
class NVFP4TrainingQuantized:
    """The outputs of ``quantize_nvfp4_training``; a direction not asked for is ``None``.

    ``q``: uint8 ``x.shape[:-1] + (K // 2,)``, the rowwise codes (element ``2i`` in the low
    nibble of byte ``i``). ``sf``: its e4m3 scale bytes, ``x.shape[:-1] + (K // 16,)``
    (``"linear"``) or ``swizzled_sf_shape(M, K)``. ``q_t``: uint8 ``(K, M // 2)``, the
    columnwise codes, i.e. the rowwise codes of ``x^T`` (``x`` flattened to ``(M, K)``).
    ``sf_t``: ``(K, M // 16)`` or ``swizzled_sf_shape(K, M)``. ``tensor_sf`` and
    ``tensor_sf_t``: the float32 tensor scale each direction used (the given scale as
    float32, or the computed one for ``"dynamic"``); dequantize each direction with its own.
    """

    q: np.ndarray | None
    sf: np.ndarray | None
    q_t: np.ndarray | None
    sf_t: np.ndarray | None
    tensor_sf: np.float32 | None
    tensor_sf_t: np.float32 | None


def _require_bool(value, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {value!r} of type {type(value).__name__}")
    return bool(value)


def _tensor_sf_spec(value, name: str):
    """``"dynamic"``, or the scalar as float32 (no range check: the formulas define the bits)."""
    if isinstance(value, str):
        if value != DYNAMIC:
            raise ValueError(f"{name} must be a number or 'dynamic', got {value!r}")
        return DYNAMIC
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a Python float, a numpy float32 scalar or 'dynamic', "
                        f"got {value!r} of type {type(value).__name__}")
    with np.errstate(over="ignore"):
        return np.float32(value)


def dynamic_tensor_sf(values: np.ndarray, four_over_six: bool) -> np.float32:
    """``min(float32(N / amax), 2**100)`` over the float32 ``values`` being quantized, ``N``
    2688 (1536 under 4/6); 1.0 when that amax (NaN ignored) is 0 or not finite."""
    amax = np.fmax.reduce(np.abs(values), axis=None, initial=np.float32(0))
    if amax == 0 or not np.isfinite(amax):
        return np.float32(1)
    numerator = NUMERATOR_FOUR_OVER_SIX if four_over_six else NUMERATOR
    with np.errstate(over="ignore"):
        return np.minimum(numerator / amax, TENSOR_SF_MAX)


def _resolve(spec, values: np.ndarray, four_over_six: bool) -> np.float32:
    return dynamic_tensor_sf(values, four_over_six) if spec is DYNAMIC else spec


def _sequential_sum(a: np.ndarray, axis: int) -> np.ndarray:
    """Float32 sum over ``axis`` from index 0 up, each addition rounded (the spec's order)."""
    a = np.moveaxis(a, axis, 0)
    total = np.zeros(a.shape[1:], np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for term in a:
            total = total + term
    return total


def _block_sse(xb: np.ndarray, sf: np.ndarray, tsf: np.float32, inv: np.ndarray) -> np.ndarray:
    """A candidate's float32 sum of squared errors per block of ``xb`` (..., rows, 16): its
    round-to-nearest codes dequantized (``e2m1_value * d``, as ``dequantize_nvfp4`` in
    float32) minus the values, squared, summed along each row and then over the rows."""
    d, _ = nvfp4_multipliers(sf, tsf)
    with np.errstate(all="ignore"):
        codes = e2m1_encode(xb * inv[..., None, None])
        err = e2m1_decode(codes) * d[..., None, None] - xb
        squares = err * err
    return _sequential_sum(_sequential_sum(squares, -1), -1)


def _quantize_blocks(xb: np.ndarray, tsf: np.float32, rbytes, four_over_six: bool):
    """Codes (shape of ``xb``) and scale bytes (``xb.shape[:-2]``) of float32 blocks ``xb``
    (..., rows, 16) that share one scale each: 1 row for 16-element groups, 16 for 16x16
    blocks. ``rbytes`` (uint8, shape of ``xb``) rounds stochastically; None rounds to
    nearest. Under 4/6 the candidate is chosen by its round-to-nearest error, so that
    stochastic rounding of the chosen one stays unbiased."""
    amax = group_amax(xb.reshape(xb.shape[:-2] + (xb.shape[-2] * GROUP,)))
    sf, inv = nvfp4_scales(amax, tsf)
    if four_over_six:
        sf4, inv4 = nvfp4_scales(amax, tsf, R4)
        # 6 on a tie; a NaN error (a NaN in the block) compares false and keeps 6 too.
        pick4 = _block_sse(xb, sf4, tsf, inv4) < _block_sse(xb, sf, tsf, inv)
        sf = np.where(pick4, sf4, sf)
        inv = np.where(pick4, inv4, inv)
    with np.errstate(all="ignore"):
        scaled = xb * inv[..., None, None]
    codes = e2m1_encode(scaled) if rbytes is None else e2m1_round_stochastic(scaled, rbytes)
    return codes, sf


def _random_bytes(seed: int, offset: int, rows: int, groups: int, direction: str) -> np.ndarray:
    """The random byte of every element of a ``rows x 16*groups`` output, as ``(rows, groups,
    16)``: group ``g = row * groups + j`` draws one Philox block, word ``w`` rounds its
    elements ``4w .. 4w+3`` through ``cvt.rs``."""
    words = group_random_words(seed, offset, np.arange(rows * groups, dtype=np.uint64), direction)
    return cvt_rs_random_bytes(words).reshape(rows, groups, GROUP)


def _to_blocks(a: np.ndarray, block_2d: bool) -> np.ndarray:
    """``(R, G, 16)`` group layout to ``(R, G, 1, 16)`` groups or ``(R/16, G, 16, 16)`` blocks."""
    r, g, _ = a.shape
    if block_2d:
        return a.reshape(r // GROUP, GROUP, g, GROUP).transpose(0, 2, 1, 3)
    return a.reshape(r, g, 1, GROUP)


def _quantize_rows(values: np.ndarray, tsf: np.float32, *, block_2d: bool, rbytes,
                   four_over_six: bool) -> tuple[np.ndarray, np.ndarray]:
    """Codes ``(R, C)`` and linear scale bytes ``(R, C // 16)`` of float32 ``values``
    ``(R, C)`` quantized along its rows; with ``block_2d`` one scale per 16x16 block,
    repeated on each of the block's 16 rows."""
    r, c = values.shape
    xb = _to_blocks(values.reshape(r, c // GROUP, GROUP), block_2d)
    rb = None if rbytes is None else _to_blocks(rbytes, block_2d)
    codes, sf = _quantize_blocks(xb, tsf, rb, four_over_six)
    if block_2d:
        return codes.transpose(0, 2, 1, 3).reshape(r, c), np.repeat(sf, GROUP, axis=0)
    return codes.reshape(r, c), sf.reshape(r, c // GROUP)


def check_combination(m: int, *, block_2d: bool, hadamard, rowwise: bool = True, columnwise: bool | None = None) -> None:
    """NVFP4_SPEC.md's "Combinations" on ``M`` (``x``'s rows, leading dimensions flattened), the
    directions and the Hadamard transform: the rules of the training quantizer (``columnwise`` a
    bool) and of fake quantization (``columnwise`` None: one direction, along K), here and in
    the ops alike."""
    if columnwise is not None and not (rowwise or columnwise):
        raise ValueError("rowwise and columnwise are both False: at least one direction must be asked for")
    for option, on in (("columnwise", columnwise), ("block_2d", block_2d)):
        if on and m % GROUP:
            raise ValueError(f"{option}=True needs M (x's rows, leading dimensions flattened) to be a multiple of "
                             f"16, got M={m}")
    if hadamard is not None and block_2d:
        why = ("the transform mixes the values of a group along K, which 16x16 blocks do not follow"
               if columnwise is None else
               "the transform would make the columnwise output differ from the transposed rowwise one that 2D "
               "blocks guarantee")
        raise ValueError(f"hadamard={hadamard!r} cannot be combined with block_2d=True: {why}")
    if hadamard is not None and columnwise is False:
        raise ValueError(f"hadamard={hadamard!r} needs columnwise=True: the transform applies to the columnwise "
                         "direction only")


def quantize_nvfp4_training(x, tensor_sf, *, rowwise=True, columnwise=True, columnwise_tensor_sf=None,
                            block_2d=False, stochastic=False, seed=0, offset=0, hadamard=None,
                            four_over_six=False, sf_layout="swizzled") -> NVFP4TrainingQuantized:
    """Quantize ``x`` (bf16, bf16 bits as uint16, or fp16; ``(..., K)``, flattened to ``(M, K)``)
    to NVFP4 rowwise and/or columnwise; returns an ``NVFP4TrainingQuantized``.

    ``tensor_sf``: a float32 scalar or ``"dynamic"`` (``dynamic_tensor_sf`` of the values
    each direction quantizes: 2688 / amax, or 1536 / amax with ``four_over_six``).
    ``columnwise_tensor_sf``: the columnwise direction's own scale (default: as
    ``tensor_sf``; ``"dynamic"`` takes the columnwise values, post-Hadamard).
    ``block_2d``: one scale per 16x16 block, shared by both directions, so that ``q_t`` is
    the transpose of ``q`` nibble for nibble (random bits included: each element is
    rounded once). ``stochastic``: ``cvt.rs`` rounding with Philox bits of ``(seed,
    offset)`` (64-bit unsigned each), both directions. ``hadamard``: a 16-bit sign mask;
    the random Hadamard transform is applied to the columnwise direction only (where
    Transformer Engine applies it: the weight-gradient GEMM's inputs). ``four_over_six``:
    each group (block) keeps the map-to-4 scale when its squared error is smaller.
    Columnwise outputs and ``block_2d`` need ``M % 16 == 0``.
    """
    xf = input_float32(x)
    k = xf.shape[-1]
    lead, m, groups = row_groups(xf.shape, k, GROUP, "K")
    rowwise = _require_bool(rowwise, "rowwise")
    columnwise = _require_bool(columnwise, "columnwise")
    block_2d = _require_bool(block_2d, "block_2d")
    stochastic = _require_bool(stochastic, "stochastic")
    four_over_six = _require_bool(four_over_six, "four_over_six")
    seed = require_u64(seed, "seed")
    offset = require_u64(offset, "offset")
    require_choice(sf_layout, "sf_layout", SF_LAYOUTS)
    mask = None if hadamard is None else require_sign_mask(hadamard, "hadamard")
    check_combination(m, block_2d=block_2d, hadamard=hadamard, rowwise=rowwise, columnwise=columnwise)
    spec = _tensor_sf_spec(tensor_sf, "tensor_sf")
    if columnwise_tensor_sf is None:
        spec_t = spec
    elif block_2d:
        raise ValueError(f"columnwise_tensor_sf={columnwise_tensor_sf!r} cannot be combined with "
                         "block_2d=True: both directions share the 2D blocks' scales and tensor_sf")
    else:
        spec_t = _tensor_sf_spec(columnwise_tensor_sf, "columnwise_tensor_sf")

    x2d = xf.reshape(m, k)
    q = sf = q_t = sf_t = tsf_row = tsf_col = None
    if block_2d:
        tsf_row = tsf_col = _resolve(spec, x2d, four_over_six)
        rbytes = _random_bytes(seed, offset, m, groups, "rowwise") if stochastic else None
        codes, sf_lin = _quantize_rows(x2d, tsf_row, block_2d=True, rbytes=rbytes,
                                       four_over_six=four_over_six)
        if columnwise:
            # Block (i, b) holds sf_lin[16 i, b]; row k of x^T meets block (., k // 16).
            sf_t_lin = np.repeat(sf_lin[::GROUP].T, GROUP, axis=0)
            q_t = pack_nibbles(codes.T)
            sf_t = scales_out(sf_t_lin, (k,), sf_layout)
    else:
        if rowwise:
            tsf_row = _resolve(spec, x2d, four_over_six)
            rbytes = _random_bytes(seed, offset, m, groups, "rowwise") if stochastic else None
            codes, sf_lin = _quantize_rows(x2d, tsf_row, block_2d=False, rbytes=rbytes,
                                           four_over_six=four_over_six)
        if columnwise:
            xt = np.ascontiguousarray(x2d.T)
            if mask is not None:
                xt = hadamard16(xt, mask)
            tsf_col = _resolve(spec_t, xt, four_over_six)
            rbytes_t = _random_bytes(seed, offset, k, m // GROUP, "columnwise") if stochastic else None
            codes_t, sf_t_lin = _quantize_rows(xt, tsf_col, block_2d=False, rbytes=rbytes_t,
                                               four_over_six=four_over_six)
            q_t = pack_nibbles(codes_t)
            sf_t = scales_out(sf_t_lin, (k,), sf_layout)
    if rowwise:
        q = pack_nibbles(codes).reshape(lead + (k // 2,))
        sf = scales_out(sf_lin, lead, sf_layout)
    else:
        tsf_row = None
    return NVFP4TrainingQuantized(q=q, sf=sf, q_t=q_t, sf_t=sf_t, tensor_sf=tsf_row,
                                  tensor_sf_t=tsf_col if columnwise else None)


def fake_quantize_nvfp4(x, tensor_sf, *, block_2d=False, stochastic=False, seed=0, offset=0,
                        hadamard=None, four_over_six=False) -> np.ndarray:
    """``dequantize(quantize(x))`` in ``x``'s dtype and shape: the rowwise direction of
    ``quantize_nvfp4_training`` with the same options (its random bits included), each
    value ``e2m1_value * d`` in float32, rounded to nearest even into bf16 (an ml_dtypes
    bfloat16 array, or its bits as uint16 for uint16 input) or fp16.

    ``hadamard`` (a 16-bit sign mask) transforms each group of 16 along K first and
    applies the inverse transform (``hadamard16(..., inverse=True)``) to the dequantized
    values, so the result approximates ``x`` itself; the dynamic scale is taken after
    the transform. It cannot be combined with ``block_2d``.
    """
    xf = input_float32(x)
    k = xf.shape[-1]
    _, m, groups = row_groups(xf.shape, k, GROUP, "K")
    block_2d = _require_bool(block_2d, "block_2d")
    stochastic = _require_bool(stochastic, "stochastic")
    four_over_six = _require_bool(four_over_six, "four_over_six")
    seed = require_u64(seed, "seed")
    offset = require_u64(offset, "offset")
    mask = None if hadamard is None else require_sign_mask(hadamard, "hadamard")
    check_combination(m, block_2d=block_2d, hadamard=hadamard)
    spec = _tensor_sf_spec(tensor_sf, "tensor_sf")

    values = xf.reshape(m, k)
    if mask is not None:
        values = hadamard16(values, mask)
    tsf = _resolve(spec, values, four_over_six)
    rbytes = _random_bytes(seed, offset, m, groups, "rowwise") if stochastic else None
    codes, sf_lin = _quantize_rows(values, tsf, block_2d=block_2d, rbytes=rbytes,
                                   four_over_six=four_over_six)
    d, _ = nvfp4_multipliers(sf_lin, tsf)
    with np.errstate(all="ignore"):
        y = (e2m1_decode(codes).reshape(m, groups, GROUP) * d[..., None]).reshape(m, k)
    if mask is not None:
        y = hadamard16(y, mask, inverse=True)
    out = round_to(y.reshape(xf.shape), "float16" if x.dtype == np.float16 else "bfloat16")
    return out.view(x.dtype) if x.dtype.name == "bfloat16" else out
