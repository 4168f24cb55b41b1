"""The one-pass training quantizer beside fp4q's existing calls composed, a copy of its bytes and the Triton,
torch eager and torchao contenders, in one run.

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
- the contenders, for ``1d`` with a float ``--tensor-sf`` only (others: n/a), measured once per shape:
  ``triton``, the one-pass Triton kernel of ``triton_training`` (every tile of its CONFIGS checked and
  timed, the fastest bit-exact one timed again for the row); ``torch_eager``, the spec's formula in
  PyTorch eager (``bench_contenders.make_torch_formula``), and ``torchao``, torchao's eager
  ``NVFP4Tensor.to_nvfp4`` (what a Hopper user runs today, its per-tensor scale the reciprocal of
  tensor_sf), each on x and on ``x.t().contiguous()``. Before timing, each one's outputs are compared with
  the one-pass op's, byte for byte (torch and torchao write linear scales, compared with fp4q's
  unswizzled; notes under the table name the Triton tile and what differs); a missing or failing
  contender is a status in its cell, not a crash;

and the ratios one_pass / copy (the target: at most 1.20 at 4096x4096 and above), composition / one_pass
and each contender / one_pass. The exit status is 1 where the Triton kernel, meant to be bit-exact, is
not.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

if __package__ in (None, ""):  # run as a file: the repository root makes `scripts` importable
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from scripts.bench import timing, triton_training  # noqa: E402
from scripts.bench.bench_contenders import (EAGER_LAUNCHES, make_torch_formula, torchao_nvfp4,  # noqa: E402
                                           torchao_scale)
from scripts.bench.bench_measure import align_streams, import_torch  # noqa: E402
from scripts.bench.outputs import add_output_options, ints, names, require_names, write_outputs  # noqa: E402

# Block shapes, rounded to nearest or stochastically (_sr), with the columnwise Hadamard transform
# (_rht: 1D blocks only) or 4/6 (_46).
BLOCKS = ("1d", "2d", "1d_sr", "2d_sr", "1d_rht", "1d_46", "2d_46")
# Weights (out x in features of Llama-3 8B/70B and larger MLPs) and activations (tokens x hidden).
SHAPES = "4096x4096,8192x8192,16384x16384,16384x53248,53248x16384,4096x8192,16384x8192,32768x8192"
QUICK = "4096x4096,16384x16384,32768x8192"
# The contenders' row fields and table headings.
CONTENDERS = {"triton": "triton", "torch_eager": "torch eager", "torchao": "torchao"}


def shapes(text: str) -> list[tuple[int, int]]:
    """A comma-separated list of ``MxK``."""
    return [(int(m), int(k)) for m, k in (s.split("x") for s in text.split(",") if s)]


def tensor_scale(text: str) -> float | str:
    """``dynamic`` or a float."""
    return text if text == "dynamic" else float(text)


def written(m: int, k: int) -> int:
    """The bytes one direction writes: codes and e4m3 scales."""
    return m * k // 2 + m * k // 16


def status(exc: BaseException) -> str:
    """A failure as a status: the exception's type and first line."""
    lines = str(exc).strip().splitlines()
    return f"failed: {type(exc).__name__}: {lines[0][:120] if lines else ''}"


def differing(cp, pairs) -> tuple[str, str]:
    """("yes"/"no", what differs) of (name, contender's output, fp4q's) pairs, byte for byte; the
    contender's a uint8 torch tensor or a CuPy array, of fp4q's number of bytes in any shape."""
    bad = []
    for name, got, want in pairs:
        got = (got if isinstance(got, cp.ndarray) else cp.from_dlpack(got)).reshape(-1)
        want = want.reshape(-1)
        if got.size != want.size:
            bad.append(f"{name}: {got.size} bytes where fp4q has {want.size}")
        elif (n := int(cp.count_nonzero(got != want))):
            bad.append(f"{name}: {n} of {want.size} bytes differ from fp4q")
    return ("no" if bad else "yes"), "; ".join(bad)


FIELDS = ("q", "sf", "q_t", "sf_t")


