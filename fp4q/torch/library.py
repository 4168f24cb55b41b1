"""The torch library ``fp4q``, derived from the ops' declarations: each op's schemas, its
CUDA kernel (the ops layer's one call path with outputs from torch's caching allocator)
and its fake implementation. Importing this module registers them; ``fp4q.torch`` is
the public face.

Per declared op ``name`` (``fp4q.ops.api.OPS``):

- ``name``: the functional op, returning the outputs. An op with a tensor scale has two
  overloads, ``.Tensor`` (defined first, so that the overload packet resolves a tensor to
  it instead of converting it to a float with a host sync) and ``.default`` (a float,
  passed by value); an op with codes takes ``bool fp4_dtype=False`` last (codes as
  ``float4_e2m1fn_x2``).
- ``name_out``, where the caller may pass the outputs: they come as mutated arguments
  (``Tensor(a!) out, ...``) after the inputs, and it returns nothing.
- ``name_dynamic`` and ``name_dynamic_out``, where the tensor scale may be ``"dynamic"``:
  the same without the tensor scale, returning it (after the outputs, or alone);
  ``name_dynamic_per_row`` and ``name_dynamic_per_row_out`` likewise for
  ``"dynamic_per_row"``, returning the scales of ``x.shape[:-1]``. A tensor scale per row
  (a float32 tensor of one value per row) takes the ``.Tensor`` overloads.
"""

from __future__ import annotations

import functools
import threading

import torch

from ..ops.api import ALL_OPS
from ..ops.arrays import DEVICE, device_expert_scales, device_scale, expert_count, tensor_scale, torch_operand
from ..ops.checks import check_operand
from ..ops.declare import DYNAMIC, Op
from ..ops.options import Flag, Integer, Number, Width
from ..ops.engine import Buffer, runner
from ..ops.plans import PLAN_CAPACITY, put_bounded
from ..ops.streams import torch_current_stream

ROLE_DTYPES = {"q": torch.uint8, "sf_nvfp4": torch.float8_e4m3fn, "sf_mxfp4": torch.float8_e8m0fnu,
               "bfloat16": torch.bfloat16, "float16": torch.float16, "uint16": torch.uint16, "float32": torch.float32,
               "scale": torch.float32}
_devices: dict[int, torch.device] = {}


def _device(ordinal: int) -> torch.device:
    found = _devices.get(ordinal)
    if found is None:
        found = _devices[ordinal] = torch.device("cuda", ordinal)
    return found


class TorchOutputs:
    """The ops layer's ``allocate(role, shape, device, stream) -> (array, address)`` on torch's
    caching allocator, in ``ROLE_DTYPES`` (codes as ``float4_e2m1fn_x2`` with ``fp4_dtype``)."""

    __slots__ = ("dtypes", "_strides", "_lock")

    def __init__(self, fp4_dtype: bool) -> None:
        self.dtypes = dict(ROLE_DTYPES, q=torch.float4_e2m1fn_x2) if fp4_dtype else ROLE_DTYPES
        self._strides: dict[tuple, tuple] = {}  # C-contiguous strides by shape, as many as the plans
        self._lock = threading.Lock()

    def _contiguous_strides(self, shape: tuple) -> tuple:
        strides, step = [], 1
        for size in reversed(shape):
            strides.append(step)
            step *= max(size, 1)
        found = tuple(reversed(strides))
        with self._lock:
            put_bounded(self._strides, shape, found, PLAN_CAPACITY)
        return found

    def __call__(self, role: str, shape: tuple, device: int, stream: int) -> tuple[torch.Tensor, int]:
        dtype = self.dtypes[role]
        where = _devices.get(device) or _device(device)
        # empty_strided: torch.empty derives the same strides, at about 1 us more per call.
        strides = self._strides.get(shape)
        if strides is None:
            strides = self._contiguous_strides(shape)
        if stream == torch_current_stream(device):
            t = torch.empty_strided(shape, strides, dtype=dtype, device=where)
        else:
            # torch's caching allocator hands a freed block only to later allocations on the
            # stream it was allocated on, in that stream's order: allocated on the launch
            # stream, an output the caller drops at once is reused only by work queued behind
            # the kernel. Only a call given a stream= other than torch's current one gets here.
            with torch.cuda.stream(torch.cuda.ExternalStream(stream, device=where)):
                t = torch.empty_strided(shape, strides, dtype=dtype, device=where)
        return t, t.data_ptr()


OUTPUTS = (TorchOutputs(False), TorchOutputs(True))


# Keyword names torch's functionalization of mutating ops takes for itself: an option of that name
# goes into the schema by its kernel config field's name instead (quantize_mxfp4's mode: mx_mode).
RESERVED = frozenset({"mode"})


