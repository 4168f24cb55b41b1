"""``global_scale``: the NVFP4 tensor scale ``min(2688 / amax(|x|), 2**100)`` on the device.

Two kernels on the caller's stream, chained with programmatic dependent
launch: the amax pass writes one partial maximum per CTA, the scale pass
(one CTA) reduces them and writes the scale. Maxima are exact, so the result
does not depend on how the work was split: it is deterministic. The partial
maxima live in the same allocation as the returned scalar (after its first
element), so the buffer lives exactly as long as the result and a captured
CUDA graph never writes memory that was handed back to the pool.
"""

from __future__ import annotations

from ..cuda import driver
from ..jit.loader import get_kernel
from ..kernels.global_scale import AmaxConfig, GlobalScaleConfig
from .arrays import INPUT_DTYPES
from .declare import Array, Op, Rows
from .plans import KernelLaunch

INPUT_WHAT = "bfloat16 or float16 values (uint16 holds bf16 bits)"
X = Rows("x", INPUT_DTYPES, INPUT_WHAT, field="input_dtype", doc="bf16 (or fp16) values ``(..., K)``, ``K`` a multiple of 16; "
                                           "rows may be strided")


def scale_pass(dev, four_over_six: bool, count: int) -> KernelLaunch:
    """The scale pass on ``dev``: one CTA reduces ``count`` partial maxima into the scale
    (``2688 / amax``; ``1536 / amax`` under ``four_over_six``)."""
    config = GlobalScaleConfig(four_over_six=four_over_six, arch=dev.arch)
    return KernelLaunch(config, get_kernel(config.spec, dev.ordinal), 1, (("partial", "ptr"), ("scale", "ptr")),
                        {"count": count})


class ScaleLaunch:
    """The amax pass over a kind of call's main input and the scale pass after it, given
    the input's pointer and the scale's: the partial maxima go right after the scale.
    ``four_over_six``: 4/6's scale, ``1536 / amax``."""

    __slots__ = ("amax", "scale", "workspace", "config")

    def __init__(self, plan, vector_loads: bool, four_over_six: bool = False) -> None:
        dev = driver.device(plan.view.device)
        view = plan.view
        self.amax, self.workspace = None, 0
        if not view.empty:
            cfg = AmaxConfig(vector_loads=vector_loads, input_dtype=plan.call["input_dtype"],
                             prologue=plan.call.get("prologue", "none"), arch=dev.arch)
            kernel = get_kernel(cfg.spec, dev.ordinal)
            self.workspace = cfg.spec.grid.size(view.rows * plan.geometry.k // cfg.elements_per_unit, dev.sm_count,
                                                kernel.ctas_per_sm)
            self.amax = KernelLaunch(cfg, kernel, self.workspace, (("x", "ptr"), ("partial", "ptr")), plan.fixed)
        self.scale = scale_pass(dev, four_over_six, self.workspace)
        self.config = self.scale.config

    def __call__(self, stream: int, pdl: bool, values, tickets: None = None) -> None:
        """``values``: the input's pointer first, the scale's last."""
        scale = values[-1]
        partial = scale + 4
        if self.amax is not None:
            self.amax(stream, pdl, (values[0], partial))
        self.scale(stream, pdl, (partial, scale))


class GlobalScaleKernels:
    """The kernels of ``global_scale``: the amax pass reads 16 bytes at a time where the
    base and the row stride allow it."""

    def check_config(self, op: Op, config) -> None:
        """Never called: the op takes no config."""

    def resolve(self, plan, mode: str, pointers: list[int], config) -> ScaleLaunch:
        return ScaleLaunch(plan, pointers[0] % 16 == 0 and plan.view.row_stride % 8 == 0)


GLOBAL_SCALE = Op(
    name="global_scale",
    summary="The NVFP4 global scale of bf16 (or fp16) ``x``, as a device float32 scalar.",
    doc="""Returns a float32 array of shape ``()`` (CuPy; a torch tensor from
``fp4q.torch``): ``min(float32(2688 / amax), 2**100)`` with ``amax`` the
maximum of ``|x|`` over the whole tensor, NaN ignored, correctly rounded;
``1.0`` when ``amax`` is 0 or infinite (and for an empty ``x``). It is
computed on the stream without a host sync, so it can be passed straight to
``quantize_nvfp4(x, tensor_sf=...)`` and captured in a CUDA graph.""",
    fmt="nvfp4",
    main=X,
    outputs=(Array("scale", "scalar", doc="the scale, float32, shape ``()``"),),
    kernels=GlobalScaleKernels(),
    out_keywords=False,
    configurable=False,
)