def time_triton(torch, cp, xt, tsf_t, want, reps: int) -> dict:
    """triton_training's kernel: every tile checked against fp4q's swizzled outputs ``want`` and timed;
    the fastest bit-exact one (the fastest of all where none is) timed again for the row, as the least
    of several noisy medians is biased low."""
    if triton_training.triton is None:
        return dict(status=triton_training.TRITON_STATUS)
    outs = triton_training.outputs(torch, xt)
    tiles: list[dict] = []
    for config in triton_training.CONFIGS:
        label = "{}x{}/vec{}/{}w".format(*config)
        try:
            for out in outs:
                out.fill_(0xAB)
            triton_training.quantize_training(xt, tsf_t, *outs, config)
            exact, detail = differing(cp, zip(FIELDS, outs, want))
            median = timing.time_fn(lambda c=config: triton_training.quantize_training(xt, tsf_t, *outs, c),
                                    reps=reps).median_us
        except Exception as exc:  # noqa: BLE001 - one tile's failure is its entry's status
            tiles.append(dict(tile=label, status=status(exc)))
            continue
        tiles.append(dict(tile=label, config=config, us=round(median, 2), exact=exact, detail=detail))
    timed = [t for t in tiles if "us" in t]
    if not timed:
        return dict(status="failed: every tile", tiles=tiles)
    exact_tiles = [t for t in timed if t["exact"] == "yes"]
    best = min(exact_tiles or timed, key=lambda t: t["us"])
    chosen = timing.time_fn(lambda: triton_training.quantize_training(xt, tsf_t, *outs, best["config"]), reps=reps)
    wrong = [f"{t['tile']}: {t['detail']}" for t in timed if t["exact"] != "yes"]
    note = f"tile {best['tile']}, the fastest {'bit-exact ' if exact_tiles else '(none bit-exact) '}at " \
           f"{best['us']:.2f} us, timed again"
    return dict(us=round(chosen.median_us, 2), exact="no" if wrong else "yes",
                note="; ".join([note] + wrong), tiles=[{k: v for k, v in t.items() if k != "config"} for t in tiles])


def time_torch_eager(torch, cp, xt, tsf_t, want_linear, reps: int) -> dict:
    """The spec's formula in PyTorch eager on x and on x.t().contiguous(), against fp4q's outputs
    (linear scales)."""
    formula = make_torch_formula(torch, xt.device)

    def both():
        return formula(xt, tsf_t) + formula(xt.t().contiguous(), tsf_t)

    exact, detail = differing(cp, zip(FIELDS, both(), want_linear))
    t = timing.time_fn(both, reps=reps, entries=2 * EAGER_LAUNCHES + 1)
    return dict(us=round(t.median_us, 2), exact=exact, note=detail or "linear scales; allocates its outputs")


def time_torchao(torch, cp, xt, tsf_t, want_linear, reps: int) -> dict:
    """torchao's eager NVFP4Tensor.to_nvfp4 on x and on x.t().contiguous(); its own formula (scales
    clamped to e4m3's smallest normal, for one), so a difference from fp4q is reported, not a failure."""
    NVFP4Tensor, version = torchao_nvfp4()
    if NVFP4Tensor is None:
        return dict(status=version)
    scale = torchao_scale(tsf_t)

    def both():
        return (NVFP4Tensor.to_nvfp4(xt, per_tensor_scale=scale),
                NVFP4Tensor.to_nvfp4(xt.t().contiguous(), per_tensor_scale=scale))

    outs = [t.contiguous().view(torch.uint8) for a in both() for t in (a.qdata, a.scale)]
    exact, detail = differing(cp, zip(FIELDS, outs, want_linear))
    t = timing.time_fn(both, reps=reps, entries=2 * EAGER_LAUNCHES + 1)
    return dict(us=round(t.median_us, 2), exact=exact, note=f"torchao {version}; linear scales" +
                (f"; {detail}" if detail else ""))


