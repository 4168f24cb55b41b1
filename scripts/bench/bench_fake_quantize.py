"""fake_quantize_nvfp4 beside a copy of x read and written, per option, in one run.

    python scripts/bench/bench_fake_quantize.py [--options plain,2d,sr,rht,4over6,dynamic]
                                                [--shapes 4096x4096,8192x8192,16384x53248] [--reps 20]
                                                [--json OUT] [--md OUT]

Per option and shape (M x K, bf16): device time (median, L2 flushed, launches queued behind a spin
kernel: ``timing.time_fn``) of ``fp4q.fake_quantize_nvfp4(x, tensor_sf, out=y, **option)`` (CuPy,
the 16-byte loads: x and y from the pool are aligned), of a device copy moving its bytes (x read,
y written: 4 M K), and their ratio; the issue's target is at most 1.15. ``dynamic`` is the tensor
scale computed on the device (its amax pass reads x once more: 6 M K bytes for the copy).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

if __package__ in (None, ""):  # run as a file: the repository root makes `scripts` importable
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from scripts.bench import timing  # noqa: E402
from scripts.bench.outputs import add_output_options, names, require_names, write_outputs  # noqa: E402

TE_MASK = 0xD7E8
OPTIONS = {
    "plain": {},
    "2d": dict(block_2d=True),
    "sr": dict(stochastic=True, seed=1, offset=2),
    "rht": dict(hadamard=TE_MASK),
    "4over6": dict(four_over_six=True),
    "dynamic": {},
}


def shapes(text: str) -> list[tuple[int, int]]:
    """``"4096x4096,8192x8192"`` to ``[(4096, 4096), (8192, 8192)]``; K a multiple of 16, M of 16 (2D blocks)."""
    out = []
    for item in text.split(","):
        m, k = (int(v) for v in item.lower().split("x"))
        if m % 16 or k % 16 or m <= 0 or k <= 0:
            raise argparse.ArgumentTypeError(f"shapes must be MxK with M and K positive multiples of 16, got {item!r}")
        out.append((m, k))
    return out


def run(options: list[str], sizes: list[tuple[int, int]], reps: int) -> list[dict]:
    import cupy as cp

    import fp4q

    results = []
    rng = np.random.default_rng(0)
    for m, k in sizes:
        bits = (rng.standard_normal((m, k), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
        x = cp.asarray(bits)
        y = cp.empty_like(x)
        for name in options:
            scale = "dynamic" if name == "dynamic" else 100.0
            kwargs = OPTIONS[name]

            def call():
                fp4q.fake_quantize_nvfp4(x, scale, out=y, **kwargs)

            call()  # compiles and loads before timing
            reads = 2 if name == "dynamic" else 1  # the amax pass reads x too
            copy = timing.copy_fn_bytes(reads * 2 * m * k, 2 * m * k)
            t_fake = timing.time_fn(call, reps=reps, entries=3 if name == "dynamic" else 1).median_us
            t_copy = timing.time_fn(copy, reps=reps).median_us
            row = dict(option=name, m=m, k=k, fake_us=round(t_fake, 2), copy_us=round(t_copy, 2),
                       fake_over_copy=round(t_fake / t_copy, 3))
            print(json.dumps(row), flush=True)
            results.append(row)
    return results


def table(results: list[dict]) -> str:
    lines = ["| option | M x K | fake_quantize_nvfp4 us | copy us | fake / copy |", "|---|---|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['option']} | {r['m']}x{r['k']} | {r['fake_us']:.1f} | {r['copy_us']:.1f} | "
                     f"{r['fake_over_copy']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--options", type=names, default=list(OPTIONS), help=f"comma-separated, of {', '.join(OPTIONS)}")
    parser.add_argument("--shapes", type=shapes, default=shapes("4096x4096,8192x8192,16384x53248"))
    parser.add_argument("--reps", type=int, default=20)
    add_output_options(parser)
    args = parser.parse_args(argv)
    require_names(parser, "--options", args.options, OPTIONS)
    results = run(args.options, args.shapes, args.reps)
    write_outputs(args, results, table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
