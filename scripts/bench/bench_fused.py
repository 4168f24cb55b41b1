"""The fused serving quantizers beside their unfused compositions and a copy of their bytes, in one run.

    python scripts/bench/bench_fused.py [--rows 1,16,128,1024,4096,8192] [--d 4096,7168,8192,14336]
                                        [--reps 20] [--json OUT] [--md OUT]

Per shape (rows x d, d the width of the quantized h): device time (median, L2 flushed, launches
queued behind a spin kernel: ``timing.time_fn``) of

- ``fused``: ``fp4q.torch.silu_and_mul_quantize_nvfp4(x, tensor_sf)`` on x of ``(rows, 2d)``;
- ``composition``: what a user runs without it, torch's SiLU·mul (``F.silu(gate) * up`` in bf16) and then
  ``fp4q.torch.quantize_nvfp4``;
- ``copy``: a device copy moving the fused op's own bytes (x read, q and the scales written);

and the ratios fused / copy and composition / fused. It also reports, per shape, the share of
elements of h (the intermediate the fused op quantizes, ``fp4q.reference.silu_and_mul``) identical to
torch's composition in bf16 on the device, which rounds silu(gate) to bf16 before the product.
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


def parse(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def run(rows: list[int], widths: list[int], reps: int) -> list[dict]:
    import cupy as cp
    import torch
    import torch.nn.functional as F

    import fp4q.torch as ft
    from fp4q.numerics import reference

    results = []
    rng = np.random.default_rng(0)
    for d in widths:
        for m in rows:
            bits = (rng.standard_normal((m, 2 * d), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
            x = torch.from_numpy(bits.view(np.int16)).cuda().view(torch.bfloat16)
            gate, up = x[:, :d], x[:, d:]
            tsf = 1.0
            q, sf = ft.silu_and_mul_quantize_nvfp4(x, tsf)
            h_torch = F.silu(gate) * up
            torch.cuda.synchronize()
            h_spec = reference.silu_and_mul(bits[: min(m, 256)])
            same = float(np.mean(h_torch[: min(m, 256)].view(torch.int16).cpu().numpy().view(np.uint16) == h_spec))

            def fused():
                ft.silu_and_mul_quantize_nvfp4(x, tsf, out=q, sf_out=sf)

            def composition():
                ft.quantize_nvfp4(F.silu(gate) * up, tsf, out=q, sf_out=sf)

            read, write = 4 * m * d, m * d // 2 + m * d // 16
            copy = timing.copy_fn_bytes(read, write)
            with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
                t_fused = timing.time_fn(fused, reps=reps).median_us
                t_comp = timing.time_fn(composition, reps=reps, entries=4).median_us
                t_copy = timing.time_fn(copy, reps=reps).median_us
            row = dict(rows=m, d=d, fused_us=round(t_fused, 2), composition_us=round(t_comp, 2),
                       copy_us=round(t_copy, 2), fused_over_copy=round(t_fused / t_copy, 3),
                       composition_over_fused=round(t_comp / t_fused, 3), h_identical_to_torch=round(same, 4))
            print(json.dumps(row), flush=True)
            results.append(row)
    return results


def table(results: list[dict]) -> str:
    lines = ["| rows x d | fused us | composition us | copy us | fused / copy | composition / fused | "
             "h identical to torch's bf16 composition |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['rows']}x{r['d']} | {r['fused_us']:.1f} | {r['composition_us']:.1f} | "
                     f"{r['copy_us']:.1f} | {r['fused_over_copy']:.2f} | {r['composition_over_fused']:.2f} | "
                     f"{100 * r['h_identical_to_torch']:.1f} % |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=parse, default=parse("1,16,128,1024,4096,8192"))
    parser.add_argument("--d", type=parse, default=parse("4096,7168,8192,14336"))
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--json", help="write the rows as JSON here")
    parser.add_argument("--md", help="write the table as markdown here")
    args = parser.parse_args(argv)
    results = run(args.rows, args.d, args.reps)
    text = table(results)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
