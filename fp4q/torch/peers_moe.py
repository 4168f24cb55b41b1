"""Drop-ins for the serving engines' mixture-of-experts NVFP4 quantizer calls, on fp4q's experts
and masked batches: vLLM's ``scaled_fp4_experts_quant`` and ``silu_and_mul_scaled_fp4_experts_quant``
(also in ``fp4q.torch``); FlashInfer's ``nvfp4_batched_quantize``, ``scaled_fp4_grouped_quantize``
and ``silu_and_mul_scaled_nvfp4_experts_quantize`` (the last two also SGLang's grouped quantizers,
whose arguments come in another order). Each has the peer's call shape on fp4q's registered ops;
``docs/peers_moe.md`` reads each call from the peer's code. The grouped quantizers return the
permuted views their peers return.
"""

from __future__ import annotations

import torch

from .peers import bytes_as, ops, peer_global_scale, require_input


# ------------------------------------------------------------------------------------- vLLM
def _experts(op, input_tensor, input_global_scale, expert_offsets, blockscale_offsets, topk, halves: bool):
    """vLLM's per-expert quantizers on fp4q's: the scales as vLLM's 2-D float8_e4m3fn view
    ``(128 * P, 4 * ceil(G / 4))`` of fp4q's blocks."""
    require_input(input_tensor, "input_tensor", 16, halves)
    if input_tensor.dim() != 2:
        raise ValueError(f"input_tensor must be 2-D (m_topk, {'2k' if halves else 'k'}), got shape "
                         f"{tuple(input_tensor.shape)}")
    if not isinstance(topk, int) or isinstance(topk, bool) or topk < 1:
        raise ValueError(f"topk must be an int >= 1, got {topk!r}")
    if not isinstance(blockscale_offsets, torch.Tensor) or blockscale_offsets.shape != expert_offsets.shape:
        got = tuple(blockscale_offsets.shape) if isinstance(blockscale_offsets, torch.Tensor) else blockscale_offsets
        raise ValueError(f"blockscale_offsets must be a tensor of expert_offsets' shape {tuple(expert_offsets.shape)}, "
                         f"got {got!r}")
    q, sf = op(input_tensor, expert_offsets, input_global_scale, "swizzled", True, False)
    return q, bytes_as(sf, sf.shape[0] * 128, sf.shape[1] * 4)


def scaled_fp4_experts_quant(input_tensor, input_global_scale, expert_offsets, blockscale_offsets, topk):
    """vLLM's ``scaled_fp4_experts_quant``: the rows of each expert of ``input_tensor``
    ``(m_topk, k)`` (bf16 or fp16, grouped by expert, ``expert_offsets`` int32 ``(E + 1,)``)
    quantized to NVFP4 under ``input_global_scale[e]`` (float32 ``(E,)``, ``448 * 6 / amax``).
    Returns ``(output, output_scales)``: uint8 ``(m_topk, k // 2)`` and float8_e4m3fn
    ``(128 * P, 4 * ceil(k / 64))``, ``P = min(m_topk, (m_topk + 127 * E) // 128)``, expert
    ``e``'s scales from row ``blockscale_offsets[e]`` on, as vLLM's view of its larger buffer
    reads them. fp4q computes those offsets on the device (for valid offsets, vLLM's
    ``blockscale_offsets``); ``blockscale_offsets`` (its shape checked) and ``topk`` (which
    vLLM uses to size its buffer) are not read. Every padding byte is 0x00."""
    return _experts(ops.quantize_nvfp4_experts.default, input_tensor, input_global_scale, expert_offsets,
                    blockscale_offsets, topk, False)


def silu_and_mul_scaled_fp4_experts_quant(input_tensor, input_global_scale, expert_offsets, blockscale_offsets,
                                          topk):
    """vLLM's ``silu_and_mul_scaled_fp4_experts_quant``: as ``scaled_fp4_experts_quant`` of
    the SiLU·mul of ``input_tensor`` ``(m_topk, 2k)`` (gate first): ``output`` uint8
    ``(m_topk, k // 2)``, ``output_scales`` ``(128 * P, 4 * ceil(k / 64))``."""
    return _experts(ops.silu_and_mul_quantize_nvfp4_experts.default, input_tensor, input_global_scale,
                    expert_offsets, blockscale_offsets, topk, True)