def schema_name(choice) -> str:
    """An option's argument name in the schemas."""
    return choice.field if choice.name in RESERVED else choice.name


def schema_option(option) -> str:
    """An option's schema argument, with its default: a float for a number, an optional int
    for a width, a bool for a flag, an int (optional where None is allowed) for an integer,
    else a str."""
    if isinstance(option, Number):  # 17 significant digits, as torch prints a schema's float
        return f"float {option.name}={option.default:.17g}"
    if isinstance(option, Width):
        return f"int? {option.name}=None"
    if isinstance(option, Flag):
        return f"bool {option.name}={option.default}"
    if isinstance(option, Integer):
        return f"int? {option.name}=None" if option.optional else f"int {option.name}={option.default}"
    return f'str {schema_name(option)}="{option.default}"'


def has_codes(op: Op) -> bool:
    return any(o.kind == "codes" for o in op.outputs)


class Signature:
    """The schema arguments of one registered op and where each sits among a call's
    arguments: ``scale`` (the tensor scale's schema type, or None), ``outs`` (mutated
    outputs), ``dynamic`` (the string ``tensor_sf`` whose scale is computed and returned, after
    the outputs: ``"dynamic"`` or ``"dynamic_per_row"``; None). The options come before
    ``pdl``, except a width (``padded_k``), which comes last, after ``fp4_dtype``: a call that
    passes ``pdl`` by position keeps its meaning."""

    def __init__(self, op: Op, scale: str | None, outs: bool, dynamic: str | None) -> None:
        self.op, self.outs, self.dynamic = op, outs, dynamic
        self.fp4 = not outs and has_codes(op)
        # An input the op writes (add+RMSNorm's residual) is a mutated argument of every overload.
        args = [f"Tensor {op.main.name}", *(f"Tensor(r!) {a.name}" if a.inplace else f"Tensor {a.name}"
                                            for a in op.inputs)]
        if scale is not None and op.tensor_scale is not None:
            args.append(f"{scale} {op.tensor_scale.name}")
        # The mutated outputs, before every argument with a default.
        self.out_count = sum(1 for o in op.outputs if not o.late) if outs else 0
        if outs:
            args += [f"Tensor({chr(ord('a') + i)}!) {o.name}" for i, o in enumerate(op.outputs) if not o.late]
        # The columnwise scale, of the tensor scale's type (None: tensor_sf's); a dynamic op computes both.
        self.has_columnwise = scale is not None and op.columnwise_scale is not None
        if self.has_columnwise:
            assert op.columnwise_scale is not None
            args.append(f"{scale}? {op.columnwise_scale.name}=None")
        # The per-call values: torch's int64 (below 2**63 here), symbolic under torch.compile, so that a
        # new value (an offset advanced each step) is no recompile.
        args += [f"SymInt {v.name}={v.default}" for v in op.per_call]
        self.lead = sum(1 for c in op.options if not isinstance(c, Width))
        lead, tail = op.options[:self.lead], op.options[self.lead:]
        if any(not isinstance(c, Width) for c in tail):
            raise TypeError(f"{op.name}: a width option must come after the other options")
        args += [schema_option(c) for c in lead]
        args.append("bool pdl=True")
        if self.fp4:
            args.append("bool fp4_dtype=False")
        args += [schema_option(c) for c in tail]
        self.arguments = ", ".join(args)
        # The trailing arguments' defaults: torch leaves out those a call gave as their defaults.
        self.defaults = (*((None,) if self.has_columnwise else ()), *(v.default for v in op.per_call),
                         *(c.default for c in lead), True,
                         *((False,) if self.fp4 else ()), *(c.default for c in tail))
        self.required = len(args) - len(self.defaults)
        self.inputs = 1 + len(op.inputs)
        self.has_scale = scale is not None
        returned = [] if outs else ["Tensor"] * len(op.outputs)
        returned += ["Tensor"] if dynamic else []
        self.returns = returned[0] if len(returned) == 1 else f"({', '.join(returned)})"
        self.parameters = [a.split("=")[0].split()[-1] for a in args]

    def groups(self) -> tuple[str, str, str, str, str, str]:
        """The source of a call's arguments in the ops layer's groups (``split``'s result),
        naming the schema's arguments."""
        names = self.parameters
        i = self.inputs
        inputs = "".join(f"{n}, " for n in names[:i])
        tensor_sf = repr(self.dynamic) if self.dynamic else names[i] if self.has_scale else "None"
        i += self.has_scale
        buffers = "".join(f"{n}, " for n in names[i:i + self.out_count]) if self.outs else "None, " * len(self.op.outputs)
        i += self.out_count
        if len(self.op.scalars) > 1:  # one tuple: the scale, the columnwise scale's place, the per-call values
            columnwise = [names[i] if self.has_columnwise else "None"] if self.op.columnwise_scale is not None else []
            i += self.has_columnwise
            tensor_sf = f"({', '.join([tensor_sf, *columnwise, *names[i:i + len(self.op.per_call)]])},)"
            i += len(self.op.per_call)
        options = names[i:i + self.lead]
        i += self.lead
        pdl = names[i]
        fp4_dtype = names[i + 1] if self.fp4 else "False"
        options += names[i + 1 + self.fp4:]
        return f"({inputs})", tensor_sf, f"({''.join(f'{n}, ' for n in options)})", f"({buffers})", pdl, fp4_dtype

    def function(self, name: str, body: str, namespace: dict):
        """A function of the schema's arguments (trailing ones with their defaults: torch leaves
        out those a call gave as their defaults) with ``body`` (source naming them), compiled
        with ``namespace``'s names: written out, so that a call binds its arguments as fast as
        a hand-written function does."""
        params = [n if i < self.required else f"{n}=DEFAULTS[{i - self.required}]"
                  for i, n in enumerate(self.parameters)]
        source = f"def {name}({', '.join(params)}):\n    {body}\n"
        scope = dict(namespace, DEFAULTS=self.defaults)
        exec(compile(source, f"<fp4q.torch.library: {self.op.name} {name}>", "exec"), scope)
        return scope[name]

    def split(self, args: tuple):
        """A call's arguments in the ops layer's groups: inputs, tensor scale, options,
        buffers, pdl, fp4_dtype."""
        return self.splitter(*args)

    @functools.cached_property
    def splitter(self):
        return self.function("split", f"return {', '.join(self.groups())}", {})

    def arguments_of(self, inputs: tuple, scale: tuple, buffers: tuple, options: tuple, pdl, fp4_dtype,
                     scalars: tuple = ()) -> tuple:
        """A call's arguments in the schema's order (``split`` takes them apart); ``scalars``:
        the columnwise scale where the schema takes one, then the per-call values."""
        return (*inputs, *scale, *buffers, *scalars, *options[:self.lead], pdl, *((fp4_dtype,) if self.fp4 else ()),
                *options[self.lead:])

    def returned(self, result, main, fp4_dtype: bool):
        """What the registered op returns of an op's ``result`` object: its outputs, one the
        call does not write as an empty tensor of its dtype, then, where the op is dynamic,
        the computed scale (the scale of a direction written)."""
        dtypes = OUTPUTS[fp4_dtype].dtypes
        outputs = tuple(main.new_empty((0,), dtype=dtypes[o.role_in(self.op.fmt, {})]) if r is None else r
                        for o, r in zip(self.op.outputs, result.outputs))
        if self.dynamic:
            return (*outputs, next(scale for scale in result.scales if scale is not None))
        return outputs

    def kernel(self):
        """The op's eager kernel: the ops layer's call path on the grouped arguments, returning
        what the schema returns."""
        inputs, tensor_sf, options, buffers, pdl, fp4_dtype = self.groups()
        call = f"RUN({inputs}, {tensor_sf}, {options}, {buffers}, None, None, {pdl}, OUTPUTS[{fp4_dtype}])"
        if self.op.result is not None:
            body = f"return SIG.returned({call}, {self.parameters[0]}, {fp4_dtype})"
        elif not self.outs:
            body = f"return {call}"
        elif self.dynamic:
            body = f"return {call}[-1]"
        else:
            body = call
        return self.function("kernel", body, {"RUN": runner(self.op), "SIG": self, "OUTPUTS": OUTPUTS})

    def fake(self):
        def fake(*args):
            inputs, tensor_sf, options, buffers, _, fp4_dtype = self.split(args)
            main, made = inputs[0], fake_outputs(self.op, inputs, tensor_sf, options)
            if self.outs:
                for spec, buffer in zip(made, buffers):
                    check_operand(torch_operand(buffer, spec.name, 0), spec.name, spec.shape, spec.dtypes,
                                  main.get_device())
            dtypes = OUTPUTS[fp4_dtype].dtypes
            results = [] if self.outs else [main.new_empty(spec.shape if spec.present else (0,), dtype=dtypes[spec.role])
                                            for spec in made]
            if self.dynamic:  # one scale, or one per row
                shape = () if self.dynamic == DYNAMIC else main.shape[:-1]
                results.append(main.new_empty(shape, dtype=torch.float32))
            if not results:
                return None
            return results[0] if len(results) == 1 else tuple(results)

        return fake


