"""The public functions of the CuPy API, one per declared op, and ``config_for``.

Every function is written from its op's declaration (``entry``) and runs the one
call path (``engine.runner(op)``) with outputs from CuPy's pool (``outputs``)."""

from __future__ import annotations

from ..cuda import driver
from ..kernels.call import ROW_TENSOR_SF_MODES
from ..numerics.groups import require_choice
from .arrays import NO_TENSOR_SCALE, PTR, as_operand, tensor_scale
from .declare import Op
from .dequantize import DEQUANTIZE_MXFP4, DEQUANTIZE_NVFP4
from .engine import compiled, plan_of, runner, runner_source
from .entry import docstring, public_head
from .fake_quantize import FAKE_QUANTIZE_NVFP4
from .experts import (QUANTIZE_NVFP4_BATCHED, QUANTIZE_NVFP4_EXPERTS, SILU_AND_MUL_QUANTIZE_NVFP4_BATCHED,
                      SILU_AND_MUL_QUANTIZE_NVFP4_EXPERTS)
from .fused import SILU_AND_MUL_QUANTIZE_MXFP4, SILU_AND_MUL_QUANTIZE_NVFP4
from .global_scale import GLOBAL_SCALE
from .outputs import cupy_outputs
from .quantize import QUANTIZE_MXFP4, QUANTIZE_NVFP4, check_no_config, resolve_config
from .rms_norm import RMS_NORM_QUANTIZE_MXFP4, RMS_NORM_QUANTIZE_NVFP4
from .rows import ROW_KERNELS
from .training import QUANTIZE_NVFP4_TRAINING

# Every public op, in the order the documentation lists them.
OPS: tuple[Op, ...] = (QUANTIZE_NVFP4, QUANTIZE_MXFP4, SILU_AND_MUL_QUANTIZE_NVFP4, SILU_AND_MUL_QUANTIZE_MXFP4,
                       RMS_NORM_QUANTIZE_NVFP4, RMS_NORM_QUANTIZE_MXFP4, QUANTIZE_NVFP4_EXPERTS,
                       SILU_AND_MUL_QUANTIZE_NVFP4_EXPERTS, QUANTIZE_NVFP4_BATCHED, SILU_AND_MUL_QUANTIZE_NVFP4_BATCHED,
                       QUANTIZE_NVFP4_TRAINING, DEQUANTIZE_NVFP4, DEQUANTIZE_MXFP4, GLOBAL_SCALE, FAKE_QUANTIZE_NVFP4)
# With the ops a public function runs for an optional input (add+RMSNorm): what torch registers.
ALL_OPS: tuple[Op, ...] = OPS + tuple(op.with_input[1] for op in OPS if op.with_input is not None)


def _function(op: Op):
    """``op``'s function, written as its call path (``entry.public_head``)."""
    other = op.with_input[1] if op.with_input is not None else op
    fn = compiled(op, runner_source(op, public_head(op)), op.name, {"RUN_WITH": runner(other), "ALLOCATE": cupy_outputs})
    fn.__doc__, fn.__module__ = docstring(op), "fp4q"
    return fn


_FUNCTIONS = {op.name: _function(op) for op in OPS}

quantize_nvfp4 = _FUNCTIONS["quantize_nvfp4"]
quantize_mxfp4 = _FUNCTIONS["quantize_mxfp4"]
dequantize_nvfp4 = _FUNCTIONS["dequantize_nvfp4"]
dequantize_mxfp4 = _FUNCTIONS["dequantize_mxfp4"]
global_scale = _FUNCTIONS["global_scale"]
silu_and_mul_quantize_nvfp4 = _FUNCTIONS["silu_and_mul_quantize_nvfp4"]
silu_and_mul_quantize_mxfp4 = _FUNCTIONS["silu_and_mul_quantize_mxfp4"]
rms_norm_quantize_nvfp4 = _FUNCTIONS["rms_norm_quantize_nvfp4"]
rms_norm_quantize_mxfp4 = _FUNCTIONS["rms_norm_quantize_mxfp4"]
quantize_nvfp4_experts = _FUNCTIONS["quantize_nvfp4_experts"]
silu_and_mul_quantize_nvfp4_experts = _FUNCTIONS["silu_and_mul_quantize_nvfp4_experts"]
quantize_nvfp4_batched = _FUNCTIONS["quantize_nvfp4_batched"]
silu_and_mul_quantize_nvfp4_batched = _FUNCTIONS["silu_and_mul_quantize_nvfp4_batched"]
quantize_nvfp4_training = _FUNCTIONS["quantize_nvfp4_training"]
fake_quantize_nvfp4 = _FUNCTIONS["fake_quantize_nvfp4"]


def config_for(x, tensor_sf=1.0, *, fmt="nvfp4", mode="rceil", sf_layout="swizzled", padded_k=None, out=None,
               sf_out=None, config=None):
    """The config (``QuantizeConfig`` or ``SimtConfig``; ``RowConfig`` for a tensor scale per
    row) that ``quantize_nvfp4`` (``fmt="nvfp4"``) or ``quantize_mxfp4`` (``fmt="mxfp4"``) with
    these arguments would launch on ``x``'s device; ``None`` for an empty ``x``. Outputs it
    would allocate count as aligned."""
    require_choice(fmt, "fmt", ("nvfp4", "mxfp4"))
    op = QUANTIZE_NVFP4 if fmt == "nvfp4" else QUANTIZE_MXFP4
    main = as_operand(x, "x")
    plan = plan_of(op, main, (sf_layout, padded_k) if fmt == "nvfp4" else (mode, sf_layout, padded_k), config)
    scale_mode = (tensor_scale(tensor_sf, plan.view.device, plan.row_shapes) if fmt == "nvfp4"
                  else NO_TENSOR_SCALE)[0]
    if config is not None:
        op.kernels.check_config(op, config)
    if plan.empty:
        return None
    pointers = [main[PTR], 0, 0]
    for i, (buf, name) in enumerate(((out, "out"), (sf_out, "sf_out")), start=1):
        if buf is not None:
            pointers[i] = as_operand(buf, name)[PTR]
    arch = driver.device(plan.view.device).arch
    if scale_mode in ROW_TENSOR_SF_MODES:
        check_no_config(plan, config)
        return ROW_KERNELS.choose(plan, scale_mode, pointers, None, arch)
    return resolve_config(config, plan, pointers, scale_mode, arch)
