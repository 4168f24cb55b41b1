"""The compile targets fp4q builds for, the devices each serves, and the limits its configs must fit.

Every kernel is compiled by NVRTC to a cubin (never PTX, see ``fp4q.jit.compiler``), so a target is a
binary: it runs on the compute capabilities NVIDIA's compatibility rules allow for it, and nowhere else.

Targets (NVRTC 13 accepts each; ``tests/test_archs.py`` compiles every feature instruction for every
target and checks it compiles exactly where the target claims the feature):

``sm_80``    Ampere and Ada, every 8.x. A plain (not arch-specific) cubin runs on every later minor of its
             major, so one sm_80 cubin serves A100 (8.0), RTX 30 / A10 / A40 (8.6), Jetson Orin (8.7) and
             RTX 40 / L4 / L40 (8.9). Separate sm_86 / sm_89 cubins would buy hardware ``max.xorsign.abs``
             (8.6) and e4m3 conversions (8.9), a few integer operations per 16 elements in kernels that
             are memory-bound, at the price of three times the binaries and three numerics paths to
             verify instead of one; so one cubin, with its limits the smallest of the 8.x devices. No
             TMA, no PDL (``griddepcontrol``), no ``setmaxnreg``, no e2m1 or e4m3 conversion
             instructions: only the SIMT kernels run here, with software conversions.
``sm_90a``   Hopper (9.0). Arch-specific (``setmaxnreg`` needs the ``a``); runs on 9.0 only.
``sm_100f``  Blackwell datacenter: B200 / GB200 (10.0) and B300 / GB300 (10.3). The family target gives one
             cubin for both with everything fp4q uses (TMA, PDL, ``setmaxnreg``, hardware e2m1), so no
             separate sm_100a / sm_103a binaries.
``sm_110f``  Jetson Thor (11.0).
``sm_120f``  Blackwell workstation and desktop: RTX 50, RTX PRO 6000 (12.0) and DGX Spark / GB10 (12.1), one
             family cubin. 100 KB of shared memory per SM and 1536 threads: the configs that need more are
             not shipped here and never chosen (``fits``), and the defaults use fewer CTAs per SM.

A device maps to its target by compute capability (``target_for``). Below 8.0 it is refused. A compute
capability that is not in ``COMPUTE_CAPABILITIES`` is refused too, with one exception: an unknown 8.x
minor runs the sm_80 cubin (the plain-cubin rule above). Arch- and family-specific cubins run only on
the compute capabilities NVIDIA lists for them, and fp4q never ships PTX for the driver to JIT, so a
newer device needs a newer fp4q that knows its target.

The limits come from the CUDA C++ Programming Guide's table of technical specifications per compute
capability; a target's limits are the smallest over the compute capabilities it serves, so a config
that fits the target fits every device that runs its cubin.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .._version import __version__
from .rules import check_choice, require

KB = 1024


@dataclass(frozen=True)
class Limits:
    """Per-SM resources of one compute capability (or the smallest over a target's)."""

    max_smem_per_block: int  # bytes, with the opt-in above 48 KB
    smem_per_sm: int  # bytes
    regs_per_sm: int  # 32-bit registers
    max_threads_per_sm: int


@dataclass(frozen=True)
class ComputeCapability:
    devices: str
    target: str
    limits: Limits


COMPUTE_CAPABILITIES: dict[tuple[int, int], ComputeCapability] = {
    (8, 0): ComputeCapability("A100, A30", "sm_80", Limits(163 * KB, 164 * KB, 65536, 2048)),
    (8, 6): ComputeCapability("RTX 30, A10, A40, RTX A6000", "sm_80", Limits(99 * KB, 100 * KB, 65536, 1536)),
    (8, 7): ComputeCapability("Jetson Orin", "sm_80", Limits(163 * KB, 164 * KB, 65536, 1536)),
    (8, 9): ComputeCapability("RTX 40, L4, L40, RTX 6000 Ada", "sm_80", Limits(99 * KB, 100 * KB, 65536, 1536)),
    (9, 0): ComputeCapability("H100, H200, GH200", "sm_90a", Limits(227 * KB, 228 * KB, 65536, 2048)),
    (10, 0): ComputeCapability("B200, GB200", "sm_100f", Limits(227 * KB, 228 * KB, 65536, 2048)),
    (10, 3): ComputeCapability("B300, GB300", "sm_100f", Limits(227 * KB, 228 * KB, 65536, 2048)),
    (11, 0): ComputeCapability("Jetson Thor", "sm_110f", Limits(227 * KB, 228 * KB, 65536, 1536)),
    (12, 0): ComputeCapability("RTX 50, RTX PRO 6000 Blackwell", "sm_120f", Limits(99 * KB, 100 * KB, 65536, 1536)),
    (12, 1): ComputeCapability("DGX Spark (GB10)", "sm_120f", Limits(99 * KB, 100 * KB, 65536, 1536)),
}
MIN_COMPUTE_CAPABILITY = (8, 0)


@dataclass(frozen=True)
class Features:
    """What a target's kernels may use; the renderer turns each into a ``FP4Q_HAS_*`` flag."""

    tma: bool  # cp.async.bulk.tensor and mbarrier transactions: the TMA kernels exist
    pdl: bool  # griddepcontrol: kernels wait for their predecessor and launch with PDL
    setmaxnreg: bool
    cvt_e2m1: bool  # cvt.rn.satfinite.e2m1x2.f32
    cvt_e4m3: bool  # cvt.rn.satfinite.e4m3x2.f32 and cvt.rn.f16x2.e4m3x2
    max_abs_x2: bool  # max.NaN.xorsign.abs.{bf16x2,f16x2}

    def flags(self) -> dict[str, bool]:
        return {
            "FP4Q_HAS_TMA": self.tma,
            "FP4Q_HAS_PDL": self.pdl,
            "FP4Q_HAS_SETMAXNREG": self.setmaxnreg,
            "FP4Q_HAS_CVT_E2M1": self.cvt_e2m1,
            "FP4Q_HAS_CVT_E4M3": self.cvt_e4m3,
            "FP4Q_HAS_MAX_ABS_X2": self.max_abs_x2,
        }


PRE_HOPPER = Features(tma=False, pdl=False, setmaxnreg=False, cvt_e2m1=False, cvt_e4m3=False, max_abs_x2=False)
HOPPER = Features(tma=True, pdl=True, setmaxnreg=True, cvt_e2m1=False, cvt_e4m3=True, max_abs_x2=True)
BLACKWELL = Features(tma=True, pdl=True, setmaxnreg=True, cvt_e2m1=True, cvt_e4m3=True, max_abs_x2=True)


@dataclass(frozen=True)
class Target:
    """One compile target: NVRTC's ``--gpu-architecture`` value, its features, the compute capabilities
    that run its cubins, and the limits of the smallest of them."""

    name: str
    gpu_architecture: str
    features: Features
    compute_capabilities: tuple[tuple[int, int], ...]
    max_smem_per_block: int
    smem_per_sm: int
    regs_per_sm: int
    max_threads_per_sm: int

    @property
    def devices(self) -> str:
        return "; ".join(COMPUTE_CAPABILITIES[cc].devices for cc in self.compute_capabilities)


def _target(name: str, features: Features, gpu_architecture: str | None = None) -> Target:
    ccs = tuple(cc for cc, entry in COMPUTE_CAPABILITIES.items() if entry.target == name)
    limits = [COMPUTE_CAPABILITIES[cc].limits for cc in ccs]
    return Target(
        name=name,
        gpu_architecture=gpu_architecture or name,
        features=features,
        compute_capabilities=ccs,
        max_smem_per_block=min(x.max_smem_per_block for x in limits),
        smem_per_sm=min(x.smem_per_sm for x in limits),
        regs_per_sm=min(x.regs_per_sm for x in limits),
        max_threads_per_sm=min(x.max_threads_per_sm for x in limits),
    )


# The shipped targets, oldest first.
ARCHS: dict[str, Target] = {
    "sm_80": _target("sm_80", PRE_HOPPER),
    "sm_90a": _target("sm_90a", HOPPER),
    "sm_100f": _target("sm_100f", BLACKWELL),
    "sm_110f": _target("sm_110f", BLACKWELL),
    "sm_120f": _target("sm_120f", BLACKWELL),
}

# For tests only: sm_80's kernels (same templates, same features and flags) compiled for sm_90a, so that
# a Hopper GPU runs the exact pre-Hopper code. Never the target of a device, never precompiled.
EMULATED_SM_80 = "sm_80_on_sm_90a"
TEST_TARGETS: dict[str, Target] = {
    EMULATED_SM_80: dataclasses.replace(ARCHS["sm_80"], name=EMULATED_SM_80, gpu_architecture="sm_90a",
                                        compute_capabilities=((9, 0),)),
}
ALL_TARGETS: dict[str, Target] = {**ARCHS, **TEST_TARGETS}


class UnsupportedDeviceError(RuntimeError):
    """The device has no fp4q target: its compute capability is too old, or newer than this fp4q knows."""


def check_arch(arch) -> None:
    check_choice("arch", arch, tuple(ALL_TARGETS))


def target(arch: str) -> Target:
    check_arch(arch)
    return ALL_TARGETS[arch]


def target_for(compute_capability: tuple[int, int], device: str | None = None) -> str:
    """The compile target of a device of this compute capability; ``device`` names it in errors."""
    major, minor = compute_capability
    cc = f"compute capability {major}.{minor}"
    who = f"{device} ({cc})" if device else f"a device of {cc}"
    if (major, minor) < MIN_COMPUTE_CAPABILITY:
        raise UnsupportedDeviceError(
            f"fp4q does not support {who}: it needs compute capability 8.0 or newer (Ampere or later)"
        )
    entry = COMPUTE_CAPABILITIES.get((major, minor))
    if entry is not None:
        return entry.target
    if major == 8:
        return "sm_80"  # a plain sm_80 cubin runs on every 8.x
    known = ", ".join(f"{a}.{b}" for a, b in COMPUTE_CAPABILITIES)
    raise UnsupportedDeviceError(
        f"fp4q {__version__} has no compile target for {who}: it knows compute capabilities {known}. "
        f"Its cubins are specific to the architectures and families they were built for and fp4q ships no "
        f"PTX to JIT, so a newer device needs a newer fp4q"
    )


def fits(cfg, arch: str) -> bool:
    """Whether TMA config ``cfg`` (built for any target) would pass ``check_fits_sm`` on ``arch``."""
    return not _fit_problems(cfg, arch)


def max_ctas_per_sm(smem_bytes: int, threads: int, arch: str) -> int:
    """How many CTAs of this shared memory (bytes, as launched) and threads one SM of ``arch`` holds."""
    limits = target(arch)
    return min(limits.smem_per_sm // (smem_bytes + 1024), limits.max_threads_per_sm // threads)


def _fit_problems(cfg, arch: str) -> list[str]:
    limits = target(arch)
    if not limits.features.tma:
        return [
            f"arch={arch!r} has no TMA, so {type(cfg).__name__} (a TMA kernel) cannot run there: "
            f"use the SIMT kernels (SimtConfig, DequantizeSimtConfig)"
        ]
    problems = []
    smem = cfg.smem.total
    if smem > limits.max_smem_per_block:
        problems.append(
            f"shared memory of {smem} bytes (num_stages={cfg.num_stages}, tile {cfg.tile_m}x{cfg.tile_k}) "
            f"exceeds the {arch} limit of {limits.max_smem_per_block} bytes per block"
        )
    if cfg.min_ctas_per_sm * (smem + 1024) > limits.smem_per_sm:
        problems.append(
            f"min_ctas_per_sm={cfg.min_ctas_per_sm} CTAs of {smem} bytes of shared memory do not fit "
            f"in the {limits.smem_per_sm} bytes of one {arch} SM"
        )
    if cfg.min_ctas_per_sm * cfg.threads > limits.max_threads_per_sm:
        problems.append(
            f"min_ctas_per_sm={cfg.min_ctas_per_sm} CTAs of {cfg.threads} threads exceed "
            f"{limits.max_threads_per_sm} threads per {arch} SM"
        )
    if getattr(cfg, "setmaxnreg", False) and not limits.features.setmaxnreg:
        problems.append(f"setmaxnreg=True but arch={arch!r} has no setmaxnreg")
    return problems


def check_fits_sm(cfg) -> None:
    """The rules shared by every TMA kernel config: its target has TMA, and its shared memory per
    block, and ``min_ctas_per_sm`` CTAs of it (memory and threads), fit one SM of the target."""
    problems = _fit_problems(cfg, cfg.arch)
    require(not problems, problems[0] if problems else "")
