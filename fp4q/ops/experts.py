"""The mixture-of-experts quantizers, declared: the rows of each expert under its own
tensor scale, its scales in 128-row blocks of their own, in one launch of the row kernel
for every expert: experts by offsets (vLLM's per-expert contract, ``segments="experts"``)
and masked batches (FlashInfer's and SGLang's grouped quantizers, ``segments="batches"``).

The offsets (and the batches' counts) stay on the device: the outputs are sized by the most scale blocks any
routing fills (``numerics.experts.experts_sf_blocks``), every CTA resolves the offsets
itself (``ptx_templates/pipeline/segments.cuh``), so a call needs no host
synchronization and a CUDA graph replays with any routing. The numerics and the
resolution of bad offsets are NVFP4_SPEC.md's, "The project's exact sequences: experts
and batches".
"""

from __future__ import annotations

from ..kernels.rows import MAX_EXPERTS, longest_row
from .arrays import INPUT_DTYPES
from .declare import Array, Op, Rows, TensorScale
from .options import Choice
from .global_scale import INPUT_WHAT
from .quantize import OUT
from .rows import ROW_KERNELS

X = Rows("x", INPUT_DTYPES, INPUT_WHAT, field="input_dtype", dims=("M", "K"),
         doc="bf16 (or fp16) ``(M, K)``, the rows of each expert consecutive; rows may be strided")
GATE_UP = Rows("x", INPUT_DTYPES, INPUT_WHAT, field="input_dtype", halves=True, dims=("M", "2N"),
               doc="bf16 (or fp16) ``(M, 2N)``, the rows of each expert consecutive: ``gate = x[:, :N]``, "
                   "``up = x[:, N:]``")
EXPERT_OFFSETS = Array("expert_offsets", "offsets", output=False,
                       doc=f"device int32 ``(E + 1,)``, ``1 <= E <= {MAX_EXPERTS}``: expert ``e`` owns rows "
                           "``[expert_offsets[e], expert_offsets[e + 1])``; read on the device only (values are "
                           "clamped into ``[0, M]`` and made non-decreasing there, never an error)")
SCALE = TensorScale(per_expert=True, doc="device float32 ``(E,)``: ``tensor_sf[e]`` is expert ``e``'s "
                                         "``448 * 6 / amax``")
SF_LAYOUT = Choice("sf_layout", ("swizzled",), "swizzled", "sf_layout",
                   doc='``"swizzled"``, the only layout: each expert\'s scales are 128x4 blocks of their own, '
                       "as a grouped block-scaled GEMM reads them")
SF_OUT = Array("sf_out", "scales",
               doc="e4m3 scale bytes ``(P, ceil(K / 64), 32, 4, 4)``, ``P = min(M, (M + 127 * E) // 128)``: "
                   "expert ``e``'s from 128-row block ``sum(ceil(n_i / 128) for i < e)`` on, every other byte 0")
EXPERTS = {"segments": "experts"}
RETURNS = """Returns ``(q, sf)``. ``q`` row ``r`` is ``x`` row ``r``'s codes; rows no expert owns
are neither read nor written. ``sf`` holds expert ``e``'s scales from 128-row block
``sum(ceil(n_i / 128) for i < e)`` on (vLLM's ``blockscale_offsets``), computed on the
device from the offsets, and zeros in every other byte, on every call. With ``E = 1`` and
offsets ``(0, M)`` this is ``quantize_nvfp4(x, tensor_sf[0])`` byte for byte."""


def _experts(name: str, main: Rows, prologue: str, summary: str, doc: str) -> Op:
    return Op(name=name, summary=summary, doc=doc, fmt="nvfp4", main=main, inputs=(EXPERT_OFFSETS,),
              tensor_scale=SCALE, options=(SF_LAYOUT,), outputs=(OUT, SF_OUT), kernels=ROW_KERNELS,
              call={**EXPERTS, "prologue": prologue})


QUANTIZE_NVFP4_EXPERTS = _experts(
    "quantize_nvfp4_experts", X, "none",
    "The rows of each expert quantized to NVFP4 under its own tensor scale, in one launch.",
    f"""Each row of expert ``e`` is quantized as ``quantize_nvfp4`` would with
``tensor_sf[e]``. {RETURNS} Rows of up to K = {longest_row("nvfp4")} elements; no host
synchronization, so the call can be captured in a CUDA graph and replayed with other
offsets.""")
SILU_AND_MUL_QUANTIZE_NVFP4_EXPERTS = _experts(
    "silu_and_mul_quantize_nvfp4_experts", GATE_UP, "silu_mul",
    "SiLU·mul of the rows of each expert quantized to NVFP4 under its own tensor scale, in one launch.",
    f"""``h = dtype(silu(gate) * up)`` of each row an expert owns (the spec's exact sequence,
as ``silu_and_mul_quantize_nvfp4``), quantized as ``quantize_nvfp4_experts(h, ...)`` would:
``q`` is ``(M, N // 2)``. {RETURNS} Rows of up to N = {longest_row("nvfp4")} elements.""")


