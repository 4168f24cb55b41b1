"""Three calls of one op at one shape, for a profiler such as ncu (needs a GPU).

    ncu --clock-control none -k regex:fp4q_ --section SpeedOfLight --section Occupancy --section WarpStateStats \
        --csv --page details python scripts/gpu/ncu_one.py MxK [CONFIG]
        [--op quantize|dynamic|dequantize|training|training_sr|training_rht]

``quantize``: ``quantize_nvfp4(x, 1.0)`` with a shipped config (default: the call's own
choice); ``dynamic``: ``quantize_nvfp4(x, "dynamic")``; ``dequantize``: ``dequantize_nvfp4`` of
x's codes; ``training``: ``quantize_nvfp4_training(x, 1.0)``, both directions;
``training_sr``: the same rounded stochastically; ``training_rht``: the same with Transformer
Engine's sign mask and ``tensor_sf="dynamic"`` (the post-RHT amax pass). x is bf16 normal(0, 1) data."""

from __future__ import annotations

import argparse
import os
import sys

if __package__ in (None, ""):  # run as a file: the repository root makes `scripts` importable
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


OPS = ("quantize", "dynamic", "dequantize", "training", "training_sr", "training_rht")


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
                        help="a shipped config name (fp4q.kernels.variants.SHIPPED), for --op quantize; default: "
                             "the call's own choice")
    parser.add_argument("--op", choices=OPS, default="quantize")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    import cupy as cp
    import numpy as np

    import fp4q
    from fp4q.kernels.variants import SHIPPED
    from fp4q.numerics.hadamard import TE_WGRAD_SIGN_MASK
    from scripts.sweep import sweep_ops

    if args.config is not None and args.config not in SHIPPED:
        raise SystemExit(f"unknown config {args.config!r}; shipped: {', '.join(SHIPPED)}")
    if args.config is not None and args.op != "quantize":
        raise SystemExit(f"a config names a quantize kernel: it needs --op quantize, got --op {args.op}")
    cfg = SHIPPED[args.config] if args.config is not None else None
    m, k = args.shape
    x = cp.asarray(sweep_ops.bf16_normal(m, k, np.random.default_rng(0)))
    q, sf = fp4q.quantize_nvfp4(x, 1.0)
    calls = {
        "quantize": lambda: fp4q.quantize_nvfp4(x, 1.0, config=cfg),
        "dynamic": lambda: fp4q.quantize_nvfp4(x, "dynamic"),
        "dequantize": lambda: fp4q.dequantize_nvfp4(q, sf, 1.0),
        "training": lambda: fp4q.quantize_nvfp4_training(x, 1.0),
        "training_sr": lambda: fp4q.quantize_nvfp4_training(x, 1.0, stochastic=True, seed=1, offset=2),
        "training_rht": lambda: fp4q.quantize_nvfp4_training(x, "dynamic", hadamard=TE_WGRAD_SIGN_MASK),
    }
    for _ in range(3):
        calls[args.op]()
    cp.cuda.Device().synchronize()


if __name__ == "__main__":
    main()
