"""The one call path of every op: its declaration's rules, the plan, the launch.

``run`` takes a call's arguments grouped as the declaration groups them (the
inputs, the tensor scale, the options, the output buffers) and runs, in the
order of their messages: the main input (through the plan of its kind of
call), the further inputs, the tensor scale, the stream, the outputs (checked,
or allocated by ``allocate``: CuPy's pool, or torch's allocator), ``pdl``,
``config``. The plan of a kind of call (keyed by the op, the main input's
shape, strides, dtype and device, the options and the config's identity)
keeps what its rules derived and, per tensor-scale mode and the pointers' low
four bits, the launch its op family chose.

Those steps are written once, in ``runner_source``, and compiled per op with
its arrays spelled out (``runner``): the rules are the functions of
``checks``, ``arrays`` and the plan, called in straight-line code, which
costs less host time than a loop over an op's one or two arrays."""

from __future__ import annotations

import math
import threading
from typing import Any, Callable

import numpy as np

from ..kernels.spec import Extent
from .arrays import ITEMSIZE, NO_TENSOR_SCALE, Operand, as_operand, expert_count, expert_scales, tensor_scale
from .checks import check_element_aligned, check_operand, check_pdl
from .declare import DYNAMIC, DYNAMIC_PER_ROW, SAME_SCALE, Array, Geometry, Op
from .options import LAUNCHED
from .plans import plans
from .streams import stream_handle


class Buffer:
    """An array of a kind of call other than the main input, as its plan fixed it."""

    __slots__ = ("name", "role", "shape", "dtypes", "nbytes", "late", "present")

    def __init__(self, array: Array, g: Geometry) -> None:
        self.name, self.role, self.shape, self.dtypes = array.name, array.role(g), array.shape(g), array.dtypes(g)
        self.nbytes = math.prod(self.shape) * ITEMSIZE[self.dtypes[0]]  # every dtype of a buffer has one size
        self.late = array.late
        self.present = array.present(g)


class Plan:
    """What the rules on one kind of call derived, and the launches chosen for it so far."""

    __slots__ = ("op", "config", "geometry", "view", "empty", "inputs", "outputs", "late", "extents", "fixed",
                 "call", "align_mask", "main_extent", "row_shapes", "launches", "lock")

    def __init__(self, op: Op, main: Operand, options: tuple, config, experts: int = 0) -> None:
        g = op.geometry(main, options, experts)
        self.op, self.config, self.geometry, self.view = op, config, g, g.view
        self.empty = g.view.empty
        self.inputs = tuple(Buffer(a, g) for a in op.inputs)
        outputs = tuple(Buffer(a, g) for a in op.outputs)
        self.outputs = tuple(b for b in outputs if not b.late)
        self.late = tuple(b for b in outputs if b.late)
        self.extents: dict[str, Extent] = {op.main.name: op.main.extent(g)}
        self.extents.update((a.name, a.extent(g)) for a in (*op.inputs, *op.outputs) if a.kind != "scalar")
        view = g.view
        # The launch values every kernel of the op may take from the plan.
        self.fixed: dict[str, int | float] = {"rows": view.rows, "cols": g.k, "out_cols": g.out_k,
                                              f"{op.main.name}_row_stride": view.row_stride}
        if op.tensor_scale is None:  # the kernels' by-value tensor scale, never read
            self.fixed.update(tensor_sf_value=0.0, tensor_sf_ptr=0)
        if g.experts:
            self.fixed.update(experts=g.experts, sf_blocks=g.sf_blocks, batch_rows=g.batch_rows)
        self.fixed.update((c.name, c.launch_value(g.options[c.name])) for c in op.options if isinstance(c, LAUNCHED))
        # The kernel configs' call fields these options and this input fix.
        self.call = {c.field: c.call_value(g.options[c.name]) for c in op.options if c.field is not None}
        self.call.update(op.call, fmt=op.fmt)
        if op.main.field is not None:
            self.call[op.main.field] = op.main.dtypes[view.dtype]
        self.align_mask = view.itemsize - 1
        self.main_extent = view.span(0)[1]
        # The shapes a tensor scale per row may have (and of the computed ones: the second).
        self.row_shapes = op.row_shapes(g)
        self.launches: dict[tuple, object] = {}
        self.lock = threading.Lock()

    def launch_for(self, mode: str, low: int, pointers: list[int], config):
        """The launch of this kind of call for ``mode`` and pointers whose low four bits
        are ``low``: chosen once by the op's kernels, then kept."""
        launch = self.launches.get((mode, low))
        if launch is None:
            launch = self.op.kernels.resolve(self, mode, pointers, config)
            with self.lock:
                self.launches[(mode, low)] = launch
        return launch


