"""The shipped variants: valid, uniquely named, and covering every tuning axis."""

import dataclasses
import re

import pytest

from fp4q.jit import render as codegen
from fp4q.kernels.archs import ARCHS, EMULATED_SM_80, fits
from fp4q.kernels.dequantize import DequantizeSimtConfig
from fp4q.kernels.fake_quantize import FakeQuantizeConfig
from fp4q.kernels.global_scale import AmaxConfig, FusedDynamicConfig, GlobalScaleConfig
from fp4q.kernels.tuning import choose_config, tuned_table
from fp4q.kernels.rules import ConfigError
from fp4q.kernels.quantize import QuantizeConfig, SimtConfig, default_config, default_mx_config
from fp4q.kernels.rows import RowConfig
from fp4q.kernels.training import HadamardAmaxConfig, TrainingConfig
from fp4q.kernels.spec import Swizzle
from fp4q.kernels.variants import MIN_FITTED_STAGES, SHIPPED_MX, SHIPPED, SIMT, all_variants, fitted, op_of

S = Swizzle
TMA_ARCHS = sorted(a for a in ARCHS if ARCHS[a].features.tma)


def quantize_variants(arch):
    """all_variants' quantization entries (the dequantization and global-scale ones follow them)."""
    return {n: c for n, c in all_variants(arch).items() if isinstance(c, (QuantizeConfig, SimtConfig))}


def rebuilt(cfg):
    """The config built again from its fields, i.e. validated from scratch."""
    return type(cfg)(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)})


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_config_is_valid(name):
    cfg = SHIPPED[name]
    assert isinstance(cfg, QuantizeConfig)
    assert rebuilt(cfg) == cfg
    for arch in TMA_ARCHS:
        fit = fitted(cfg, arch)
        if fit is None:
            continue
        for layout in ("swizzled", "linear"):
            assert fit.replace(sf_layout=layout).smem.total <= ARCHS[arch].max_smem_per_block


@pytest.mark.parametrize("name", sorted(SIMT))
def test_simt_config_is_valid(name):
    assert isinstance(SIMT[name], SimtConfig)
    assert rebuilt(SIMT[name]) == SIMT[name]


def test_shipped_defaults_are_the_call_independent_defaults():
    # sf_layout, tensor_sf_mode, input_dtype and arch are set per call; the shipped table uses the defaults
    for cfg in list(SHIPPED.values()) + list(SIMT.values()):
        assert (cfg.sf_layout, cfg.tensor_sf_mode, cfg.input_dtype, cfg.arch) == ("swizzled", "value", "bfloat16",
                                                                                   "sm_90a")


def test_names_unique_and_well_formed():
    names = list(SHIPPED) + list(SIMT)
    assert len(names) == len(set(names))
    assert not set(SHIPPED) & set(SIMT)  # a clash would silently drop one in all_variants
    for name in names:
        assert re.fullmatch(r"[A-Za-z0-9_]+", name), name
        assert "/" not in name


def test_configs_unique():
    # two names for one config would compile and test the same launch twice
    configs = list(SHIPPED.values())
    assert len(set(configs)) == len(configs)
    launches = {(codegen.render(c.spec).source, c.spec.grid) for c in configs}
    assert len(launches) == len(configs)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_name_matches_config(name):
    cfg = SHIPPED[name]
    m = re.match(r"m(\d+)_k(\d+)", name)
    assert m, name
    assert (cfg.tile_m, cfg.tile_k) == (int(m.group(1)), int(m.group(2)))
    if s := re.search(r"_s(\d+)(_|$)", name):
        assert cfg.num_stages == int(s.group(1))
    if wg := re.search(r"_wg(\d+)", name):
        assert cfg.consumer_warpgroups == int(wg.group(1))
    if cta := re.search(r"_(\d+)cta", name):
        assert cfg.min_ctas_per_sm == int(cta.group(1))
    if i := re.search(r"_in(\d+)B", name):
        assert cfg.input_swizzle == int(i.group(1))
    if o := re.search(r"_out(\d+)B", name):
        assert cfg.output_swizzle == int(o.group(1))
    assert ("noswizzle" in name) == (cfg.input_swizzle == S.NONE and cfg.output_swizzle == S.NONE)
    assert ("tile_per_cta" in name) == (not cfg.persistent)
    assert ("no_setmaxnreg" in name) == (not cfg.setmaxnreg)


