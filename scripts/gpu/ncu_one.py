"""Three quantize launches of one shape and config, for a profiler such as ncu (needs a GPU)."""

from __future__ import annotations

import argparse
import os
import sys

if __package__ in (None, ""):  # run as a file: the repository root makes `scripts` importable
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def parse_shape(text: str) -> tuple[int, int]:
    try:
        m, k = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape is MxK, e.g. 4096x7168; got {text!r}") from None
    if m <= 0 or k <= 0 or k % 16:
        raise argparse.ArgumentTypeError(f"shape {text}: M and K must be positive and K a multiple of 16")
    return m, k


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("shape", type=parse_shape, help="MxK of the bf16 input")
    parser.add_argument("config", nargs="?", default=None,
                        help="a shipped config name (fp4q.kernels.variants.SHIPPED); default: the default config")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    import cupy as cp
    import numpy as np

    import fp4q
    from fp4q.kernels.variants import SHIPPED
    from scripts.sweep import sweep_ops

    if args.config is not None and args.config not in SHIPPED:
        raise SystemExit(f"unknown config {args.config!r}; shipped: {', '.join(SHIPPED)}")
    cfg = SHIPPED[args.config] if args.config is not None else None
    m, k = args.shape
    x = cp.asarray(sweep_ops.bf16_normal(m, k, np.random.default_rng(0)))
    for _ in range(3):
        fp4q.quantize_nvfp4(x, 1.0, config=cfg)
    cp.cuda.Device().synchronize()


if __name__ == "__main__":
    main()
