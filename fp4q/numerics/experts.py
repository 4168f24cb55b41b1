"""The numpy reference of the mixture-of-experts quantizers: NVFP4_SPEC.md, "The project's
exact sequences: experts and batches".

Two ways to hand a quantizer the tokens routed to several experts, each expert under its own
tensor scale:

- experts (vLLM's ``scaled_fp4_experts_quant``): ``x`` ``(M, K)`` with the rows of expert
  ``e`` at ``[off[e], off[e + 1])`` of a device array of offsets; the scales of each expert
  start at a 128-row block of their own, as a grouped block-scaled GEMM reads them;
- masked batches (FlashInfer's and SGLang's grouped quantize): ``x`` ``(B, M, K)``, batch
  ``b`` one expert whose first ``valid_rows[b]`` rows are tokens.

Offsets and counts live on the device, where the kernel reads them without a host
synchronization and so cannot raise on their values. The reference therefore never rejects
a value either: it resolves bad offsets and counts by the spec's rule, giving the bytes the
kernels must give for any input. What the host can check without reading device memory
(types, dtypes, shapes) raises, with a message naming the argument, its value and the rule.

The SiLU·mul variants quantize ``h = silu_and_mul(x)`` of the rows they read. They take the
prologue as a parameter (the spec's SiLU·mul by default), so that a test can run them over a
stand-in and compare them with the unfused composition.
"""

from __future__ import annotations

import numbers
from typing import Callable

import numpy as np

from . import layouts
from .formats import input_float32, pack_nibbles
from .groups import quantize_groups, row_groups
from .prologues import silu_and_mul

__all__ = [
    "quantize_nvfp4_experts",
    "quantize_nvfp4_batched",
    "silu_and_mul_quantize_nvfp4_experts",
    "silu_and_mul_quantize_nvfp4_batched",
    "experts_sf_shape",
    "resolve_expert_offsets",
]

NVFP4_GROUP = 16
BLOCK_ROWS = layouts.ROWS_PER_TILE

Prologue = Callable[[np.ndarray], np.ndarray]