def test_every_swizzle_mode_is_shipped():
    inputs = {c.input_swizzle for c in SHIPPED.values()}
    outputs = {c.output_swizzle for c in SHIPPED.values()}
    assert inputs | outputs == set(Swizzle)
    # each mode for the input and for the output separately, where the box rules allow it
    assert inputs == {S.NONE, S.B32, S.B64, S.B128}
    assert outputs == {S.NONE, S.B32, S.B64, S.B128}


def test_every_tuning_axis_is_shipped():
    cfgs = list(SHIPPED.values())
    assert {c.persistent for c in cfgs} == {True, False}
    assert {c.setmaxnreg for c in cfgs} == {True, False}
    assert {c.tile_m for c in cfgs} == {128, 256}
    assert {c.consumer_warpgroups for c in cfgs} == {1, 2, 3}
    assert {1, 2} <= {c.min_ctas_per_sm for c in cfgs}
    assert len({c.num_stages for c in cfgs}) >= 3
    assert {64, 128, 192, 256} <= {c.tile_k for c in cfgs}


def test_default_config_is_shipped():
    assert default_config() == SHIPPED["m128_k64_s2_wg1_3cta"]


def test_tuned_table_configs_are_compiled_variants():
    names = quantize_variants("sm_90a")
    from fp4q.kernels.tuning import tuned_table

    compiled = {cfg.replace(sf_layout="swizzled", tensor_sf_mode="value") for cfg in names.values()}
    assert tuned_table("sm_90a"), "the sm_90a tuned table is shipped"
    assert set(tuned_table("sm_90a").values()) <= compiled


def expected_bases(arch):
    """What all_variants(arch) should ship before layouts and modes: each SHIPPED(_MX) config fitted
    to the target, then the tuned table, the defaults and the SIMT configs in both input dtypes (the
    plain SIMT kernel in float32 as well), for
    MXFP4 both rounding modes, and under every prologue (a TMA config fitted to its larger stages)."""
    out = set()
    if ARCHS[arch].features.tma:
        out |= {fit for cfg in {**SHIPPED, **SHIPPED_MX}.values() if (fit := fitted(cfg, arch)) is not None}
        choosable = [*tuned_table(arch).values(), default_config(arch), default_mx_config(arch)]
    else:
        choosable = []
    for cfg in choosable + [c.replace(arch=arch) for c in SIMT.values()]:
        for prologue in ("none", "silu_mul"):
            for dtype in ("bfloat16", "float16"):
                for mode in ("rceil", "floor") if cfg.fmt == "mxfp4" else ("rceil",):
                    changes = dict(input_dtype=dtype, mx_mode=mode, prologue=prologue)
                    if isinstance(cfg, SimtConfig):
                        out.add(cfg.replace(**changes))
                        if not cfg.vector and prologue == "none" and dtype == "bfloat16":  # float32 x
                            out.add(cfg.replace(**dict(changes, input_dtype="float32")))
                    elif (fit := fitted(cfg, arch, **changes)) is not None:
                        out.add(fit)
    return out


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_all_variants(arch):
    out = quantize_variants(arch)
    want = set()
    for cfg in expected_bases(arch):
        for layout in cfg.sf_layouts:  # the TMA kernel's two, the SIMT kernels' three
            for mode in ("value", "pointer") if cfg.fmt == "nvfp4" else ("value",):
                want.add(cfg.replace(sf_layout=layout, tensor_sf_mode=mode))
    assert set(out.values()) == want
    assert len(set(out.values())) == len(out)
    for name, cfg in out.items():
        base, layout, mode = name.split("/")
        assert (cfg.arch, cfg.sf_layout, cfg.tensor_sf_mode) == (arch, layout, mode)
        assert ("_fp16" in base) == (cfg.input_dtype == "float16"), name
        assert ("_silu_mul" in base) == (cfg.prologue == "silu_mul"), name
    # the named configs keep their names where they fit unchanged
    for name, cfg in {**SHIPPED, **SHIPPED_MX, **SIMT}.items():
        if isinstance(cfg, SimtConfig) or fits(cfg, arch):
            assert out[f"{name}/swizzled/value"] == cfg.replace(arch=arch)


