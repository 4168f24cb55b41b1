#!/usr/bin/env python3
"""Host-side times of fp4q that need no GPU, as a table: a cold NVRTC compile
of the default quantize kernel into an empty cache, a disk-cache hit in a new
process (with NVRTC already loaded, and as the process's very first lookup),
a memory-cache hit, and the numpy reference on a large input.

These were once assertions in the test-suite (cold compile < 1.5 s, cached
lookup < 5 ms, reference < 10 s); the budgets are shown next to the times,
and this script reports rather than fails: timings depend on the machine.

    python3 scripts/dev/compile_times.py            # 3 runs of each
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if __package__ in (None, ""):  # run as a file: the repository root makes `scripts` importable
    sys.path.append(REPO)  # after site-packages: an installed fp4q wins

LOOKUP_CHILD = textwrap.dedent(
    """
    import json, sys, time
    from fp4q.jit import compiler, render
    from fp4q.kernels.quantize import QuantizeConfig
    if sys.argv[1] == "preload":
        compiler.nvrtc_version()
    src = render.render(QuantizeConfig().spec)
    start = time.perf_counter()
    kernel = compiler.compile_source(src)
    print(json.dumps(dict(ms=(time.perf_counter() - start) * 1e3, hit=kernel.cache_hit)))
    """
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs of each measurement; the table shows the median")
    parser.add_argument("--reference-shape", default="4096x7168", help="MxK for the numpy reference")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    args.reference_shape = tuple(int(v) for v in args.reference_shape.lower().split("x"))
    return args


def lookup_ms(cache_dir: str, mode: str) -> float:
    env = dict(os.environ, FP4Q_CACHE_DIR=cache_dir,
               PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", LOOKUP_CHILD, mode], env=env, capture_output=True, text=True,
                         timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"lookup child failed: {out.stderr.strip()[-2000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if not result["hit"]:
        raise RuntimeError("the lookup child compiled instead of hitting the disk cache")
    return result["ms"]


def measure(args) -> list[tuple[str, float, str, str]]:
    """(what, median, unit, budget) rows."""
    import numpy as np

    from scripts.sweep import sweep_ops
    from fp4q.jit import compiler
    from fp4q.jit.cache import BinaryCache
    from fp4q.jit.render import render
    from fp4q.kernels.quantize import QuantizeConfig
    from fp4q.numerics import reference

    compiler.nvrtc_version()  # loading NVRTC is not part of a compile
    src = render(QuantizeConfig().spec)
    cold, memory, disk_preloaded, disk_first = [], [], [], []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="fp4q-compile-times-") as tmp:
            cache = BinaryCache(tmp)
            start = time.perf_counter()
            compile_source_checked(compiler, src, cache, hit=False)
            cold.append(time.perf_counter() - start)
            start = time.perf_counter()
            compile_source_checked(compiler, src, cache, hit=True)
            memory.append((time.perf_counter() - start) * 1e3)
            disk_preloaded.append(lookup_ms(tmp, "preload"))
            disk_first.append(lookup_ms(tmp, "first"))
    m, k = args.reference_shape
    x = sweep_ops.bf16_normal(m, k, np.random.default_rng(10))
    tsf = reference.global_scale(x)
    ref = []
    for _ in range(args.runs):
        start = time.perf_counter()
        reference.quantize_nvfp4(x, tsf)
        ref.append(time.perf_counter() - start)
    med = statistics.median
    return [("cold compile of the default quantize kernel (empty cache)", med(cold), "s", "< 1.5 s"),
            ("disk-cache hit, new process, NVRTC loaded", med(disk_preloaded), "ms", "< 5 ms"),
            ("disk-cache hit, new process, first lookup", med(disk_first), "ms", "< 5 ms"),
            ("memory-cache hit, same process", med(memory), "ms", ""),
            (f"numpy reference quantize_nvfp4 {m}x{k}", med(ref), "s", "< 10 s")]


def compile_source_checked(compiler, src, cache, *, hit: bool):
    kernel = compiler.compile_source(src, cache=cache)
    if kernel.cache_hit != hit:
        raise RuntimeError(f"expected cache_hit={hit}, got {kernel.cache_hit}")
    return kernel


def table(rows, runs: int) -> str:
    out = [f"Median of {runs} runs.", "", "| what | time | budget |", "|---|---:|---|"]
    for what, value, unit, budget in rows:
        shown = f"{value:.3f} s" if unit == "s" else f"{value:.2f} ms"
        out.append(f"| {what} | {shown} | {budget} |")
    return "\n".join(out)


def main(argv=None) -> int:
    args = parse_args(argv)
    print(table(measure(args), args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