def contenders(x, tensor_sf: float, got, reps: int) -> dict[str, dict]:
    """{name: dict(us, exact, note) or dict(status)} of CONTENDERS on bf16 bits x (CuPy, M x K)
    against the one-pass op's outputs ``got`` (1D blocks, rounded to nearest, tensor_sf)."""
    import cupy as cp

    import fp4q

    torch, torch_status = import_torch()
    if torch is None:
        return {name: dict(status=f"needs torch: {torch_status}") for name in CONTENDERS}
    align_streams(cp, torch)
    m, k = x.shape
    xt = torch.from_dlpack(x.view(cp.int16)).view(torch.bfloat16)
    tsf_t = torch.tensor(tensor_sf, dtype=torch.float32, device=xt.device)
    swizzled = [got.q, got.sf, got.q_t, got.sf_t]
    linear = [got.q, fp4q.unswizzle_sf(got.sf, m, k), got.q_t, fp4q.unswizzle_sf(got.sf_t, k, m)]
    measures = {"triton": lambda: time_triton(torch, cp, xt, tsf_t, swizzled, reps),
                "torch_eager": lambda: time_torch_eager(torch, cp, xt, tsf_t, linear, reps),
                "torchao": lambda: time_torchao(torch, cp, xt, tsf_t, linear, reps)}
    results = {}
    for name, measure in measures.items():
        try:
            results[name] = measure()
        except Exception as exc:  # noqa: BLE001 - one contender's failure must not lose the run
            results[name] = dict(status=status(exc))
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # the eager contenders' temporaries, before the next one's
        print(json.dumps(dict(m=m, k=k, contender=name, **{f: v for f, v in results[name].items() if f != "tiles"})),
              flush=True)
    return results


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
        others = None  # the contenders' results at this shape, measured with the first 1d row
        for block, ctas in ((b, c) for b in blocks for c in min_ctas):
            options = dict(block_2d=block.startswith("2d"), stochastic=block.endswith("_sr"),
                           hadamard=TE_WGRAD_SIGN_MASK if block.endswith("_rht") else None,
                           four_over_six=block.endswith("_46"))
            config = fp4q.TrainingConfig(min_ctas_per_sm=ctas)
            got = fp4q.quantize_nvfp4_training(x, tensor_sf, config=config, **options)
            buffers = dict(out=got.q, sf_out=got.sf, out_t=got.q_t, sf_t_out=got.sf_t)
            if block == "1d" and tensor_sf != "dynamic" and others is None:
                others = contenders(x, float(tensor_sf), got, reps)

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
            for name in CONTENDERS:
                result = others[name] if block == "1d" and others is not None else None
                row[name] = result
                row[f"{name}_over_one_pass"] = round(result["us"] / t_one, 3) if result and "us" in result else None
            print(json.dumps({f: v for f, v in row.items() if f not in CONTENDERS}), flush=True)
            results.append(row)
            del got, buffers
        del x
        cp.get_default_memory_pool().free_all_blocks()
    return results


def number(value, digits: int) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def contender_cell(result) -> str:
    """A contender's time, "n/a" where it does not apply, or why it has none (its first line, without the
    markdown column bar)."""
    if result is None:
        return "n/a"
    if "status" in result:
        return (result["status"].splitlines() or [""])[0].replace("|", "/")
    return f"{result['us']:.1f}" + ("" if result["exact"] == "yes" else " (not bit-exact)")


def table(results: list[dict]) -> str:
    headings = list(CONTENDERS.values())
    lines = ["| M x K | blocks | tensor_sf | min CTAs | one pass us | composition us | "
             + " | ".join(f"{h} us" for h in headings) + " | copy us | one pass / copy | composition / one pass | "
             + " | ".join(f"{h} / one pass" for h in headings) + " |",
             "|---|---|---|---:|---:|---:|" + "---:|" * (2 * len(headings) + 3)]
    notes = {}
    for r in results:
        cells = [f"{r['m']}x{r['k']}", r["blocks"], str(r["tensor_sf"]), str(r["min_ctas"]), f"{r['one_pass_us']:.1f}",
                 number(r["composition_us"], 1), *(contender_cell(r.get(c)) for c in CONTENDERS),
                 f"{r['copy_us']:.1f}", f"{r['one_pass_over_copy']:.2f}", number(r["composition_over_one_pass"], 2),
                 *(number(r.get(f"{c}_over_one_pass"), 2) for c in CONTENDERS)]
        lines.append("| " + " | ".join(cells) + " |")
        for c, name in CONTENDERS.items():
            if r.get(c) and r[c].get("note"):
                notes[f"{r['m']}x{r['k']} {name}"] = r[c]["note"]
    if notes:
        lines += [""] + [f"- {what}: {note}" for what, note in notes.items()]
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
    inexact = sorted({f"{r['m']}x{r['k']}" for r in results if (r.get("triton") or {}).get("exact") == "no"})
    if inexact:
        print(f"FAILED: the Triton kernel is not bit-exact at {', '.join(inexact)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
