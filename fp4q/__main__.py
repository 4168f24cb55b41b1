"""``python -m fp4q``: command-line tools.

``precompile``: compile every shipped kernel variant of the given targets into the kernel cache, so that
a server never compiles at run time (see ``fp4q.jit.precompile`` and docs/kernels.md on precompiling).
``--check`` compiles nothing and exits 1 listing what is missing. ``--version`` prints fp4q's version.
"""

from __future__ import annotations

import argparse
import sys

from ._version import __version__
from .jit.precompile import precompile
from .kernels.archs import ARCHS
from .kernels.variants import OPS


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m fp4q", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"fp4q {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    pre = commands.add_parser(
        "precompile",
        help="compile the shipped kernel variants into the cache ($FP4Q_CACHE_DIR)",
        description="Compile every shipped kernel variant of the given targets into the kernel cache "
                    "($FP4Q_CACHE_DIR, else $XDG_CACHE_HOME/fp4q, else ~/.cache/fp4q).",
    )
    pre.add_argument("--arch", help=f"comma-separated targets (default: all of {','.join(ARCHS)})")
    pre.add_argument("--ops", help=f"comma-separated operations (default: all of {','.join(OPS)})")
    pre.add_argument("--jobs", type=int, help="compiler processes (default: the number of CPUs)")
    pre.add_argument("--check", action="store_true",
                     help="compile nothing; exit 1 listing the variants missing from the cache")
    pre.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        report = precompile(args.arch, args.ops, jobs=args.jobs, check=args.check, progress=not args.no_progress)
    except ValueError as exc:  # ConfigError included: a bad --arch, --ops or --jobs
        print(f"python -m fp4q precompile: {exc}", file=sys.stderr)
        return 2
    print(report.summary())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
