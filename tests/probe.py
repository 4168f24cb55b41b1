"""The numerics probe: a test kernel (tests/kernels/numerics_probe.cu) that runs the
numerics headers on raw float32 inputs, so that the GPU tests compare each step
with the reference bit for bit. It is built by the tests only; the package never
ships or precompiles it."""

from __future__ import annotations

import pathlib

from fp4q.kernels.archs import check_arch
from fp4q.kernels.spec import KernelSpec, StrideGrid, params

TEMPLATE = pathlib.Path(__file__).resolve().parent / "kernels" / "numerics_probe.cu"

PROBE_PARAMS = params(
    ("v", "ptr"), ("codes", "ptr"), ("amax", "ptr"), ("sf", "ptr"), ("inv", "ptr"), ("tensor_sf", "f32"),
    ("pairs", "i32"),
)


def numerics_probe_spec(arch: str) -> KernelSpec[StrideGrid]:
    """The probe's spec for ``arch`` (its template path is absolute: the renderer resolves its
    includes against the package's templates)."""
    check_arch(arch)
    return KernelSpec(name="fp4q_numerics_probe", template=str(TEMPLATE), arch=arch, constants=(),
                      flags=(("FP4Q_INPUT_FP16", False),), params=PROBE_PARAMS, threads=256, smem_bytes=0,
                      grid=StrideGrid(256))