def fake_outputs(op: Op, inputs, tensor_sf, options) -> list[Buffer]:
    """The ops layer's rules on fake tensors' sizes and strides (symbolic under dynamic
    shapes: a rule becomes a guard), in the eager call's order, and the outputs they fix.
    Contiguity and overlap, which need addresses or would specialize symbolic sizes, are
    checked when the op runs."""
    main = torch_operand(inputs[0], op.main.name, 0)
    counted = op.offsets_index
    experts = 0
    if counted is not None:
        name = op.inputs[counted - 1].name
        experts = expert_count(torch_operand(inputs[counted], name, 0), name)
    g = op.geometry(main, options, experts)
    device = main[DEVICE]
    if op.per_call:
        for value, v in zip(tensor_sf[-len(op.per_call):], op.per_call):
            if type(value) is int:  # a traced SymInt is checked when the op runs
                v.launch_value(value)
    if op.columnwise_scale is not None:
        tensor_sf, columnwise = tensor_sf[:2]
        name = op.columnwise_scale.name
        if isinstance(columnwise, torch.Tensor):
            device_scale(torch_operand(columnwise, name, 0), device, (), name)
        elif type(columnwise) is float:
            tensor_scale(columnwise, device, (), name)
    for array, value in zip(op.inputs, inputs[1:]):
        spec = Buffer(array, g)
        check_operand(torch_operand(value, spec.name, 0), spec.name, spec.shape, spec.dtypes, device)
    if op.per_expert:  # a Tensor: the schema's type
        device_expert_scales(torch_operand(tensor_sf, "tensor_sf", 0), device, g.experts,
                             "batch" if op.segments == "batches" else "expert")
    elif isinstance(tensor_sf, torch.Tensor):
        device_scale(torch_operand(tensor_sf, "tensor_sf", 0), device, op.row_shapes(g))
    elif type(tensor_sf) is float:  # a traced SymFloat is checked when the op runs
        tensor_scale(tensor_sf, device)
    return [Buffer(array, g) for array in op.outputs]


