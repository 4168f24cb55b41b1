"""Parameter sweep of the fp4q kernels: NVFP4 quantization (the default),
MXFP4 quantization (``--op mxfp4``), or NVFP4 / MXFP4 dequantization to
bf16 (``--op dequantize`` / ``dequantize_mx``).

With a GPU: enumerates valid configs over a shape list, checks each result
bit-exact against the numpy reference on a sample of rows, times it with
CUDA events (warm-up, median of many, L2 flushed, launches queued behind a
spin kernel so host overhead never counts) next to a device-to-device copy
of the same bytes, and writes CSV + JSON (+ a PNG plot when matplotlib is
installed). ``--write-tuned`` merges the best config per shape class (the
lowest geometric mean of time / copy over the class's swept shapes) into
the package's tuned table, keeping the classes it did not sweep.

Without a GPU: compiles every shipped variant for sm_90a and sm_100f with
NVRTC and prints registers, shared memory, spills, cold compile time and
cache-hit time, and says plainly that no GPU was found.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import itertools
import json
import math
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

if __package__ in (None, ""):  # run as a file: the repository root makes `scripts` importable
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from fp4q.cuda.driver import gpu_status  # noqa: E402
from fp4q.jit.cache import BinaryCache  # noqa: E402
from fp4q.jit.render import render  # noqa: E402
from fp4q.jit.compiler import compile_source  # noqa: E402
from fp4q.kernels.call import CallFields  # noqa: E402
from fp4q.kernels.rules import ConfigError  # noqa: E402
from fp4q.kernels.quantize import QuantizeConfig, SimtConfig  # noqa: E402
from fp4q.kernels.spec import Swizzle  # noqa: E402
from fp4q.kernels.variants import SHIPPED, SIMT, all_variants  # noqa: E402

DEFAULT_M = (1, 16, 128, 1024, 4096, 8192, 16384)
DEFAULT_K = (2048, 4096, 7168, 8192, 16384)
QUICK_M = (16, 1024, 8192)
QUICK_K = (4096, 7168)


def _progress(iterable, total: int, desc: str):
    try:
        from tqdm import tqdm

        return tqdm(iterable, total=total, desc=desc, file=sys.stderr)
    except ImportError:
        return iterable


def _outputs_for(tile_k: int) -> dict:
    row = tile_k // 2
    if row in (32, 64, 128):
        return dict(output_box_k=row, output_swizzle=Swizzle(row))
    if row % 128 == 0:
        return dict(output_box_k=128, output_swizzle=Swizzle.B128)
    return dict(output_box_k=row if row <= 256 else 128, output_swizzle=Swizzle.NONE)


def _inputs_for(tile_k: int, swizzle: Swizzle) -> dict:
    if swizzle == Swizzle.NONE:
        return dict(input_box_k=min(tile_k, 256), input_swizzle=swizzle)
    return dict(input_box_k=swizzle.value // 2, input_swizzle=swizzle)


def config_space(name: str) -> dict[str, QuantizeConfig | SimtConfig]:
    """Named valid configs of a search space ('shipped', 'small' or 'full'): TMA
    configs and the vector SIMT kernel (the small-input candidate)."""
    vector = {n: c for n, c in SIMT.items() if c.vector and c.fmt == "nvfp4"}
    if name == "shipped":
        return {**SHIPPED, **vector}
    if name == "small":
        axes = dict(tile_m=(128,), tile_k=(64, 128, 192, 256), swizzle=(Swizzle.B128, Swizzle.B64),
                    stages=(2, 3, 4, 6), wg=(1, 2, 3), ctas=(1, 2, 3, 4), persistent=(True,), out_buffers=(2, 3))
    elif name == "full":
        axes = dict(tile_m=(128, 256), tile_k=(64, 128, 192, 256), swizzle=tuple(Swizzle), stages=(2, 3, 4, 6),
                    wg=(1, 2, 3), ctas=(1, 2, 3, 4), persistent=(True, False), out_buffers=(2, 3))
    else:
        raise SystemExit(f"--space must be shipped, small or full, got {name!r}")
    out = {}
    for tm, tk, sw, st, wg, ctas, pers, ob in itertools.product(*axes.values()):
        try:
            cfg = QuantizeConfig(tile_m=tm, tile_k=tk, num_stages=st, consumer_warpgroups=wg, min_ctas_per_sm=ctas,
                                 persistent=pers, out_buffers=ob, **_inputs_for(tk, sw), **_outputs_for(tk))
        except ConfigError:
            continue
        name_ = (f"m{tm}_k{tk}_in{int(sw)}_s{st}_wg{wg}_c{ctas}_ob{ob}" + ("" if pers else "_tpc"))
        out[name_] = cfg
    for threads in (64, 128, 256, 512):
        out[f"vec_{threads}"] = SimtConfig(threads=threads, vector=True)
    return out


def _compile_one(args):
    cfg, cache_dir = args
    start = time.perf_counter()
    kernel = compile_source(render(cfg.spec), BinaryCache(cache_dir))
    return time.perf_counter() - start, kernel.resources, kernel.cache_hit


def compile_table(arches, layouts_modes: bool, out_dir: str | None) -> list[dict]:
    """Cold-compile every shipped variant per arch, then load it back from the disk cache.

    Without ``layouts_modes`` only the first variant of each shipped config
    (swizzled scales, tensor_sf by value) is compiled.
    """
    rows = []
    with tempfile.TemporaryDirectory() as cold_dir:
        for arch in arches:
            variants = all_variants(arch)
            if not layouts_modes:
                firsts: dict[str, tuple] = {}
                for name, cfg in variants.items():
                    firsts.setdefault(name.split("/")[0], (name, cfg))
                variants = dict(firsts.values())
            for name, cfg in variants.items():
                src = render(cfg.spec)
                start = time.perf_counter()
                cold = compile_source(src, BinaryCache(cold_dir))
                cold_ms = (time.perf_counter() - start) * 1e3
                fresh = BinaryCache(cold_dir)  # a new instance: the hit comes from disk
                start = time.perf_counter()
                hit = compile_source(src, fresh)
                hit_ms = (time.perf_counter() - start) * 1e3
                assert hit.cache_hit and hit.cubin == cold.cubin
                res = cold.resources
                smem = getattr(cfg, "smem", None)
                rows.append(dict(variant=name, arch=arch, registers=res.registers,
                                 smem_bytes=smem.total if smem is not None else 0,
                                 spill_bytes=res.spill_bytes, compile_ms=round(cold_ms, 1),
                                 cache_hit_ms=round(hit_ms, 2)))
    header = f"{'variant':<52} {'arch':<8} {'regs':>5} {'smem':>7} {'spill':>5} {'compile ms':>10} {'hit ms':>7}"
    print(header)
    for r in rows:
        print(f"{r['variant']:<52} {r['arch']:<8} {r['registers']!s:>5} {r['smem_bytes'] or 0:>7} "
              f"{r['spill_bytes']!s:>5} {r['compile_ms']:>10.1f} {r['cache_hit_ms']:>7.2f}")
    if out_dir:
        _write(out_dir, "compile", rows)
    return rows


def _write(out_dir: str, stem: str, rows: list[dict]) -> None:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{stem}.json"), "w") as f:
        json.dump(rows, f, indent=1, default=str)
    if rows:
        with open(os.path.join(out_dir, f"{stem}.csv"), "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


# ------------------------------------------------------------------ GPU sweep
def gpu_sweep(args) -> list[dict]:
    import cupy as cp
    import numpy as np

    from fp4q.cuda.driver import device as device_info
    from fp4q.cuda.driver import driver_version
    from scripts.bench.timing import copy_fn_bytes, time_fn
    from scripts.sweep import sweep_ops

    dev = device_info(cp.cuda.Device().id)
    op = sweep_ops.make(args.op)
    configs = {name: cfg.replace(arch=dev.arch) for name, cfg in op.configs(config_space(args.space)).items()}
    if args.configs:
        wanted = set(args.configs.split(","))
        configs = {n: c for n, c in configs.items() if n in wanted}
    pdls = (True, False) if args.pdl == "both" else ((args.pdl == "on"),)
    cache_dir = os.environ.get("FP4Q_CACHE_DIR") or str(BinaryCache().directory)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        list(_progress(pool.map(_compile_one, [(c, cache_dir) for c in _compiled_forms(configs, args.op)]),
                       len(configs), "compile"))
    shapes = list(itertools.product(args.m, args.k))
    rng = np.random.default_rng(0)
    rows = []
    bar = _progress(range(len(shapes) * len(configs) * len(pdls)), len(shapes) * len(configs) * len(pdls), "sweep")
    it = iter(bar)
    for m, k in shapes:
        op.prepare(m, k, rng)
        read, written = op.bytes(m, k)
        copy = time_fn(copy_fn_bytes(read, written), reps=args.reps)
        moved = read + written
        for (name, cfg), pdl in itertools.product(configs.items(), pdls):
            next(it, None)
            op.clear()
            op.run(cfg, pdl)
            ok = op.check(rng)
            t = time_fn(lambda: op.run(cfg, pdl), reps=args.reps)
            rows.append(dict(op=args.op, config=name, m=m, k=k, pdl=pdl, bit_exact=ok,
                             median_us=round(t.median_us, 3), min_us=round(t.min_us, 3),
                             gbps=round(moved / t.median_us / 1e3, 1), copy_us=round(copy.median_us, 3),
                             pct_of_copy=round(100 * copy.median_us / t.median_us, 1), bytes=moved,
                             **{f"cfg_{f}": str(getattr(cfg, f, "")) for f in (
                                 "tile_m", "tile_k", "input_swizzle", "num_stages", "consumer_warpgroups",
                                 "min_ctas_per_sm", "persistent", "out_buffers", "threads", "vector")}))
        cp.get_default_memory_pool().free_all_blocks()
    meta = dict(device=dev.name, arch=dev.arch, driver=".".join(map(str, driver_version())),
                date=time.strftime("%Y-%m-%d"), space=args.space, reps=args.reps, op=args.op)
    _write(args.out, "sweep", rows)
    with open(os.path.join(args.out, "sweep_meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    _summary(rows)
    if not args.no_plot:
        _plot(rows, os.path.join(args.out, "sweep.png"))
    if args.write_tuned:
        _write_tuned(rows, configs, meta, args.write_tuned)
    bad = [r for r in rows if not r["bit_exact"]]
    if bad:
        print(f"{len(bad)} results were NOT bit-exact: {sorted({r['config'] for r in bad})}")
    return rows


def _compiled_forms(configs: dict, op: str) -> list:
    """The configs as the calls will build them (MXFP4 and dequantize take the call's format fields)."""
    if op.startswith("dequantize"):
        fmt = "mxfp4" if op == "dequantize_mx" else "nvfp4"
        return [c.replace(fmt=fmt, out_dtype="bfloat16") for c in configs.values()]
    return list(configs.values())


def _summary(rows: list[dict]) -> None:
    print(f"\n{'M':>6} {'K':>6} {'best config':<36} {'pdl':>4} {'us':>8} {'copy us':>8} {'% copy':>7}")
    for (m, k), group in itertools.groupby(sorted(rows, key=lambda r: (r["m"], r["k"])), key=lambda r: (r["m"], r["k"])):
        best = min((r for r in group if r["bit_exact"]), key=lambda r: r["median_us"], default=None)
        if best:
            print(f"{m:>6} {k:>6} {best['config']:<36} {str(best['pdl']):>4} {best['median_us']:>8.2f} "
                  f"{best['copy_us']:>8.2f} {best['pct_of_copy']:>6.1f}%")


def _plot(rows: list[dict], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install 'fp4q[plot]')")
        return
    fig, ax = plt.subplots(figsize=(10, 6))
    by_cfg: dict[str, list] = {}
    for r in rows:
        by_cfg.setdefault(f"{r['config']}{'' if r['pdl'] else ' (no pdl)'}", []).append(r)
    for name, rs in sorted(by_cfg.items()):
        rs = sorted(rs, key=lambda r: r["bytes"])
        ax.plot([r["bytes"] for r in rs], [r["gbps"] for r in rs], lw=0.8, alpha=0.6, label=name)
    copy = sorted({(r["bytes"], r["bytes"] / r["copy_us"] / 1e3) for r in rows})
    ax.plot([c[0] for c in copy], [c[1] for c in copy], "k-", lw=2.5, label="device copy, same bytes")
    ax.set_xscale("log")
    ax.set_xlabel("bytes moved (read + write)")
    ax.set_ylabel("GB/s")
    ax.set_title(f"{rows[0]['op']} bandwidth vs a same-bytes copy" if rows else "bandwidth vs a same-bytes copy")
    if len(by_cfg) <= 20:
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def vector_crossover(rows, configs) -> int | None:
    """The fewest elements (M*K) at which the best TMA config beat the best vector-kernel
    config, over the measured shapes; None if the two kinds were never both measured."""
    best: dict[tuple, dict] = {}
    for r in rows:
        if not (r["bit_exact"] and r["pdl"]):
            continue
        kind = "vector" if isinstance(configs[r["config"]], SimtConfig) else "tma"
        shape = best.setdefault((r["m"], r["k"]), {})
        shape[kind] = min(shape.get(kind, math.inf), r["median_us"])
    both = {mk: b for mk, b in best.items() if len(b) == 2}
    if not both:
        return None
    tma_wins = [m * k for (m, k), b in both.items() if b["tma"] < b["vector"]]
    return min(tma_wins) if tma_wins else max(m * k for m, k in both) + 1


def best_per_class(rows, configs) -> dict[str, dict]:
    """Per shape class of the tuned table, the TMA config with the lowest geometric mean of
    time / copy time over the class's measured shapes (only configs measured, bit-exact and with
    PDL, on every one of them compete): the config that serves the class, not the one that won a
    single shape of it."""
    from fp4q.kernels.tuning import shape_class

    scores: dict[str, dict[str, dict[tuple, float]]] = {}
    shapes: dict[str, set] = {}
    for r in rows:
        # Class entries are TMA configs; the vector kernel has its own rule (vector_crossover).
        if not r["pdl"] or isinstance(configs[r["config"]], SimtConfig):
            continue
        cls = shape_class(r["m"], r["k"])
        shapes.setdefault(cls, set()).add((r["m"], r["k"]))
        if r["bit_exact"]:
            scores.setdefault(cls, {}).setdefault(r["config"], {})[(r["m"], r["k"])] = r["median_us"] / r["copy_us"]
    best = {}
    for cls, by_config in scores.items():
        complete = {name: s for name, s in by_config.items() if set(s) == shapes[cls]}
        if not complete:
            continue
        means = {name: math.exp(sum(math.log(v) for v in s.values()) / len(s)) for name, s in complete.items()}
        name = min(means, key=means.get)
        best[cls] = dict(config=name, measured_on=",".join(f"{m}x{k}" for m, k in sorted(shapes[cls])),
                         pct_of_copy=round(100 / means[name], 1))
    return best


def merged_table(old: dict, best: dict[str, dict], configs, meta: dict, crossover: int | None) -> dict:
    """The tuned table after a sweep: its classes replaced, the classes it did not measure kept as
    they were (each entry carries the date it was measured), the vector crossover replaced when the
    sweep measured one."""
    entries = dict(old.get("entries", {}))
    for cls, b in best.items():
        call_fields = {f.name for f in dataclasses.fields(CallFields)}
        fields = {f: (int(v) if isinstance(v, Swizzle) else v) for f, v in configs[b["config"]].__dict__.items()
                  if f not in call_fields}
        entries[cls] = dict(measured_on=b["measured_on"], pct_of_copy=b["pct_of_copy"], date=meta["date"],
                            config=fields)
    for cls, entry in entries.items():
        entry.setdefault("date", old.get("date"))
    table = {**{k: v for k, v in old.items() if k != "entries"}, **meta}
    if crossover is not None:
        table["vector_max_elements"] = crossover
        table.pop("vector_measured", None)
    elif "vector_max_elements" in old:
        table["vector_max_elements"] = old["vector_max_elements"]
    table["entries"] = dict(sorted(entries.items()))
    return table


def _write_tuned(rows, configs, meta, path: str) -> None:
    old = {}
    if os.path.isfile(path):
        with open(path) as f:
            old = json.load(f)
    best = best_per_class(rows, configs)
    table = merged_table(old, best, configs, meta, vector_crossover(rows, configs))
    with open(path, "w") as f:
        json.dump(table, f, indent=1)
    print(f"wrote the tuned table to {path}: {len(best)} shape classes measured now, "
          f"{len(table['entries']) - len(best)} kept from before")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a short run: few shapes, the shipped configs")
    parser.add_argument("--m", type=lambda s: tuple(int(v) for v in s.split(",")), default=None,
                        help="comma-separated row counts")
    parser.add_argument("--k", type=lambda s: tuple(int(v) for v in s.split(",")), default=None,
                        help="comma-separated K values (multiples of 32)")
    parser.add_argument("--space", default=None, help="shipped, small or full (default: shipped with --quick, else small)")
    parser.add_argument("--configs", default=None, help="only these config names (comma-separated)")
    parser.add_argument("--pdl", choices=("on", "off", "both"), default="on")
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel compiles")
    parser.add_argument("--out", default="sweep-results")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--op", choices=("nvfp4", "mxfp4", "dequantize", "dequantize_mx"), default="nvfp4",
                        help="what to sweep: quantize_nvfp4 (default), quantize_mxfp4, or dequantize_nvfp4 / "
                             "dequantize_mxfp4 to bf16")
    parser.add_argument("--write-tuned", default=None,
                        help="merge the best config per shape class into this JSON (classes not swept are kept)")
    parser.add_argument("--cpu", action="store_true", help="compile table only, even if a GPU is present")
    args = parser.parse_args(argv)
    args.m = args.m or (QUICK_M if args.quick else DEFAULT_M)
    args.k = args.k or (QUICK_K if args.quick else DEFAULT_K)
    args.space = args.space or ("shipped" if args.quick else "small")
    args.reps = args.reps or (20 if args.quick else 50)
    if args.write_tuned and args.op != "nvfp4":
        parser.error("--write-tuned: the tuned table holds quantize_nvfp4 configs; sweep with --op nvfp4")
    available, reason = gpu_status()
    if args.cpu or not available:
        if not available:
            print(f"No GPU found ({reason}).")
            what = "one variant of every shipped config" if args.quick else "every shipped variant"
            print(f"Compiling {what} for sm_90a and sm_100f with NVRTC instead of sweeping.\n")
        rows = compile_table(("sm_90a", "sm_100f"), layouts_modes=not args.quick, out_dir=args.out)
        worst = max(r["compile_ms"] for r in rows)
        hit = max(r["cache_hit_ms"] for r in rows)
        print(f"\n{len(rows)} variants compiled; slowest cold compile {worst:.0f} ms, slowest cache hit {hit:.2f} ms.")
        if not available:
            print("No GPU found: nothing was timed. Run this on a machine with an NVIDIA GPU for the sweep.")
        return 0
    gpu_sweep(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
