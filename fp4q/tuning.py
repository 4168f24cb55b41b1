"""Which config to run for a shape: the measured table for this GPU, else a heuristic."""

from __future__ import annotations

from .config import QuantizeConfig, default_config


def choose_config(m: int, k: int, arch: str) -> QuantizeConfig:
    return default_config(m, k, arch)