def signatures(op: Op) -> dict[str, Signature]:
    """Every registered op of ``op``, by its qualified name (``name`` or ``name.overload``)."""
    found: dict[str, Signature] = {}
    # An op returning a result object has no _out ops: its wrapper given buffers calls the ops layer.
    variants = [(False, "_out")] if op.out_keywords and op.result is None else []
    for outs, suffix in [(False, ""), *[(True, s) for _, s in variants]]:
        if op.tensor_scale is None:
            found[op.name + suffix] = Signature(op, None, outs, None)
            continue
        if op.per_expert:  # a tensor alone
            found[op.name + suffix] = Signature(op, "Tensor", outs, None)
            continue
        found[f"{op.name}{suffix}.Tensor"] = Signature(op, "Tensor", outs, None)
        found[f"{op.name}{suffix}"] = Signature(op, "float", outs, None)
        for string in op.scale_strings():
            found[f"{op.name}_{string}{suffix}"] = Signature(op, None, outs, string)
    return found


SIGNATURES: dict[str, Signature] = {name: sig for op in ALL_OPS for name, sig in signatures(op).items()}


def schemas() -> list[str]:
    """Every registered schema, as torch prints it."""
    return [f"fp4q::{name}({sig.arguments}) -> {sig.returns}" for name, sig in SIGNATURES.items()]


# ------------------------------------------------------------ registration
_lib = torch.library.Library("fp4q", "DEF")
_AFTER_INPLACE_OR_VIEW = torch._C._after_ADInplaceOrView_keyset


def _mutation_kernel(op, mutated: tuple[int, ...]):
    """The ADInplaceOrView kernel of a mutating op: bump the version counters of
    what it writes (so that autograd notices a tensor saved for backward being
    overwritten, as with torch's own out= ops), then run the op."""

    def kernel(keyset, *args):
        for i in mutated:
            torch.autograd.graph.increment_version(args[i])
        return op.redispatch(keyset & _AFTER_INPLACE_OR_VIEW, *args)

    return kernel


def _register(name: str, sig: Signature) -> None:
    _lib.define(f"{name}({sig.arguments}) -> {sig.returns}", tags=(torch.Tag.pt2_compliant_tag,))
    # CPU too: the ops layer's rules then name a host tensor as such.
    _lib.impl(name, sig.kernel(), "CUDA")
    _lib.impl(name, sig.kernel(), "CPU")
    torch.library.register_fake(f"fp4q::{name}", sig.fake(), lib=_lib)
    mutated = tuple(i for i, a in enumerate(sig.arguments.split(", ")) if "!)" in a)
    if mutated:
        base, _, overload = name.partition(".")
        _lib.impl(name, _mutation_kernel(getattr(getattr(torch.ops.fp4q, base), overload or "default"), mutated),
                  "ADInplaceOrView", with_keyset=True)


for _name, _sig in SIGNATURES.items():
    _register(_name, _sig)
