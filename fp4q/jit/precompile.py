"""Ahead-of-time compilation: every shipped variant of the given targets into the on-disk cache.

A serving process then finds every kernel it can choose in the cache and never stalls on NVRTC
(``FP4Q_DISABLE_JIT=1`` makes a miss an error instead of a compile). Variants are rendered and keyed in
this process; only the ones missing from the cache are compiled, in worker processes (NVRTC holds the
GIL for the whole compile, so threads would not overlap).
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import pathlib
import sys
import time
from dataclasses import dataclass, field

from ..kernels.archs import ARCHS
from ..kernels.rules import check_choice
from ..kernels.spec import KernelConfig
from ..kernels.variants import OPS, all_variants, op_of
from .cache import BinaryCache
from .compiler import CompileError, compile_source, kernel_key, unpack_cubin
from .render import render


@dataclass(frozen=True)
class Variant:
    arch: str
    name: str
    config: KernelConfig

    def __str__(self) -> str:
        return f"{self.arch} {self.name}: {self.config!r}"


@dataclass
class Report:
    """What a precompile (or a check) found: ``variants`` considered, ``compiled`` now, ``cached``
    already, ``missing`` from the cache (a check), ``failed`` with their errors, cubin bytes per target."""

    directory: pathlib.Path
    variants: int = 0
    compiled: list[Variant] = field(default_factory=list)
    cached: list[Variant] = field(default_factory=list)
    missing: list[Variant] = field(default_factory=list)
    failed: list[tuple[Variant, str]] = field(default_factory=list)
    bytes_by_arch: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.missing and not self.failed

    def summary(self) -> str:
        total = sum(self.bytes_by_arch.values())
        per_arch = ", ".join(f"{a} {n / 2**20:.1f} MiB" for a, n in self.bytes_by_arch.items())
        lines = [
            f"{self.variants} variants: {len(self.compiled)} compiled, {len(self.cached)} already cached, "
            f"{len(self.missing)} missing, {len(self.failed)} failed; {total / 2**20:.1f} MiB of cubins "
            f"({per_arch}) in {self.directory}; {self.seconds:.1f} s"
        ]
        lines += [f"missing: {v}" for v in self.missing]
        lines += [f"failed: {v}\n{err}" for v, err in self.failed]
        return "\n".join(lines)


def _parse_list(name: str, value, choices: tuple[str, ...], default: tuple[str, ...]) -> tuple[str, ...]:
    if value is None:
        return default
    items = value.split(",") if isinstance(value, str) else list(value)
    items = [item.strip() for item in items]
    if not items or not all(items):
        raise ValueError(f"{name} must name at least one of {', '.join(choices)}, got {value!r}")
    for item in items:
        check_choice(name, item, choices)
    return tuple(dict.fromkeys(items))


def variants(archs=None, ops=None) -> list[Variant]:
    """The shipped variants of ``archs`` (default: every target) for ``ops`` (default: all four)."""
    archs = _parse_list("arch", archs, tuple(ARCHS), tuple(ARCHS))
    ops = _parse_list("ops", ops, OPS, OPS)
    return [Variant(arch, name, cfg) for arch in archs for name, cfg in all_variants(arch).items()
            if op_of(cfg) in ops]


_worker_cache: BinaryCache | None = None


def _init_worker(directory: str) -> None:
    global _worker_cache
    _worker_cache = BinaryCache(directory)


def _compile(config: KernelConfig) -> tuple[int, bool]:
    kernel = compile_source(render(config.spec), _worker_cache, variant=config.spec)
    return len(kernel.cubin), kernel.cache_hit


class _Progress:
    """tqdm where it is installed (the ``progress`` extra), else one counter line on stderr."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.done, self.enabled = total, 0, enabled and total > 0
        self.bar = None
        if self.enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                self.tty = sys.stderr.isatty()
            else:
                self.bar = tqdm(total=total, unit="kernel", desc="fp4q precompile")

    def step(self) -> None:
        self.done += 1
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update()
        elif self.tty:
            sys.stderr.write(f"\rfp4q precompile: {self.done}/{self.total}")
            sys.stderr.flush()
        elif self.done == self.total or self.done % max(1, self.total // 10) == 0:
            sys.stderr.write(f"fp4q precompile: {self.done}/{self.total}\n")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and self.tty:
            sys.stderr.write("\n")


def precompile(archs=None, ops=None, *, jobs: int | None = None, check: bool = False,
               cache_dir: str | os.PathLike | None = None, progress: bool = True) -> Report:
    """Compile every shipped variant of ``archs`` and ``ops`` into the cache, ``jobs`` processes at a time.

    ``archs``: target names (a list or a comma-separated string), default every target in
    ``fp4q.kernels.archs.ARCHS``. ``ops``: any of the public operations (``quantize_nvfp4``,
    ``quantize_mxfp4``, ``dequantize_nvfp4``, ``dequantize_mxfp4``, ``global_scale``), default all. ``jobs``: default ``os.cpu_count()``. ``cache_dir``: default the
    cache fp4q uses (``$FP4Q_CACHE_DIR``, else ``$XDG_CACHE_HOME/fp4q``, else ``~/.cache/fp4q``).
    ``check=True`` compiles nothing and reports the variants missing from the cache. Failures are
    reported, not raised: see ``Report.ok``. ``FP4Q_DISABLE_JIT=1`` is honoured here too (a missing
    variant fails instead of compiling), so it must be unset for the build step.
    """
    if jobs is None:
        jobs = os.cpu_count() or 1
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ValueError(f"jobs must be an integer >= 1, got {jobs!r}")
    start = time.perf_counter()
    todo = variants(archs, ops)
    cache = BinaryCache(cache_dir)
    report = Report(directory=cache.directory, variants=len(todo))
    report.bytes_by_arch = {arch: 0 for arch in dict.fromkeys(v.arch for v in todo)}
    missing = []
    for variant in todo:
        payload = cache.get(kernel_key(render(variant.config.spec)))
        cubin = None if payload is None else unpack_cubin(payload)
        if cubin is None:
            missing.append(variant)
        else:
            report.cached.append(variant)
            report.bytes_by_arch[variant.arch] += len(cubin)
    if check:
        report.missing = missing
    else:
        _compile_all(missing, cache, jobs, progress, report)
    report.seconds = time.perf_counter() - start
    return report


def _compile_all(missing: list[Variant], cache: BinaryCache, jobs: int, progress: bool, report: Report) -> None:
    bar = _Progress(len(missing), progress)

    def record(variant: Variant, result) -> None:
        if isinstance(result, BaseException):
            report.failed.append((variant, f"{type(result).__name__}: {result}"))
        else:
            size, hit = result
            (report.cached if hit else report.compiled).append(variant)
            report.bytes_by_arch[variant.arch] += size
        bar.step()

    try:
        if jobs == 1 or len(missing) <= 1:
            _init_worker(str(cache.directory))
            for variant in missing:
                result: tuple[int, bool] | BaseException
                try:
                    result = _compile(variant.config)
                except CompileError as exc:
                    result = exc
                record(variant, result)
            return
        # spawn, not fork: the parent may hold CUDA or NVRTC state that a forked child must not inherit.
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(min(jobs, len(missing)), mp_context=context,
                                                    initializer=_init_worker,
                                                    initargs=(str(cache.directory),)) as pool:
            futures = {pool.submit(_compile, v.config): v for v in missing}
            for future in concurrent.futures.as_completed(futures):
                error = future.exception()
                if error is not None and not isinstance(error, CompileError):
                    raise error
                record(futures[future], error if error is not None else future.result())
    finally:
        bar.close()