@pytest.mark.parametrize("arch", TMA_ARCHS)
def test_fitted_configs_are_the_largest_that_fit(arch):
    for name, cfg in {**SHIPPED, **SHIPPED_MX}.items():
        fit = fitted(cfg, arch)
        if fits(cfg, arch):
            assert fit == cfg.replace(arch=arch), name
            continue
        # every (stages, CTAs) tried before the fit, fewer CTAs first, does not fit
        tried = [(s, c) for s in range(cfg.num_stages, MIN_FITTED_STAGES - 1, -1)
                 for c in range(cfg.min_ctas_per_sm, 0, -1)]
        found = (fit.num_stages, fit.min_ctas_per_sm) if fit else None
        for stages, ctas in tried:
            if (stages, ctas) == found:
                break
            assert not fits(cfg.replace(num_stages=stages, min_ctas_per_sm=ctas), arch), (name, stages, ctas)
        if fit is not None:
            assert rebuilt(fit) == fit and fit.arch == arch


def test_what_sm_120f_ships():
    # 100 KB of shared memory per SM: everything runs fewer CTAs or stages, and the tiles of
    # 64 KiB per stage or more (k256, m256, k192 with three warpgroups) are left out
    names = {n.split("/")[0] for n in quantize_variants("sm_120f")}
    assert "m128_k128_s2" in {n for n, c in SHIPPED.items() if fits(c, "sm_120f")}
    assert not any(n.startswith(("m128_k256", "m256_k128", "m128_k192")) for n in names)
    assert "m128_k64_s6_wg1_fit_s5_1cta" in names
    assert "m128_k64_s2_wg1_3cta_fit_s2_2cta" in names  # the default's shape, two CTAs
    for cfg in quantize_variants("sm_120f").values():
        assert isinstance(cfg, SimtConfig) or cfg.smem.total <= 101376


@pytest.mark.parametrize("arch", ["sm_80", EMULATED_SM_80])
def test_pre_hopper_ships_only_simt_row_training_global_scale_and_fake_quantize(arch):
    out = all_variants(arch)
    kinds = {type(c) for c in out.values()}
    assert kinds == {SimtConfig, RowConfig, DequantizeSimtConfig, AmaxConfig, GlobalScaleConfig, FusedDynamicConfig,
                     TrainingConfig, HadamardAmaxConfig, FakeQuantizeConfig}
    assert set(SIMT) <= {n.split("/")[0] for n in out if isinstance(out[n], SimtConfig)}


@pytest.mark.parametrize("arch", sorted(ARCHS))
@pytest.mark.parametrize("m, k", [(1, 32), (16, 4096), (128, 8192), (1024, 1024), (4096, 4096), (8192, 8192),
                                  (100000, 96), (300, 16384)])
