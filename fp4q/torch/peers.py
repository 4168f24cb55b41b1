"""Drop-ins for the serving engines' NVFP4 quantizer calls: vLLM's ``scaled_fp4_quant`` and
``silu_and_mul_nvfp4_quant``; FlashInfer's ``fp4_quantize``, ``nvfp4_quantize``,
``silu_and_mul_nvfp4_quantize``, ``rmsnorm_fp4quant`` and ``add_rmsnorm_fp4quant`` (the
mixture-of-experts calls are in ``peers_moe``). Each has
the peer's call shape (name, argument order, defaults, dtypes, output shapes) on fp4q's
registered ops, so the bits are the spec's.
``docs/peers.md`` reads each call from the peer's code and says where the peer's own bytes
differ (approximate reciprocals, another rounding of the intermediate).

A peer's 2-D scale tensor of shape ``(R, C)`` in the 128x4 layout holds the same bytes as
fp4q's ``(R / 128, C / 4, 32, 4, 4)`` array, and in the 8x4 layout as fp4q's ``(R / 8, C / 4,
8, 4)``: the drop-ins reshape, never permute. What a peer offers that fp4q does not compute
yet (row remapping, weight shuffling, fp8 input) raises
``ValueError`` naming the argument, before anything runs.
"""

from __future__ import annotations

import enum
import math

import torch

from ..kernels.rules import align_up
from ..numerics.layouts import SF_TILE

ops = torch.ops.fp4q
INPUT_DTYPES = (torch.bfloat16, torch.float16)


class SfLayout(enum.IntEnum):
    """FlashInfer's scale layouts, by their values there."""

    layout_128x4 = 0
    layout_8x4 = 1
    layout_linear = 2


def require_input(t, name: str, group: int, halves: bool = False) -> None:
    """The rules every drop-in states in the peer's names: a CUDA tensor, fp16 or bf16, at least
    1-D, its last dimension (``halves``: half of it, which must be even) a multiple of ``group``."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch tensor, got {type(t).__name__}")
    if t.dtype not in INPUT_DTYPES:
        raise TypeError(f"{name} must be bfloat16 or float16, got {t.dtype}")
    if t.dim() == 0:
        raise ValueError(f"{name} must have at least 1 dimension, got shape ()")
    width = t.shape[-1]
    if halves:
        if width % 2:
            raise ValueError(f"the last dimension of {name} (two halves) must be even, got {width}")
        width //= 2
    what = "half the last dimension" if halves else "the last dimension"
    if width % group:
        raise ValueError(f"{what} of {name} must be a multiple of {group}, got {width}")


def _pdl(enable_pdl) -> bool:
    """FlashInfer's ``enable_pdl``: None means PDL where the device has it (fp4q's launches
    use it only there in any case)."""
    return True if enable_pdl is None else bool(enable_pdl)


def _scales_2d(sf, layout: str, rows: int):
    """fp4q's scales as the peers' 2-D uint8 tensor: 128x4 ``(round_up(M, 128), round_up(G, 4))``,
    8x4 ``(round_up(M, 8), round_up(G, 4))`` or linear ``(M, G)``."""
    sf = sf.view(torch.uint8)
    if layout == "linear":
        return sf.reshape(rows, sf.shape[-1])
    tile_rows, tile_groups = SF_TILE[layout]
    return bytes_as(sf, sf.shape[0] * tile_rows, sf.shape[1] * tile_groups)


def bytes_as(t, *shape):
    """Contiguous ``t``'s bytes as ``shape``, through the flat view: viewing the 5-D scales as 2-D
    directly makes torch.compile guard on how their sizes group (a recompile per shape class)."""
    return t.view(-1).view(*shape)


def peer_global_scale(t, name: str, rows: int | None = None):
    """A peer's quantize-direction global scale as fp4q's device tensor_sf: one element, or,
    where the peer takes them (``rows`` given), one per row."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a float32 CUDA tensor of one element, got {type(t).__name__}")
    if t.numel() == 1:
        return t.reshape(()).float()
    if rows is None:
        raise ValueError(f"{name} must have one element, got shape {tuple(t.shape)}")
    if t.numel() != rows:
        raise ValueError(f"{name} must have one element or one per row ({rows}), got shape {tuple(t.shape)}")
    return t.reshape(rows).float().contiguous()


