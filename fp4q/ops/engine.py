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
"""

from __future__ import annotations

import math
import threading

from ..kernels.spec import Extent
from .arrays import ITEMSIZE, NO_TENSOR_SCALE, Operand, as_operand, tensor_scale
from .checks import check_element_aligned, check_operand, check_pdl
from .declare import DYNAMIC, Array, Geometry, Op
from .plans import plans
from .streams import stream_handle


class Buffer:
    """An array of a kind of call other than the main input, as its plan fixed it."""

    __slots__ = ("name", "role", "shape", "dtypes", "nbytes", "late")

    def __init__(self, array: Array, g: Geometry) -> None:
        self.name, self.role, self.shape, self.dtypes = array.name, array.role(g), array.shape(g), array.dtypes(g)
        self.nbytes = math.prod(self.shape) * ITEMSIZE[self.dtypes[0]]  # every dtype of a buffer has one size
        self.late = array.late


class Plan:
    """What the rules on one kind of call derived, and the launches chosen for it so far."""

    __slots__ = ("op", "config", "geometry", "view", "empty", "inputs", "outputs", "late", "extents", "fixed",
                 "call", "align_mask", "main_extent", "launches", "lock")

    def __init__(self, op: Op, main: Operand, options: tuple, config) -> None:
        g = op.geometry(main, options)
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
        self.fixed: dict[str, int | float] = {"rows": view.rows, "cols": g.k,
                                              f"{op.main.name}_row_stride": view.row_stride}
        if op.tensor_scale is None:  # the kernels' by-value tensor scale, never read
            self.fixed.update(tensor_sf_value=0.0, tensor_sf_ptr=0)
        # The kernel configs' call fields these options and this input fix.
        self.call = {c.field: g.options[c.name] for c in op.options if c.field is not None}
        self.call.update(op.call, fmt=op.fmt)
        if op.main.field is not None:
            self.call[op.main.field] = op.main.dtypes[view.dtype]
        self.align_mask = view.itemsize - 1
        self.main_extent = view.span(0)[1]
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
    key = (op, shape, stride_key(obj, is_torch), is_torch, dtype, device, options, id(config))
    try:
        plan = plans.get(key)
    except TypeError:  # an unhashable option: its rule says what is wrong with it
        op.option_values(options)
        raise
    if plan is None or plan.config is not config:
        plan = plans.put(key, Plan(op, main, options, config))
    else:
        for value in options:  # equal to the stored plan's: only a str of another type breaks a rule
            if type(value) is not str:
                op.option_values(options)
    return plan


def run(op: Op, inputs: tuple, tensor_sf, options: tuple, buffers: tuple, stream, config, pdl, allocate):
    """A call of ``op``: its outputs in the declared order (one alone, else a tuple), then
    the dynamic tensor scale where ``tensor_sf`` is ``"dynamic"``."""
    main = as_operand(inputs[0], op.main.name)
    _, ptr, _, dtype, device, is_torch = main
    plan = plan_of(op, main, options, config)
    if ptr & plan.align_mask:  # the test is inline, the rule and its message are not
        check_element_aligned(ptr, dtype, op.main.name)
    pointers = [ptr]
    for spec, value in zip(plan.inputs, inputs[1:]):
        _, p = check_operand(as_operand(value, spec.name), spec.name, spec.shape, spec.dtypes, device, spec.nbytes)
        pointers.append(p)
    mode, value, scale_ptr = _scale(op, tensor_sf, device)
    handle = stream_handle(stream, device, is_torch)
    results = []
    spans = None
    for spec, buffer in zip(plan.outputs, buffers):
        if buffer is None:
            array, p = allocate(spec.role, spec.shape, device, handle)
        else:
            if spans is None:
                spans = [(op.main.name, (ptr, ptr + plan.main_extent))]
                spans += [(b.name, (p, p + b.nbytes)) for b, p in zip(plan.inputs, pointers[1:])]
            array, p = check_operand(as_operand(buffer, spec.name), spec.name, spec.shape, spec.dtypes, device,
                                     spec.nbytes, spans)
            spans.append((spec.name, (p, p + spec.nbytes)))
        results.append(array)
        pointers.append(p)
    check_pdl(pdl)
    if config is not None:  # None is always valid
        op.kernels.check_config(op, config)
    low = 0
    for p in pointers:
        low = (low << 4) | (p & 15)
    launch = plan.launch_for(mode, low, pointers, config)
    values = pointers + [value, scale_ptr] if op.tensor_scale is not None else pointers
    for spec in plan.late:
        array, p = allocate(spec.role, (1 + launch.workspace,), device, handle)
        results.append(array[0])
        values.append(p)
    if mode is DYNAMIC:
        array, p = allocate("scale", (1 + launch.workspace,), device, handle)
        results.append(array[0])
        values.append(p)
    launch(handle, pdl, values)
    return results[0] if len(results) == 1 else tuple(results)


def _scale(op: Op, tensor_sf, device: int) -> tuple[str, float, int]:
    """The tensor scale's launch mode, value and pointer."""
    if op.tensor_scale is None:
        return NO_TENSOR_SCALE
    if type(tensor_sf) is str:
        if tensor_sf != DYNAMIC or not op.tensor_scale.dynamic:
            what = "a float, a device float32 scalar or 'dynamic'" if op.tensor_scale.dynamic else \
                "a float or a device float32 scalar"
            raise ValueError(f"{op.tensor_scale.name} must be {what}, got {tensor_sf!r}")
        return (DYNAMIC, 0.0, 0)
    return tensor_scale(tensor_sf, device)
