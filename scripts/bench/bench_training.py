"""The one-pass training quantizer beside fp4q's existing calls composed and a copy of its bytes, in one run.

    python scripts/bench/bench_training.py [--shapes 4096x4096,...] [--quick] [--blocks 1d,2d,1d_sr,...]
                                           [--min-ctas 0,3] [--tensor-sf 1.0|dynamic] [--reps 20]
                                           [--json OUT] [--md OUT]

Per shape (M x K: weights of real layers, 4096x4096 to 16384x53248, and activations of 4096 to 32768
tokens) and block shape: device time (median, L2 flushed, launches queued behind a spin kernel:
``timing.time_fn``) of

- ``one_pass``: ``fp4q.quantize_nvfp4_training(x, tensor_sf)`` (``--tensor-sf``, 1.0 by default;
  ``dynamic`` adds the amax and scale passes, after the Hadamard transform the post-RHT amax pass:
  Transformer Engine's forward input with ``_rht``) (both directions; ``block_2d=True`` for
  ``2d``; ``stochastic=True`` for ``_sr``, the target: at most 1.05 of round-to-nearest;
  ``hadamard=`` Transformer Engine's sign mask for ``_rht``, at most 1.15 of the same blocks without;
  ``four_over_six=True`` for ``_46``, at most 1.3 of the same blocks without) into reused outputs, once
  per ``--min-ctas`` value (``TrainingConfig.min_ctas_per_sm``, 0 the default rule), a row each;
- ``composition``: what a user runs without it, ``fp4q.quantize_nvfp4(x)``, then a CuPy transpose of x
  into a reused buffer and ``fp4q.quantize_nvfp4`` of it (1D blocks rounded to nearest only: fp4q has no
  other call that writes 16x16 block scales or rounds stochastically);
- ``copy``: a device copy moving the one-pass op's own bytes (x read once, both directions' codes and
  scales written);

and the ratios one_pass / copy (the target: at most 1.20 at 4096x4096 and above) and
composition / one_pass.
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

# Block shapes, rounded to nearest or stochastically (_sr), with the columnwise Hadamard transform
# (_rht: 1D blocks only) or 4/6 (_46).
BLOCKS = ("1d", "2d", "1d_sr", "2d_sr", "1d_rht", "1d_46", "2d_46")
# Weights (out x in features of Llama-3 8B/70B and larger MLPs) and activations (tokens x hidden).
SHAPES = "4096x4096,8192x8192,16384x16384,16384x53248,53248x16384,4096x8192,16384x8192,32768x8192"
QUICK = "4096x4096,16384x16384,32768x8192"


def shapes(text: str) -> list[tuple[int, int]]:
    """A comma-separated list of ``MxK``."""
    return [(int(m), int(k)) for m, k in (s.split("x") for s in text.split(",") if s)]


def tensor_scale(text: str) -> float | str:
    """``dynamic`` or a float."""
    return text if text == "dynamic" else float(text)


def written(m: int, k: int) -> int:
    """The bytes one direction writes: codes and e4m3 scales."""
    return m * k // 2 + m * k // 16


def run(cases: list[tuple[int, int]], blocks: list[str], min_ctas: list[int], reps: int,
        tensor_sf: float | str = 1.0) -> list[dict]:
    import cupy as cp

    import fp4q
    from fp4q.numerics.hadamard import TE_WGRAD_SIGN_MASK

    results = []
    rng = np.random.default_rng(0)
    for m, k in cases:
        bits = (rng.standard_normal((m, k), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
        x = cp.asarray(bits)
        copy = timing.copy_fn_bytes(2 * m * k, 2 * written(m, k))
        t_copy = timing.time_fn(copy, reps=reps).median_us
        for block, ctas in ((b, c) for b in blocks for c in min_ctas):
            options = dict(block_2d=block.startswith("2d"), stochastic=block.endswith("_sr"),
                           hadamard=TE_WGRAD_SIGN_MASK if block.endswith("_rht") else None,
                           four_over_six=block.endswith("_46"))
            config = fp4q.TrainingConfig(min_ctas_per_sm=ctas)
            got = fp4q.quantize_nvfp4_training(x, tensor_sf, config=config, **options)
            buffers = dict(out=got.q, sf_out=got.sf, out_t=got.q_t, sf_t_out=got.sf_t)

            def one_pass():
                fp4q.quantize_nvfp4_training(x, tensor_sf, config=config, seed=1, offset=2, **options, **buffers)

            t_one = timing.time_fn(one_pass, reps=reps).median_us
            t_comp = None
            if block == "1d":
                xt = cp.empty((k, m), cp.uint16)

                def composition():
                    fp4q.quantize_nvfp4(x, tensor_sf, out=got.q, sf_out=got.sf)
                    cp.copyto(xt, x.T)
                    fp4q.quantize_nvfp4(xt, tensor_sf, out=got.q_t, sf_out=got.sf_t)

                t_comp = timing.time_fn(composition, reps=reps, entries=3).median_us
                del xt
            row = dict(m=m, k=k, blocks=block, min_ctas=ctas, tensor_sf=tensor_sf, one_pass_us=round(t_one, 2),
                       composition_us=None if t_comp is None else round(t_comp, 2), copy_us=round(t_copy, 2),
                       one_pass_over_copy=round(t_one / t_copy, 3),
                       composition_over_one_pass=None if t_comp is None else round(t_comp / t_one, 3))
            print(json.dumps(row), flush=True)
            results.append(row)
            del got, buffers
        del x
        cp.get_default_memory_pool().free_all_blocks()
    return results


def table(results: list[dict]) -> str:
    lines = ["| M x K | blocks | tensor_sf | min CTAs | one pass us | composition us | copy us | one pass / copy | "
             "composition / one pass |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        comp = "n/a" if r["composition_us"] is None else f"{r['composition_us']:.1f}"
        ratio = "n/a" if r["composition_over_one_pass"] is None else f"{r['composition_over_one_pass']:.2f}"
        lines.append(f"| {r['m']}x{r['k']} | {r['blocks']} | {r['tensor_sf']} | {r['min_ctas']} | "
                     f"{r['one_pass_us']:.1f} | {comp} | {r['copy_us']:.1f} | {r['one_pass_over_copy']:.2f} | {ratio} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", type=shapes, default=None, help=f"comma-separated MxK (default: {SHAPES})")
    parser.add_argument("--quick", action="store_true", help=f"the shapes {QUICK}")
    parser.add_argument("--blocks", type=names, default=list(BLOCKS), help=f"comma-separated, of {', '.join(BLOCKS)}")
    parser.add_argument("--min-ctas", type=ints, default=[0],
                        help="comma-separated TrainingConfig.min_ctas_per_sm values (0: the default rule)")
    parser.add_argument("--tensor-sf", type=tensor_scale, default=1.0, help="a float or 'dynamic' (default 1.0)")
    parser.add_argument("--reps", type=int, default=20)
    add_output_options(parser)
    args = parser.parse_args(argv)
    require_names(parser, "--blocks", args.blocks, BLOCKS)
    if args.shapes is not None and args.quick:
        parser.error("--shapes and --quick choose the shapes: give one of them")
    cases = args.shapes or shapes(QUICK if args.quick else SHAPES)
    results = run(cases, args.blocks, args.min_ctas, args.reps, args.tensor_sf)
    write_outputs(args, results, table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
