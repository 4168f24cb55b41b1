"""fp4q in PyTorch: the ops as ``torch.ops.fp4q.*``, Python wrappers that return
torch tensors, and vLLM's ``scaled_fp4_quant``, ``silu_and_mul_nvfp4_quant``,
``scaled_fp4_experts_quant`` and ``silu_and_mul_scaled_fp4_experts_quant``
(``fp4q.torch.peers`` and ``fp4q.torch.peers_moe`` have those and FlashInfer's calls), and
``fake_quantize_nvfp4_ste``, fake quantization with the straight-through gradient for
quantization-aware training (``fp4q.torch.qat``).

``import fp4q.torch`` registers the ops (``import fp4q`` never imports torch).
Every op runs fp4q's one call path (``fp4q.ops``: the same rules, plans and
kernels as the CuPy API) with outputs from torch's caching allocator, on
torch's current stream of the input's device. Each op has a fake
implementation that derives exact shapes and dtypes (symbolic sizes too) from
the same rule functions, so ``torch.compile(fullgraph=True, dynamic=True)``
traces calls without a graph break, and CUDA graphs (``torch.cuda.graph``,
``mode="reduce-overhead"``) capture them. ``fp4q.torch.schemas()`` lists the
registered schemas; ``fp4q.torch.library`` says how they follow from the ops'
declarations.

The wrappers take the CuPy API's arguments, plus ``fp4_dtype`` where an op
returns codes, and call the registered op that fits: the ``.Tensor`` or
float overload of the tensor scale (a tensor scale per row takes ``.Tensor``), the
``_dynamic`` op for ``tensor_sf="dynamic"`` and ``_dynamic_per_row`` for
``"dynamic_per_row"``, the ``_out`` op where outputs are given (allocating
any that is not). ``config=`` (a Python object) and ``stream=`` have no place
in a schema: a wrapper given either calls the ops layer directly, eagerly, and
under ``torch.compile`` that call is a graph break (``torch.compiler.disable``).
"""

from __future__ import annotations

import numpy as np
import torch

from ..ops.api import OPS
from ..ops.declare import DYNAMIC, Op
from ..ops.options import Choice, Width
from ..ops.engine import not_dynamic, run
from ..ops.entry import body, function
from .library import OUTPUTS, SIGNATURES, fake_outputs, has_codes, schemas
from .peers import scaled_fp4_quant, silu_and_mul_nvfp4_quant
from .qat import FakeQuantizeNVFP4STE, fake_quantize_nvfp4_ste
from .peers_moe import scaled_fp4_experts_quant, silu_and_mul_scaled_fp4_experts_quant

ops = torch.ops.fp4q

__all__ = ["quantize_nvfp4", "quantize_mxfp4", "silu_and_mul_quantize_nvfp4", "silu_and_mul_quantize_mxfp4",
           "rms_norm_quantize_nvfp4", "rms_norm_quantize_mxfp4", "quantize_nvfp4_experts",
           "silu_and_mul_quantize_nvfp4_experts", "quantize_nvfp4_batched", "silu_and_mul_quantize_nvfp4_batched",
           "quantize_nvfp4_training",
           "dequantize_nvfp4", "dequantize_mxfp4", "global_scale", "fake_quantize_nvfp4", "fake_quantize_nvfp4_ste",
           "FakeQuantizeNVFP4STE",
           "scaled_fp4_quant", "silu_and_mul_nvfp4_quant", "scaled_fp4_experts_quant",
           "silu_and_mul_scaled_fp4_experts_quant", "schemas"]


class Entry:
    """What a wrapper of ``op`` dispatches to: its registered ops and their signatures, by the
    tensor scale's kind (``"Tensor"``, ``"float"``, ``"none"`` or a computed one, ``"dynamic"`` or
    ``"dynamic_per_row"``) and whether
    outputs are given; and which options may be torch dtypes (passed to the schema by name)."""

    def __init__(self, op: Op) -> None:
        self.op = op
        self.registered: dict[tuple[str, bool], tuple] = {}
        for name, sig in SIGNATURES.items():
            base, _, overload = name.partition(".")
            if sig.op is op:
                kind = sig.dynamic or ("none" if not sig.has_scale else "Tensor" if op.per_expert
                                       else overload or "float")
                self.registered[(kind, sig.outs)] = (getattr(getattr(ops, base), overload or "default"), sig)
        # Per output, the index of the option without which it is not written (Array.when), or None.
        names = [c.name for c in op.options]
        self.when = tuple(None if o.when is None else names.index(o.when) for o in op.outputs)
        # (index, name, choices) of the options that may be torch dtypes.
        self.dtype_options = tuple((i, c.name, c.choices) for i, c in enumerate(op.options)
                                   if isinstance(c, Choice) and c.name == "dtype")


