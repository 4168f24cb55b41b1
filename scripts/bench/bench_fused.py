"""The fused serving quantizers beside their unfused compositions and a copy of their bytes, in one run.

    python scripts/bench/bench_fused.py [--ops silu_mul,rms_norm,add_rms_norm] [--rows 1,16,128,1024,4096,8192]
                                        [--d 4096,7168,8192,14336] [--reps 20] [--json OUT] [--md OUT]

Per op and shape (rows x d, d the width of the quantized h): device time (median, L2 flushed, launches
queued behind a spin kernel: ``timing.time_fn``) of

- ``fused``: the fused op through ``fp4q.torch`` (``silu_and_mul_quantize_nvfp4(x, tensor_sf)`` on x of
  ``(rows, 2d)``; ``rms_norm_quantize_nvfp4(x, w, tensor_sf)``, with ``residual=`` for add+RMSNorm);
- ``composition``: what a user runs without it, torch's op in bf16 (``F.silu(gate) * up``;
  ``F.rms_norm``; ``residual += x`` then ``F.rms_norm(residual)``) and then ``fp4q.torch.quantize_nvfp4``;
- ``copy``: a device copy moving the fused op's own bytes (what it reads and writes);

and the ratios fused / copy and composition / fused. It also reports, per shape, the share of
elements of h (the intermediate the fused op quantizes, by ``fp4q.reference``) identical to torch's
composition in bf16 on the device, on the first 256 rows.
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


OPS = ("silu_mul", "rms_norm", "add_rms_norm")


def bf16_rows(rng, m: int, width: int) -> np.ndarray:
    """Normal values as bf16 bits (truncated), ``(m, width)``."""
    return (rng.standard_normal((m, width), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def case(op: str, m: int, d: int, rng):
    """``(fused, composition, bytes moved, share of h identical to torch's)`` of ``op`` at m x d."""
    import torch
    import torch.nn.functional as F

    import fp4q.torch as ft
    from fp4q.numerics import reference

    def device(bits):
        return torch.from_numpy(bits.view(np.int16)).cuda().view(torch.bfloat16)

    def bits_of(t):
        return t.view(torch.int16).cpu().numpy().view(np.uint16)

    tsf, head, codes = 1.0, min(m, 256), m * d // 2 + m * d // 16
    if op == "silu_mul":
        x_bits = bf16_rows(rng, m, 2 * d)
        x = device(x_bits)
        gate, up = x[:, :d], x[:, d:]
        q, sf = ft.silu_and_mul_quantize_nvfp4(x, tsf)
        same = np.mean(bits_of((F.silu(gate) * up)[:head]) == reference.silu_and_mul(x_bits[:head]))
        return (lambda: ft.silu_and_mul_quantize_nvfp4(x, tsf, out=q, sf_out=sf),
                lambda: ft.quantize_nvfp4(F.silu(gate) * up, tsf, out=q, sf_out=sf), 4 * m * d + codes, same)
    x_bits = bf16_rows(rng, m, d)
    w_bits = (0x3F80 + rng.integers(0, 64, d)).astype(np.uint16)  # bf16 weights in [1, 1.5)
    x, w, eps = device(x_bits), device(w_bits), 1e-6
    if op == "rms_norm":
        q, sf = ft.rms_norm_quantize_nvfp4(x, w, tsf, eps=eps)
        want = reference.rms_norm(x_bits[:head], w_bits, eps)
        same = np.mean(bits_of(F.rms_norm(x[:head], (d,), w, eps)) == want)
        return (lambda: ft.rms_norm_quantize_nvfp4(x, w, tsf, eps=eps, out=q, sf_out=sf),
                lambda: ft.quantize_nvfp4(F.rms_norm(x, (d,), w, eps), tsf, out=q, sf_out=sf), 2 * m * d + codes,
                same)
    res_bits = bf16_rows(rng, m, d)
    res = device(res_bits)
    q, sf = ft.rms_norm_quantize_nvfp4(x, w, tsf, eps=eps, residual=res.clone())
    want = reference.rms_norm(x_bits[:head], w_bits, eps, residual=res_bits[:head].copy())
    same = np.mean(bits_of(F.rms_norm(x[:head] + res[:head], (d,), w, eps)) == want)

    def composition():
        res.add_(x)
        ft.quantize_nvfp4(F.rms_norm(res, (d,), w, eps), tsf, out=q, sf_out=sf)

    return (lambda: ft.rms_norm_quantize_nvfp4(x, w, tsf, eps=eps, residual=res, out=q, sf_out=sf), composition,
            6 * m * d + codes, same)


def run(ops: list[str], rows: list[int], widths: list[int], reps: int) -> list[dict]:
    import cupy as cp
    import torch

    results = []
    rng = np.random.default_rng(0)
    for op in ops:
        for d in widths:
            for m in rows:
                fused, composition, moved, same = case(op, m, d, rng)
                torch.cuda.synchronize()
                copy = timing.copy_fn_bytes(moved, 0)
                with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
                    t_fused = timing.time_fn(fused, reps=reps).median_us
                    t_comp = timing.time_fn(composition, reps=reps, entries=4).median_us
                    t_copy = timing.time_fn(copy, reps=reps).median_us
                row = dict(op=op, rows=m, d=d, fused_us=round(t_fused, 2), composition_us=round(t_comp, 2),
                           copy_us=round(t_copy, 2), fused_over_copy=round(t_fused / t_copy, 3),
                           composition_over_fused=round(t_comp / t_fused, 3),
                           h_identical_to_torch=round(float(same), 4))
                print(json.dumps(row), flush=True)
                results.append(row)
    return results


def table(results: list[dict]) -> str:
    lines = ["| op | rows x d | fused us | composition us | copy us | fused / copy | composition / fused | "
             "h identical to torch's bf16 composition |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['op']} | {r['rows']}x{r['d']} | {r['fused_us']:.1f} | {r['composition_us']:.1f} | "
                     f"{r['copy_us']:.1f} | {r['fused_over_copy']:.2f} | {r['composition_over_fused']:.2f} | "
                     f"{100 * r['h_identical_to_torch']:.1f} % |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=names, default=list(OPS), help=f"comma-separated, of {', '.join(OPS)}")
    parser.add_argument("--rows", type=ints, default=ints("1,16,128,1024,4096,8192"))
    parser.add_argument("--d", type=ints, default=ints("4096,7168,8192,14336"))
    parser.add_argument("--reps", type=int, default=20)
    add_output_options(parser)
    args = parser.parse_args(argv)
    require_names(parser, "--ops", args.ops, OPS)
    results = run(args.ops, args.rows, args.d, args.reps)
    write_outputs(args, results, table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