# ------------------------------------------------------------------------------------- FlashInfer, SGLang
def _require_batches(a, halves: bool) -> None:
    """The batched drop-ins' input rules: ``a`` of ``(B, M, K)`` (``(B, M, 2K)`` with ``halves``)."""
    require_input(a, "a", 16, halves)
    if a.dim() != 3:
        raise ValueError(f"a must be 3-D (B, M, {'2K' if halves else 'K'}), got shape {tuple(a.shape)}")


def _batched(op, a, mask, a_global_sf, halves: bool):
    """FlashInfer's and SGLang's grouped quantizers on fp4q's masked batches: the outputs as their
    views, ``(M, K // 2, B)`` and ``(32, 4, rm, 4, rk, B)`` of the physical ``(B, M, K // 2)`` and
    ``(B, rm, rk, 32, 4, 4)``."""
    _require_batches(a, halves)
    q, sf = op(a, mask, a_global_sf, "swizzled", True, False)
    return q.permute(1, 2, 0), sf.permute(3, 4, 1, 5, 2, 0)


def nvfp4_batched_quantize(a, a_global_sf, sf_vec_size=16):
    """FlashInfer's ``nvfp4_batched_quantize``: ``a`` ``(B, M, K)`` to ``(a_fp4, a_sf)``, uint8
    ``(B, M, K // 2)`` and the swizzled scales of each batch flat, uint8 ``(B, round_up(M, 128) *
    round_up(K // 16, 4))``, every batch under the one-element float32 ``a_global_sf``."""
    if sf_vec_size != 16:
        raise ValueError(f"sf_vec_size must be 16 for nvfp4_batched_quantize, got {sf_vec_size!r}")
    _require_batches(a, False)
    scale = peer_global_scale(a_global_sf, "a_global_sf").expand(a.shape[0]).contiguous()
    q, sf = ops.quantize_nvfp4_batched.default(a, scale, "swizzled", True, False)
    return q, sf.view(torch.uint8).reshape(a.shape[0], -1)


def scaled_fp4_grouped_quantize(a, mask, a_global_sf):
    """FlashInfer's ``scaled_fp4_grouped_quantize`` (SGLang's ``scaled_fp4_grouped_quant`` with
    ``(input_tensor, input_global_scale, mask)``): ``a`` ``(B, M, K)``, ``mask`` int32 ``(B,)``
    (the valid rows of each batch), ``a_global_sf`` float32 ``(B,)``. Returns ``(a_fp4, a_sf)``:
    the uint8 view ``(M, K // 2, B)`` of ``(B, M, K // 2)`` and the float8_e4m3fn view ``(32, 4,
    rm, 4, rk, B)`` of ``(B, rm, rk, 32, 4, 4)`` (``rm = ceil(M / 128)``, ``rk = ceil(K / 64)``).
    Rows past a count are not written in ``a_fp4``; their scales and every padding byte are 0x00."""
    return _batched(ops.quantize_nvfp4_batched_masked.default, a, mask, a_global_sf, False)


def silu_and_mul_scaled_nvfp4_experts_quantize(a, mask, a_global_sf):
    """FlashInfer's ``silu_and_mul_scaled_nvfp4_experts_quantize`` (SGLang's
    ``silu_and_mul_scaled_fp4_grouped_quant`` with ``(input_tensor, input_global_scale, mask)``):
    as ``scaled_fp4_grouped_quantize`` of the SiLU·mul of ``a`` ``(B, M, 2K)`` (gate first)."""
    return _batched(ops.silu_and_mul_quantize_nvfp4_batched_masked.default, a, mask, a_global_sf, True)
