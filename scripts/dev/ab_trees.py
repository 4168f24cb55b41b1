#!/usr/bin/env python3
"""Two (or more) fp4q source trees side by side in one run: host time per call
and device time per op, through the public API only.

    python scripts/dev/ab_trees.py OLD_TREE NEW_TREE [--shapes 16x4096,1024x4096,8192x8192] [--ops REGEX]

Each tree (a directory holding ``fp4q/`` and ``ptx_templates/``) is imported
by its own child process, which stays alive for the whole run and measures
one thing at a time when asked. The parent interleaves the trees at a fine
grain, ``--rounds`` times, the order reversed every other round: one
measurement of one op by every tree before the next, so a host that speeds
up or slows down during the run moves every tree alike. Host time: warm
calls (``out=`` given, except for the allocating one), the least of three
runs of ``--calls`` calls (``timing.host_us_per_call``); device time: L2
flushed, launches queued behind a spin kernel (``timing.time_fn``). The
table gives the median per tree and the median of the per-round ratios to
the first tree. Every output of every tree is compared byte for byte with
the first tree's. ``--ops`` keeps the ops whose name (``quantize_nvfp4``,
``quantize_nvfp4 dynamic``, ``dequantize_nvfp4``, ...) the regular
expression matches in full.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

# The folder of timing.py, which the children import by its own name: each child's tree comes first on
# its sys.path and may hold a `scripts` package of its own.
TIMING_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")

CHILD = r"""
import hashlib, json, sys
sys.path.insert(0, sys.argv[1])
sys.path.insert(1, sys.argv[2])
import cupy as cp
import numpy as np
import fp4q
import timing
from fp4q import reference
try:
    import torch
    import fp4q.torch as ft
except ImportError:
    torch = None

assert fp4q.__file__.startswith(sys.argv[1]), fp4q.__file__
shapes = [tuple(map(int, s.split("x"))) for s in sys.argv[3].split(",")]
rng = np.random.default_rng(0)
ops, digests = {}, {}