def experts_sf_blocks(m: int, num_experts: int) -> int:
    """The 128-row blocks of the experts' scales for ``m`` rows and ``num_experts`` experts
    (unchecked: ``experts_sf_shape`` checks them): the most any routing fills."""
    # Expert e needs ceil(n_e / 128) blocks. Over all routings of at most m rows to E >= 1
    # experts the sum is largest for E - 1 one-row experts and one with the rest, or for m
    # one-row experts when m < E: floor((m + 127 E) / 128), and never more than m.
    return min(m, (m + (BLOCK_ROWS - 1) * num_experts) // BLOCK_ROWS)


def experts_sf_shape(m: int, k: int, num_experts: int) -> tuple:
    """Shape of the swizzled scales of ``quantize_nvfp4_experts`` for ``x`` ``(m, k)`` and
    ``num_experts`` experts: ``(P, ceil(k / 64), 32, 4, 4)`` with
    ``P = min(m, floor((m + 127 * num_experts) / 128))`` 128-row blocks.

    ``P`` is the most blocks any routing of the rows can fill, and it depends on the shapes
    alone: an output of this shape is allocated without reading the offsets, so the call
    needs no host synchronization and a CUDA graph replays with any routing.
    """
    shape = layouts.swizzled_sf_shape(m, k)  # the rules on m and k
    if isinstance(num_experts, bool) or not isinstance(num_experts, numbers.Integral) or num_experts < 1:
        raise ValueError(f"num_experts must be an int >= 1, got {num_experts!r}")
    return (experts_sf_blocks(m, int(num_experts)),) + shape[1:]


def _array_name(a) -> str:
    return f"{type(a).__module__}.{type(a).__name__}"


def _int32_vector(a, name: str) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy int32 array, got {_array_name(a)}")
    if a.dtype != np.int32:
        raise TypeError(f"{name} must have dtype int32, got {a.dtype}")
    return a


def _float32_vector(a, name: str) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy float32 array, got {_array_name(a)}")
    if a.dtype != np.float32:
        raise TypeError(f"{name} must have dtype float32, got {a.dtype}")
    return a


def _resolve(offsets: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    # Clamped into [0, m], then a running maximum: the recurrence s[e] = min(max(off[e],
    # s[e - 1]), m) of the spec. Widened first so that int32 extremes cannot wrap.
    rows = np.maximum.accumulate(np.clip(offsets.astype(np.int64), 0, m))
    blocks = -(-np.diff(rows) // BLOCK_ROWS)
    sf_rows = np.concatenate([[0], np.cumsum(blocks) * BLOCK_ROWS]).astype(np.int64)
    return rows, sf_rows


def resolve_expert_offsets(expert_offsets, m: int) -> tuple[np.ndarray, np.ndarray]:
    """The experts' rows and first scale rows as the device reads ``expert_offsets``.

    Returns ``(row_offsets, sf_row_offsets)``, both int64 ``(E + 1,)``: expert ``e`` owns
    rows ``[row_offsets[e], row_offsets[e + 1])`` of ``x`` (``m`` rows) and its scales start
    at row ``sf_row_offsets[e]`` (a multiple of 128) of the swizzled layout. Any int32
    values are accepted: they are clamped into ``[0, m]`` and made non-decreasing by a
    running maximum, so the experts never overlap and never reach past ``x``. For offsets
    that are already valid (``0 = off[0] <= ... <= off[E] <= m``) ``row_offsets`` is
    ``expert_offsets`` and ``sf_row_offsets`` is vLLM's ``blockscale_offsets``.
    """
    offsets = _int32_vector(expert_offsets, "expert_offsets")
    if offsets.ndim != 1 or offsets.shape[0] < 2:
        raise ValueError(f"expert_offsets must have shape (E + 1,) with E >= 1, got {offsets.shape}")
    if isinstance(m, bool) or not isinstance(m, numbers.Integral) or m < 0:
        raise ValueError(f"m must be an int >= 0, got {m!r}")
    return _resolve(offsets, int(m))


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The concatenated index ranges ``[starts[i], starts[i] + counts[i])``, int64."""
    before = np.cumsum(counts) - counts
    return np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(starts - before, counts)


def _quantized_width(width: int, prologue: Prologue | None) -> tuple[int, str]:
    """K, the values per quantized row, and how the error messages name it."""
    if prologue is None:
        return width, "K"
    if width % 2:
        raise ValueError(f"x.shape[-1] = 2N (gate, then up) must be even, got {width}")
    return width // 2, "N = x.shape[-1] // 2"


def _apply_prologue(prologue: Prologue, rows: np.ndarray, k: int) -> np.ndarray:
    h = prologue(rows)
    expected = (rows.shape[0], k)
    if not isinstance(h, np.ndarray) or h.shape != expected:
        got = h.shape if isinstance(h, np.ndarray) else _array_name(h)
        raise ValueError(f"prologue must return an array of shape (R, N) = {expected} for rows of "
                         f"shape {rows.shape}, got {got}")
    return input_float32(h, "prologue(rows)")


def _quantize_segments(x: np.ndarray, xf: np.ndarray, starts: np.ndarray, counts: np.ndarray,
                       scales: np.ndarray, sf_starts: np.ndarray, sf_rows: int, k: int,
                       prologue: Prologue | None) -> tuple[np.ndarray, np.ndarray]:
    """Quantize rows ``starts[i] .. starts[i] + counts[i] - 1`` of the 2-D ``x`` (``xf`` its
    float32 values) under ``scales[i]``, after the prologue; their scales go to rows
    ``sf_starts[i] ..`` of a linear ``(sf_rows, G)`` array.

    Returns ``q`` ``(len(x), k // 2)`` and that array; a row no segment reads is never
    looked at and its ``q`` bytes are 0x00, as are the scale rows no segment fills.
    """
    read = _ranges(starts, counts)
    h = xf[read] if prologue is None else _apply_prologue(prologue, x[read], k)
    groups = k // NVFP4_GROUP
    # One tensor scale per row read: each row's groups use the scale of its segment.
    codes, sf = quantize_groups(h.reshape(read.size, groups, NVFP4_GROUP), np.repeat(scales, counts)[:, None])
    q = np.zeros((x.shape[0], k // 2), dtype=np.uint8)
    q[read] = pack_nibbles(codes.reshape(read.size, k))
    sf_linear = np.zeros((sf_rows, groups), dtype=np.uint8)
    sf_linear[_ranges(sf_starts, counts)] = sf
    return q, sf_linear


def _require_swizzled(sf_layout) -> None:
    # The per-expert blocks exist for the grouped block-scaled GEMMs, which read 128x4 tiles;
    # a linear layout needs no per-expert placement (it is the per-row tensor scale), and no
    # peer has one. See NVFP4_SPEC.md.
    if sf_layout != "swizzled":
        raise ValueError(f"sf_layout must be 'swizzled' (experts and batches have no linear layout), "
                         f"got {sf_layout!r}")


def _experts(x, expert_offsets, tensor_sf, sf_layout, prologue: Prologue | None):
    xf = input_float32(x)
    if xf.ndim != 2:
        raise ValueError(f"x must have shape {'(M, K)' if prologue is None else '(M, 2N)'}, got shape {x.shape}")
    m, width = xf.shape
    k, what = _quantized_width(width, prologue)
    row_groups(xf.shape, k, NVFP4_GROUP, what)
    _require_swizzled(sf_layout)
    tsf = _float32_vector(tensor_sf, "tensor_sf")
    if tsf.ndim != 1 or tsf.shape[0] < 1:
        raise ValueError(f"tensor_sf must have shape (E,), one scale per expert, with E >= 1, got {tsf.shape}")
    offsets = _int32_vector(expert_offsets, "expert_offsets")
    num_experts = tsf.shape[0]
    if offsets.shape != (num_experts + 1,):
        raise ValueError(f"expert_offsets must have shape (E + 1,) = ({num_experts + 1},) for tensor_sf of "
                         f"shape {tsf.shape}, got {offsets.shape}")
    rows, sf_starts = _resolve(offsets, m)
    blocks = experts_sf_blocks(m, num_experts)
    q, sf = _quantize_segments(x, xf, rows[:-1], np.diff(rows), tsf, sf_starts[:-1], blocks * BLOCK_ROWS, k,
                               prologue)
    return q, layouts.swizzle_sf(sf)


def _batched(x, tensor_sf, valid_rows, sf_layout, prologue: Prologue | None):
    xf = input_float32(x)
    if xf.ndim != 3:
        raise ValueError(f"x must have shape {'(B, M, K)' if prologue is None else '(B, M, 2N)'}, "
                         f"got shape {x.shape}")
    batches, m, width = xf.shape
    k, what = _quantized_width(width, prologue)
    _, _, groups = row_groups(xf.shape, k, NVFP4_GROUP, what)
    _require_swizzled(sf_layout)
    tsf = _float32_vector(tensor_sf, "tensor_sf")
    if tsf.shape != (batches,):
        raise ValueError(f"tensor_sf must have shape (B,) = ({batches},), one scale per batch, for x of "
                         f"shape {x.shape}, got {tsf.shape}")
    if valid_rows is None:
        counts = np.full(batches, m, dtype=np.int64)
    else:
        counts = _int32_vector(valid_rows, "valid_rows")
        if counts.shape != (batches,):
            raise ValueError(f"valid_rows must have shape (B,) = ({batches},), one count per batch, for x "
                             f"of shape {x.shape}, got {counts.shape}")
        # A count outside [0, M] reads no row before the batch nor past it.
        counts = np.clip(counts.astype(np.int64), 0, m)
    blocks = -(-m // BLOCK_ROWS)
    first = np.arange(batches, dtype=np.int64)
    q, sf = _quantize_segments(x.reshape(batches * m, width), xf.reshape(batches * m, width), first * m, counts,
                               tsf, first * blocks * BLOCK_ROWS, batches * blocks * BLOCK_ROWS, k, prologue)
    swizzled = layouts.swizzle_sf(sf)
    return q.reshape(batches, m, k // 2), swizzled.reshape((batches, blocks) + swizzled.shape[1:])


def quantize_nvfp4_experts(x, expert_offsets, tensor_sf, sf_layout="swizzled"):
    """Quantize the rows of each expert under its own tensor scale: returns ``(q, sf)``.

    ``x``: ``(M, K)`` bf16 (or bf16 bits as uint16, or fp16), rows grouped by expert.
    ``expert_offsets``: int32 ``(E + 1,)``, ``E >= 1``: expert ``e`` owns rows
    ``[off[e], off[e + 1])``; any values are read as the device reads them
    (``resolve_expert_offsets``). ``tensor_sf``: float32 ``(E,)``, ``tensor_sf[e]`` the
    ``448 * 6 / amax`` of expert ``e``.

    ``q``: uint8 ``(M, K // 2)``, row ``r`` of ``x`` at row ``r``; rows in no expert are not
    read, and are 0x00 here (the device leaves them as its output buffer held them).
    ``sf``: e4m3 bytes in the swizzled layout, shape ``experts_sf_shape(M, K, E)``: expert
    ``e``'s scales start at row ``sf_row_offsets[e]`` (vLLM's ``blockscale_offsets``) and
    are those of ``quantize_nvfp4`` of its rows alone; every other byte is 0x00. The only
    ``sf_layout`` is ``"swizzled"``.
    """
    return _experts(x, expert_offsets, tensor_sf, sf_layout, None)


def quantize_nvfp4_batched(x, tensor_sf, valid_rows=None, sf_layout="swizzled"):
    """Quantize a batch of experts, batch ``b`` under its own tensor scale: returns ``(q, sf)``.

    ``x``: ``(B, M, K)`` bf16 (or bf16 bits as uint16, or fp16). ``tensor_sf``: float32
    ``(B,)``. ``valid_rows``: ``None`` (every row is a token) or int32 ``(B,)``: the first
    ``valid_rows[b]`` rows of batch ``b`` are tokens, the count clamped into ``[0, M]``.

    ``q``: uint8 ``(B, M, K // 2)``; rows at or past the count are not read, and are 0x00
    here (the device leaves them as its output buffer held them). ``sf``: e4m3 bytes,
    ``(B, ceil(M / 128), ceil(K / 64), 32, 4, 4)``: ``sf[b]`` is the swizzled layout of batch
    ``b``'s rows alone, the scale bytes of rows at or past the count and every padding byte
    0x00. With every row valid, ``(q[b], sf[b])`` is ``quantize_nvfp4(x[b], tensor_sf[b])``.
    """
    return _batched(x, tensor_sf, valid_rows, sf_layout, None)


def silu_and_mul_quantize_nvfp4_experts(x, expert_offsets, tensor_sf, sf_layout="swizzled", *,
                                        prologue: Prologue | None = None):
    """``quantize_nvfp4_experts`` of ``h = silu_and_mul(x)``: ``x`` ``(M, 2N)``, gate then up.

    ``q`` is ``(M, N // 2)`` and ``sf`` has the shape ``experts_sf_shape(M, N, E)``. Only the
    rows of the experts are read, and the prologue sees only them: it takes rows ``(R, 2N)``
    of ``x`` in ``x``'s dtype and returns ``h`` ``(R, N)`` as the unfused op stores it (bf16,
    bf16 bits as uint16, or fp16). ``prologue=None`` is the spec's SiLU·mul.
    """
    return _experts(x, expert_offsets, tensor_sf, sf_layout, silu_and_mul if prologue is None else prologue)


def silu_and_mul_quantize_nvfp4_batched(x, tensor_sf, valid_rows=None, sf_layout="swizzled", *,
                                        prologue: Prologue | None = None):
    """``quantize_nvfp4_batched`` of ``h = silu_and_mul(x)``: ``x`` ``(B, M, 2N)``, gate then up.

    ``q`` is ``(B, M, N // 2)``. Only the rows below each batch's count are read, and the
    prologue sees only them (as in ``silu_and_mul_quantize_nvfp4_experts``).
    """
    return _batched(x, tensor_sf, valid_rows, sf_layout, silu_and_mul if prologue is None else prologue)
