"""Run every example in this folder, each in its own process, and exit non-zero if any failed.

    python examples/run_all.py [NAME ...]    # names without .py; default: every example

Each example checks its own results against fp4q.reference and prints one line.
The examples need an NVIDIA GPU; the torch ones need torch too.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent


def examples() -> list[pathlib.Path]:
    """The example scripts: every .py file here but this runner and the package marker."""
    return sorted(p for p in HERE.glob("*.py") if p.name not in ("run_all.py", "__init__.py"))


def run(paths: list[pathlib.Path], timeout: float = 900) -> int:
    """Run each script; print its last line of output or why it failed; return the number that failed."""
    failed = 0
    for path in paths:
        start = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=timeout)
            ok, output = proc.returncode == 0, (proc.stdout + proc.stderr).strip()
            status = f"exit {proc.returncode}"
        except subprocess.TimeoutExpired:
            ok, output, status = False, "", f"timed out after {timeout:.0f} s"
        seconds = time.perf_counter() - start
        if ok:
            last = output.splitlines()[-1] if output else "(no output)"
            print(f"ok      {path.stem} ({seconds:.1f} s): {last}")
        else:
            failed += 1
            print(f"FAILED  {path.stem} ({status}, {seconds:.1f} s)")
            for line in output.splitlines()[-20:]:
                print(f"        {line}")
    return failed


def main(argv: list[str] | None = None) -> int:
    names = sys.argv[1:] if argv is None else argv
    known = {p.stem: p for p in examples()}
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"unknown examples {unknown}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    paths = [known[n] for n in names] if names else list(known.values())
    failed = run(paths)
    print(f"{len(paths) - failed} of {len(paths)} examples passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