# ------------------------------------------------------------------------------------- vLLM
# vLLM hands scaled_fp4_quant calls of at most this many rows with a "trtllm" backend to FlashInfer's 8x4 layout.
VLLM_8X4_MAX_ROWS = 32


def scaled_fp4_quant(input, input_global_scale, is_sf_swizzled_layout=True, backend="none", padded_n=None):
    """vLLM's ``scaled_fp4_quant`` contract on fp4q's kernels.

    ``input`` (bf16 or fp16, last dimension ``n`` a multiple of 16, any
    leading dimensions; 1-D is one row) is flattened to ``[m, n]``;
    ``input_global_scale`` is the float32 CUDA tensor ``448 * 6 / amax``;
    ``padded_n`` (None or an int ``>= n``, a multiple of 16) is the outputs'
    row width ``p``, their columns past ``n`` zeros. Returns ``(q, scale)``:
    ``q`` uint8 ``[m, p // 2]``; ``scale`` float8_e4m3fn, ``[round_up(m,
    128), round_up(p // 16, 4)]`` holding the swizzled 128x4 layout (the same
    bytes as fp4q's 5-D swizzled scales) or ``[m, p // 16]`` linear; with a
    ``backend`` naming ``"trtllm"`` and at most 32 rows, FlashInfer's 8x4
    layout ``[round_up(m, 8), round_up(n // 16, 4)]`` (no padding). The bits
    are the spec's, which can differ from vLLM's CUDA kernel (docs/torch.md).
    """
    require_input(input, "input", 1)  # K's rule is the op's, with its message
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a str, got {type(backend).__name__}")
    rows = input.reshape(-1, input.shape[-1])
    if "trtllm" in backend and rows.shape[0] <= VLLM_8X4_MAX_ROWS:
        if padded_n is not None and padded_n != rows.shape[1]:
            raise ValueError(f"padded_n must be None or n = {rows.shape[1]} with the 8x4 layout (backend "
                             f"{backend!r} with at most {VLLM_8X4_MAX_ROWS} rows), got {padded_n!r}")
        layout = "8x4"
    else:
        layout = "swizzled" if is_sf_swizzled_layout else "linear"
    op = ops.quantize_nvfp4.Tensor if isinstance(input_global_scale, torch.Tensor) else ops.quantize_nvfp4.default
    q, sf = op(rows, input_global_scale, layout, True, False, padded_n)
    return q, _scales_2d(sf, layout, rows.shape[0]).view(sf.dtype)


