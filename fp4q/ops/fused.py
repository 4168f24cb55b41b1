"""The fused serving quantizers: SiLU·mul into NVFP4 and MXFP4, declared.

The quantize ops' kernels run them with a prologue (``kernels.call.PROLOGUES``),
which the declaration fixes; everything else (the rules, the outputs, the kernel
choice, the tensor scale, torch) is the quantize ops'. The float32 sequences are
NVFP4_SPEC.md's, "The project's exact sequences: fused serving quantizers".
"""

from __future__ import annotations

from .arrays import INPUT_DTYPES
from .declare import Array, Op, Rows, TensorScale
from .global_scale import INPUT_WHAT
from .quantize import KERNELS, MX_MODE, OUT, PADDED_K, SF_LAYOUT

GATE_UP = Rows("x", INPUT_DTYPES, INPUT_WHAT, field="input_dtype", halves=True,
               doc="bf16 (or fp16) ``(..., 2N)``: ``gate = x[..., :N]``, ``up = x[..., N:]`` (vLLM's order), "
                   "``N`` a multiple of the format's group")
SILU_MUL = {"prologue": "silu_mul"}
H = ("``h = dtype(silu(gate) * up)``, ``silu(g) = g / (1 + exp(-g))`` in float32 by the spec's exact "
     "sequence, rounded once to ``x``'s dtype, exactly what the unfused SiLU·mul would store; ``h`` has "
     "shape ``(..., N)``")

SILU_AND_MUL_QUANTIZE_NVFP4 = Op(
    name="silu_and_mul_quantize_nvfp4",
    summary="SiLU·mul of ``x`` of shape ``(..., 2N)``, quantized to NVFP4, in one kernel.",
    doc=f"""{H}, and quantized as ``quantize_nvfp4(h, tensor_sf, ...)`` would: returns
``(q, sf)`` of ``h``'s shape, or ``(q, sf, tensor_sf_device)`` for ``tensor_sf="dynamic"``
(the global scale of ``h``) and ``"dynamic_per_row"`` (each row's, shape ``x.shape[:-1]``).
``x`` is read once; ``h`` never goes to memory. A tensor scale per row takes the row
kernel, as for ``quantize_nvfp4`` (``N`` at most 32768).""",
    fmt="nvfp4",
    main=GATE_UP,
    tensor_scale=TensorScale(dynamic=True, per_row=True,
                             doc="``448 * 6 / amax(h)``: a float, a device float32 scalar, a device float32 "
                                 "array of one per row, ``\"dynamic\"`` or ``\"dynamic_per_row\"``"),
    options=(SF_LAYOUT, PADDED_K),
    outputs=(OUT, Array("sf_out", "scales", doc="e4m3 scale bytes in ``sf_layout``")),
    kernels=KERNELS,
    call=SILU_MUL,
)

SILU_AND_MUL_QUANTIZE_MXFP4 = Op(
    name="silu_and_mul_quantize_mxfp4",
    summary="SiLU·mul of ``x`` of shape ``(..., 2N)``, quantized to MXFP4, in one kernel.",
    doc=f"""{H}, and quantized as ``quantize_mxfp4(h, mode=mode, ...)`` would: returns
``(q, sf)`` of ``h``'s shape.""",
    fmt="mxfp4",
    main=GATE_UP,
    options=(MX_MODE, SF_LAYOUT, PADDED_K),
    outputs=(OUT, Array("sf_out", "scales", doc="e8m0 scale bytes in ``sf_layout``")),
    kernels=KERNELS,
    call=SILU_MUL,
)
