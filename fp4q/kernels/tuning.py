"""Which config to run for a shape: the measured table for the GPU's arch
(written by ``scripts/sweep/sweep.py --write-tuned``; only sm_90a has one), else a
heuristic. Targets without TMA (sm_80) always run the vector SIMT kernel."""

from __future__ import annotations

import functools
import json
import pathlib

from .archs import target
from .rules import ConfigError
from .quantize import QuantizeConfig, SimtConfig, default_config, default_mx_config

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


def _labels(bounds: tuple[int, ...]) -> list[str]:
    return [f"<={bound}" for bound in bounds] + [f">{bounds[-1]}"]


SHAPE_CLASSES = frozenset(f"m{m},k{k}" for m in _labels(M_BUCKETS) for k in _labels(K_BUCKETS))


def table_path(arch: str) -> pathlib.Path:
    return pathlib.Path(__file__).with_name(f"tuned_{arch}.json")


# Inputs of fewer elements (M*K) than this run the vector kernel where the
# table gives no crossover of its own for the format. On the H200, with 16
# elements per thread, the vector kernel beat the default TMA config at every
# measured shape up to 1024x4096 and lost from 2048x7168 on
# (docs/performance.md at f3e56c9, "Serving sizes"). The sm_90a table records each
# format's own crossover since the vector kernels became faster.
VECTOR_MAX_ELEMENTS = 1 << 23
VECTOR_THREADS = 128

# Elements per thread of the vector kernel. On the H200 (docs/performance.md at f3e56c9,
# "Units of 8, 16 and 32 elements"), time / copy: NVFP4 with 8 elements (two
# threads per group, each with half the dependent chain) at 1x4096 1.132
# against 1.144 with 16, at 16x4096 1.106 against 1.136, and worse from
# 128x7168 on (1.232 against 1.204); NVFP4 with 32 (two groups per thread)
# was slower at every size (1024x4096 1.321 against 1.194). MXFP4 with 32
# (a whole group per thread, no shuffles) against 16: 1x4096 1.180 / 1.139,
# 1024x4096 1.233 / 1.248, 4096x7168 1.129 / 1.298, 8192x8192 1.062 / 1.219.
VECTOR_X8_MAX_ELEMENTS = 1 << 16
MX_VECTOR_X32_MIN_ELEMENTS = 1 << 22


def vector_elements(m: int, k: int, fmt: str) -> int:
    """The vector kernel's elements per thread for an ``m x k`` input of this format."""
    if fmt == "mxfp4":
        return 32 if m * k >= MX_VECTOR_X32_MIN_ELEMENTS else 16
    return 8 if m * k <= VECTOR_X8_MAX_ELEMENTS else 16


# tensor_sf="dynamic" runs one launch (amax, a grid barrier, then the vector
# kernel's work, a thread's first unit kept in registers and any later one
# read again from L2) up to this many elements, and the global-scale kernels
# followed by the quantize kernel above. On the H200, with the block sizes
# below, the one launch took 1.58-1.94x of the static quantize's copy from
# 1x4096 to 4096x4096 against 1.99-2.25x for the two passes
# (docs/performance.md at f3e56c9, "The one-launch dynamic quantizer"); larger inputs
# were not measured in one launch.
FUSED_DYNAMIC_MAX_ELEMENTS = 1 << 24

# Every CTA of the one launch arrives at one counter, so the block size sets
# how many arrivals serialize there: at 1024x4096, 2048 CTAs of 128 threads
# took 2.82x of a copy, 256 CTAs of 1024 threads 1.82x. Small inputs want the
# small CTAs, spread over more SMs.
FUSED_DYNAMIC_BLOCK_SIZES = (128, 256, 512, 1024)


# An input of at most this many units (a thread's quantize work each) takes the
# one launch as a single CTA, which needs no grid barrier: no round trips
# through L2 between the amax and the quantize step, and no counter, so a stream
# being captured into a graph takes the one launch too. Above it, spreading
# the units over SMs pays for the barrier.
FUSED_ONE_CTA_MAX_UNITS = 512