def test_chosen_configs_are_shipped(arch, m, k):
    # what a call without config= runs: choose_config's pick, or the SIMT fallbacks for shapes and
    # pointers the pick cannot serve, in the call's input dtype, MXFP4 mode, layout and tensor_sf mode
    shipped = set(quantize_variants(arch).values())
    for fmt in ("nvfp4", "mxfp4"):
        picks = [choose_config(m, k, arch, fmt), SimtConfig(fmt=fmt, arch=arch),
                 SimtConfig(fmt=fmt, vector=True, arch=arch)]
        assert all(cfg.fmt == fmt for cfg in picks)
        if not ARCHS[arch].features.tma:
            assert isinstance(picks[0], SimtConfig) and picks[0].vector
        for cfg in picks:
            for dtype in ("bfloat16", "float16"):
                for mx_mode in ("rceil", "floor") if fmt == "mxfp4" else ("rceil",):
                    for layout in cfg.sf_layouts:
                        for mode in ("value", "pointer") if fmt == "nvfp4" else ("value",):
                            call = cfg.replace(input_dtype=dtype, mx_mode=mx_mode, sf_layout=layout,
                                               tensor_sf_mode=mode)
                            assert call in shipped, call


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_the_test_kernel_is_not_shipped(arch):
    # The numerics probes build only for the tests (tests/probe.py): no variant of the package is one.
    assert not [name for name, cfg in all_variants(arch).items() if "probe" in name or "probe" in cfg.spec.name]


def test_all_variants_rejects_unknown_arch():
    with pytest.raises(ConfigError, match="arch must be one of"):
        all_variants("sm_89")


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_every_fake_quantize_call_is_shipped(arch):
    # what fake_quantize_nvfp4 runs without config=: the options' flags in each dtype and scale mode
    shipped = set(all_variants(arch).values())
    for block_2d, hadamard in ((False, False), (False, True), (True, False)):
        for stochastic in (False, True):
            for four_over_six in (False, True):
                for dtype in ("bfloat16", "float16"):
                    for mode in ("value", "pointer"):
                        for vector in (True, False):
                            cfg = FakeQuantizeConfig(block_2d=block_2d, hadamard=hadamard, stochastic=stochastic,
                                                     four_over_six=four_over_six, input_dtype=dtype,
                                                     tensor_sf_mode=mode, vector=vector, arch=arch)
                            assert cfg in shipped and op_of(cfg) == "fake_quantize_nvfp4", cfg
        for dtype in ("bfloat16", "float16"):  # the amax pass of "dynamic"
            for vector in (True, False):
                cfg = FakeQuantizeConfig(amax_pass=True, hadamard=block_2d, input_dtype=dtype, vector=vector, arch=arch)
                assert cfg in shipped and op_of(cfg) == "fake_quantize_nvfp4", cfg
    for four_over_six in (False, True):  # the scale pass of "dynamic"
        assert GlobalScaleConfig(four_over_six=four_over_six, arch=arch) in shipped


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_every_training_call_is_shipped(arch):
    # what quantize_nvfp4_training runs without config=: every direction and option the spec allows
    # (the Hadamard transform with a columnwise direction and 1D blocks), in each dtype and layout
    shipped = set(all_variants(arch).values())
    training = [cfg for cfg in shipped if isinstance(cfg, TrainingConfig)]
    want = set()
    for rowwise, columnwise in ((True, False), (False, True), (True, True)):
        for block_2d in (False, True):
            for hadamard in (False, True) if columnwise and not block_2d else (False,):
                for four_over_six in (False, True):
                    for stochastic in (False, True):
                        for dtype in ("bfloat16", "float16"):
                            for layout in ("swizzled", "linear", "8x4"):
                                want.add(TrainingConfig(rowwise=rowwise, columnwise=columnwise, block_2d=block_2d,
                                                        hadamard=hadamard, four_over_six=four_over_six,
                                                        stochastic=stochastic, input_dtype=dtype, sf_layout=layout,
                                                        arch=arch))
    assert set(training) == want and len(training) == 192
    assert all(op_of(cfg) == "quantize_nvfp4_training" for cfg in training)
    for four_over_six in (False, True):  # the scale pass of "dynamic"
        assert GlobalScaleConfig(four_over_six=four_over_six, arch=arch) in shipped
    for dtype in ("bfloat16", "float16"):  # the amax pass of a dynamic columnwise scale under the transform
        amax = HadamardAmaxConfig(input_dtype=dtype, arch=arch)
        assert amax in shipped and op_of(amax) == "quantize_nvfp4_training"
