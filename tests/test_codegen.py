"""Rendering: config -> one self-contained CUDA translation unit."""

import pathlib
import re
import shutil

import pytest

from fp4q.jit import render as codegen
from fp4q.jit.render import KernelSource, expand_includes, render, templates_dir
from fp4q.kernels.archs import ALL_TARGETS, target
from probe import TEMPLATE as PROBE_TEMPLATE, numerics_probe_spec, training_probe_spec
from fp4q.kernels.quantize import QuantizeConfig, SimtConfig
from fp4q.kernels.spec import Swizzle

FMT = {16: "nvfp4", 32: "mxfp4"}  # the format of each group size

S = Swizzle
REPO_TEMPLATES = pathlib.Path(__file__).resolve().parents[1] / "ptx_templates"
TEMPLATES = ("ptx/types.cuh", "numerics/quantize_group.cuh", "kernels/quantize_fp4_tma.cu",
             "kernels/quantize_fp4_simt.cu")


def code_lines(source: str) -> list[str]:
    """The source without whole-line comments (the config summary is one)."""
    return [line for line in source.splitlines() if not line.lstrip().startswith("//")]


def defines(source: str) -> dict[str, str]:
    """The rendered flags as "0"/"1", whether written as #define or as constexpr bool."""
    flags = dict(re.findall(r"^#define (\w+) (.*)$", source, re.M))
    for name, value in re.findall(r"^(?:\[\[maybe_unused\]\] )?constexpr bool (\w+) = (true|false);$", source, re.M):
        assert name not in flags, name
        flags[name] = str(int(value == "true"))
    return flags


def constants(source: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"^constexpr int (\w+) = (-?\d+);$", source, re.M)}


@pytest.fixture
def fresh_template_cache():
    codegen._read_template.cache_clear()
    yield
    codegen._read_template.cache_clear()


# --- templates_dir and includes ---------------------------------------------------------------------------------


def test_templates_dir_finds_ptx_templates():
    d = templates_dir()
    assert d.resolve() == REPO_TEMPLATES.resolve()
    for name in TEMPLATES:
        assert (d / name).is_file(), name
    # The numerics probes are test kernels: they live with the tests, not among the package's templates.
    assert not list(d.rglob("*_probe*")) and PROBE_TEMPLATE.is_file()
    assert pathlib.Path(numerics_probe_spec("sm_90a").template) == PROBE_TEMPLATE
    assert pathlib.Path(training_probe_spec("sm_90a").template) == PROBE_TEMPLATE.with_name("training_probe.cu")


def test_templates_dir_missing_raises(monkeypatch, tmp_path):
    # Pretend render.py lives in a checkout without ptx_templates.
    monkeypatch.setattr(codegen, "__file__", str(tmp_path / "fp4q" / "jit" / "render.py"))
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "ptx_templates"))):
        templates_dir()


@pytest.mark.parametrize("name", TEMPLATES + (str(PROBE_TEMPLATE),))  # the probe by its absolute path
def test_expand_includes_inlines_everything_once(name):
    text = expand_includes(name)
    assert not re.search(r'^\s*#\s*include\s+"', text, re.M)
    assert not re.search(r"^\s*#\s*pragma\s+once", text, re.M)
    # ptx/types.cuh is reached through many headers and must be inlined exactly once
    assert text.count("typedef unsigned char u8;") == 1
    assert text.endswith("\n")


def test_expand_includes_puts_headers_before_their_users():
    text = expand_includes("kernels/quantize_fp4_tma.cu")
    ptx = text.index("FP4Q_DEVICE float mul_rn(")
    math = text.index("FP4Q_DEVICE u32 nvfp4_scale_pair(")
    kernel = text.index('extern "C" __global__')
    assert ptx < math < kernel


def test_expand_includes_does_not_loop_on_cycles(monkeypatch, tmp_path, fresh_template_cache):
    (tmp_path / "a.cuh").write_text('#pragma once\n#include "b.cuh"\nint a;\n')
    (tmp_path / "b.cuh").write_text('#include "a.cuh"\nint b;\n')
    monkeypatch.setattr(codegen, "templates_dir", lambda: tmp_path)
    assert expand_includes("a.cuh") == "int b;\nint a;\n"


