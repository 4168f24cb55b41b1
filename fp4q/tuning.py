"""Which config to run for a shape: the measured table for the GPU's arch
(written by ``scripts/sweep.py --write-tuned``), else a heuristic."""

from __future__ import annotations

import functools
import json
import pathlib

from .config import ConfigError, QuantizeConfig, Swizzle, default_config, default_mx_config

M_BUCKETS = (16, 128, 1024, 4096)  # upper bounds; larger M is the last class
K_BUCKETS = (2048, 4096, 8192)


def _bucket(value: int, bounds: tuple[int, ...]) -> str:
    for bound in bounds:
        if value <= bound:
            return f"<={bound}"
    return f">{bounds[-1]}"


def shape_class(m: int, k: int) -> str:
    """The tuned table's key for an ``m x k`` input."""
    return f"m{_bucket(m, M_BUCKETS)},k{_bucket(k, K_BUCKETS)}"


def table_path(arch: str) -> pathlib.Path:
    return pathlib.Path(__file__).with_name(f"tuned_{arch}.json")


@functools.lru_cache(maxsize=None)
def tuned_table(arch: str) -> dict[str, QuantizeConfig]:
    """The shipped table for ``arch`` as configs per shape class (empty if none)."""
    path = table_path(arch)
    if not path.is_file():
        return {}
    entries = json.loads(path.read_text()).get("entries", {})
    table = {}
    for cls, entry in entries.items():
        fields = dict(entry["config"])
        for name in ("input_swizzle", "output_swizzle"):
            fields[name] = Swizzle(fields[name])
        try:
            table[cls] = QuantizeConfig(arch=arch, **fields)
        except (ConfigError, TypeError):
            continue  # an entry this version cannot build: fall back to the heuristic
    return table


@functools.lru_cache(maxsize=4096)
def choose_config(m: int, k: int, arch: str, sf_vec_size: int = 16) -> QuantizeConfig:
    """The tuned (NVFP4) or default config for an ``m x k`` input."""
    if sf_vec_size == 32:
        return default_mx_config(arch)
    return tuned_table(arch).get(shape_class(m, k)) or default_config(m, k, arch)
