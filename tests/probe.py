"""The numerics probes: test kernels (tests/kernels/numerics_probe.cu, and
training_probe.cu for the training numerics) that run the numerics headers on raw
inputs, so that the GPU tests compare each step with the reference bit for bit.
They are built by the tests only; the package never ships or precompiles them."""

from __future__ import annotations

import pathlib

from fp4q.kernels.archs import check_arch
from fp4q.kernels.spec import KernelSpec, StrideGrid, params

KERNELS = pathlib.Path(__file__).resolve().parent / "kernels"
TEMPLATE = KERNELS / "numerics_probe.cu"

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


TRAINING_PROBE_PARAMS = params(
    ("counters", "ptr"), ("keys", "ptr"), ("philox", "ptr"), ("rng", "ptr"), ("group_words", "ptr"), ("v", "ptr"),
    ("rbytes", "ptr"), ("rounded", "ptr"), ("rbits", "ptr"), ("words", "ptr"), ("mask", "u32"),
    ("transformed", "ptr"), ("inverted", "ptr"), ("tensor_sf", "f32"), ("errors", "ptr"), ("scales", "ptr"),
    ("block_errors", "ptr"), ("block_scales", "ptr"), ("items", "i32"),
)


def training_probe_spec(arch: str) -> KernelSpec[StrideGrid]:
    """The training numerics probe's spec for ``arch``."""
    check_arch(arch)
    return KernelSpec(name="fp4q_training_probe", template=str(KERNELS / "training_probe.cu"), arch=arch,
                      constants=(), flags=(("FP4Q_INPUT_FP16", False),), params=TRAINING_PROBE_PARAMS,
                      threads=128, smem_bytes=0, grid=StrideGrid(128))
