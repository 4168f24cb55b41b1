"""The fused RMSNorm quantizers: RMSNorm and add+RMSNorm into NVFP4 and MXFP4, declared,
and their kernel choice (the row kernel, ``kernels.rows``).

``rms_norm_quantize_nvfp4(x, weight, tensor_sf)`` normalizes each row of ``x``;
``add_rms_norm_quantize_nvfp4(x, weight, residual, tensor_sf)`` first adds
``residual`` and writes the sum back to it. The CuPy and torch functions
``rms_norm_quantize_*`` take ``residual=`` and run the second op when it is
given. The float32 sequences are NVFP4_SPEC.md's, "RMSNorm and add+RMSNorm".
"""

from __future__ import annotations

from ..kernels.rows import longest_row
from .declare import Array, Op, TensorScale
from .options import Number
from .global_scale import X
from .quantize import MX_MODE, OUT, PADDED_K, SF_LAYOUT
from .rows import ROW_KERNELS

WEIGHT = Array("weight", "like_row", output=False, doc="the norm's weight ``(K,)``, in ``x``'s dtype")
RESIDUAL = Array("residual", "like_main", output=False, inplace=True,
                 doc="C-contiguous, ``x``'s shape and dtype: ``x + residual`` is normalized, and written back "
                     "to ``residual`` (rounded to its dtype)")
EPS = Number("eps", 1e-6, doc="added to the mean square, rounded to float32 (finite, ``>= 0``)")
H = ("``h = dtype(dtype(r * rinv) * weight)`` per row, ``rinv = 1 / sqrt(sum(r**2) / K + eps)`` in float32 "
     "(the sum in the spec's fixed pairwise order), ``r`` the row of ``x``")


SCALE = TensorScale(per_row=True, doc="``448 * 6 / amax(h)``: a float, a device float32 scalar, a device "
                                      "float32 array of one per row or ``\"dynamic_per_row\"``")


def _nvfp4(name: str, inputs: tuple, prologue: str, summary: str, with_input=None) -> Op:
    return Op(name=name, summary=summary,
              doc=f"""{H}, and quantized as ``quantize_nvfp4(h, tensor_sf, ...)`` would: returns ``(q, sf)``
of ``x``'s shape, then, for ``tensor_sf="dynamic_per_row"``, each row's scale (the global
scale of its ``h``, shape ``x.shape[:-1]``). ``x`` is read once; ``h`` never goes to
memory. Rows of up to K = {longest_row("nvfp4")} elements.""",
              fmt="nvfp4", main=X, inputs=inputs, tensor_scale=SCALE, options=(EPS, SF_LAYOUT, PADDED_K),
              outputs=(OUT, Array("sf_out", "scales", doc="e4m3 scale bytes in ``sf_layout``")),
              kernels=ROW_KERNELS, call={"prologue": prologue}, with_input=with_input)


def _mxfp4(name: str, inputs: tuple, prologue: str, summary: str, with_input=None) -> Op:
    return Op(name=name, summary=summary,
              doc=f"""{H}, and quantized as ``quantize_mxfp4(h, mode=mode, ...)`` would: returns ``(q, sf)``
of ``x``'s shape. Rows of up to K = {longest_row("mxfp4")} elements.""",
              fmt="mxfp4", main=X, inputs=inputs, options=(EPS, MX_MODE, SF_LAYOUT, PADDED_K),
              outputs=(OUT, Array("sf_out", "scales", doc="e8m0 scale bytes in ``sf_layout``")),
              kernels=ROW_KERNELS, call={"prologue": prologue}, with_input=with_input)


ADD_RMS_NORM_QUANTIZE_NVFP4 = _nvfp4("add_rms_norm_quantize_nvfp4", (WEIGHT, RESIDUAL), "add_rms_norm",
                                     "``residual += x``, then RMSNorm of it quantized to NVFP4, in one kernel.")
RMS_NORM_QUANTIZE_NVFP4 = _nvfp4("rms_norm_quantize_nvfp4", (WEIGHT,), "rms_norm",
                                 "RMSNorm of ``x`` of shape ``(..., K)`` (after ``residual += x`` where given), "
                                 "quantized to NVFP4, in one kernel.", (RESIDUAL, ADD_RMS_NORM_QUANTIZE_NVFP4))
ADD_RMS_NORM_QUANTIZE_MXFP4 = _mxfp4("add_rms_norm_quantize_mxfp4", (WEIGHT, RESIDUAL), "add_rms_norm",
                                     "``residual += x``, then RMSNorm of it quantized to MXFP4, in one kernel.")
RMS_NORM_QUANTIZE_MXFP4 = _mxfp4("rms_norm_quantize_mxfp4", (WEIGHT,), "rms_norm",
                                 "RMSNorm of ``x`` of shape ``(..., K)``, ``K % 32 == 0`` (after ``residual += x`` "
                                 "where given), quantized to MXFP4, in one kernel.",
                                 (RESIDUAL, ADD_RMS_NORM_QUANTIZE_MXFP4))
