"""Dump the SASS of every shipped kernel variant, or compare two such dumps.

    python scripts/gpu/sass_dump.py OUT_DIR [--arch sm_90a --arch sm_100f] [--jobs 2] [--match REGEX]
    python scripts/gpu/sass_dump.py --compare DIR_A DIR_B [--common]

The first form compiles each variant of ``all_variants(arch)`` of the tree
the script sits in (``TREE/scripts/gpu/sass_dump.py`` puts ``TREE`` first on
``sys.path``, ahead of any installed fp4q, so that two checkouts can be
dumped and compared), plus the numerics probe of trees that shipped it, into a throw-away binary cache
and writes ``cuobjdump -sass``
of each cubin to ``OUT_DIR/<arch>/<variant>.sass`` (with ``--match``, only
the variants whose name the regular expression matches, from its start). The second form lists the
variants whose SASS differs (or exists on one side only) and exits non-zero
when there is any; with --common, variants that only one dump holds (a tree
that ships more) are counted but do not fail it. Compare DIR_A/sm_90a with
DIR_B/sm_90a to compare one target. A refactoring of the templates that claims to leave the
generated code alone is checked by dumping before and after and comparing.
cuobjdump and the nvdisasm it runs come from PATH or from the pip wheels
nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

OLD_DEFAULT_ARCHS = ("sm_90a", "sm_100a")  # trees without fp4q.kernels.archs

# An editable install of another checkout would otherwise supply fp4q (worker processes
# import this module too, so they see the same tree).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))


def _import_first(*names: str):
    """The first of ``names`` that the imported fp4q tree holds: its modules
    have moved between releases, and this script serves trees from either
    side. Existence is checked on disk, inside that tree, because an
    editable install of another checkout would otherwise supply a module
    this tree does not have."""
    root = pathlib.Path(importlib.import_module("fp4q").__file__).parent
    for name in names:
        rel = root.joinpath(*name.split(".")[1:])
        if rel.with_suffix(".py").is_file() or (rel / "__init__.py").is_file():
            return importlib.import_module(name)
    raise ModuleNotFoundError(f"{root} holds none of {', '.join(names)}")


def _fp4q():
    """The few fp4q entry points this script needs, as one namespace."""
    variants = _import_first("fp4q.kernels.variants", "fp4q.variants")
    render = _import_first("fp4q.jit.render", "fp4q.codegen")
    compiler = _import_first("fp4q.jit.compiler", "fp4q.compiler")
    cache = _import_first("fp4q.jit.cache", "fp4q.cache")
    if hasattr(render, "render_numerics_probe"):  # a tree whose renderer takes configs
        render_config, render_probe = render.render, render.render_numerics_probe
    else:  # configs describe their kernels as specs; the probe is a test kernel where the tree has none
        quantize = importlib.import_module("fp4q.kernels.quantize")
        render_config = lambda cfg: render.render(cfg.spec)  # noqa: E731
        probe = getattr(quantize, "numerics_probe_spec", None)
        render_probe = None if probe is None else (lambda arch: render.render(probe(arch)))
    return argparse.Namespace(
        all_variants=variants.all_variants,
        render=render_config,
        render_numerics_probe=render_probe,
        compile_source=compiler.compile_source,
        BinaryCache=cache.BinaryCache,
    )


def default_archs() -> list[str]:
    """Every target the imported tree ships."""
    try:
        return list(_import_first("fp4q.kernels.archs").ARCHS)
    except ModuleNotFoundError:
        return list(OLD_DEFAULT_ARCHS)


def find_cuobjdump() -> str:
    found = shutil.which("cuobjdump")
    if found:
        return found
    # The pip wheel (nvidia-cuda-cuobjdump) puts the binary under site-packages.
    for entry in map(pathlib.Path, sys.path):
        for candidate in sorted(entry.glob("nvidia/*/bin/cuobjdump")):
            return str(candidate)
    raise SystemExit("cuobjdump not found: put it on PATH, or pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm")


_SPELLED = {"<=": "le", ">=": "ge", "<": "lt", ">": "gt", "=": "eq"}


def sanitize(name: str) -> str:
    """A file name for a variant name (which holds '/', '[', '<=', ...);
    comparisons are spelled out so that tuned-table entries stay apart."""
    name = re.sub("|".join(map(re.escape, _SPELLED)), lambda m: f"-{_SPELLED[m.group()]}-", name)
    return re.sub(r"[^A-Za-z0-9.-]+", "_", name).strip("_")


def _dump_one(job: tuple[str, object, str, str, str]) -> tuple[str, int]:
    """Compile one rendered source and write its SASS; returns (path, lines)."""
    name, source, cache_dir, cuobjdump, out_path = job
    api = _fp4q()
    kernel = api.compile_source(source, api.BinaryCache(cache_dir))
    with tempfile.TemporaryDirectory() as tmp:
        # A fixed file name: cuobjdump may print it, and it must not differ
        # between two dumps of the same code.
        cubin = pathlib.Path(tmp) / "kernel.cubin"
        cubin.write_bytes(kernel.cubin)
        # cuobjdump runs nvdisasm, which the pip wheels install beside it.
        env = {**os.environ, "PATH": os.pathsep.join([str(pathlib.Path(cuobjdump).parent), os.environ.get("PATH", "")])}
        sass = subprocess.run([cuobjdump, "-sass", str(cubin)], check=True, capture_output=True, text=True,
                              cwd=tmp, env=env).stdout
    pathlib.Path(out_path).write_text(sass)
    return name, sass.count("\n")


def dump(out_dir: pathlib.Path, archs: list[str], jobs: int, match: str | None = None) -> None:
    api = _fp4q()
    cuobjdump = find_cuobjdump()
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as cache_dir:
        work = []
        for arch in archs:
            arch_dir = out_dir / arch
            arch_dir.mkdir(exist_ok=True)
            sources = {name: api.render(cfg) for name, cfg in api.all_variants(arch).items()
                       if match is None or re.match(match, name)}
            if api.render_numerics_probe is not None and (match is None or re.match(match, "numerics_probe")):
                sources["numerics_probe"] = api.render_numerics_probe(arch)
            files = {}
            for name, source in sources.items():
                file = arch_dir / f"{sanitize(name)}.sass"
                if file in files:
                    raise SystemExit(f"{name!r} and {files[file]!r} map to the same file {file.name}")
                files[file] = name
                work.append((f"{arch}/{name}", source, cache_dir, cuobjdump, str(file)))
        with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
            for done, (name, lines) in enumerate(pool.map(_dump_one, work), 1):
                print(f"[{done}/{len(work)}] {name}: {lines} lines", flush=True)
    print(f"wrote {len(work)} SASS dumps to {out_dir}")


def compare(a: pathlib.Path, b: pathlib.Path, common: bool = False) -> int:
    files_a = {p.relative_to(a) for p in a.rglob("*.sass")}
    files_b = {p.relative_to(b) for p in b.rglob("*.sass")}
    by_arch: dict[str, list[int]] = {}
    problems = []
    one_sided = 0
    for rel in sorted(files_a | files_b):
        counts = by_arch.setdefault(rel.parts[0] if len(rel.parts) > 1 else ".", [0, 0])
        if rel not in files_a or rel not in files_b:
            if common:
                one_sided += 1
                continue
            problems.append(f"only in {a if rel in files_a else b}: {rel}")
            counts[1] += 1
        elif (a / rel).read_bytes() == (b / rel).read_bytes():
            counts[0] += 1
        else:
            problems.append(f"differs: {rel}")
            counts[1] += 1
    for line in problems:
        print(line)
    for arch, (same, different) in sorted(by_arch.items()):
        print(f"{arch}: {same} identical, {different} differing")
    if common:
        print(f"{one_sided} in one dump only, not compared")
    compared = sum(same + different for same, different in by_arch.values())
    return 1 if problems or not compared else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", nargs="?", type=pathlib.Path, help="where to write the dumps")
    parser.add_argument("--arch", action="append", help="target (repeatable; default every target of the tree)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="compile processes")
    parser.add_argument("--compare", nargs=2, type=pathlib.Path, metavar=("DIR_A", "DIR_B"))
    parser.add_argument("--common", action="store_true", help="with --compare: only the variants both dumps hold")
    parser.add_argument("--match", help="dump only the variants whose name this regular expression matches")
    args = parser.parse_args(argv)
    if args.compare:
        if args.out_dir is not None:
            parser.error("--compare takes no OUT_DIR")
        return compare(*args.compare, common=args.common)
    if args.out_dir is None:
        parser.error("give OUT_DIR or --compare DIR_A DIR_B")
    dump(args.out_dir, args.arch or default_archs(), args.jobs, args.match)
    return 0


if __name__ == "__main__":
    sys.exit(main())