def stride_key(obj, is_torch: bool) -> tuple:
    """The strides of an operand's ``obj`` as its library keeps them (torch: elements,
    CuPy: bytes): cheaper than ``byte_strides``, and exact in a plan key beside the
    dtype and ``is_torch``."""
    return obj.stride() if is_torch else obj.strides


def plan_of(op: Op, main: Operand, options: tuple, config) -> Plan:
    """The plan of this kind of call (built, checking its rules, on the first call)."""
    obj, _, shape, dtype, device, is_torch = main
    return plan_for(op, main, options, config, (op, shape, stride_key(obj, is_torch), is_torch, dtype, device,
                                                options, id(config)))


def plan_for(op: Op, main: Operand, options: tuple, config, key: tuple, experts: int = 0) -> Plan:
    """``plan_of`` with the key already built (the call path builds it inline); ``experts``:
    the count the expert offsets fixed (in the key too), for an op with them."""
    try:
        plan = plans.get(key)
    except TypeError:  # an unhashable option: its rule says what is wrong with it
        op.option_values(options)
        raise
    if plan is None or plan.config is not config:
        return plans.put(key, Plan(op, main, options, config, experts))
    for value in options:  # equal to the stored plan's: only a value of another type can break a rule
        if value is not None and type(value) is not str and type(value) is not float:
            op.option_values(options)
    return plan


def run(op: Op, inputs: tuple, tensor_sf, options: tuple, buffers: tuple, stream, config, pdl, allocate):
    """A call of ``op``: its outputs in the declared order (one alone, else a tuple), then
    the dynamic tensor scale where ``tensor_sf`` is ``"dynamic"``; or what its ``result``
    builds. ``tensor_sf``: the tuple of ``op.scalars`` where the op has more than the tensor scale."""
    return runner(op)(inputs, tensor_sf, options, buffers, stream, config, pdl, allocate)


_runners: dict[Op, Callable] = {}


def runner(op: Op) -> Callable:
    """``op``'s call path as one function (``run`` without the op), compiled from
    ``runner_source(op)`` on first use."""
    found = _runners.get(op)
    if found is None:
        found = _runners[op] = compiled(op, runner_source(op), "run", {})
    return found


def compiled(op: Op, source: str, name: str, namespace: dict) -> Callable:
    """Function ``name`` of ``source`` (``runner_source(op, ...)``), with the call path's names and
    ``namespace``'s."""
    scope: dict[str, Any] = dict(_RUNNER_NAMES, OP=op, PER_CALL=op.per_call, __name__=__name__, **namespace)
    exec(compile(source, f"<fp4q.ops.engine: {op.name}>", "exec"), scope)
    fn = scope[name]
    fn.__source__ = source
    return fn


RUN_HEAD = "def run(inputs, tensor_sf, options, buffers, stream, config, pdl, allocate):"


