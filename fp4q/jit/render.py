"""Render the CUDA source of one kernel variant from a validated config.

Templates in ``ptx_templates/`` hold all logic; rendering only writes the
config as preprocessor flags and ``constexpr`` constants ahead of the kernel
template and then inlines the ``#include "..."`` lines. The result is one
self-contained translation unit: NVRTC needs no include path, and the text
that is hashed for the binary cache is exactly the text that is compiled, so
a header edit always changes the key.
"""

from __future__ import annotations

import functools
import importlib.resources
import pathlib
import re
from dataclasses import dataclass, fields

from ..kernels.archs import target
from ..kernels.quantize import QuantizeConfig, SimtConfig
from ..kernels.dequantize import DequantizeConfig, DequantizeSimtConfig
from ..kernels.global_scale import AmaxConfig, GlobalScaleConfig

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$')
_PRAGMA_ONCE = re.compile(r"^\s*#\s*pragma\s+once\s*$")


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
        header = importlib.resources.files("fp4q.ptx_templates").joinpath("ptx.cuh")
        if header.is_file():
            return pathlib.Path(str(header)).parent
    except ModuleNotFoundError:
        pass
    checkout = pathlib.Path(__file__).resolve().parents[2] / "ptx_templates"
    if (checkout / "ptx.cuh").is_file():
        return checkout
    raise FileNotFoundError(
        "fp4q's ptx_templates directory was not found: neither the installed "
        f"package data 'fp4q.ptx_templates' nor {checkout} holds ptx.cuh"
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


def _prelude(config, constants: dict[str, int], flags: dict[str, bool]) -> str:
    summary = ", ".join(f"{f.name}={getattr(config, f.name)!r}" for f in fields(config))
    lines = [f"// fp4q generated: {type(config).__name__}({summary})"]
    for name, value in flags.items():
        lines.append(f"#define {name} {int(value)}")
    if target(config.arch).features.cvt_e2m1:
        lines.append("#define FP4Q_HAS_CVT_E2M1 1")
    for name, value in constants.items():
        lines.append(f"constexpr int {name} = {int(value)};")
    return "\n".join(lines) + "\n"


def _common_flags(config) -> dict[str, bool]:
    flags = {
        "FP4Q_INPUT_FP16": config.input_dtype == "float16",
        "FP4Q_TENSOR_SF_BY_POINTER": config.tensor_sf_mode == "pointer",
        "FP4Q_SF_SWIZZLED": config.sf_layout == "swizzled",
    }
    if config.sf_vec_size == 32:
        flags["FP4Q_MX_RCEIL"] = config.mx_mode == "rceil"
    return flags


def render_tma(config: QuantizeConfig) -> KernelSource:
    smem = config.smem
    producer_regs, consumer_regs = config.register_split
    constants = {
        "TILE_M": config.tile_m,
        "TILE_K": config.tile_k,
        "IN_BOX_K": config.input_box_k,
        "IN_SWIZZLE": int(config.input_swizzle),
        "OUT_BOX_K": config.output_box_k,
        "OUT_SWIZZLE": int(config.output_swizzle),
        "NUM_STAGES": config.num_stages,
        "NUM_OUT_BUFFERS": config.out_buffers,
        "CONSUMER_THREADS": config.consumer_threads,
        "MIN_CTAS_PER_SM": config.min_ctas_per_sm,
        "SF_VEC": config.sf_vec_size,
        "OFF_IN": smem.input,
        "OFF_Q": smem.q,
        "OFF_SF": smem.sf,
        "OFF_BARRIERS": smem.barriers,
        "OFF_TILES": smem.tiles,
    }
    if config.setmaxnreg:
        constants.update(PRODUCER_REGS=producer_regs, CONSUMER_REGS=consumer_regs)
    flags = {**_common_flags(config), "FP4Q_SETMAXNREG": config.setmaxnreg}
    source = _prelude(config, constants, flags) + expand_includes("quantize_fp4_tma.cu")
    return KernelSource("fp4q_quantize_fp4_tma", source, config.arch)


def render_simt(config: SimtConfig) -> KernelSource:
    kind = "vector" if config.vector else "simt"
    source = _prelude(config, {"SIMT_THREADS": config.threads, "SF_VEC": config.sf_vec_size}, _common_flags(config))
    source += expand_includes(f"quantize_fp4_{kind}.cu")
    return KernelSource(f"fp4q_quantize_fp4_{kind}", source, config.arch)


def render_numerics_probe(arch: str) -> KernelSource:
    """A kernel that applies the numerics header to raw floats, for bit-exact tests."""
    flags = {"FP4Q_INPUT_FP16": False}
    lines = [f"#define {k} {int(v)}" for k, v in flags.items()]
    if target(arch).features.cvt_e2m1:
        lines.append("#define FP4Q_HAS_CVT_E2M1 1")
    source = "\n".join(lines) + "\n" + expand_includes("numerics_probe.cu")
    return KernelSource("fp4q_numerics_probe", source, arch)


def _dequantize_flags(config) -> dict[str, bool]:
    return {
        "FP4Q_MXFP4": config.fmt == "mxfp4",
        "FP4Q_OUT_F32": config.out_dtype == "float32",
        "FP4Q_TENSOR_SF_BY_POINTER": config.tensor_sf_mode == "pointer",
        "FP4Q_SF_SWIZZLED": config.sf_layout == "swizzled",
    }


def render_dequantize_tma(config: DequantizeConfig) -> KernelSource:
    constants = {
        "TILE_M": config.tile_m,
        "TILE_K": config.tile_k,
        "NUM_STAGES": config.num_stages,
        "CONSUMER_THREADS": config.consumer_threads,
        "MIN_CTAS_PER_SM": config.min_ctas_per_sm,
        "OFF_BARRIERS": config.smem.barriers,
        "OFF_TILES": config.smem.tiles,
    }
    source = _prelude(config, constants, _dequantize_flags(config)) + expand_includes("dequantize_tma.cu")
    return KernelSource("fp4q_dequantize_tma", source, config.arch)


def render_dequantize_simt(config: DequantizeSimtConfig) -> KernelSource:
    source = _prelude(config, {"SIMT_THREADS": config.threads}, _dequantize_flags(config))
    source += expand_includes("dequantize_simt.cu")
    return KernelSource("fp4q_dequantize_simt", source, config.arch)


def render_amax(config: AmaxConfig) -> KernelSource:
    flags = {"FP4Q_INPUT_FP16": config.input_dtype == "float16", "FP4Q_VECTOR_LOADS": config.vector_loads}
    source = _prelude(config, {"AMAX_THREADS": config.threads}, flags) + expand_includes("amax.cu")
    return KernelSource("fp4q_amax", source, config.arch)


def render_global_scale(config: GlobalScaleConfig) -> KernelSource:
    source = _prelude(config, {"SCALE_THREADS": config.threads}, {}) + expand_includes("global_scale.cu")
    return KernelSource("fp4q_global_scale", source, config.arch)


_RENDERERS = {
    QuantizeConfig: render_tma,
    SimtConfig: render_simt,
    DequantizeConfig: render_dequantize_tma,
    DequantizeSimtConfig: render_dequantize_simt,
    AmaxConfig: render_amax,
    GlobalScaleConfig: render_global_scale,
}


def render(config) -> KernelSource:
    renderer = _RENDERERS.get(type(config))
    if renderer is None:
        names = ", ".join(cls.__name__ for cls in _RENDERERS)
        raise TypeError(f"config must be one of {names}, got {type(config).__name__}")
    return renderer(config)