# The ops at one shape and the digests of their outputs: a function, so that each
# shape's lambdas keep that shape's arrays (a loop body would leave every lambda
# with the last shape's).
# The swizzled scales' shape, written out: the trees' own helpers take different arguments.
def swizzled(m, groups):
    return (-(-m // 128), -(-groups // 4), 32, 4, 4)


def shape_ops(m, k):
    x = cp.asarray((rng.standard_normal((m, k), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16))
    tsf = float(reference.global_scale(cp.asnumpy(x)))
    tsf_dev = cp.asarray(np.float32(tsf)).reshape(())
    q = cp.empty((m, k // 2), cp.uint8)
    sf = cp.empty(swizzled(m, k // 16), cp.uint8)
    qm = cp.empty((m, k // 2), cp.uint8)
    sfm = cp.empty(swizzled(m, k // 32), cp.uint8)
    y = cp.empty((m, k), cp.uint16)
    qd, sfd = cp.empty_like(q), cp.empty_like(sf)
    shape_fns = {
        "quantize_nvfp4": lambda: fp4q.quantize_nvfp4(x, tsf, out=q, sf_out=sf),
        "quantize_nvfp4 device tsf": lambda: fp4q.quantize_nvfp4(x, tsf_dev, out=q, sf_out=sf),
        "quantize_nvfp4 allocating": lambda: fp4q.quantize_nvfp4(x, tsf),
        "quantize_nvfp4 dynamic": lambda: fp4q.quantize_nvfp4(x, "dynamic", out=qd, sf_out=sfd),
        "quantize_mxfp4": lambda: fp4q.quantize_mxfp4(x, out=qm, sf_out=sfm),
        "dequantize_nvfp4": lambda: fp4q.dequantize_nvfp4(q, sf, tsf, out=y),
        "global_scale": lambda: fp4q.global_scale(x),
    }
    if torch is not None:  # the torch wrapper and the registered op, on torch tensors and torch's allocator
        xt = torch.as_tensor(x, device="cuda").view(torch.bfloat16)
        qt, sft = torch.empty((m, k // 2), dtype=torch.uint8, device="cuda"), torch.empty(
            swizzled(m, k // 16), dtype=torch.uint8, device="cuda")
        shape_fns["torch quantize_nvfp4 out="] = lambda: ft.quantize_nvfp4(xt, tsf, out=qt, sf_out=sft)
        shape_fns["torch.ops.fp4q.quantize_nvfp4"] = lambda: torch.ops.fp4q.quantize_nvfp4.default(xt, tsf)
    for fn in shape_fns.values():
        fn()
    fp4q.quantize_nvfp4(x, tsf, out=q, sf_out=sf)
    fp4q.quantize_mxfp4(x, out=qm, sf_out=sfm)
    fp4q.dequantize_nvfp4(q, sf, tsf, out=y)
    g = fp4q.global_scale(x)
    dynamic_scale = fp4q.quantize_nvfp4(x, "dynamic", out=qd, sf_out=sfd)[2]
    cp.cuda.Device().synchronize()
    outputs = (q, sf, qm, sfm, y, g, qd, sfd, dynamic_scale)
    return shape_fns, [hashlib.sha256(cp.asnumpy(a).tobytes()).hexdigest() for a in outputs]


for m, k in shapes:
    shape_fns, digests[f"{m}x{k}"] = shape_ops(m, k)
    for name, fn in shape_fns.items():
        ops[f"{name} {m}x{k}"] = (m * k, fn)
print(json.dumps({"ops": {key: size for key, (size, _) in ops.items()}, "bytes": digests}), flush=True)
for line in sys.stdin:
    section, key, n = json.loads(line)
    fn = ops[key][1]
    if section == "host":
        value = min(timing.host_us_per_call(fn, calls=n) for _ in range(3))
    else:
        value = timing.time_fn(fn, reps=n).median_us
    print(json.dumps(value), flush=True)
"""


class Child:
    """One tree's measuring process."""

    def __init__(self, tree: str, shapes: str, cpu: int | None) -> None:
        self.tree = tree
        pin = None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, os.path.abspath(tree), TIMING_DIR, shapes],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=pin)
        self.setup = json.loads(self._line())

    def _line(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{self.tree}: the child ended (exit {self.proc.wait()})")
        return line

    def measure(self, section: str, key: str, n: int) -> float:
        self.proc.stdin.write(json.dumps([section, key, n]) + "\n")
        self.proc.stdin.flush()
        return json.loads(self._line())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="+", help="fp4q source trees; the first is the baseline")
    parser.add_argument("--shapes", default="16x4096,1024x4096,8192x8192")
    parser.add_argument("--reps", type=int, default=30, help="device-time repetitions per measurement")
    parser.add_argument("--calls", type=int, default=300, help="calls per host-time run")
    parser.add_argument("--host-max-elements", type=int, default=16 * 4096,
                        help="host time only for shapes up to this many elements (larger ones are device-bound)")
    parser.add_argument("--rounds", type=int, default=15, help="measurements per op and tree, interleaved")
    parser.add_argument("--ops", type=re.compile, default=None,
                        help="measure only the ops whose name this regular expression matches in full")
    parser.add_argument("--cpu", type=int, default=None,
                        help="the CPU every child is pinned to (default: the last one this process may use; -1: "
                             "no pinning). One CPU for all: cores of one host differ in speed by more than the "
                             "trees do")
    args = parser.parse_args(argv)
    cpu = args.cpu
    if cpu is None and hasattr(os, "sched_getaffinity"):
        cpu = max(os.sched_getaffinity(0))
    children = [Child(t, args.shapes, None if cpu == -1 else cpu) for t in args.trees]
    base = children[0]
    status = 0
    for child in children[1:]:
        if child.setup["bytes"] != base.setup["bytes"]:
            print(f"OUTPUTS DIFFER: {child.tree} vs {base.tree}")
            status = 1
    names = [os.path.basename(os.path.normpath(t)) or t for t in args.trees]
    for section, unit, n in (("host", "us/call", args.calls), ("device", "us", args.reps)):
        keys = [key for key, size in base.setup["ops"].items()
                if (section == "device" or size <= args.host_max_elements)
                and (args.ops is None or args.ops.fullmatch(key.rsplit(" ", 1)[0]))]
        print(f"\n{section} ({unit}; median of {args.rounds} interleaved measurements; ratio: median of the "
              f"per-round ratios to {names[0]})", flush=True)
        print(f"| {'op':<36} | " + " | ".join(f"{n:>10}" for n in names) + " | ratio |")
        for key in keys:
            values: list[list[float]] = [[] for _ in children]
            for i in range(args.rounds):  # the order alternates, so that neither tree always goes first
                for j in (range(len(children)) if i % 2 == 0 else reversed(range(len(children)))):
                    values[j].append(children[j].measure(section, key, n))
            med = [statistics.median(v) for v in values]
            ratio = " ".join(f"{statistics.median(a / b for a, b in zip(v, values[0])):.3f}" for v in values[1:])
            print(f"| {key:<36} | " + " | ".join(f"{m:10.2f}" for m in med) + f" | {ratio} |", flush=True)
    for child in children:
        child.close()
    return status


if __name__ == "__main__":
    sys.exit(main())