# --- render: TMA ------------------------------------------------------------------------------------------------

CONFIGS = {
    "default": QuantizeConfig(),
    "k256": QuantizeConfig(tile_k=256, output_box_k=128, output_swizzle=S.B128, num_stages=2),
    "m256": QuantizeConfig(tile_m=256, num_stages=2),
    "wg3_noswz": QuantizeConfig(tile_k=192, output_box_k=96, output_swizzle=S.NONE, consumer_warpgroups=3),
    "linear_ptr_fp16": QuantizeConfig(sf_layout="linear", tensor_sf_mode="pointer", input_dtype="float16"),
    "no_setmaxnreg_sm100": QuantizeConfig(setmaxnreg=False, arch="sm_100f"),
    "2cta": QuantizeConfig(tile_k=64, output_box_k=32, output_swizzle=S.B32, consumer_warpgroups=1,
                           min_ctas_per_sm=2, out_buffers=3),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_render_tma_is_self_contained(name):
    src = render(CONFIGS[name].spec)
    assert isinstance(src, KernelSource)
    assert src.kernel_name == "fp4q_quantize_fp4_tma"
    assert src.arch == CONFIGS[name].arch
    assert not re.search(r'^\s*#\s*include\s+"', src.source, re.M)
    assert not re.search(r"^\s*#\s*include", src.source, re.M)  # no include of any kind
    assert not re.search(r"#\s*pragma\s+once", src.source)
    assert f'extern "C" __global__ void __launch_bounds__(THREADS, MIN_CTAS_PER_SM)\n{src.kernel_name}(' in src.source
    assert src.source.count("typedef unsigned char u8;") == 1


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_render_tma_constants(name):
    cfg = CONFIGS[name]
    src = render(cfg.spec).source
    got = constants(src)
    smem = cfg.smem
    want = {
        "TILE_M": cfg.tile_m, "TILE_K": cfg.tile_k, "IN_BOX_K": cfg.input_box_k, "IN_SWIZZLE": cfg.input_swizzle.value,
        "OUT_BOX_K": cfg.output_box_k, "OUT_SWIZZLE": cfg.output_swizzle.value, "NUM_STAGES": cfg.num_stages,
        "NUM_OUT_BUFFERS": cfg.out_buffers, "CONSUMER_THREADS": cfg.consumer_threads,
        "MIN_CTAS_PER_SM": cfg.min_ctas_per_sm, "OFF_IN": smem.input, "OFF_Q": smem.q, "OFF_SF": smem.sf,
        "OFF_BARRIERS": smem.barriers, "OFF_TILES": smem.tiles, "SF_VEC": cfg.sf_vec_size, "PROLOGUE": 0,
    }
    if cfg.setmaxnreg:
        want["PRODUCER_REGS"], want["CONSUMER_REGS"] = cfg.register_split
    assert got == want
    # each constant is defined before the template that uses it
    first_use = src.index("constexpr int THREADS = 128 + CONSUMER_THREADS;")
    for key in want:
        assert src.index(f"constexpr int {key} = ") < first_use


def test_render_tma_literal_constants():
    src = render(CONFIGS["k256"].spec).source
    assert "constexpr int TILE_K = 256;" in src
    assert "constexpr int OUT_BOX_K = 128;" in src
    assert "constexpr int OUT_SWIZZLE = 128;" in src
    assert "constexpr int NUM_STAGES = 2;" in src
    src = render(CONFIGS["wg3_noswz"].spec).source
    assert "constexpr int OUT_SWIZZLE = 0;" in src and "constexpr int CONSUMER_THREADS = 384;" in src


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_render_tma_flags(name):
    cfg = CONFIGS[name]
    d = defines(render(cfg.spec).source)
    assert d["FP4Q_SF_SWIZZLED"] == ("1" if cfg.sf_layout == "swizzled" else "0")
    assert d["FP4Q_TENSOR_SF_BY_POINTER"] == ("1" if cfg.tensor_sf_mode == "pointer" else "0")
    assert d["FP4Q_INPUT_FP16"] == ("1" if cfg.input_dtype == "float16" else "0")
    assert d["FP4Q_SETMAXNREG"] == ("1" if cfg.setmaxnreg else "0")
    assert d["FP4Q_HAS_CVT_E2M1"] == ("1" if cfg.arch == "sm_100f" else "0")


@pytest.mark.parametrize("cfg", [QuantizeConfig(), QuantizeConfig(arch="sm_100f"), SimtConfig(fmt="mxfp4")])
def test_flags_are_constexpr_except_preprocessor_guards(cfg):
    # if constexpr type-checks both branches in every compile; only the guards whose
    # branch cannot compile in some config stay macros
    src = render(cfg.spec).source
    assert set(re.findall(r"^#define (FP4Q_\w+) [01]$", src, re.M)) <= {"FP4Q_SETMAXNREG"}
    assert "constexpr bool FP4Q_SF_SWIZZLED = true;" in src
    assert "constexpr bool FP4Q_INPUT_FP16 = false;" in src
    assert f"constexpr bool FP4Q_MX_RCEIL = {'true' if cfg.fmt == 'mxfp4' else 'false'};" in src


def test_render_without_setmaxnreg_has_no_register_constants():
    src = render(QuantizeConfig(setmaxnreg=False).spec).source
    assert "PRODUCER_REGS =" not in src and "CONSUMER_REGS =" not in src
    assert "#define FP4Q_SETMAXNREG 0" in src


@pytest.mark.parametrize("arch, has", [("sm_90a", False), ("sm_100f", True)])
def test_cvt_e2m1_flag_only_for_sm_100f(arch, has):
    for cfg in (QuantizeConfig(arch=arch), SimtConfig(arch=arch)):
        src = render(cfg.spec).source
        assert f"[[maybe_unused]] constexpr bool FP4Q_HAS_CVT_E2M1 = {'true' if has else 'false'};" in src
        assert render(cfg.spec).arch == arch


@pytest.mark.parametrize("arch", sorted(ALL_TARGETS))
def test_every_feature_flag_of_the_target_is_rendered(arch):
    want = {name: str(int(value)) for name, value in target(arch).features.flags().items()}
    for spec in (SimtConfig(arch=arch).spec, numerics_probe_spec(arch)):
        d = defines(render(spec).source)
        assert {name: d[name] for name in want} == want


def test_render_names_the_kernel_and_target_in_the_first_line():
    first = render(QuantizeConfig(num_stages=3, arch="sm_100f").spec).source.splitlines()[0]
    assert first == "// fp4q generated: fp4q_quantize_fp4_tma for sm_100f"


# --- render: SIMT -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("threads", [64, 256, 1024])
@pytest.mark.parametrize("layout", ["swizzled", "linear"])
@pytest.mark.parametrize("mode", ["value", "pointer"])
def test_render_simt(threads, layout, mode):
    cfg = SimtConfig(threads=threads, sf_layout=layout, tensor_sf_mode=mode, input_dtype="float16")
    src = render(cfg.spec)
    assert src.kernel_name == "fp4q_quantize_fp4_simt" and src.arch == "sm_90a"
    assert constants(src.source) == {"SIMT_THREADS": threads, "SF_VEC": 16, "PROLOGUE": 0}
    d = defines(src.source)
    assert d["FP4Q_SF_SWIZZLED"] == ("1" if layout == "swizzled" else "0")
    assert d["FP4Q_TENSOR_SF_BY_POINTER"] == ("1" if mode == "pointer" else "0")
    assert d["FP4Q_INPUT_FP16"] == "1"
    assert "FP4Q_SETMAXNREG" not in d
    assert not re.search(r"^\s*#\s*(include|pragma\s+once)", src.source, re.M)
    assert 'extern "C" __global__ void __launch_bounds__(SIMT_THREADS)' in src.source


@pytest.mark.parametrize("sf_vec_size", [16, 32])
@pytest.mark.parametrize("layout", ["swizzled", "linear"])
def test_render_vector(sf_vec_size, layout):
    src = render(SimtConfig(threads=128, fmt=FMT[sf_vec_size], sf_layout=layout, vector=True).spec)
    assert src.kernel_name == "fp4q_quantize_fp4_vector"
    assert constants(src.source) == {"SIMT_THREADS": 128, "SF_VEC": sf_vec_size, "PROLOGUE": 0, "VEC_ELEMS": 16}
    assert defines(src.source)["FP4Q_SF_SWIZZLED"] == ("1" if layout == "swizzled" else "0")
    assert "shfl.sync.bfly.b32" in src.source and "ld.global.nc.v4.u32" in src.source
    assert render(SimtConfig(vector=True).spec).source != render(SimtConfig().spec).source
    for elements in (8, 32):
        other = render(SimtConfig(threads=128, fmt=FMT[sf_vec_size], vector=True, vector_elements=elements).spec)
        assert constants(other.source)["VEC_ELEMS"] == elements


def test_vector_elements_rules():
    assert SimtConfig(vector=True).vector_elements == 16 and SimtConfig().vector_elements == 8
    assert SimtConfig(vector=True) == SimtConfig(vector=True, vector_elements=16)  # one config, one cache entry
    with pytest.raises(ValueError, match=r"vector_elements must be one of 8, 16, 32, got 64"):
        SimtConfig(vector=True, vector_elements=64)
    with pytest.raises(ValueError, match=r"with vector=False it must be 8, got 16"):
        SimtConfig(vector_elements=16)


@pytest.mark.parametrize("sf_vec_size", [16, 32])
def test_a_unit_of_the_walk_is_vector_elements_or_one_group(sf_vec_size):
    assert SimtConfig(fmt=FMT[sf_vec_size]).elements_per_unit == sf_vec_size
    assert SimtConfig(fmt=FMT[sf_vec_size], vector=True).elements_per_unit == 16
    assert SimtConfig(fmt=FMT[sf_vec_size], vector=True, vector_elements=32).elements_per_unit == 32
    # 4096 columns: 256 or 128 groups; swizzled, their domain is already whole 4-group words.
    assert SimtConfig(fmt=FMT[sf_vec_size]).units_per_row(4096) == 4096 // sf_vec_size
    assert SimtConfig(fmt=FMT[sf_vec_size], vector=True, vector_elements=8).units_per_row(4096) == 512


# --- determinism and sensitivity --------------------------------------------------------------------------------


def test_equal_configs_render_identical_sources():
    a = render(QuantizeConfig(num_stages=2, input_swizzle=128).spec)
    b = render(QuantizeConfig(num_stages=2, input_swizzle=S.B128).spec)
    assert a == b
    assert render(SimtConfig().spec) == render(SimtConfig(threads=256).spec)


@pytest.mark.parametrize(
    "changes",
    [
        dict(tile_k=256, output_box_k=128, output_swizzle=S.B128, num_stages=2),
        dict(tile_m=256, num_stages=2),
        dict(num_stages=3),
        dict(out_buffers=3),
        dict(consumer_warpgroups=1),
        dict(input_box_k=32, input_swizzle=S.B64),
        dict(output_box_k=32, output_swizzle=S.B32),
        dict(min_ctas_per_sm=1, setmaxnreg=False),
        dict(sf_layout="linear"),
        dict(tensor_sf_mode="pointer"),
        dict(input_dtype="float16"),
        dict(arch="sm_100f"),
    ],
    ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()),
)
def test_code_affecting_fields_change_the_code(changes):
    base = render(QuantizeConfig().spec)
    other = render(QuantizeConfig(**changes).spec)
    assert other.source != base.source
    # not only in the summary comment: the compiled text differs
    assert code_lines(other.source) != code_lines(base.source)


