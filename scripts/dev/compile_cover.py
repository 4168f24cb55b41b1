#!/usr/bin/env python3
"""Compiles, with a given NVRTC library, a covering set of the shipped
variants: per target and template, variants chosen until every flag value
and every constant value that the template's shipped variants use appears in
at least one of them (a few dozen per target instead of about a thousand).

    python -m scripts.dev.compile_cover --nvrtc DIR [--arch sm_90a,sm_100f]

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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nvrtc", required=True, type=pathlib.Path,
                        help="the folder of the libnvrtc.so.13 and libnvrtc-builtins to compile with")
    parser.add_argument("--arch", default="all", help="comma-separated targets, or 'all' (the default)")
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
    from fp4q.kernels.variants import all_variants

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
    for arch in archs:
        variants = all_variants(arch)
        by_template = defaultdict(list)
        for name, cfg in variants.items():
            by_template[cfg.spec.template].append((name, cfg.spec))
        for template, specs in sorted(by_template.items()):
            for name in covering(specs):
                compiled += 1
                try:
                    kernel = compile_source(render(variants[name].spec), cache=cache)
                except CompileError as error:
                    failures += 1
                    print(f"FAILED {arch} {name} ({template}):\n{error}\n", flush=True)
                    continue
                if kernel.resources.spill_bytes:
                    failures += 1
                    print(f"FAILED {arch} {name} ({template}): {kernel.resources.spill_bytes} bytes spilled", flush=True)
    print(f"NVRTC {version[0]}.{version[1]}: {compiled} covering variants of {', '.join(archs)} compiled in "
          f"{time.perf_counter() - start:.0f} s, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
