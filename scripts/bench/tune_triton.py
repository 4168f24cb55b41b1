"""The Triton contender's tile per shape, chosen by measurement on this GPU.

    python -m scripts.bench.tune_triton [--shapes 1x4096,16x4096,...] [--reps 10] [--out FILE] [--log FILE]

For every shape (default: the benchmark's) and every tile of SPACE that
fits it (rows x elements per program, warps), the kernel of
scripts/bench/bench_triton.py is run once and its outputs compared byte for
byte with fp4q's (q and the swizzled scales, padding included), then timed
as the benchmark times (scripts/bench/timing.py: device time, L2 flushed
before every repetition, median). The fastest bit-exact tile of each shape
is printed beside the copy of the same bytes and written, with every tile's
time, to --out (default scripts/bench/triton_tuned.json, the table that
bench_triton.TUNED reads, so that the benchmark then times that tile). All
tiles of a shape are compiled first, in parallel (Triton's AsyncCompileMode).
A tile that is not bit-exact is reported and never chosen; the exit status
is 1 if any was, or if a shape has no bit-exact tile.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
if __package__ in (None, ""):
    sys.path.append(str(REPO))

from scripts.bench import bench_triton  # noqa: E402

# (BLOCK_M, BLOCK_K, warps) with 8 to 32 elements per thread: from one row and 1024-2048
# columns per program (the decode shapes' few rows) to 32 rows of 128 (the tall ones); up
# to 64 bytes of x in flight per thread.
SPACE = tuple((bm, bk, w) for bm in (1, 2, 4, 8, 16, 32) for bk in (128, 256, 512, 1024, 2048)
              for w in (1, 2, 4, 8) if 8 <= bm * bk // (32 * w) <= 32)


def space_for(m: int, k: int) -> list[tuple[int, int, int]]:
    """The tiles of SPACE worth timing at (m, k): no wider than the padded row (its groups up to a
    multiple of 4), no taller than the padded rows (a multiple of 128)."""
    padded_k = -(-(k // 16) // 4) * 64
    widest = max(bk for _, bk, _ in SPACE if bk <= max(padded_k, 128))
    return [t for t in SPACE if t[1] <= widest and t[0] <= -(-m // 128) * 128]


def parse_shapes(text: str) -> list[tuple[int, int]]:
    shapes = []
    for item in text.split(","):
        m, k = item.lower().split("x")
        shapes.append((int(m), int(k)))
    return shapes


def tune_shape(torch, cp, fp4q, timing, m: int, k: int, args) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    xt = torch.randn((m, k), generator=gen, device="cuda", dtype=torch.float32).to(torch.bfloat16)
    x = cp.from_dlpack(xt.view(torch.int16)).view(cp.uint16)
    tsf = float(fp4q.global_scale(x))
    tsf_t = torch.tensor(tsf, dtype=torch.float32, device="cuda")
    q_ref, sf_ref = fp4q.quantize_nvfp4(x, tsf)
    q, sf = bench_triton.outputs(torch, xt)
    tiles = space_for(m, k)
    # Compile every tile first, in parallel: the timing loop then only launches.
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        from triton.runtime._async_compile import AsyncCompileMode

        with AsyncCompileMode(pool):
            for tile in tiles:
                kernel_args, grid = bench_triton.launch(xt, tsf_t, q, sf, tile)
                bench_triton._nvfp4_kernel.warmup(*kernel_args, grid=grid, **bench_triton.launch_options(m, k, tile))
    copy = timing.time_fn(timing.copy_fn(m, k), warmup=args.warmup, reps=args.reps)
    results = []
    for tile in tiles:
        q.fill_(0xAB)
        sf.fill_(0xAB)
        bench_triton.quantize(xt, tsf_t, q, sf, tile)
        exact = bool(cp.array_equal(cp.from_dlpack(q), q_ref)
                     and cp.array_equal(cp.from_dlpack(sf), sf_ref.reshape(-1)))
        t = timing.time_fn(lambda tile=tile: bench_triton.quantize(xt, tsf_t, q, sf, tile),
                           warmup=args.warmup, reps=args.reps)
        results.append(dict(block_m=tile[0], block_k=tile[1], warps=tile[2], us=round(t.median_us, 3),
                            exact=exact))
    exact = [r for r in results if r["exact"]]
    best = min(exact, key=lambda r: r["us"]) if exact else None
    return dict(m=m, k=k, copy_us=round(copy.median_us, 3), best=best, tiles=results)


def write_table(path: pathlib.Path, torch, shapes: list[dict]) -> None:
    """The tuned table: each shape's fastest bit-exact tile ("best", what bench_triton.TUNED reads) and
    every tile's time."""
    table = dict(device=torch.cuda.get_device_name(), triton=bench_triton.triton.__version__,
                 date=datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
                 best=[dict(m=s["m"], k=s["k"], **s["best"], copy_us=s["copy_us"]) for s in shapes if s["best"]],
                 shapes=shapes)
    path.write_text(json.dumps(table, indent=1) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    from scripts.bench.bench import DEFAULT_SHAPES

    parser.add_argument("--shapes", type=parse_shapes, default=parse_shapes(DEFAULT_SHAPES))
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=pathlib.Path, default=bench_triton.TUNED_FILE,
                        help="the tuned table (default %(default)s)")
    args = parser.parse_args(argv)
    if bench_triton.triton is None:
        print(f"triton: {bench_triton.TRITON_STATUS}", file=sys.stderr)
        return 2
    import cupy as cp
    import torch

    import fp4q
    from scripts.bench import bench_measure, timing

    bench_measure.align_streams(cp, torch)
    shapes, bad = [], []
    for m, k in args.shapes:
        shape = tune_shape(torch, cp, fp4q, timing, m, k, args)
        shapes.append(shape)
        write_table(args.out, torch, shapes)  # after every shape: a run cut short keeps what it measured
        wrong = [r for r in shape["tiles"] if not r["exact"]]
        bad += [f"{m}x{k} tile {r['block_m']}x{r['block_k']}/{r['warps']}w is not bit-exact" for r in wrong]
        best = shape["best"]
        if best is None:
            bad.append(f"{m}x{k}: no bit-exact tile")
            continue
        ranked = sorted((r for r in shape["tiles"] if r["exact"]), key=lambda r: r["us"])
        runners = ", ".join(f"{r['block_m']}x{r['block_k']}/{r['warps']}w {r['us']:.2f}" for r in ranked[1:4])
        print(f"{m}x{k}: best {best['block_m']}x{best['block_k']}/{best['warps']}w {best['us']:.2f} us, "
              f"copy {shape['copy_us']:.2f} us, {best['us'] / shape['copy_us']:.2f}x of the copy "
              f"({len(shape['tiles'])} tiles; next: {runners})", flush=True)
    print(f"wrote {args.out}")
    for line in bad:
        print(f"NOT BIT-EXACT: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