@torch.compiler.disable
def _eager(op: Op, inputs, tensor_sf, options, buffers, stream, config, pdl, fp4_dtype):
    """The ops layer called directly, for what a schema cannot carry (config=, stream=)."""
    return run(op, inputs, tensor_sf, options, buffers, stream, config, pdl, OUTPUTS[fp4_dtype])


def dispatch(entry: Entry, inputs: tuple, tensor_sf, options: tuple, buffers: tuple, stream, config, pdl, fp4_dtype):
    """A wrapper's call: the registered op that fits its arguments."""
    op = entry.op
    for i, option, choices in entry.dtype_options:
        value = options[i]
        name = str(value).removeprefix("torch.") if isinstance(value, torch.dtype) else value
        if type(name) is not str or name not in choices:  # the rule with both spellings it takes
            raise ValueError(f"{option} must be {', '.join(map(repr, choices))}, "
                             f"{' or '.join(f'torch.{c}' for c in choices)}, got {value!r}")
        options = (*options[:i], name, *options[i + 1:])
    # A tensor scale per expert that is no tensor fits no schema: the ops layer says what is wrong.
    if stream is not None or config is not None or (op.per_expert and not isinstance(tensor_sf, torch.Tensor)):
        return _eager(op, inputs, tensor_sf, options, buffers, stream, config, pdl, fp4_dtype)
    if op.result is not None:
        return dispatch_result(entry, inputs, tensor_sf, options, buffers, pdl, fp4_dtype)
    calls: tuple = ()
    if op.per_call:  # the tensor scale, then the per-call values
        scales, (tensor_sf, *calls) = tensor_sf, tensor_sf
        if not _fit_schema(calls):
            return _eager(op, inputs, scales, options, buffers, stream, config, pdl, fp4_dtype)
    scale: tuple = ()
    if op.tensor_scale is None:
        kind = "none"
    elif type(tensor_sf) is str:
        if tensor_sf not in op.scale_strings():
            not_dynamic(op, tensor_sf)
        kind = tensor_sf
    else:
        kind, scale = ("Tensor" if isinstance(tensor_sf, torch.Tensor) else "float"), (tensor_sf,)
    table = entry.registered
    missing = 0
    for b in buffers:  # a loop, not all()/any() over a generator: a repeated call is a few microseconds
        if b is None:
            missing += 1
    if missing == len(buffers):
        registered, sig = table[(kind, False)]
        return registered(*sig.arguments_of(inputs, scale, (), options, pdl, fp4_dtype, calls))
    if missing:
        dtypes = OUTPUTS[fp4_dtype].dtypes
        specs = fake_outputs(op, inputs, tensor_sf, options)
        buffers = tuple(torch.empty(spec.shape, dtype=dtypes[spec.role], device=inputs[0].device) if b is None else b
                        for spec, b in zip(specs, buffers))
    registered, sig = table[(kind, True)]
    result = registered(*sig.arguments_of(inputs, scale, buffers, options, pdl, False, calls))
    if sig.dynamic:
        return (*buffers, result)
    return buffers[0] if len(buffers) == 1 else buffers


def _fit_schema(calls) -> bool:
    """Whether per-call values fit a schema's int64 (no int, or one of 2**63 or more, goes to
    the ops layer, which names its rule); a traced SymInt goes to the schema, and the op checks
    its value when it runs."""
    return all(isinstance(v, torch.SymInt) or (type(v) is int and 0 <= v < 2**63) for v in calls)


