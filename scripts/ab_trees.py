#!/usr/bin/env python3
"""Two (or more) fp4q source trees side by side in one run: host time per call
and device time per op, through the public API only.

    python scripts/ab_trees.py OLD_TREE NEW_TREE [--shapes 16x4096,1024x4096,8192x8192]

Each tree (a directory holding ``fp4q/`` and ``ptx_templates/``) runs in its
own child process, ``--rounds`` times, the order reversed every other round;
the table gives the median per tree and the ratio to the first tree. Host
time: warm calls (``out=`` given, except for the allocating ones), the
least of five runs of 1000 calls (``timing.host_us_per_call``); device
time: L2 flushed, launches queued behind a spin kernel (``timing.time_fn``).
Every output of every tree is compared byte for byte with the first tree's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import hashlib, json, sys
sys.path.insert(0, sys.argv[1])
sys.path.insert(1, sys.argv[2])
import cupy as cp
import numpy as np
import fp4q
import timing
from fp4q import reference

assert fp4q.__file__.startswith(sys.argv[1]), fp4q.__file__
shapes = [tuple(map(int, s.split("x"))) for s in sys.argv[3].split(",")]
reps = int(sys.argv[4])
out = {"host": {}, "device": {}, "bytes": {}}
rng = np.random.default_rng(0)
for m, k in shapes:
    x = cp.asarray((rng.standard_normal((m, k), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16))
    tsf = float(reference.global_scale(cp.asnumpy(x)))
    tsf_dev = cp.asarray(np.float32(tsf)).reshape(())
    q = cp.empty((m, k // 2), cp.uint8)
    sf = cp.empty(fp4q.swizzled_sf_shape(m, k // 16), cp.uint8)
    qm = cp.empty((m, k // 2), cp.uint8)
    sfm = cp.empty(fp4q.swizzled_sf_shape(m, k // 32), cp.uint8)
    y = cp.empty((m, k), cp.uint16)
    ops = {
        "quantize_nvfp4": lambda: fp4q.quantize_nvfp4(x, tsf, out=q, sf_out=sf),
        "quantize_nvfp4 device tsf": lambda: fp4q.quantize_nvfp4(x, tsf_dev, out=q, sf_out=sf),
        "quantize_nvfp4 allocating": lambda: fp4q.quantize_nvfp4(x, tsf),
        "quantize_mxfp4": lambda: fp4q.quantize_mxfp4(x, out=qm, sf_out=sfm),
        "dequantize_nvfp4": lambda: fp4q.dequantize_nvfp4(q, sf, tsf, out=y),
        "global_scale": lambda: fp4q.global_scale(x),
    }
    for name, fn in ops.items():
        fn()
        cp.cuda.Device().synchronize()
        key = f"{name} {m}x{k}"
        if m * k <= 16 * 4096:  # the least of five: a run of calls that no other load slowed down
            out["host"][key] = min(timing.host_us_per_call(fn, calls=1000) for _ in range(5))
        out["device"][key] = timing.time_fn(fn, reps=reps).median_us
    fp4q.quantize_nvfp4(x, tsf, out=q, sf_out=sf)
    fp4q.quantize_mxfp4(x, out=qm, sf_out=sfm)
    fp4q.dequantize_nvfp4(q, sf, tsf, out=y)
    g = fp4q.global_scale(x)
    cp.cuda.Device().synchronize()
    out["bytes"][f"{m}x{k}"] = [hashlib.sha256(cp.asnumpy(a).tobytes()).hexdigest() for a in (q, sf, qm, sfm, y, g)]
print("AB_RESULT " + json.dumps(out))
"""


def run_tree(tree: str, shapes: str, reps: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, os.path.abspath(tree), HERE, shapes, str(reps)],
                          capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("AB_RESULT "):
            return json.loads(line[len("AB_RESULT "):])
    raise SystemExit(f"{tree}: no result (exit {proc.returncode})\n{proc.stdout}\n{proc.stderr}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="+", help="fp4q source trees; the first is the baseline")
    parser.add_argument("--shapes", default="16x4096,1024x4096,8192x8192")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3, help="child runs per tree, alternating")
    args = parser.parse_args(argv)
    runs: dict[str, list[dict]] = {t: [] for t in args.trees}
    for i in range(args.rounds):  # the order alternates, so that neither tree always runs first
        for tree in args.trees if i % 2 == 0 else reversed(args.trees):
            runs[tree].append(run_tree(tree, args.shapes, args.reps))
    base = args.trees[0]
    status = 0
    for tree in args.trees[1:]:
        if runs[tree][0]["bytes"] != runs[base][0]["bytes"]:
            print(f"OUTPUTS DIFFER: {tree} vs {base}")
            status = 1
    names = [os.path.basename(os.path.normpath(t)) or t for t in args.trees]
    for section, unit in (("host", "us/call"), ("device", "us")):
        print(f"\n{section} ({unit}, median of {args.rounds} runs)")
        print(f"| {'op':<36} | " + " | ".join(f"{n:>10}" for n in names) + " | ratio |")
        for key in runs[base][0][section]:
            med = [statistics.median(r[section][key] for r in runs[t]) for t in args.trees]
            ratio = " ".join(f"{m / med[0]:.3f}" for m in med[1:])
            print(f"| {key:<36} | " + " | ".join(f"{m:10.2f}" for m in med) + f" | {ratio} |")
    return status


if __name__ == "__main__":
    sys.exit(main())