def fused_dynamic_block(units: int, work_items: int, sm_count: int) -> tuple[int, bool]:
    """The block size of the one-launch dynamic kernel for ``units`` quantize units
    and ``work_items`` work items in all (the padding scales' words included), and
    whether its grid is one CTA (the smallest block that gives every work item a
    thread, or the largest block)."""
    if units <= FUSED_ONE_CTA_MAX_UNITS:
        wanted = min(work_items, FUSED_DYNAMIC_BLOCK_SIZES[-1])
        return min(t for t in FUSED_DYNAMIC_BLOCK_SIZES if t >= wanted), True
    return fused_dynamic_threads(work_items, sm_count), False


def fused_dynamic_threads(units: int, sm_count: int) -> int:
    """The block size of the one-launch dynamic kernel for ``units`` work items
    (threads' worth of work): the largest of FUSED_DYNAMIC_BLOCK_SIZES that
    still gives at least one CTA per two SMs, else the smallest. On the H200
    this was the best of the four, or within 2 % of it, from 1x4096 to 4096x4096."""
    fitting = [t for t in FUSED_DYNAMIC_BLOCK_SIZES if 2 * -(-units // t) >= sm_count]
    return max(fitting, default=FUSED_DYNAMIC_BLOCK_SIZES[0])


@functools.lru_cache(maxsize=None)
def _table_json(arch: str) -> dict:
    path = table_path(arch)
    return json.loads(path.read_text()) if path.is_file() else {}


def _entry_config(arch: str, cls: str, entry) -> QuantizeConfig:
    if cls not in SHAPE_CLASSES:
        raise ConfigError(f"not a shape class (one of {', '.join(sorted(SHAPE_CLASSES))})")
    if not isinstance(entry, dict) or not isinstance(entry.get("config"), dict):
        raise ConfigError("the entry has no \"config\" object")
    return QuantizeConfig(arch=arch, **entry["config"])


@functools.lru_cache(maxsize=None)
def tuned_table(arch: str) -> dict[str, QuantizeConfig]:
    """The shipped table for ``arch`` as configs per shape class (empty if none).

    The table ships with the package, so an entry that does not build a config
    is a packaging bug: it raises ``ConfigError`` naming the file, the entry
    and the reason, instead of leaving its shapes to the heuristic unnoticed.
    """
    table = {}
    for cls, entry in _table_json(arch).get("entries", {}).items():
        try:
            table[cls] = _entry_config(arch, cls, entry)
        except (TypeError, ValueError) as exc:  # ConfigError is a ValueError; unknown fields are a TypeError
            raise ConfigError(f"{table_path(arch)}: entry {cls!r}: {exc}") from exc
    return table


def vector_max_elements(arch: str, fmt: str = "nvfp4") -> int:
    """Below this many elements the vector kernel is chosen: the table's measured crossover
    for the format (``vector_max_elements`` for NVFP4, ``mx_vector_max_elements`` for
    MXFP4), else VECTOR_MAX_ELEMENTS."""
    value = _table_json(arch).get("vector_max_elements" if fmt == "nvfp4" else "mx_vector_max_elements")
    return value if isinstance(value, int) and value > 0 else VECTOR_MAX_ELEMENTS


@functools.lru_cache(maxsize=4096)
def choose_config(m: int, k: int, arch: str, fmt: str = "nvfp4") -> QuantizeConfig | SimtConfig:
    """The config for an ``m x k`` input: the vector kernel for small inputs, else the
    tuned (NVFP4) or default TMA config; the vector kernel for every input where ``arch`` has no TMA."""
    if m * k < vector_max_elements(arch, fmt) or not target(arch).features.tma:
        return SimtConfig(threads=VECTOR_THREADS, vector=True, vector_elements=vector_elements(m, k, fmt), fmt=fmt,
                          arch=arch)
    if fmt == "mxfp4":
        return default_mx_config(arch)
    return tuned_table(arch).get(shape_class(m, k)) or default_config(arch)