def dispatch_result(entry: Entry, inputs: tuple, scales: tuple, options: tuple, buffers: tuple, pdl, fp4_dtype):
    """``dispatch`` of an op that returns a result object and takes a columnwise scale
    (``scales``: both, then the per-call values): the registered op of the scale's kind where the columnwise scale is
    ``None`` or of the same kind (both tensors, both floats); the ops layer otherwise, and
    where buffers are given or a per-call value is 2**63 or more (its eager call: a graph
    break under ``torch.compile``)."""
    op = entry.op
    tensor_sf, columnwise, *calls = scales
    kind = ("Tensor" if isinstance(tensor_sf, torch.Tensor) else "float" if type(tensor_sf) is float
            else tensor_sf if type(tensor_sf) is str else "")  # "": a kind no schema takes
    same = columnwise is None or (kind == "Tensor" and isinstance(columnwise, torch.Tensor)) or (
        kind == "float" and type(columnwise) is float) or (kind == DYNAMIC and columnwise == DYNAMIC)
    found = (entry.registered.get((kind, False)) if same and _fit_schema(calls)
             and not any(b is not None for b in buffers) else None)
    if found is None:
        return _eager(op, inputs, scales, options, buffers, None, None, pdl, fp4_dtype)
    registered, sig = found
    scale, scalars = ((), tuple(calls)) if sig.dynamic else ((tensor_sf,), (columnwise, *calls))
    returned = registered(*sig.arguments_of(inputs, scale, (), options, pdl, fp4_dtype, scalars))
    assert op.result is not None
    outputs = [r if i is None or options[i] else None for i, r in zip(entry.when, returned)]
    used = [returned[-1] if sig.dynamic else tensor_sf] * 2
    if sig.dynamic or isinstance(tensor_sf, torch.Tensor):
        used[1] = used[0] if columnwise is None else columnwise
    else:
        used = [np.float32(tensor_sf), np.float32(tensor_sf if columnwise is None else columnwise)]
    return op.result(*outputs, *used)


def fast_path(entry: Entry, namespace: dict) -> str:
    """The source of a wrapper's first lines: where a call needs none of ``dispatch``'s
    general steps (no ``stream=`` or ``config=``, a tensor scale that is a tensor or a float,
    the outputs all given or none, options that are their schema's values, width options left
    out), it calls the registered op itself, as a hand-written wrapper would; ``""`` for an
    op with per-call values, a result object or scales per expert, which always dispatch. Binds
    the registered ops it calls in ``namespace``."""
    op = entry.op
    if op.result is not None or op.per_expert or op.per_call:
        return ""
    guard = ["stream is None", *(["config is None"] if op.configurable else [])]
    if op.with_input is not None:
        guard.append(f"{op.with_input[0].name} is None")
    for i, name, choices in entry.dtype_options:
        namespace[f"CHOICES{i}"] = choices
        guard.append(f"type({name}) is str and {name} in CHOICES{i}")
    lead = [c.name for c in op.options if not isinstance(c, Width)]
    tail = [c.name for c in op.options if isinstance(c, Width)]
    guard += [f"{name} is None" for name in tail]
    inputs = [op.main.name, *(a.name for a in op.inputs)]
    outs = [o.name for o in op.outputs]
    scale = [] if op.tensor_scale is None else [op.tensor_scale.name]
    # Per kind of tensor scale, the test that picks it: none, or a tensor, else a float.
    kinds = [("none", "")] if not scale else [("Tensor", f"isinstance({scale[0]}, TENSOR)"),
                                             ("float", f"type({scale[0]}) is float")]

    def calls(given: bool, indent: str) -> list[str]:
        found = []
        for kind, test in kinds:
            registered, sig = entry.registered[(kind, given)]
            namespace[f"{kind.upper()}_{given}"] = registered
            args = ", ".join([*inputs, *scale, *(outs if given else []), *lead, "pdl", *(["fp4_dtype"] if sig.fp4 else [])])
            done = f"{kind.upper()}_{given}({args}); return {', '.join(outs)}" if given else \
                f"return {kind.upper()}_{given}({args})"
            found.append(f"{indent}if {test}: {done}" if test else f"{indent}{done}")
        return found

    lines = [f"    if {' and '.join(guard)}:"]
    if not op.out_keywords:
        lines += calls(False, "        ")
    elif not any(o.late for o in op.outputs):  # the outputs all given or none
        lines += [f"        if {' and '.join(f'{o} is None' for o in outs)}:", *calls(False, "            "),
                  f"        elif {' and '.join(f'{o} is not None' for o in outs)}:", *calls(True, "            ")]
    else:
        return ""
    return "\n".join(lines) + "\n"


def _wrapper(op: Op):
    """``op``'s torch function: its CuPy signature, plus ``fp4_dtype`` where it returns codes; given
    its ``with_input``, the other op's call."""
    other = op.with_input[1] if op.with_input is not None else op
    entry = Entry(op)
    namespace = {"dispatch": dispatch, "RUN": entry, "RUN_WITH": Entry(other), "TENSOR": torch.Tensor}
    first = fast_path(entry, namespace)
    if has_codes(op):
        return function(op, first + body(op, "dispatch(TARGET, ARGS, fp4_dtype)"), namespace,
                        (("fp4_dtype", "False"),), module="fp4q.torch")
    return function(op, first + body(op, "dispatch(TARGET, ARGS, False)"), namespace, module="fp4q.torch")


_FUNCTIONS = {op.name: _wrapper(op) for op in OPS}

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
