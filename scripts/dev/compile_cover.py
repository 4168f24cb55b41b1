#!/usr/bin/env python3
"""Compiles, with a given NVRTC library, a covering set of the shipped
variants: per target and template, variants chosen until every flag value
and every constant value that the template's shipped variants use appears in
at least one of them (a few dozen per target instead of about a thousand).

    python -m scripts.dev.compile_cover --nvrtc DIR [--arch sm_90a,sm_100f] [--shard K/N]

DIR holds ``libnvrtc.so.13`` and its ``libnvrtc-builtins.so.13.*`` (the
``nvidia/cu13/lib`` folder of an ``nvidia-cuda-nvrtc`` wheel).

fp4q accepts every NVRTC of its major version (``nvidia-cuda-nvrtc>=13.0``),
and NVRTC releases differ in what C++ they take in device code (13.0 rejects
a generic lambda inside a kernel that 13.5 compiles): the test suite compiles
every variant with the NVRTC it has installed, the newest; this compiles the
covering set with another one, the oldest accepted. The libraries are
loaded (the builtins first, which NVRTC opens by name) before cuda-bindings
looks for NVRTC, so cuda-bindings uses them. Exits non-zero if any variant
fails to compile or spills, or if cuda-bindings does not use the NVRTC given.
``--shard K/N``: every N-th variant of the covering set from the K-th, so that N
processes (one per CPU) compile it together.
"""

from __future__ import annotations

import argparse
import ctypes
import pathlib
import sys
import tempfile
import time
from collections import defaultdict


def covering(specs: list[tuple[str, object]]) -> list[str]:
    """Names of variants (greedy, largest gain first) whose flag and constant values cover all of ``specs``'."""
    def values(spec) -> set:
        return {("flag",) + f for f in spec.flags} | {("constant",) + c for c in spec.constants}

    need = set().union(*(values(spec) for _, spec in specs))
    chosen = []
    while need:
        name, spec = max(specs, key=lambda item: len(values(item[1]) & need))
        chosen.append(name)
        need -= values(spec)
    return chosen


def shard(text: str) -> tuple[int, int]:
    """``K/N`` with ``0 <= K < N``."""
    k, _, n = text.partition("/")
    if not (k.isdigit() and n.isdigit() and int(k) < int(n)):
        raise argparse.ArgumentTypeError(f"must be K/N with 0 <= K < N, got {text!r}")
    return int(k), int(n)


def covering_work(archs: list[str]) -> list[tuple[str, str, str, object]]:
    """``(arch, template, variant name, spec)`` of the covering set of each target, in a fixed order."""
    from fp4q.kernels.variants import all_variants

    work = []
    for arch in archs:
        by_template = defaultdict(list)
        for name, cfg in all_variants(arch).items():
            by_template[cfg.spec.template].append((name, cfg.spec))
        for template, specs in sorted(by_template.items()):
            named = dict(specs)
            work += [(arch, template, name, named[name]) for name in covering(specs)]
    return work


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nvrtc", required=True, type=pathlib.Path,
                        help="the folder of the libnvrtc.so.13 and libnvrtc-builtins to compile with")
    parser.add_argument("--arch", default="all", help="comma-separated targets, or 'all' (the default)")
    parser.add_argument("--shard", type=shard, default=(0, 1), help="K/N: every N-th variant from the K-th (default 0/1)")
    args = parser.parse_args(argv)
    builtins = sorted(args.nvrtc.glob("libnvrtc-builtins.so.13.*"))
    if not (args.nvrtc / "libnvrtc.so.13").is_file() or not builtins:
        parser.error(f"--nvrtc must be a folder with libnvrtc.so.13 and libnvrtc-builtins.so.13.*, got {args.nvrtc}")
    ctypes.CDLL(str(builtins[0]), mode=ctypes.RTLD_GLOBAL)
    loaded = ctypes.CDLL(str(args.nvrtc / "libnvrtc.so.13"), mode=ctypes.RTLD_GLOBAL)

    from cuda.bindings import nvrtc

    from fp4q.jit.cache import BinaryCache
    from fp4q.jit.compiler import CompileError, compile_source
    from fp4q.jit.render import render
    from fp4q.kernels.archs import ARCHS

    major, minor = ctypes.c_int(), ctypes.c_int()
    loaded.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    version = nvrtc.nvrtcVersion()[1:]
    if version != (major.value, minor.value):
        print(f"cuda-bindings uses NVRTC {version}, not {args.nvrtc} ({major.value}.{minor.value})")
        return 2
    archs = sorted(ARCHS) if args.arch == "all" else args.arch.split(",")
    unknown = [a for a in archs if a not in ARCHS]
    if unknown:
        parser.error(f"--arch must name targets of {', '.join(sorted(ARCHS))}, got {', '.join(unknown)}")

    cache = BinaryCache(tempfile.mkdtemp(prefix="fp4q-cover-"))
    failures = compiled = 0
    start = time.perf_counter()
    k, n = args.shard
    for arch, template, name, spec in covering_work(archs)[k::n]:
        compiled += 1
        try:
            kernel = compile_source(render(spec), cache=cache)
        except CompileError as error:
            failures += 1
            print(f"FAILED {arch} {name} ({template}):\n{error}\n", flush=True)
            continue
        if kernel.resources.spill_bytes:
            failures += 1
            print(f"FAILED {arch} {name} ({template}): {kernel.resources.spill_bytes} bytes spilled", flush=True)
    part = "" if n == 1 else f" (shard {k}/{n})"
    print(f"NVRTC {version[0]}.{version[1]}: {compiled} covering variants of {', '.join(archs)}{part} compiled in "
          f"{time.perf_counter() - start:.0f} s, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
