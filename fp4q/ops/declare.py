"""What a public op is, declared once: its arguments, with their roles and rules.

An ``Op`` lists its main input (a row-major array whose rows the kernels
walk), further inputs, its tensor scale, its keyword options and its outputs;
each of them knows its shape, dtypes and allocation role as a function of
what the call's main input and options fix (a ``Geometry``). From the
declaration alone come the boundary checks and their messages, the plan key,
the outputs' allocation, the kernel's launch values (``Op.slots``), the
public function's signature and docstring (``entry``), the torch schemas,
ops and fakes (``fp4q.torch``) and the API table. What stays per op family
is the kernel choice (``kernels``: which config serves a call, and how it is
launched).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

from ..kernels.call import ROW_TENSOR_SF_MODES
from ..kernels.rows import MAX_EXPERTS
from ..kernels.spec import Extent
from ..numerics.formats import GROUP_SIZE
from ..numerics.experts import experts_sf_blocks
from ..numerics.groups import padded_width
from ..numerics.layouts import scales_shape, tiles_shape
from .arrays import OFFSET_DTYPES, Q_DTYPES, SAME_DTYPES, SF_DTYPES, SHAPE, VALUE_DTYPES, Operand
from .checks import MAX_ROWS, RowsView, rows_view
from .options import Option, PerCall, Width


@dataclass(frozen=True)
class Geometry:
    """What the main input and the options of one kind of call fix: the view of the
    main input, the format, the values per row (K) and their groups, the options."""

    view: RowsView
    fmt: str
    k: int
    options: Mapping[str, Any]
    # The outputs' row width in values: K, or the padded_k option's.
    out_k: int
    # The experts (or batches) whose rows the main input holds, else 0.
    experts: int = 0
    # How its rows are grouped: "none", "experts" (by offsets) or "batches" (its first dimension).
    segments: str = "none"

    @property
    def groups(self) -> int:
        """The scale groups per row of the outputs (padding groups included)."""
        return self.out_k // GROUP_SIZE[self.fmt]

    @property
    def batch_rows(self) -> int:
        """The rows of each batch (M of ``(B, M, K)``), else 0."""
        return self.lead[1] if self.segments == "batches" else 0

    @property
    def sf_blocks(self) -> int:
        """The 128-row scale blocks of experts (the most any routing of the rows fills) or of
        batches (``ceil(M / 128)`` each)."""
        if self.segments == "batches":
            return self.experts * -(-self.batch_rows // 128)
        return experts_sf_blocks(self.view.rows, self.experts)

    @property
    def lead(self) -> tuple[int, ...]:
        return self.view.lead_shape


@dataclass(frozen=True)
class Rows:
    """The main input: a row-major array ``(..., W)`` whose leading dimensions flatten to
    rows, the last contiguous. ``dtypes`` maps each accepted dtype to what the kernel
    config's ``field`` (if any) takes for it; ``what`` names them in messages; K (the
    values per row) is ``per_element * W``, or ``W // 2`` with ``halves`` (a row holds
    two operands of K values each, as SiLU·mul's gate and up), and must be a multiple
    of the format's group. ``dims``: where given, the names of the dimensions the input
    must have (its rank)."""

    name: str
    dtypes: Mapping[str, str]
    what: str
    per_element: int = 1
    field: str | None = None
    halves: bool = False
    dims: tuple[str, ...] = ()
    doc: str = ""

    def view(self, a: Operand, op: "Op") -> RowsView:
        if self.dims and len(a[SHAPE]) != len(self.dims):
            raise ValueError(f"{self.name} must have {len(self.dims)} dimensions ({', '.join(self.dims)}) for "
                             f"{op.name}, got shape {tuple(a[SHAPE])}")
        return rows_view(a, self.name, self.dtypes, self.what, self.per_element, GROUP_SIZE[op.fmt],
                         f" for {op.name}", self.halves)

    def k(self, view: RowsView) -> int:
        """K, the values per row of what is quantized."""
        return view.width // 2 if self.halves else self.per_element * view.width

    def extent(self, g: Geometry) -> Extent:
        v = g.view
        return Extent(v.rows, v.width, v.row_stride * v.itemsize)


@dataclass(frozen=True)
class Array:
    """An array argument other than the main input, its shape fixed by the geometry:
    an input (``output=False``) the kernel reads, or an output it writes, which the call
    allocates where the caller passes none. ``kind`` is what it holds:
    ``"codes"`` (packed e2m1 pairs, ``(..., K // 2)``), ``"scales"`` (the format's scale
    bytes in the ``sf_layout`` option's layout), ``"values"`` (``(..., K)`` in the
    ``dtype`` option's dtype), ``"like_row"`` (``(K,)`` in the main input's dtype),
    ``"like_main"`` (the main input's shape, with K values per row, and dtype),
    ``"scalar"`` (one float32, with the scratch space the chosen launch asks for after
    it: allocated once the launch is known), ``"offsets"`` (int32 ``(E + 1,)``: the
    experts' first rows, an input whose length fixes the geometry's experts),
    ``"counts"`` (int32 ``(B,)``: the valid rows of each batch), ``"codes_t"`` and
    ``"scales_t"`` (the codes and scales of the main input's transpose, ``(K, M // 2)`` and
    the layout's scales of K rows of ``M // 16`` groups: the columnwise outputs). An
    ``inplace`` input is written too: it must not overlap the main input or an input
    before it. Under experts and batches, the scales are their blocks. ``when``: the
    ``Flag`` option without which the output is not written (``None`` is returned and a
    buffer passed for it is an error)."""

    name: str
    kind: str
    output: bool = True
    inplace: bool = False
    when: str | None = None
    doc: str = ""

    def present(self, g: Geometry) -> bool:
        """Whether the call writes it (its ``when`` option, if any, is True)."""
        return self.when is None or bool(g.options[self.when])

    def shape(self, g: Geometry) -> tuple[int, ...]:
        if self.kind == "codes_t":
            return (g.k, g.view.rows // 2)
        if self.kind == "scales_t":
            return scales_shape(g.options["sf_layout"], (g.k,), g.k, g.view.rows // GROUP_SIZE[g.fmt])
        if self.kind == "codes":
            return g.lead + (g.out_k // 2,)
        if self.kind == "scales":
            if g.segments == "batches":
                return (g.experts,) + tiles_shape(g.batch_rows, g.groups)
            if g.segments == "experts":
                return tiles_shape(128 * g.sf_blocks, g.groups)
            return scales_shape(g.options["sf_layout"], g.lead, g.view.rows, g.groups)
        if self.kind in ("values", "like_main"):
            return g.lead + (g.k,)
        if self.kind == "like_row":
            return (g.k,)
        if self.kind == "offsets":
            return (g.experts + 1,)
        if self.kind == "counts":
            return (g.experts,)
        return ()

    def dtypes(self, g: Geometry) -> tuple[str, ...]:
        if self.kind in ("codes", "codes_t"):
            return Q_DTYPES
        if self.kind in ("scales", "scales_t"):
            return SF_DTYPES[g.fmt]
        if self.kind == "values":
            return VALUE_DTYPES[g.options["dtype"]]
        if self.kind in ("like_row", "like_main"):
            return SAME_DTYPES[g.view.dtype]
        if self.kind in ("offsets", "counts"):
            return OFFSET_DTYPES
        return ("float32",)

    def role(self, g: Geometry) -> str:
        """What an allocator makes for it (``ops.outputs``)."""
        if self.kind == "like_main":  # an output in the main input's dtype, bf16 bits as bits
            return g.view.dtype
        return self.role_in(g.fmt, g.options)

    def role_in(self, fmt: str, options: Mapping[str, Any]) -> str:
        """``role`` from the format and the options alone (all it depends on), for every kind
        but ``like_main``."""
        if self.kind in ("scales", "scales_t"):
            return f"sf_{fmt}"
        if self.kind == "values":
            return options["dtype"]
        return "q" if self.kind in ("codes", "codes_t") else "scale"

    def extent(self, g: Geometry) -> Extent:
        if self.kind == "codes":
            return Extent(g.view.rows, g.out_k // 2, g.out_k // 2)
        if self.kind in ("like_row", "like_main"):
            rows = 1 if self.kind == "like_row" else g.view.rows
            return Extent(rows, g.k, g.k * g.view.itemsize)
        if self.kind in ("offsets", "counts"):
            n = g.experts + (self.kind == "offsets")
            return Extent(1, n, 4 * n)
        return Extent(g.view.rows, g.groups, 0)

    @property
    def late(self) -> bool:
        """Allocated after the launch is chosen (its size depends on it)."""
        return self.kind == "scalar"


@dataclass(frozen=True)
class TensorScale:
    """The NVFP4 tensor scale: a float (passed by value) or a device float32 scalar (read
    by the kernel); with ``dynamic``, also the string ``"dynamic"``: the scale is computed
    on the device and returned after the outputs; with ``per_row``, also a device float32
    array of one value per row (shape ``(M,)`` or ``x.shape[:-1]``) and the string
    ``"dynamic_per_row"``: each row's scale computed and returned, of that shape. With
    ``per_expert``, only a device float32 array of one value per expert or batch
    (``(E,)``, ``(B,)``)."""

    name: str = "tensor_sf"
    dynamic: bool = False
    per_row: bool = False
    per_expert: bool = False
    doc: str = ""


class Kernels(Protocol):
    """The kernel choice of an op family."""

    def check_config(self, op: "Op", config) -> None:
        """Raise where ``config`` (not None) cannot serve ``op``'s calls."""

    def resolve(self, plan, mode: Any, pointers: list[int], config) -> Any:
        """The launch of ``plan``'s kind of call for this tensor-scale ``mode`` (for an op with a
        columnwise scale, the pair of both modes) and these pointers (only their low four bits
        may matter: the choice is kept per them)."""



DYNAMIC = "dynamic"  # the launch mode of tensor_sf="dynamic"
DYNAMIC_PER_ROW = ROW_TENSOR_SF_MODES[1]  # the launch mode of tensor_sf="dynamic_per_row"
SAME_SCALE = "same"  # the launch mode of a columnwise scale of None: tensor_sf's


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: cheap in plan keys
class Op:
    """One public operation: ``main`` (the input its kernels walk by rows), further
    ``inputs``, its ``tensor_scale`` (NVFP4 ops), keyword ``options``, and its ``outputs``
    in the order returned; ``fmt`` is the format whose group K must be a multiple of;
    ``kernels`` chooses and launches its kernels; ``call``: kernel config fields the op
    fixes (``kernels.call.CallFields``: its prologue). ``out_keywords``: the caller may pass
    the outputs (``out=``, ...); ``configurable``: the caller may pass a kernel config;
    ``with_input``: see the field. ``columnwise_scale``: a second tensor scale, of the
    outputs of the transpose (``None``, its default, takes ``tensor_scale``'s);
    ``per_call``: keyword arguments passed to the kernels call by call (after the
    options); ``rules``: the op's own rules on a geometry (on the options' combination),
    after the declared ones; ``result``: builds what the call returns from its outputs in order
    (``None`` where not written) and each tensor scale it used (the device scalar read or
    computed, or the float32 passed by value), instead of a tuple of the outputs: an
    object whose ``outputs`` and ``scales`` give them back in that order."""

    name: str
    summary: str
    doc: str
    fmt: str
    main: Rows
    outputs: tuple[Array, ...]
    kernels: Kernels
    inputs: tuple[Array, ...] = ()
    tensor_scale: TensorScale | None = None
    options: tuple[Option, ...] = ()
    call: Mapping[str, str] = field(default_factory=dict)
    out_keywords: bool = True
    configurable: bool = True
    # An input the function also takes as a keyword (default None) and, given one, runs
    # this other op, whose inputs end with it (RMSNorm's residual: add+RMSNorm).
    with_input: tuple[Array, "Op"] | None = None
    columnwise_scale: TensorScale | None = None
    per_call: tuple[PerCall, ...] = ()
    rules: Callable[[Geometry], None] | None = None
    result: Callable[..., Any] | None = None
    slots: tuple[tuple[str, str], ...] = field(init=False)
    dynamic_slots: tuple[tuple[str, str], ...] = field(init=False)

    def __post_init__(self) -> None:
        arrays = (self.main.name, *(a.name for a in self.inputs),
                  *(o.name for o in self.outputs if not o.late))
        slots = tuple((name, "ptr") for name in arrays)
        scale = self.tensor_scale
        for given in (scale, self.columnwise_scale):
            if given is not None:
                slots += ((f"{given.name}_value", "f32"), (f"{given.name}_ptr", "ptr"))
        slots += tuple((v.name, "u64") for v in self.per_call)
        slots += tuple((o.name, "ptr") for o in self.outputs if o.late)
        object.__setattr__(self, "slots", slots)
        # tensor_sf="dynamic": the scale is one more output, written by the launch.
        dynamic = slots + ((f"{scale.name}_out", "ptr"),) if scale is not None and scale.dynamic else slots
        object.__setattr__(self, "dynamic_slots", dynamic)

    @property
    def dynamic(self) -> bool:
        return self.tensor_scale is not None and self.tensor_scale.dynamic

    @property
    def scalars(self) -> tuple[str, ...]:
        """The arguments the call path takes as one group after the inputs: the tensor scale,
        with the columnwise scale and the per-call values where the op has them."""
        names: tuple[str, ...] = (self.tensor_scale.name,) if self.tensor_scale is not None else ()
        names += (self.columnwise_scale.name,) if self.columnwise_scale is not None else ()
        return names + tuple(v.name for v in self.per_call)

    @property
    def per_row(self) -> bool:
        return self.tensor_scale is not None and self.tensor_scale.per_row

    @property
    def per_expert(self) -> bool:
        return self.tensor_scale is not None and self.tensor_scale.per_expert

    @property
    def offsets_index(self) -> int | None:
        """The index among the call's inputs (the main input is 0) of the expert offsets,
        whose length fixes the geometry's experts; None where the op has none."""
        for i, array in enumerate(self.inputs, start=1):
            if array.kind == "offsets":
                return i
        return None

    def row_shapes(self, g: Geometry) -> tuple[tuple[int, ...], ...]:
        """The shapes a tensor scale per row may have: ``(M,)`` and ``x.shape[:-1]`` (that
        of the computed ones); none where the op takes none."""
        return ((g.view.rows,), g.lead) if self.per_row else ()

    def scale_strings(self) -> tuple[str, ...]:
        """The strings ``tensor_sf`` may be: the dynamic modes the op computes."""
        return (DYNAMIC,) * self.dynamic + (DYNAMIC_PER_ROW,) * self.per_row

    def option_values(self, options: tuple) -> dict[str, Any]:
        """The options by name, each checked against its rule."""
        for choice, value in zip(self.options, options):
            choice.check(value)
        return {choice.name: value for choice, value in zip(self.options, options)}

    @property
    def segments(self) -> str:
        """How the op groups the main input's rows: ``"none"``, ``"experts"`` or ``"batches"``."""
        return self.call.get("segments", "none")

    def geometry(self, main: Operand, options: tuple, experts: int = 0) -> Geometry:
        """The rules on the options and the main input, in the order of their messages;
        ``experts``: the count the expert offsets fixed (``arrays.expert_count``), if any
        (batches count the main input's first dimension)."""
        values = self.option_values(options)
        view = self.main.view(main, self)
        k = self.main.k(view)
        out_k = k
        for option in self.options:
            if isinstance(option, Width):
                out_k = padded_width(values[option.name], k, GROUP_SIZE[self.fmt], "N" if self.main.halves else "K")
        if self.segments == "batches":
            experts = view.lead_shape[0]
            if experts > MAX_EXPERTS:
                raise ValueError(f"{self.main.name} must have at most {MAX_EXPERTS} batches (B) for {self.name}, got "
                                 f"{experts}")
        g = Geometry(view, self.fmt, k, values, out_k, experts, self.segments)
        if experts and 128 * g.sf_blocks > MAX_ROWS:
            raise ValueError(f"{self.main.name} has {view.rows} rows: with {experts} {self.segments} its scales would "
                             f"take {128 * g.sf_blocks} rows, at most {MAX_ROWS}")
        if self.rules is not None:
            self.rules(g)
        return g
