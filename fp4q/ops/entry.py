"""Each op's Python function, written from its declaration: the signature (main and
further inputs and the tensor scale positional, then keyword-only options with their
defaults, output buffers, ``stream``, ``config`` and ``pdl``), a docstring listing the
arguments, and a body: for the CuPy API the op's call path itself, after the lines
``public_head`` writes; ``fp4q.torch`` writes its own bodies (``body``). Written as
source and compiled, so that a call binds its arguments as fast as a hand-written
function does."""

from __future__ import annotations

from typing import Callable

from .declare import Op

STREAM_DOC = ("the stream to run on: a CuPy or torch stream, an object with ``__cuda_stream__`` or a raw "
              "handle; default: torch's current stream for a torch input, else CuPy's")
CONFIG_DOC = "a kernel config to run instead of the tuned choice (``None``: the tuned choice)"
PDL_DOC = "launch with programmatic dependent launch, overlapping the previous kernel's tail"


def parameters(op: Op, extra: tuple[tuple[str, str], ...] = ()) -> list[tuple[str, str | None, str]]:
    """``(name, default source or None for a positional, doc)`` of each parameter of ``op``'s
    function, in order; ``extra``: keyword parameters appended with their defaults' source."""
    params: list[tuple[str, str | None, str]] = [(op.main.name, None, op.main.doc)]
    params += [(a.name, None, a.doc) for a in op.inputs]
    if op.tensor_scale is not None:
        params.append((op.tensor_scale.name, None, op.tensor_scale.doc))
    if op.columnwise_scale is not None:
        params.append((op.columnwise_scale.name, "None", op.columnwise_scale.doc))
    params += [(c.name, repr(c.default), c.doc) for c in op.options]
    params += [(v.name, repr(v.default), v.doc) for v in op.per_call]
    if op.out_keywords:
        params += [(o.name, "None", f"an optional C-contiguous buffer for {o.doc}") for o in op.outputs]
    params.append(("stream", "None", STREAM_DOC))
    if op.configurable:
        params.append(("config", "None", CONFIG_DOC))
    params.append(("pdl", "True", PDL_DOC))
    if op.with_input is not None:
        array, other = op.with_input
        params.append((array.name, "None", f"{array.doc}; given, the call is ``{other.name}``'s"))
    params += [(name, default, "") for name, default in extra]
    return params


def signature(op: Op, extra: tuple[tuple[str, str], ...] = ()) -> str:
    """The parameter list of ``op``'s function, as source."""
    parts, keyword = [], False
    for name, default, _ in parameters(op, extra):
        if default is not None and not keyword:
            parts.append("*")
            keyword = True
        parts.append(name if default is None else f"{name}={default}")
    return ", ".join(parts)


def grouped_arguments(op: Op) -> str:
    """The source of the arguments ``engine.run`` takes after the op (and a runner takes):
    inputs, tensor scale, options, output buffers, stream, config, pdl."""
    inputs = ", ".join([op.main.name, *(a.name for a in op.inputs)]) + ","
    scale = op.tensor_scale.name if op.tensor_scale is not None else "None"
    if len(op.scalars) > 1:  # the runner takes them as one tuple
        scale = f"({', '.join(op.scalars)})"
    options = "".join(f"{c.name}, " for c in op.options)
    outputs = "".join(f"{o.name}, " for o in op.outputs) if op.out_keywords else "None, " * len(op.outputs)
    config = "config" if op.configurable else "None"
    return f"({inputs}), {scale}, ({options}), ({outputs}), stream, {config}, pdl"


def body(op: Op, call: str) -> str:
    """The body of ``op``'s function: ``return`` ``call`` (source naming ``TARGET`` and ``ARGS``)
    with ``TARGET`` as ``RUN`` and ``ARGS`` as ``grouped_arguments(op)``; where the caller gives
    ``op``'s ``with_input``, with ``RUN_WITH`` and the other op's arguments instead. The
    function's namespace binds ``RUN`` and ``RUN_WITH``."""
    lines = []
    if op.with_input is not None:
        array, other = op.with_input
        lines += [f"    if {array.name} is not None:",
                  "        return " + call.replace("TARGET", "RUN_WITH").replace("ARGS", grouped_arguments(other))]
    return "\n".join(lines + ["    return " + call.replace("TARGET", "RUN")]) + "\n"


def public_head(op: Op) -> list[str]:
    """The first lines of ``op``'s CuPy function when it is written as the call path itself
    (``engine.runner_source(op, public_head(op))``: a call costs no second function): its
    signature; where the caller gives ``with_input``, the other op's call (``RUN_WITH``, with
    ``ALLOCATE``); then the names the call path's steps read, bound to the arguments (a scalar
    is its own argument already, and ``tensor_sf`` where the op has none is never read)."""
    lines = [f"def {op.name}({signature(op)}):"]
    if op.with_input is not None:
        array, other = op.with_input
        lines += [f"    if {array.name} is not None:", f"        return RUN_WITH({grouped_arguments(other)}, ALLOCATE)"]
    names = [op.main.name, *(a.name for a in op.inputs)]
    outputs = "".join(f"{o.name}, " for o in op.outputs) if op.out_keywords else "None, " * len(op.outputs)
    lines += [f"    {', '.join(f'a{i}' for i in range(len(names)))} = {', '.join(names)}",
              f"    options = ({''.join(f'{c.name}, ' for c in op.options)})",
              f"    buffers = ({outputs})",
              *([] if op.configurable else ["    config = None"]),
              "    allocate = ALLOCATE"]
    return lines


def docstring(op: Op) -> str:
    lines = [op.summary, "", op.doc, "", "Arguments:"]
    lines += [f"    ``{name}``: {doc}" for name, _, doc in parameters(op) if doc]
    return "\n".join(lines)


def function(op: Op, body: str, namespace: dict, extra: tuple[tuple[str, str], ...] = (),
             module: str = "fp4q") -> Callable:
    """``op``'s function with ``body`` (source, one level indented, which may name ``OP``
    and ``ARGS`` for ``grouped_arguments(op)``), compiled with ``namespace``'s names."""
    source = f"def {op.name}({signature(op, extra)}):\n" + body.replace("ARGS", grouped_arguments(op))
    scope = dict(namespace, OP=op)
    exec(compile(source, f"<fp4q.{op.name}>", "exec"), scope)
    fn = scope[op.name]
    fn.__doc__, fn.__module__, fn.__source__ = docstring(op), module, source
    return fn


def api_table(ops) -> str:
    """The API reference of ``ops`` as markdown: per op its signature, what it returns and
    its arguments (docs/api.md is this text; a test keeps it so)."""
    parts = ["# API reference", "",
             "Written from the ops' declarations (`fp4q/ops/*.py`); `fp4q.torch` has the same functions",
             "(plus `fp4_dtype` where an op returns codes) and registers them as `torch.ops.fp4q.*`.", ""]
    for op in ops:
        parts += [f"## `fp4q.{op.name}({signature(op)})`", "", op.summary, "", op.doc, "",
                  "| argument | |", "|---|---|"]
        parts += [f"| `{name}` | {doc} |" for name, _, doc in parameters(op) if doc]
        parts.append("")
    return "\n".join(parts)
