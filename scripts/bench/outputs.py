"""What the table-printing benchmarks (``bench_fused``, ``bench_experts``) share on the command
line: lists of integers and of names, and the rows written as JSON and the table as markdown."""

from __future__ import annotations

import argparse
import json


def ints(text: str) -> list[int]:
    """A comma-separated list of integers."""
    return [int(v) for v in text.split(",") if v]


def names(text: str) -> list[str]:
    """A comma-separated list of names."""
    return [v for v in text.split(",") if v]


def require_names(parser: argparse.ArgumentParser, option: str, given: list[str], allowed) -> None:
    """Exit with the parser's error where ``given`` names anything outside ``allowed``."""
    unknown = [v for v in given if v not in allowed]
    if unknown:
        parser.error(f"{option} must name values of {', '.join(allowed)}, got {', '.join(unknown)}")


def add_output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", help="write the rows as JSON here")
    parser.add_argument("--md", help="write the table as markdown here")


def write_outputs(args: argparse.Namespace, results: list[dict], text: str) -> None:
    """Print the table, and write the rows and the table where ``--json`` and ``--md`` say."""
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text + "\n")