def test_persistent_changes_only_the_grid():
    # persistent only changes the launch grid: one source, so one cache entry
    a, b = QuantizeConfig().spec, QuantizeConfig(persistent=False).spec
    assert render(a).source == render(b).source
    assert a.grid != b.grid and a.grid.persistent and not b.grid.persistent


def test_all_distinct_configs_render_distinct_sources():
    cfgs = list(CONFIGS.values()) + [SimtConfig(), SimtConfig(threads=128), SimtConfig(arch="sm_100f")]
    sources = [render(c.spec) for c in cfgs]
    assert len(set(sources)) == len(cfgs)


def test_header_edit_changes_rendered_text(monkeypatch, tmp_path, fresh_template_cache):
    before = render(QuantizeConfig().spec)
    copy = tmp_path / "ptx_templates"
    shutil.copytree(REPO_TEMPLATES, copy)
    header = copy / "ptx" / "types.cuh"
    header.write_text(header.read_text().replace("typedef unsigned char u8;", "typedef unsigned char u8;  // edited"))
    monkeypatch.setattr(codegen, "templates_dir", lambda: copy)
    # the lru cache still holds the old text until cleared
    assert render(QuantizeConfig().spec) == before
    codegen._read_template.cache_clear()
    after = render(QuantizeConfig().spec)
    assert after.source != before.source
    assert "typedef unsigned char u8;  // edited" in after.source
    assert after.source.replace("  // edited", "") == before.source
    # every kernel that includes ptx/types.cuh sees the edit
    assert "// edited" in render(SimtConfig().spec).source
    assert "// edited" in render(numerics_probe_spec("sm_90a")).source