def runner_source(op: Op, head: list[str] | None = None) -> str:
    """The source of ``op``'s call path: ``run``'s steps written out for its arrays (a
    repeated call costs a few host microseconds, and loops over one or two arrays would
    be a good part of them). Arrays: ``a`` the arguments, ``p`` the pointers; the main
    input is ``a0``/``p0``, further inputs ``a1``..., outputs ``b1``... (buffers, spec
    ``o1``..., results ``r1``...). ``head``: the lines before the steps, which bind their
    names (``a0``..., the scalars, ``options``, ``buffers``, ``stream``, ``config``, ``pdl``,
    ``allocate``); default, ``run``'s parameters (``RUN_HEAD``) taken apart."""
    ins, outs = op.inputs, [o for o in op.outputs if not o.late]
    names = [op.main.name, *(a.name for a in ins)]
    ptrs = [f"p{i}" for i in range(len(names))] + [f"q{j}" for j in range(1, len(outs) + 1)]
    buffers = [f"b{op.outputs.index(o) + 1}" if op.out_keywords else "_" for o in outs]
    if head is None:
        head = [RUN_HEAD, f"    {unpacked([f'a{i}' for i in range(len(names))])} = inputs",
                *([f"    {', '.join(op.scalars)} = tensor_sf"] if len(op.scalars) > 1 else [])]
    lines = [
        *head,
        f"    main = as_operand(a0, {op.main.name!r})",
        "    obj, p0, shape, dtype, device, is_torch = main",
    ]
    # The expert offsets' length fixes the plan's shapes: read before it, and keyed.
    counted = op.offsets_index
    experts = ""
    if counted is not None:
        lines += [f"    c{counted} = as_operand(a{counted}, {names[counted]!r})",
                  f"    experts = expert_count(c{counted}, {names[counted]!r})"]
        experts = ", experts"
    # The stored plan, looked up here; plan_for where there is none, the config is another or an
    # option's type may break its rule.
    plain = "".join(f" or (o{i} is not None and type(o{i}) is not str and type(o{i}) is not float)"
                    for i in range(len(op.options)))
    lines += [
        "    key = (OP, shape, obj.stride() if is_torch else obj.strides, "
        f"is_torch, dtype, device, options{experts}, id(config))",
        *([f"    {unpacked([f'o{i}' for i in range(len(op.options))])} = options"] if op.options else []),
        "    try:",
        "        plan = PLANS_GET(key)",
        "    except TypeError:  # an unhashable option: plan_for names its rule",
        "        plan = None",
        f"    if plan is None or plan.config is not config{plain}:",
        f"        plan = plan_for(OP, main, options, config, key{experts})",
        "    if p0 & plan.align_mask:  # the test is inline, the rule and its message are not",
        f"        check_element_aligned(p0, dtype, {op.main.name!r})",
    ]
    spans = [f"({op.main.name!r}, (p0, p0 + plan.main_extent))"]
    if ins:
        lines.append(f"    {unpacked([f'i{i}' for i in range(1, len(names))])} = plan.inputs")
    for i, (name, array) in enumerate(zip(names[1:], ins), start=1):
        written = f", ({', '.join(spans)},)" if array.inplace else ""
        operand = f"c{i}" if i == counted else f"as_operand(a{i}, {name!r})"
        lines.append(f"    _, p{i} = check_operand({operand}, {name!r}, i{i}.shape, i{i}.dtypes, "
                     f"device, i{i}.nbytes{written})")
        spans.append(f"({name!r}, (p{i}, p{i} + i{i}.nbytes))")
    scale = op.tensor_scale
    if scale is None:
        lines.append("    mode = NO_SCALE_MODE")
    elif op.per_expert:
        unit = "batch" if op.segments == "batches" else "expert"
        lines.append(f"    mode, value, scale_ptr = expert_scales(tensor_sf, device, plan.geometry.experts, {unit!r})")
    else:
        given = f"mode, value, scale_ptr = tensor_scale(tensor_sf, device{', plan.row_shapes' if op.per_row else ''})"
        lines.append("    if type(tensor_sf) is str:")
        if not op.scale_strings():
            lines += ["        not_dynamic(OP, tensor_sf)", f"    {given}"]
        for n, string in enumerate(op.scale_strings()):
            lines += [f"        {'elif' if n else 'if'} tensor_sf == {string!r}:",
                      f"            mode, value, scale_ptr = {_MODE_NAMES[string]}, 0.0, 0"]
        if op.scale_strings():
            lines += ["        else:", "            not_dynamic(OP, tensor_sf)", "    else:", f"        {given}"]
    second = op.columnwise_scale
    if second is not None:  # None: tensor_sf's
        lines += [f"    if {second.name} is None:", "        mode_t, value_t, scale_ptr_t = SAME_SCALE, value, scale_ptr",
                  f"    elif type({second.name}) is str:",
                  f"        if {second.name} != DYNAMIC:", f"            not_dynamic(OP, {second.name}, {second.name!r})",
                  "        mode_t, value_t, scale_ptr_t = DYNAMIC, 0.0, 0", "    else:",
                  f"        mode_t, value_t, scale_ptr_t = tensor_scale({second.name}, device, name={second.name!r})"]
    lines.append("    handle = stream_handle(stream, device, is_torch)")
    if outs:
        lines.append(f"    {unpacked([f'o{j}' for j in range(1, len(outs) + 1)])} = plan.outputs")
    if op.out_keywords:
        lines.append(f"    {unpacked([f'b{k}' for k in range(1, len(op.outputs) + 1)])} = buffers")
    for j, (o, buffer) in enumerate(zip(outs, buffers), start=1):
        allocated = f"r{j}, q{j} = allocate(o{j}.role, o{j}.shape, device, handle)"
        if not op.out_keywords:
            lines.append(f"    {allocated}")
            continue
        first = "if"
        if o.when is not None:  # not written without its option: None, and no buffer
            lines += [f"    if not o{j}.present:", f"        if {buffer} is not None:",
                      f"            not_written(OP, {o.name!r}, {o.when!r})", f"        r{j}, q{j} = None, 0"]
            first = "elif"
        lines += [f"    {first} {buffer} is None:", f"        {allocated}", "    else:",
                  f"        r{j}, q{j} = check_operand(as_operand({buffer}, {o.name!r}), {o.name!r}, o{j}.shape, "
                  f"o{j}.dtypes, device, o{j}.nbytes, ({', '.join(spans)},))"]
        spans.append(f"({o.name!r}, (q{j}, q{j} + o{j}.nbytes))")
    lines += ["    if pdl is not True and pdl is not False:", "        check_pdl(pdl)"]
    if op.configurable:
        lines += ["    if config is not None:  # None is always valid", "        OP.kernels.check_config(OP, config)"]
    low = " | ".join(f"({p} & 15) << {4 * (len(ptrs) - 1 - n)}" if n < len(ptrs) - 1 else f"{p} & 15"
                     for n, p in enumerate(ptrs))
    lines.append(f"    low = {low}")
    pointers = f"[{', '.join(ptrs)}]"
    if op.per_row:  # the scales per row, computed: the kernel's tensor_sf_ptr
        lines += ["    if mode is DYNAMIC_PER_ROW:",
                  "        row_scales, scale_ptr = allocate('scale', plan.row_shapes[1], device, handle)"]
    # The per-call values, after their rule, follow the scales among the launch values.
    lines += [f"    {v.name} = PER_CALL[{i}].launch_value({v.name})" for i, v in enumerate(op.per_call)]
    per_call = "".join(f", {v.name}" for v in op.per_call)
    if scale is None:
        lines += [f"    values = [{', '.join(ptrs)}{per_call}]",
                  f"    launch = plan.launches.get((mode, low)) or plan.launch_for(mode, low, {pointers}, config)"]
    elif second is not None:
        lines += [f"    values = [{', '.join(ptrs)}, value, scale_ptr, value_t, scale_ptr_t{per_call}]",
                  "    modes = (mode, mode_t)",
                  f"    launch = plan.launches.get((modes, low)) or plan.launch_for(modes, low, {pointers}, config)"]
    else:
        lines += [f"    values = [{', '.join(ptrs)}, value, scale_ptr{per_call}]",
                  f"    launch = plan.launches.get((mode, low)) or plan.launch_for(mode, low, {pointers}, config)"]
    results, late = [], [o for o in op.outputs if o.late]
    for o in op.outputs:
        if o.late:
            k = late.index(o)
            results.append(f"s{k}")
            lines += scalar_lines(f"s{k}", f"plan.late[{k}].role", "    ")
        else:
            results.append(f"r{outs.index(o) + 1}")
    returned = results[0] if len(results) == 1 else f"{', '.join(results)}"
    if second is not None:  # a dynamic scale, computed once, is every dynamic direction's, or (the
        # launch's scale_t_apart) the columnwise one is computed apart, the allocation's second element
        assert scale is not None and op.result is not None
        lines += ["    if mode is DYNAMIC or mode_t is DYNAMIC:",
                  *scalar_lines("computed", "'scale'", "        ", whole="scales"),
                  "        computed_t = scales[1] if launch.scale_t_apart else computed",
                  "    else:", "        computed = computed_t = None",
                  "    launch(handle, pdl, values)",
                  f"    used = computed if mode is DYNAMIC else {scale.name} if scale_ptr else float32(value)",
                  f"    used_t = computed_t if launch.scale_t_apart or mode_t is DYNAMIC else used if mode_t is "
                  f"SAME_SCALE else {second.name} if scale_ptr_t else float32(value_t)",
                  f"    return OP.result({', '.join(results)}, used, used_t)"]
        return "\n".join(lines) + "\n"
    if scale is not None and scale.dynamic:
        lines += ["    if mode is DYNAMIC:",
                  "        launch, tickets = launch.on(handle)",
                  *scalar_lines("scale", "'scale'", "        "),
                  "        launch(handle, pdl, values, tickets)",
                  f"        return {', '.join(results)}, scale"]
    if op.per_row:
        lines += ["    if mode is DYNAMIC_PER_ROW:", "        launch(handle, pdl, values)",
                  f"        return {', '.join(results)}, row_scales"]
    lines += ["    launch(handle, pdl, values)", f"    return {returned}"]
    return "\n".join(lines) + "\n"


