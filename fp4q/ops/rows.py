"""The row kernel's choice and launch (``kernels.rows``): the kernels of the RMSNorm ops,
and of every NVFP4 quantize op whose tensor scale is taken per row; and the alignment rule
of every kernel that loads and stores 16 bytes at a time (the quantize ops' too)."""

from __future__ import annotations

from ..cuda import driver
from ..jit.loader import get_kernel
from ..kernels.call import ROW_PROLOGUES
from ..kernels.rows import ROW_QUANTIZE_PARAMS, RowConfig, for_row, longest_row
from .declare import DYNAMIC_PER_ROW, Op
from .plans import NO_LAUNCH, KernelLaunch


def alignment_obstacle(plan, pointers: list[int]) -> str | None:
    """Why kernels that load and store 16 bytes at a time (TMA, the vector and row kernels)
    cannot serve these pointers (the main input's, the further inputs', the outputs', in the
    op's order), or None: each base 16-byte aligned (linear scales, written a byte at a time,
    excepted), and so the main input's row stride."""
    view, op = plan.view, plan.op
    if pointers[0] % 16:
        return f"{op.main.name}'s base address {pointers[0]:#x} is not 16-byte aligned"
    if (view.row_stride * view.itemsize) % 16:
        return f"{op.main.name}'s row stride of {view.row_stride * view.itemsize} bytes is not a multiple of 16"
    tiled = plan.call.get("sf_layout") != "linear"  # an op without scales has no sf_layout
    for array, ptr in zip((*op.inputs, *op.outputs), pointers[1:]):
        # Expert offsets and batch counts are read 4 bytes at a time.
        if ptr % 16 and array.kind not in ("offsets", "counts") and (array.kind not in ("scales", "scales_t") or tiled):
            return f"{array.name}'s base address {ptr:#x} is not 16-byte aligned"
    return None


class RowKernels:
    """The row kernels: one row per CTA (``RowConfig``)."""

    def check_config(self, op: Op, config) -> None:
        if not isinstance(config, RowConfig):
            raise TypeError(f"config must be None or a RowConfig, got {type(config).__name__}")
        if config.fmt != op.fmt:
            raise ValueError(f"config.fmt is {config.fmt!r}, but {op.name} quantizes to {op.fmt.upper()}: pass a "
                             f"config with fmt={op.fmt!r}")

    def resolve(self, plan, mode: str, pointers: list[int], config):
        # Rows of no elements still get their dynamic scales (1.0): the kernel writes them.
        if plan.view.rows == 0 or (plan.empty and mode is not DYNAMIC_PER_ROW):
            return NO_LAUNCH
        dev = driver.device(plan.view.device)
        cfg = self.choose(plan, mode, pointers, config, dev.arch)
        kernel = get_kernel(cfg.spec, dev.ordinal)
        grid = cfg.spec.grid.size(plan.view.rows, dev.sm_count, kernel.ctas_per_sm)
        # The kernel's inputs this op has not (weight, residual, eps): its prologue never reads them.
        taken = {name for name, _ in plan.op.slots} | set(plan.fixed)
        fixed = dict(plan.fixed, **{p.name: 0.0 if p.kind == "f32" else 0 for p in ROW_QUANTIZE_PARAMS
                                    if p.name not in taken})
        return KernelLaunch(cfg, kernel, grid, plan.op.slots, fixed)

    def choose(self, plan, mode: str, pointers: list[int], config, arch: str) -> RowConfig:
        """The row kernel of a call: the caller's config or the fewest units per thread that
        hold a row, with the call's fields; after the rules on the row's width (the outputs',
        padded_k where it is given) and the pointers."""
        op, g = plan.op, plan.geometry
        what, width = ("padded_k", g.out_k) if g.out_k != g.k else ("K", g.k)
        normalizes = plan.call.get("prologue") in ROW_PROLOGUES
        if width > longest_row(op.fmt):
            why = ("a row is normalized in one CTA" if normalizes
                   else f"the row kernel quantizes the {g.segments}' rows, one row in one CTA" if g.experts
                   else "a tensor scale per row is taken by the row kernel, which holds a row in one CTA")
            raise ValueError(f"{what} must be at most {longest_row(op.fmt)} for {op.name} ({why}), got {width}")
        obstacle = alignment_obstacle(plan, pointers)
        if obstacle is not None:
            kernel = "" if normalizes or g.experts else " with a tensor scale per row"
            raise ValueError(f"{op.name} loads and stores 16 bytes at a time{kernel}: {obstacle}")
        call = dict(plan.call, tensor_sf_mode=mode, arch=arch)
        if config is None:
            return for_row(width, **call)
        cfg = config.replace(**call)
        if width > cfg.max_k:
            raise ValueError(f"config.row_units={cfg.row_units} holds rows of up to {cfg.max_k} elements, got "
                             f"{what}={width}")
        return cfg


ROW_KERNELS = RowKernels()