def silu_and_mul_nvfp4_quant(result, result_block_scale, input, input_global_scale) -> None:
    """vLLM's ``torch.ops._C.silu_and_mul_nvfp4_quant``: SiLU·mul of ``input`` ``(M, 2N)``
    (gate first) quantized to NVFP4 into ``result`` (uint8 ``(M, N // 2)``) and
    ``result_block_scale`` (the 128x4 scales as vLLM allocates them: int32
    ``(round_up(M, 128), round_up(N // 16, 4) // 4)``, or their bytes as uint8 or
    float8_e4m3fn ``(round_up(M, 128), round_up(N // 16, 4))``), with the float32
    one-element ``input_global_scale`` read on the device. Returns nothing."""
    require_input(input, "input", 16, halves=True)
    if input.dim() != 2:
        raise ValueError(f"input must be 2-D (M, 2N), got shape {tuple(input.shape)}")
    m, n = input.shape[0], input.shape[1] // 2
    rows, cols = align_up(m, 128), align_up(n // 16, 4)
    scale = result_block_scale
    if scale.dtype == torch.int32:
        if tuple(scale.shape) != (rows, cols // 4):
            raise ValueError(f"result_block_scale (int32) must have shape {(rows, cols // 4)}, got "
                             f"{tuple(scale.shape)}")
        scale = scale.view(torch.uint8)
    elif scale.dtype in (torch.uint8, torch.float8_e4m3fn):
        if tuple(scale.shape) != (rows, cols):
            raise ValueError(f"result_block_scale must have shape {(rows, cols)}, got {tuple(scale.shape)}")
    else:
        raise TypeError(f"result_block_scale must be int32, uint8 or float8_e4m3fn, got {scale.dtype}")
    if not scale.is_contiguous():
        raise ValueError("result_block_scale must be contiguous")
    ops.silu_and_mul_quantize_nvfp4_out.Tensor(input, peer_global_scale(input_global_scale, "input_global_scale"),
                                               result, bytes_as(scale, rows // 128, cols // 4, 32, 4, 4),
                                               "swizzled", True)


# ------------------------------------------------------------------------------------- FlashInfer
def _layout(swizzled: bool, eight_by_four: bool) -> str:
    """FlashInfer's two layout flags as fp4q's layout: the 8x4 flag picks between the two tiled
    layouts, so without the swizzled flag the scales are linear (its ``fp4Quantize.cpp``)."""
    if not swizzled:
        return "linear"
    return "8x4" if eight_by_four else "swizzled"


def fp4_quantize(input, global_scale=None, sf_vec_size=16, sf_use_ue8m0=False, is_sf_swizzled_layout=True,
                 is_sf_8x4_layout=False, is_global_scale_inversed=False, enable_pdl=None, backend="cuda"):
    """FlashInfer's ``fp4_quantize``: ``input`` ``(..., K)`` bf16 or fp16 to ``(x_q, sf)``, ``x_q``
    uint8 ``(..., K // 2)`` and ``sf`` uint8 2-D: 128x4 ``(round_up(M, 128),
    round_up(K // sf_vec_size, 4))``, 8x4 ``(round_up(M, 8), round_up(K // sf_vec_size, 4))``
    (``is_sf_8x4_layout`` with ``is_sf_swizzled_layout``) or linear ``(M, K // sf_vec_size)``. NVFP4
    (``sf_vec_size=16``) takes ``global_scale``, a float32 CUDA tensor of one element or
    one per row (``M``: a tensor scale per row), quantize direction (``is_global_scale_inversed=True``: dequantize direction, inverted
    exactly on the device); MXFP4 is ``sf_vec_size=32, sf_use_ue8m0=True`` (fp4q's
    ``"rceil"``). ``backend`` names FlashInfer's implementations; fp4q has one."""
    if (sf_vec_size, bool(sf_use_ue8m0)) not in ((16, False), (32, True)):
        raise ValueError(f"sf_vec_size and sf_use_ue8m0 must be 16 and False (NVFP4) or 32 and True (MXFP4), got "
                         f"{sf_vec_size!r} and {sf_use_ue8m0!r}")
    require_input(input, "input", sf_vec_size)
    if input.dim() == 2 and input.shape[1] > 1 and input.stride(1) != 1:
        raise ValueError("input must be row-major (its last dimension contiguous): fp4q does not quantize a "
                         "column-major input as its transpose")
    layout = _layout(is_sf_swizzled_layout, is_sf_8x4_layout)
    rows = math.prod(input.shape[:-1])
    if sf_vec_size == 32:
        q, sf = ops.quantize_mxfp4.default(input, "rceil", layout, _pdl(enable_pdl), False)
        return q, _scales_2d(sf, layout, rows)
    if global_scale is None:
        raise ValueError("global_scale is required for NVFP4 (sf_vec_size=16)")
    scale = peer_global_scale(global_scale, "global_scale", rows)
    if is_global_scale_inversed:
        scale = torch.reciprocal(scale)
    q, sf = ops.quantize_nvfp4.Tensor(input, scale, layout, _pdl(enable_pdl), False)
    return q, _scales_2d(sf, layout, rows)


def nvfp4_quantize(a, a_global_sf, sfLayout=SfLayout.layout_128x4, do_shuffle=False, sf_vec_size=16,
                   enable_pdl=None, backend="cuda", *, per_token_activation=False, expanded_idx_to_permuted_idx=None):
    """FlashInfer's ``nvfp4_quantize``: ``a`` ``(M, K)`` to ``(a_fp4, a_sf)`` as ``fp4_quantize``
    with the layout ``sfLayout`` (``SfLayout`` or its int value).

    ``per_token_activation=True``: ``a_global_sf`` (one element) is the dequantize-direction
    base multiplier, typically ``1 / (448 * 6)``, read on the host as FlashInfer does (a host
    synchronization); each row's ``per_token_scale = amax_row * a_global_sf`` (float32, NaN
    ignored in the amax) is returned third, ``(M,)``, and the row is quantized with the tensor
    scale ``1 / per_token_scale``, correctly rounded (FlashInfer takes an approximate
    reciprocal)."""
    if sf_vec_size != 16:
        raise ValueError(f"sf_vec_size must be 16 for nvfp4_quantize, got {sf_vec_size!r}")
    if do_shuffle:
        raise ValueError("do_shuffle=True (TensorRT-LLM's weight shuffling) has no fp4q counterpart")
    if expanded_idx_to_permuted_idx is not None:
        raise ValueError("expanded_idx_to_permuted_idx (MoE row remapping) has no fp4q counterpart yet")
    try:
        layout = SfLayout(int(sfLayout))
    except (TypeError, ValueError):
        raise ValueError(f"sfLayout must be one of {[m.name for m in SfLayout]} (or 0, 1, 2), got {sfLayout!r}") \
            from None
    if not per_token_activation:
        return fp4_quantize(a, a_global_sf, 16, False, layout != SfLayout.layout_linear,
                            layout == SfLayout.layout_8x4, False, enable_pdl, backend)
    require_input(a, "a", 16)
    if not isinstance(a_global_sf, torch.Tensor) or a_global_sf.numel() != 1:
        raise ValueError(f"a_global_sf must be a tensor of one element with per_token_activation=True, got "
                         f"{tuple(a_global_sf.shape) if isinstance(a_global_sf, torch.Tensor) else a_global_sf!r}")
    magnitude = a.reshape(-1, a.shape[-1]).abs().float()
    magnitude = torch.where(torch.isnan(magnitude), 0.0, magnitude)
    amax = magnitude.amax(dim=-1) if magnitude.shape[-1] else magnitude.new_zeros(magnitude.shape[0])
    per_token_scale = amax * float(a_global_sf.float().item())
    q, sf = fp4_quantize(a, torch.reciprocal(per_token_scale), 16, False, layout != SfLayout.layout_linear,
                         layout == SfLayout.layout_8x4, False, enable_pdl, backend)
    return q, sf, per_token_scale


def silu_and_mul_nvfp4_quantize(input, global_scale, sf_vec_size=16, is_sf_swizzled_layout=True,
                                is_sf_8x4_layout=False, enable_pdl=None):
    """FlashInfer's ``silu_and_mul_nvfp4_quantize``: SiLU·mul of ``input`` ``(..., 2K)`` (gate
    first, leading dimensions flattened to ``M``) to ``(packed, scales)``, packed uint8
    ``(M, K // 2)``, scales as ``fp4_quantize``'s."""
    if sf_vec_size != 16:
        raise ValueError(f"sf_vec_size must be 16 for silu_and_mul_nvfp4_quantize, got {sf_vec_size!r}")
    require_input(input, "input", 16, halves=True)
    layout = _layout(is_sf_swizzled_layout, is_sf_8x4_layout)
    rows = input.reshape(-1, input.shape[-1])
    q, sf = ops.silu_and_mul_quantize_nvfp4.Tensor(rows, peer_global_scale(global_scale, "global_scale"), layout,
                                                   _pdl(enable_pdl), False)
    return q, _scales_2d(sf, layout, rows.shape[0])


def _formats(block_size, scale_format) -> str:
    """FlashInfer's ``block_size`` and ``scale_format`` as fp4q's format."""
    fmt = {(16, None): "nvfp4", (16, "e4m3"): "nvfp4", (32, None): "mxfp4", (32, "ue8m0"): "mxfp4"}.get(
        (block_size, scale_format))
    if fmt is None:
        raise ValueError(f"block_size and scale_format must be 16 with 'e4m3' (NVFP4) or 32 with 'ue8m0' (MXFP4), "
                         f"got {block_size!r} and {scale_format!r}")
    return fmt


def linear_scales(sf_swizzled, rows: int, groups: int):
    """The linear ``(rows, groups)`` scales of fp4q's swizzled ``(R / 128, C / 4, 32, 4, 4)``
    ones (any view of their bytes): row ``mb * 128 + r4 * 32 + r32`` and group ``kb * 4 + c4``
    sit at ``[mb, kb, r32, r4, c4]``."""
    blocks, quads = -(-rows // 128), -(-groups // 4)
    sw = sf_swizzled.reshape(blocks, quads, 32, 4, 4)
    return sw.permute(0, 3, 2, 1, 4).reshape(blocks * 128, quads * 4)[:rows, :groups]


def _rms_norm(input, weight, residual, y_fp4, block_scale, global_scale, eps, block_size, scale_format,
              is_sf_swizzled_layout, enable_pdl):
    """FlashInfer's RMSNorm quantizers on fp4q's ops: the outputs, allocated where not given (the
    swizzled scales as a flat byte buffer, FlashInfer's shape)."""
    fmt = _formats(block_size, scale_format)
    require_input(input, "input", block_size)
    layout = "swizzled" if is_sf_swizzled_layout else "linear"
    add = "" if residual is None else "add_"
    inputs = (input, weight) if residual is None else (input, weight, residual)
    scale = () if fmt == "mxfp4" else (
        (1.0,) if global_scale is None else (peer_global_scale(global_scale, "global_scale"),))
    overload = "default" if not scale or not isinstance(scale[0], torch.Tensor) else "Tensor"
    options = (eps, layout) if fmt == "nvfp4" else (eps, "rceil", layout)
    rows, groups = math.prod(input.shape[:-1]), input.shape[-1] // block_size
    if y_fp4 is None and block_scale is None:
        op = getattr(getattr(ops, f"{add}rms_norm_quantize_{fmt}"), overload)
        y_fp4, sf = op(*inputs, *scale, *options, _pdl(enable_pdl), True)
        if fmt == "mxfp4":  # FlashInfer's ue8m0 scales are uint8
            sf = sf.view(torch.uint8)
        return y_fp4, (sf.view(-1) if is_sf_swizzled_layout else sf)
    if y_fp4 is None or block_scale is None:
        raise ValueError("y_fp4 and block_scale must be given together (fp4q writes both or allocates both)")
    sf = block_scale
    if is_sf_swizzled_layout:
        sf = bytes_as(block_scale, -(-rows // 128), -(-groups // 4), 32, 4, 4)
    op = getattr(getattr(ops, f"{add}rms_norm_quantize_{fmt}_out"), overload)
    op(*inputs, *scale, y_fp4, sf, *options, _pdl(enable_pdl))
    return y_fp4, block_scale


def rmsnorm_fp4quant(input, weight, y_fp4=None, block_scale=None, global_scale=None, eps=1e-6, block_size=16,
                     scale_format=None, is_sf_swizzled_layout=False, enable_pdl=None):
    """FlashInfer's ``rmsnorm_fp4quant``: RMSNorm of ``input`` ``(B, H)`` or ``(B, S, H)`` with
    ``weight`` ``(H,)`` quantized to NVFP4 (``block_size=16``) or MXFP4 (32) in one kernel.
    Returns ``(y_fp4, block_scale)``: ``float4_e2m1fn_x2`` ``(..., H // 2)`` and the scales,
    linear ``(..., H // block_size)`` or, swizzled, a flat buffer of their bytes (written
    into ``y_fp4`` and ``block_scale`` where given). ``global_scale`` is a float32 tensor of
    one element, quantize direction (None: 1.0). The normalized values are vLLM's
    roundings (``docs/peers.md``), not FlashInfer's."""
    return _rms_norm(input, weight, None, y_fp4, block_scale, global_scale, eps, block_size, scale_format,
                     is_sf_swizzled_layout, enable_pdl)


def add_rmsnorm_fp4quant(input, residual, weight, y_fp4=None, block_scale=None, global_scale=None, eps=1e-6,
                         block_size=16, scale_format=None, is_sf_swizzled_layout=False, output_both_sf_layouts=False,
                         block_scale_unswizzled=None, enable_pdl=None):
    """FlashInfer's ``add_rmsnorm_fp4quant``: ``residual += input`` (in place), then as
    ``rmsnorm_fp4quant`` of it. ``output_both_sf_layouts=True`` returns the linear scales of the
    same values third (into ``block_scale_unswizzled`` where given), beside the swizzled
    ones."""
    if output_both_sf_layouts:  # FlashInfer's block_scale is then the swizzled one, the other linear
        is_sf_swizzled_layout = True
    y_fp4, block_scale = _rms_norm(input, weight, residual, y_fp4, block_scale, global_scale, eps, block_size,
                                   scale_format, is_sf_swizzled_layout, enable_pdl)
    if not output_both_sf_layouts:
        return y_fp4, block_scale
    rows, groups = math.prod(input.shape[:-1]), input.shape[-1] // block_size
    linear = linear_scales(block_scale.view(torch.uint8), rows, groups).reshape(*input.shape[:-1], groups)
    if block_scale_unswizzled is None:
        return y_fp4, block_scale, linear.contiguous().view(block_scale.dtype)
    block_scale_unswizzled.view(torch.uint8).copy_(linear)
    return y_fp4, block_scale, block_scale_unswizzled
