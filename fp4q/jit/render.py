"""Render the CUDA source of one kernel from its spec.

Templates in ``ptx_templates/`` hold all logic; rendering only writes the
target's feature flags, the spec's flags and its constants as ``constexpr``
ahead of the kernel template and then inlines the ``#include "..."`` lines
(paths relative to the template root). The result is one
self-contained translation unit: NVRTC needs no include path, and the text
that is hashed for the binary cache is exactly the text that is compiled, so
a header edit always changes the key.
"""

from __future__ import annotations

import functools
import importlib.resources
import pathlib
import re
from dataclasses import dataclass

from ..kernels.archs import target
from ..kernels.spec import KernelSpec

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$')
_PRAGMA_ONCE = re.compile(r"^\s*#\s*pragma\s+once\s*$")
_SENTINEL = "ptx/types.cuh"
# Flags the templates test with #if rather than `if constexpr`: the branch
# they guard names constants that only exist when the flag is set.
_PREPROCESSOR_FLAGS = frozenset({"FP4Q_SETMAXNREG"})


@dataclass(frozen=True)
class KernelSource:
    kernel_name: str
    source: str
    arch: str


def templates_dir() -> pathlib.Path:
    """The template directory, installed (``fp4q.ptx_templates``) or in a checkout."""
    try:
        # A directory without __init__.py is a namespace package, whose
        # files() is a MultiplexedPath; a file inside it is a real path.
        header = importlib.resources.files("fp4q.ptx_templates").joinpath(_SENTINEL)
        if header.is_file():
            return pathlib.Path(str(header)).parent.parent
    except ModuleNotFoundError:
        pass
    checkout = pathlib.Path(__file__).resolve().parents[2] / "ptx_templates"
    if (checkout / _SENTINEL).is_file():
        return checkout
    raise FileNotFoundError(
        "fp4q's ptx_templates directory was not found: neither the installed "
        f"package data 'fp4q.ptx_templates' nor {checkout} holds {_SENTINEL}"
    )


@functools.lru_cache(maxsize=None)
def _read_template(name: str) -> str:
    return (templates_dir() / name).read_text()


def expand_includes(name: str) -> str:
    """Inline every quoted include of template ``name`` once, depth first."""
    seen: set[str] = set()
    out: list[str] = []

    def visit(current: str) -> None:
        if current in seen:
            return
        seen.add(current)
        for line in _read_template(current).splitlines():
            match = _INCLUDE.match(line)
            if match:
                visit(match.group(1))
            elif not _PRAGMA_ONCE.match(line):
                out.append(line)

    visit(name)
    return "\n".join(out) + "\n"


def _flag_line(name: str, value: bool) -> str:
    if name in _PREPROCESSOR_FLAGS:
        return f"#define {name} {int(value)}"
    return f"constexpr bool {name} = {'true' if value else 'false'};"


def feature_flags(arch: str) -> str:
    """The ``FP4Q_HAS_*`` lines of target ``arch``: each a ``constexpr bool``, including those naming an
    instruction the target's ptxas rejects, because the front end drops a discarded ``if constexpr``
    branch (its asm never reaches ptxas; ``tests/test_ptx.py`` checks that it stays so). A kernel
    uses only some of them, hence ``[[maybe_unused]]``."""
    return "".join(f"[[maybe_unused]] constexpr bool {name} = {'true' if value else 'false'};\n"
                   for name, value in target(arch).features.flags().items())


def _prelude(spec: KernelSpec) -> str:
    lines = [f"// fp4q generated: {spec.name} for {spec.arch}", feature_flags(spec.arch).rstrip("\n")]
    lines += [_flag_line(name, value) for name, value in spec.flags]
    for name, value in spec.constants:
        lines.append(f"constexpr int {name} = {int(value)};")
    return "\n".join(lines) + "\n"


def render(spec: KernelSpec) -> KernelSource:
    """The self-contained CUDA source of ``spec``'s kernel."""
    if not isinstance(spec, KernelSpec):
        raise TypeError(f"render takes a KernelSpec (a config's .spec), got {type(spec).__name__}")
    return KernelSource(spec.name, _prelude(spec) + expand_includes(spec.template), spec.arch)
