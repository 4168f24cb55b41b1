"""The experts' quantizer beside one call per expert, the plain quantizer and a copy of its bytes, in one run.

    python scripts/bench/bench_experts.py [--experts 8,64,256] [--tokens 1,16,128,1024,4096,8192]
                                          [--k 2048,7168] [--routings uniform,hot,sparse] [--reps 20]
                                          [--json OUT] [--md OUT]

Per routing, E, tokens (M, the rows routed) and K: device time (median, L2 flushed, launches queued
behind a spin kernel: ``timing.time_fn``) of

- ``experts``: ``fp4q.quantize_nvfp4_experts(x, offsets, tensor_sf)`` into reused outputs;
- ``per_expert``: what a user runs without it, one ``fp4q.quantize_nvfp4`` per expert that has rows,
  on its rows, with its device scale, into the same outputs at the same places (the offsets read on
  the host beforehand, which the timing leaves out);
- ``plain``: ``fp4q.quantize_nvfp4`` of all M rows under one device scale (the same rows, the scales
  of one tensor);
- ``copy``: a device copy moving the experts' op's own bytes (x read, q and every scale block written);

and the ratios experts / copy, experts / plain and per_expert / experts. Routings: ``uniform`` (M / E
rows each), ``hot`` (one expert nine tenths of the rows, the rest spread at random), ``sparse`` (the
rows spread over an eighth of the experts, the others empty).
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
from scripts.bench.outputs import add_output_options, ints, names, require_names, write_outputs  # noqa: E402

ROUTINGS = ("uniform", "hot", "sparse")


def counts_of(m: int, experts: int, routing: str, rng) -> np.ndarray:
    """Rows per expert of ``m`` rows routed to ``experts`` experts."""
    if routing == "uniform":
        counts = np.full(experts, m // experts)
        counts[: m % experts] += 1
        return counts
    if routing == "hot":
        counts = np.bincount(rng.integers(0, experts, m // 10), minlength=experts)
        counts[rng.integers(experts)] += m - m // 10
        return counts
    chosen = rng.choice(experts, size=max(1, experts // 8), replace=False)
    return np.bincount(rng.choice(chosen, size=m), minlength=experts)


def case(m: int, k: int, experts: int, routing: str, rng):
    """``(experts_fn, per_expert_fn, launches per_expert makes, plain_fn, bytes moved)``."""
    import cupy as cp

    import fp4q

    counts = counts_of(m, experts, routing, rng)
    offsets_host = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    x = cp.asarray((rng.standard_normal((m, k), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16))
    offsets = cp.asarray(offsets_host)
    tsf = cp.asarray((2688.0 / 4.0 * rng.uniform(0.5, 2.0, experts)).astype(np.float32))
    q, sf = fp4q.quantize_nvfp4_experts(x, offsets, tsf)
    blocks = np.concatenate([[0], np.cumsum(-(-counts // 128))])
    calls = []
    for e in np.flatnonzero(counts):
        s, t = int(offsets_host[e]), int(offsets_host[e + 1])
        calls.append((x[s:t], tsf[e:e + 1], q[s:t], sf[int(blocks[e]):int(blocks[e + 1])]))

    def per_expert():
        for xe, te, qe, sfe in calls:
            fp4q.quantize_nvfp4(xe, te, out=qe, sf_out=sfe)

    pq, psf = fp4q.quantize_nvfp4(x, tsf[:1])
    moved = 2 * m * k + q.nbytes + sf.nbytes
    return (lambda: fp4q.quantize_nvfp4_experts(x, offsets, tsf, out=q, sf_out=sf), per_expert, len(calls),
            lambda: fp4q.quantize_nvfp4(x, tsf[:1], out=pq, sf_out=psf), moved)


def run(experts_list: list[int], tokens: list[int], widths: list[int], routings: list[str], reps: int) -> list[dict]:
    results = []
    rng = np.random.default_rng(0)
    for routing in routings:
        for k in widths:
            for experts in experts_list:
                for m in tokens:
                    fn, per_expert, launches, plain, moved = case(m, k, experts, routing, rng)
                    copy = timing.copy_fn_bytes(moved, 0)
                    t = {name: timing.time_fn(f, reps=reps, entries=n).median_us
                         for name, f, n in (("experts", fn, 1), ("per_expert", per_expert, max(1, launches)),
                                            ("plain", plain, 1), ("copy", copy, 1))}
                    row = dict(routing=routing, experts=experts, tokens=m, k=k, launches=launches,
                               **{f"{name}_us": round(v, 2) for name, v in t.items()},
                               experts_over_copy=round(t["experts"] / t["copy"], 3),
                               experts_over_plain=round(t["experts"] / t["plain"], 3),
                               per_expert_over_experts=round(t["per_expert"] / t["experts"], 2))
                    print(json.dumps(row), flush=True)
                    results.append(row)
    return results


def table(results: list[dict]) -> str:
    lines = ["| routing | E | tokens x K | experts us | per expert us (launches) | plain us | copy us | "
             "experts / copy | experts / plain | per expert / experts |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['routing']} | {r['experts']} | {r['tokens']}x{r['k']} | {r['experts_us']:.1f} | "
                     f"{r['per_expert_us']:.1f} ({r['launches']}) | {r['plain_us']:.1f} | {r['copy_us']:.1f} | "
                     f"{r['experts_over_copy']:.2f} | {r['experts_over_plain']:.2f} | "
                     f"{r['per_expert_over_experts']:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experts", type=ints, default=ints("8,64,256"))
    parser.add_argument("--tokens", type=ints, default=ints("1,16,128,1024,4096,8192"))
    parser.add_argument("--k", type=ints, default=ints("2048,7168"))
    parser.add_argument("--routings", type=names, default=list(ROUTINGS),
                        help=f"comma-separated, of {', '.join(ROUTINGS)}")
    parser.add_argument("--reps", type=int, default=20)
    add_output_options(parser)
    args = parser.parse_args(argv)
    require_names(parser, "--routings", args.routings, ROUTINGS)
    results = run(args.experts, args.tokens, args.k, args.routings, args.reps)
    write_outputs(args, results, table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
