#!/usr/bin/env python3
"""A figure of one benchmark run (the JSON that ``bench.py`` writes): per shape, the median device time
as a multiple of a device copy of the same bytes, timed in the same run (1.0 is the copy).

Left, NVFP4 quantization: fp4q (default config, PDL on) and every other quantizer the run timed.
Right, fp4q's other kernels, each against a copy of its own bytes: MXFP4 quantization, NVFP4 and MXFP4
dequantization to bf16, and ``quantize_nvfp4(x, "dynamic")`` (amax and quantization in one call).

    python -m scripts.bench.plot [JSON] [PNG]    # default: docs/data/benchmarks.json -> docs/benchmarks.png

Needs matplotlib (``pip install 'fp4q[plot]'``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_JSON = os.path.join(REPO, "docs", "data", "benchmarks.json")
DEFAULT_PNG = os.path.join(REPO, "docs", "benchmarks.png")

# Contender rows of the NVFP4 quantize table (their names start so), and the legend's words for them.
QUANTIZERS = (("fp4q default, PDL on", "fp4q"), ("triton", "Triton, bit-exact (tuned tile per shape)"),
              ("torch eager", "torch eager (spec formula)"), ("torch.compile", "torch.compile (spec formula)"),
              ("torchao", "torchao"))
# fp4q's other kernels in the formats table (their labels start so), and the legend's words for them.
KERNELS = (("quantize_mxfp4", "quantize_mxfp4"), ("dequantize_nvfp4", "dequantize_nvfp4 -> bf16"),
           ("dequantize_mxfp4", "dequantize_mxfp4 -> bf16"),
           ('quantize_nvfp4(x, "dynamic")', 'quantize_nvfp4(x, "dynamic")'))


def quantizer_ratios(data: dict) -> dict[str, list[float | None]]:
    """Legend label -> time / copy per shape of the run (None where that contender has no time);
    contenders with no time at any shape are left out."""
    out = {}
    for prefix, label in QUANTIZERS:
        ratios = []
        for s in data["shapes"]:
            row = next((r for r in s["rows"] if r["contender"].startswith(prefix)), None)
            ok = row is not None and row["median_us"] is not None and s["copy_us"]
            ratios.append(row["median_us"] / s["copy_us"] if ok else None)
        if any(r is not None for r in ratios):
            out[label] = ratios
    return out


def kernel_ratios(data: dict) -> dict[str, list[float | None]]:
    """Legend label -> time / its own copy per shape, for fp4q's kernels other than NVFP4 quantization."""
    out = {}
    for prefix, label in KERNELS:
        ratios = []
        for s in data["shapes"]:
            row = next((r for r in s.get("formats", []) if r["kernel"].startswith(prefix)), None)
            ok = row is not None and row.get("median_us") is not None and row.get("copy_us")
            ratios.append(row["median_us"] / row["copy_us"] if ok else None)
        if any(r is not None for r in ratios):
            out[label] = ratios
    return out


def title(meta: dict) -> str:
    return (f"fp4q {meta['commit'].split()[0]} on {meta['device']} ({meta['arch']}), {meta['date']}: "
            f"median device time / a device copy of the same bytes, L2 flushed, {meta['reps']} repetitions")


def draw(data: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = [s["shape"] for s in data["shapes"]]
    panels = [("NVFP4 quantization", quantizer_ratios(data)),
              ("fp4q's other kernels, each against its own copy", kernel_ratios(data))]
    panels = [(name, series) for name, series in panels if series]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.8), sharey=True, squeeze=False)
    x = list(range(len(shapes)))
    for ax, (name, series) in zip(axes[0], panels):
        ax.axhline(1.0, color="black", linewidth=1, linestyle=":", label="device copy")
        for label, ratios in series.items():
            points = [(i, r) for i, r in zip(x, ratios) if r is not None]
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=4,
                    linewidth=2.2 if label == "fp4q" else 1.2, label=label)
        ax.set_title(name, fontsize=10)
        ax.set_xticks(x, shapes, rotation=60, ha="right", fontsize=8)
        ax.set_xlabel("M x K (bf16 input)", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    axes[0][0].set_ylabel("time / copy time (lower is better)", fontsize=9)
    fig.suptitle(title(data["meta"]), fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", nargs="?", default=DEFAULT_JSON, help="a run's JSON (default %(default)s)")
    parser.add_argument("png", nargs="?", default=DEFAULT_PNG, help="the figure (default %(default)s)")
    args = parser.parse_args(argv)
    with open(args.json) as f:
        data = json.load(f)
    try:
        draw(data, args.png)
    except ImportError:
        print("matplotlib is not installed: no plot (pip install 'fp4q[plot]')", file=sys.stderr)
        return 2
    print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
