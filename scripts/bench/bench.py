#!/usr/bin/env python3
"""fp4q next to what a user would otherwise run, side by side in one run.

Per shape (device time, L2 flushed before every repetition, launches queued
behind a spin kernel so host overhead never counts):

  copy            a device-to-device copy moving the same bytes (timing.copy_fn):
                  the roofline every other row is a ratio of
  torch eager     the spec's formula written straightforwardly in PyTorch
  torch.compile   the same function under torch.compile(mode="default")
  triton          bench_triton.py: a vectorized Triton kernel, bit-exact to the
                  spec, swizzled scales; its tile per shape from the tuned table
                  (tune_triton.py), else the best of its CONFIGS
  torchao         torchao's NVFP4 quantizer, where torchao imports
  fp4q            the default (tuned) config, with PDL on and with PDL off

torch, torch.compile and triton are checked byte for byte against fp4q's
output (q and the scales, full tensors); fp4q itself against the numpy
reference (the spec) on sampled rows. Then, per shape:

  PDL chain       N dependent launches (quantize -> a consumer kernel that sums
                  the bytes of q -> quantize ...) timed as a whole, with and
                  without pdl=True on the quantize launches
  CUDA graph      K quantize calls with a device tensor_sf captured through
                  cupy stream capture and replayed; bytes checked
  formats         fp4q's MXFP4 quantizer, its NVFP4 and MXFP4 dequantizers, and
                  quantize_nvfp4(x, "dynamic") against global_scale + quantize
                  as two calls (default configs), each next to a copy of its
                  own bytes and checked against the reference on sampled rows

and once: host overhead per call (warm caches), the first call in a new
process with a warm disk cache, and a corner-case bit-exactness check of
every contender against the spec (NaN, Inf, -0, ties, subnormal scales).

Output: markdown tables (printed, and written to docs/benchmarks.md with the
command line, device, driver, versions and date), the results as JSON
(docs/data/benchmarks.json) and their figure (docs/benchmarks.png, made by
plot.py where matplotlib is installed); --md, --out and --png move them.

Optional dependencies (torch, triton, torchao) that are missing give rows
saying so; anything that fails prints its traceback, is named in the table and
makes the exit status 1. Without a GPU nothing is timed and the exit status
is 2.

    python3 scripts/bench/bench.py             # the 15 default shapes, 50 repetitions
    python3 scripts/bench/bench.py --quick     # three shapes, 20 repetitions
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
from dataclasses import asdict

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if __package__ in (None, ""):  # run as a file: the repository root makes `scripts` importable
    sys.path.append(REPO)  # after site-packages: an installed fp4q wins

from scripts.bench import bench_triton, plot  # noqa: E402
from scripts.bench.bench_report import Row, markdown  # noqa: E402

# Decode-sized rows (16, 128), prefill-sized row counts over the common hidden
# sizes (256, 512, 1024 rows), and large tensors that stream from HBM.
DEFAULT_SHAPES = ",".join(["1x4096", "16x4096", "128x7168"] + [f"{m}x{k}" for m in (256, 512) for k in (2048, 5120, 7168, 8192)]
                          + ["1024x4096", "4096x7168", "8192x8192", "16384x16384"])
QUICK_SHAPES = "16x4096,1024x4096,8192x8192"


def _versions(env) -> dict:
    v = dict(python=platform.python_version(), numpy=np.__version__, cupy=env.cp.__version__,
             fp4q=env.fp4q.__version__)
    v["torch"] = env.torch.__version__ if env.torch is not None else env.torch_status
    v["triton"] = bench_triton.triton.__version__ if bench_triton.triton is not None else bench_triton.TRITON_STATUS
    try:
        import torchao

        v["torchao"] = getattr(torchao, "__version__", "?")
    except ModuleNotFoundError:
        v["torchao"] = "not installed"
    except Exception as exc:  # noqa: BLE001
        v["torchao"] = f"import failed: {type(exc).__name__}"
    try:
        from cuda import bindings

        v["cuda-bindings"] = bindings.__version__
    except Exception:  # noqa: BLE001
        v["cuda-bindings"] = "?"
    return v


def _driver(env) -> str:
    from fp4q.cuda.driver import driver_version

    cuda = ".".join(map(str, driver_version()))
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        release = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "?"
    except (OSError, subprocess.SubprocessError):
        release = "?"
    return f"{release} (CUDA {cuda})"


def _git_commit() -> str:
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
        return (head or "unknown (not a git checkout)") + (" (modified)" if head and dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"


# ------------------------------------------------------------------- output
def parse_shapes(text: str) -> list[tuple[int, int]]:
    shapes = []
    for item in text.split(","):
        try:
            m, k = (int(v) for v in item.lower().split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"shapes are MxK, comma-separated (e.g. 16x4096,1024x7168); got {item!r}") from None
        if m <= 0 or k <= 0 or k % 16:
            raise argparse.ArgumentTypeError(f"shape {item}: M and K must be positive and K a multiple of 16")
        shapes.append((m, k))
    return shapes


SECTIONS = ("eager", "compile", "triton", "torchao", "chain", "graph", "formats", "host", "first-call", "corner")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", type=parse_shapes, default=None,
                        help=f"comma-separated MxK (default {DEFAULT_SHAPES}; with --quick {QUICK_SHAPES})")
    parser.add_argument("--quick", action="store_true", help="a short run: 3 shapes, 20 repetitions, 1 first-call run")
    parser.add_argument("--reps", type=int, default=None, help="timed repetitions (default 50, --quick 20)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--chain-n", type=int, default=20, help="quantize launches in the PDL chain")
    parser.add_argument("--graph-k", type=int, default=10, help="quantize calls captured in the CUDA graph")
    parser.add_argument("--first-call-runs", type=int, default=None,
                        help="fresh processes per shape (default 3, --quick 1)")
    parser.add_argument("--skip", default="", help=f"comma-separated sections to skip: {','.join(SECTIONS)}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=plot.DEFAULT_JSON,
                        help="JSON results (default docs/data/benchmarks.json; 'none' to skip)")
    parser.add_argument("--png", default=plot.DEFAULT_PNG,
                        help="the figure of the JSON results, where matplotlib is installed (default "
                             "docs/benchmarks.png; 'none' to skip)")
    parser.add_argument("--md", default=os.path.join(REPO, "docs", "benchmarks.md"),
                        help="markdown report (default docs/benchmarks.md; 'none' to skip)")
    args = parser.parse_args(argv)
    args.shapes = args.shapes or parse_shapes(QUICK_SHAPES if args.quick else DEFAULT_SHAPES)
    args.reps = args.reps or (20 if args.quick else 50)
    args.first_call_runs = args.first_call_runs or (1 if args.quick else 3)
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    unknown = args.skip - set(SECTIONS)
    if unknown:
        parser.error(f"--skip: unknown sections {sorted(unknown)}; known: {','.join(SECTIONS)}")
    if args.chain_n < 1 or args.graph_k < 1 or args.reps < 1 or args.warmup < 0:
        parser.error("--chain-n, --graph-k and --reps must be >= 1, --warmup >= 0")
    args.corner_tsf = [1.0, float(np.float32(0.3)), 1024.0, 2.0**-15]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    command = "python3 " + shlex.join([sys.argv[0], *(sys.argv[1:] if argv is None else argv)])
    try:
        from fp4q.cuda.driver import gpu_status
    except Exception as exc:  # noqa: BLE001
        print(f"cannot import fp4q ({type(exc).__name__}: {exc}); run from the repo or pip install -e .",
              file=sys.stderr)
        return 2
    available, reason = gpu_status()
    if not available:
        print(f"No GPU found ({reason}): nothing to benchmark. Run this on a machine with an NVIDIA GPU.",
              file=sys.stderr)
        return 2
    try:
        import cupy  # noqa: F401 - only whether it imports
    except Exception as exc:  # noqa: BLE001
        print(f"CuPy is needed (pip install cupy-cuda13x): {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    from scripts.bench import bench_contenders as contenders
    from scripts.bench import bench_measure as measure

    env = measure.Env(args)
    if env.torch is not None:
        env.torch_formula = contenders.make_torch_formula(env.torch, f"cuda:{env.device.ordinal}")
    meta = dict(command=command, date=datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
                device=env.device.name, arch=env.device.arch, sm_count=env.device.sm_count, driver=_driver(env),
                versions=_versions(env), commit=_git_commit(), reps=args.reps, warmup=args.warmup,
                shapes=[f"{m}x{k}" for m, k in args.shapes], corner_tsf=args.corner_tsf, quick=args.quick)
    print(f"{meta['device']}, driver {meta['driver']}; " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
          flush=True)
    shapes_out: list[dict] = []
    host: list[dict] = []
    first: list[dict] = []
    corner: list[dict] = []
    incomplete = None
    try:
        if "corner" not in args.skip:
            corner = contenders.bench_corner(env)
        for m, k in args.shapes:
            try:
                shapes_out.append(bench_shape(env, contenders, measure, m, k))
            except Exception as exc:  # noqa: BLE001 - e.g. out of memory: the other shapes still run
                env.fail(f"{m}x{k} (whole shape)", exc)
        if "host" not in args.skip:
            host = contenders.bench_host(env)
        if "first-call" not in args.skip:
            for s in shapes_out:
                m, k = (int(v) for v in s["shape"].split("x"))
                try:
                    first.append(measure.bench_first_call(env, m, k, s["tensor_sf"]))
                except Exception as exc:  # noqa: BLE001
                    first.append(dict(shape=s["shape"], status=env.fail(f"first call {s['shape']}", exc)))
    except BaseException as exc:  # noqa: BLE001 - write what was measured, then re-raise
        incomplete = f"stopped by {type(exc).__name__}: {exc}"
        raise
    finally:
        write_outputs(args, meta, shapes_out, host, first, corner, env, incomplete)
    if env.findings:
        print("\nFindings:\n" + "\n".join(f"  - {f}" for f in env.findings))
    if env.problems:
        print("\nPROBLEMS (exit status 1):\n" + "\n".join(f"  - {p}" for p in env.problems), file=sys.stderr)
        return 1
    return 0


def bench_shape(env, contenders, measure, m: int, k: int) -> dict:
    cp, args = env.cp, env.args
    case = measure.make_case(env, m, k)
    env.spec_ok = measure.spec_check(env, case)
    if not env.spec_ok[0]:
        env.problems.append(f"{m}x{k}: fp4q differs from the spec on sampled rows")
    rows = [contenders.run_contender(env, case, "device copy", lambda: contenders.bench_copy(env, case))]
    plan = [("fp4q default, PDL on", lambda: contenders.bench_fp4q(env, case, True), None),
            ("fp4q default, PDL off", lambda: contenders.bench_fp4q(env, case, False), None),
            ("torch eager", lambda: contenders.bench_torch_eager(env, case), "eager"),
            ("torch.compile", lambda: contenders.bench_torch_compile(env, case), "compile"),
            ("triton", lambda: contenders.bench_triton(env, case), "triton"),
            ("torchao", lambda: contenders.bench_torchao(env, case), "torchao")]
    for name, fn, section in plan:
        if section in args.skip:
            rows.append(Row(name, status="skipped (--skip)"))
            continue
        rows.append(contenders.run_contender(env, case, name, fn))
    # Table order: roofline, the alternatives, then fp4q.
    rows = [rows[0]] + rows[3:] + rows[1:3]
    result = dict(shape=f"{m}x{k}", m=m, k=k, tensor_sf=case.tsf, moved=case.moved, copy_us=case.copy_us,
                  rows=[asdict(r) for r in rows])
    for key, section, fn in (("chain", "chain", measure.bench_pdl_chain), ("graph", "graph", measure.bench_graph),
                             ("formats", "formats", measure.bench_formats)):
        if section in args.skip:
            continue
        try:
            result[key] = fn(env, case)
        except Exception as exc:  # noqa: BLE001
            result[key] = dict(status=env.fail(f"{m}x{k} {key}", exc), n=args.chain_n)
    case = None  # free this shape's buffers before the next one
    cp.get_default_memory_pool().free_all_blocks()
    if env.torch is not None:
        env.torch.cuda.empty_cache()
    return result


def write_outputs(args, meta, shapes_out, host, first, corner, env, incomplete) -> None:
    data = dict(meta=meta, shapes=shapes_out, host=host, first_call=first, corner=corner,
                findings=env.findings, problems=env.problems, incomplete=incomplete)
    text = markdown(meta, shapes_out, host, first, corner, env.problems, env.findings, incomplete)
    print("\n" + text)
    if args.out and args.out != "none":
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(data, f, indent=1, default=str)
        print(f"wrote {args.out}")
    if args.md and args.md != "none":
        os.makedirs(os.path.dirname(os.path.abspath(args.md)), exist_ok=True)
        with open(args.md, "w") as f:
            f.write(text + "\n")
        print(f"wrote {args.md}")
    if args.png and args.png != "none" and shapes_out:
        try:
            plot.draw(data, args.png)
            print(f"wrote {args.png}")
        except ImportError:
            print("matplotlib is not installed: no figure (pip install 'fp4q[plot]')")


if __name__ == "__main__":
    sys.exit(main())