def test_template_edit_of_the_kernel_changes_rendered_text(monkeypatch, tmp_path, fresh_template_cache):
    before = render(SimtConfig().spec)
    copy = tmp_path / "t"
    shutil.copytree(REPO_TEMPLATES, copy)
    kernel = copy / "kernels" / "quantize_fp4_simt.cu"
    kernel.write_text(kernel.read_text() + "\n// trailing edit\n")
    monkeypatch.setattr(codegen, "templates_dir", lambda: copy)
    codegen._read_template.cache_clear()
    assert render(SimtConfig().spec).source == before.source + "\n// trailing edit\n"


@pytest.mark.parametrize("bad", [None, "sm_90a", {"tile_k": 128}, 1, object(), QuantizeConfig])
def test_render_wrong_type_raises_type_error(bad):
    with pytest.raises(TypeError, match=r"render takes a KernelSpec \(a config's .spec\), got"):
        render(bad)


# --- numerics probe ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100f"])
def test_render_numerics_probe(arch):
    src = render(numerics_probe_spec(arch))
    assert src.kernel_name == "fp4q_numerics_probe" and src.arch == arch
    assert not re.search(r"^\s*#\s*(include|pragma\s+once)", src.source, re.M)
    assert 'extern "C" __global__ void fp4q_numerics_probe(' in src.source
    d = defines(src.source)
    assert d["FP4Q_INPUT_FP16"] == "0"
    assert d["FP4Q_HAS_CVT_E2M1"] == ("1" if arch == "sm_100f" else "0")
    # the numerics header is present exactly once
    assert src.source.count("FP4Q_DEVICE u32 nvfp4_scale_pair(") == 1


def test_numerics_probe_differs_by_arch():
    assert render(numerics_probe_spec("sm_90a")).source != render(numerics_probe_spec("sm_100f")).source


@pytest.mark.parametrize("cfg", [SimtConfig(vector=True), SimtConfig(), QuantizeConfig(num_stages=2)],
                         ids=["vector", "plain", "tma"])
def test_the_prologue_selects_its_steps_and_doubles_the_tma_stage(cfg):
    silu = cfg.replace(prologue="silu_mul")
    assert constants(render(silu.spec).source)["PROLOGUE"] == 1
    assert "exp_f32" in render(silu.spec).source  # the SiLU·mul transform's numerics are rendered
    if isinstance(cfg, QuantizeConfig):
        assert silu.smem.q == 2 * cfg.smem.q  # each stage holds both halves' tiles
