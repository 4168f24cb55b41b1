"""The compile targets fp4q builds for and the limits its configs must fit."""

from __future__ import annotations

from dataclasses import dataclass

from .rules import check_choice, require


@dataclass(frozen=True)
class ArchLimits:
    max_smem_per_block: int
    smem_per_sm: int
    regs_per_sm: int
    max_threads_per_sm: int
    has_cvt_e2m1: bool


ARCHS: dict[str, ArchLimits] = {
    "sm_90a": ArchLimits(232448, 233472, 65536, 2048, has_cvt_e2m1=False),
    "sm_100a": ArchLimits(232448, 233472, 65536, 2048, has_cvt_e2m1=True),
}


def check_arch(arch) -> None:
    check_choice("arch", arch, tuple(ARCHS))


def target_for(compute_capability: tuple[int, int]) -> str:
    """The compile target of a device of this compute capability."""
    major, minor = compute_capability
    return f"sm_{major}{minor}a"


def check_fits_sm(cfg) -> None:
    """The occupancy rules shared by every TMA kernel config: its shared memory
    per block, and ``min_ctas_per_sm`` CTAs of it (memory and threads) per SM."""
    limits = ARCHS[cfg.arch]
    smem = cfg.smem.total
    require(
        smem <= limits.max_smem_per_block,
        f"shared memory of {smem} bytes (num_stages={cfg.num_stages}, tile {cfg.tile_m}x{cfg.tile_k}) "
        f"exceeds the {cfg.arch} limit of {limits.max_smem_per_block} bytes per block",
    )
    require(
        cfg.min_ctas_per_sm * (smem + 1024) <= limits.smem_per_sm,
        f"min_ctas_per_sm={cfg.min_ctas_per_sm} CTAs of {smem} bytes of shared memory do not fit "
        f"in the {limits.smem_per_sm} bytes of one {cfg.arch} SM",
    )
    require(
        cfg.min_ctas_per_sm * cfg.threads <= limits.max_threads_per_sm,
        f"min_ctas_per_sm={cfg.min_ctas_per_sm} CTAs of {cfg.threads} threads exceed "
        f"{limits.max_threads_per_sm} threads per SM",
    )