def unpacked(names: list[str]) -> str:
    """The target list that unpacks a sequence into ``names`` (one name keeps its comma)."""
    return f"{names[0]}," if len(names) == 1 else ", ".join(names)


def scalar_lines(name: str, role: str, indent: str, whole: str | None = None) -> list[str]:
    """Source that allocates scalar output ``name`` of ``role`` and appends its address to the
    values: followed, in the same allocation, by the launch's ``workspace`` float32
    elements, which then make it a view of that allocation (a view costs a host
    microsecond: only where needed); ``whole`` names the allocation too (with a workspace)."""
    keep = [f"{indent}    {whole} = {name}"] if whole else []
    return [f"{indent}workspace = launch.workspace",
            f"{indent}if workspace:",
            f"{indent}    {name}, p = allocate({role}, (1 + workspace,), device, handle)",
            *keep,
            f"{indent}    {name} = {name}[0]",
            f"{indent}else:",
            f"{indent}    {name}, p = allocate({role}, (), device, handle)",
            f"{indent}values.append(p)"]


def not_dynamic(op: Op, tensor_sf: str, name: str | None = None) -> None:
    """Raises: ``tensor_sf`` (or the argument ``name``: the columnwise scale) is a string other
    than those it may be (``op`` has a tensor scale)."""
    scale = op.tensor_scale
    assert scale is not None
    kinds = ["a float", "a device float32 scalar", *(["a device float32 array of one value per row"] * op.per_row),
             *map(repr, op.scale_strings())]
    if name is not None:
        kinds = ["None (tensor_sf's)", *kinds]
    what = f"{', '.join(kinds[:-1])} or {kinds[-1]}"
    raise ValueError(f"{name or scale.name} must be {what}, got {tensor_sf!r}")


def not_written(op: Op, name: str, when: str) -> None:
    """Raises: a buffer was passed for output ``name``, which the call does not write."""
    raise ValueError(f"{name} was given, but {op.name} writes it only with {when}=True, and {when} is False")


# The names a runner's source uses besides OP.
_RUNNER_NAMES = dict(as_operand=as_operand, plan_for=plan_for, PLANS_GET=plans.get, check_element_aligned=check_element_aligned,
                     check_operand=check_operand, check_pdl=check_pdl, tensor_scale=tensor_scale,
                     expert_count=expert_count, expert_scales=expert_scales,
                     stream_handle=stream_handle, not_dynamic=not_dynamic, DYNAMIC=DYNAMIC,
                     DYNAMIC_PER_ROW=DYNAMIC_PER_ROW, NO_SCALE_MODE=NO_TENSOR_SCALE[0], not_written=not_written,
                     SAME_SCALE=SAME_SCALE, float32=np.float32)
# The runner's name of the launch mode of each string tensor_sf.
_MODE_NAMES = {DYNAMIC: "DYNAMIC", DYNAMIC_PER_ROW: "DYNAMIC_PER_ROW"}
