"""Quick timing of every shipped config next to a same-bytes device copy.

Device time only (launches are queued behind a spin kernel); host time per
call is reported separately.
"""

from __future__ import annotations

import argparse
import os
import sys

import cupy as cp
import numpy as np

if __package__ in (None, ""):  # run as a file: the repository root makes `scripts` importable
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import fp4q  # noqa: E402
from fp4q.kernels.variants import SHIPPED  # noqa: E402
from scripts.bench.timing import copy_bytes, copy_fn, host_us_per_call, time_fn  # noqa: E402
from scripts.sweep.sweep_ops import bf16_normal  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="8192x8192,16x4096,4096x7168,1024x4096")
    parser.add_argument("--configs", default="all")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    configs = [("default", None), *SHIPPED.items()]
    if args.configs != "all":
        configs = [(n, c) for n, c in configs if n in args.configs.split(",")]
    print(f"{'shape':>12} {'config':>28} {'us':>8} {'copy us':>8} {'% copy':>7} {'TB/s':>6}")
    for shape in args.shapes.split(","):
        m, k = map(int, shape.split("x"))
        x = cp.asarray(bf16_normal(m, k, rng))
        q = cp.empty((m, k // 2), cp.uint8)
        sf = cp.empty(fp4q.swizzled_sf_shape(m, k), cp.uint8)
        copy = time_fn(copy_fn(m, k))
        moved = sum(copy_bytes(m, k))
        for name, cfg in configs:
            t = time_fn(lambda: fp4q.quantize_nvfp4(x, 1.0, out=q, sf_out=sf, config=cfg))
            print(f"{shape:>12} {name:>28} {t.median_us:8.2f} {copy.median_us:8.2f} "
                  f"{100 * copy.median_us / t.median_us:6.1f}% {moved / t.median_us / 1e6:6.2f}", flush=True)
        host = host_us_per_call(lambda: fp4q.quantize_nvfp4(x, 1.0, out=q, sf_out=sf))
        host_alloc = host_us_per_call(lambda: fp4q.quantize_nvfp4(x, 1.0))
        print(f"{shape:>12} host us/call: {host:.1f} with out=, {host_alloc:.1f} allocating", flush=True)


if __name__ == "__main__":
    main()