# ---------------------------------------------------------------- masked batches
XB = Rows("x", INPUT_DTYPES, INPUT_WHAT, field="input_dtype", dims=("B", "M", "K"),
          doc="bf16 (or fp16) ``(B, M, K)``: batch ``b`` is one expert's ``M`` rows")
GATE_UP_B = Rows("x", INPUT_DTYPES, INPUT_WHAT, field="input_dtype", halves=True, dims=("B", "M", "2N"),
                 doc="bf16 (or fp16) ``(B, M, 2N)``: ``gate = x[..., :N]``, ``up = x[..., N:]``")
VALID_ROWS = Array("valid_rows", "counts", output=False,
                   doc="device int32 ``(B,)``, FlashInfer's and SGLang's ``mask``: the first ``valid_rows[b]`` rows "
                       "of batch ``b`` are quantized, the count clamped into ``[0, M]`` on the device (never an "
                       "error); ``None``: every row")
BATCH_SCALE = TensorScale(per_expert=True, doc="device float32 ``(B,)``: ``tensor_sf[b]`` is batch ``b``'s "
                                               "``448 * 6 / amax``")
SF_OUT_B = Array("sf_out", "scales",
                 doc="e4m3 scale bytes ``(B, ceil(M / 128), ceil(K / 64), 32, 4, 4)``: ``sf[b]`` the swizzled "
                     "scales of batch ``b``'s rows alone, zeros for rows past its count and every padding byte")
BATCHES = {"segments": "batches"}
RETURNS_B = """Returns ``(q, sf)``, ``q`` ``(B, M, K // 2)``. Rows at or past a batch's count are
neither read nor written in ``q``; their scale bytes, and every padding byte, are 0x00 on every
call. Without ``valid_rows``, ``(q[b], sf[b])`` is ``quantize_nvfp4(x[b], tensor_sf[b])``."""


def _batched(name: str, main: Rows, prologue: str, inputs: tuple, summary: str, h: str, with_input=None) -> Op:
    return Op(name=name, summary=summary,
              doc=f"""{h}Each valid row of batch ``b`` is quantized as ``quantize_nvfp4`` would with
``tensor_sf[b]``, in one launch for every batch. {RETURNS_B} Rows of up to
{longest_row("nvfp4")} quantized elements; at most {MAX_EXPERTS} batches.""",
              fmt="nvfp4", main=main, inputs=inputs, tensor_scale=BATCH_SCALE, options=(SF_LAYOUT,),
              outputs=(OUT, SF_OUT_B), kernels=ROW_KERNELS, call={**BATCHES, "prologue": prologue},
              with_input=with_input)


H_B = "``h = dtype(silu(gate) * up)`` of each valid row (as ``silu_and_mul_quantize_nvfp4``), quantized: "
QUANTIZE_NVFP4_BATCHED_MASKED = _batched(
    "quantize_nvfp4_batched_masked", XB, "none", (VALID_ROWS,),
    "A batch of experts' rows quantized to NVFP4, batch ``b``'s first ``valid_rows[b]`` rows under its own "
    "tensor scale.", "")
QUANTIZE_NVFP4_BATCHED = _batched(
    "quantize_nvfp4_batched", XB, "none", (),
    "A batch of experts' rows quantized to NVFP4, each batch under its own tensor scale, in one launch.", "",
    (VALID_ROWS, QUANTIZE_NVFP4_BATCHED_MASKED))
SILU_AND_MUL_QUANTIZE_NVFP4_BATCHED_MASKED = _batched(
    "silu_and_mul_quantize_nvfp4_batched_masked", GATE_UP_B, "silu_mul", (VALID_ROWS,),
    "SiLU·mul of a batch of experts' rows quantized to NVFP4, batch ``b``'s first ``valid_rows[b]`` rows under "
    "its own tensor scale.", H_B)
SILU_AND_MUL_QUANTIZE_NVFP4_BATCHED = _batched(
    "silu_and_mul_quantize_nvfp4_batched", GATE_UP_B, "silu_mul", (),
    "SiLU·mul of a batch of experts' rows quantized to NVFP4, each batch under its own tensor scale, in one "
    "launch.", H_B, (VALID_ROWS, SILU_AND_MUL_QUANTIZE_NVFP4_BATCHED_MASKED))
