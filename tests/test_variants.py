"""The shipped variants: valid, uniquely named, and covering every tuning axis."""

import dataclasses
import re

import pytest

from fp4q.jit import render as codegen
from fp4q.kernels.archs import ARCHS
from fp4q.kernels.rules import ConfigError
from fp4q.kernels.quantize import QuantizeConfig, SimtConfig, default_config
from fp4q.kernels.spec import Swizzle
from fp4q.kernels.variants import SHIPPED_MX, SHIPPED, SIMT, all_variants

S = Swizzle


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
    for arch in ARCHS:
        for layout in ("swizzled", "linear"):
            assert cfg.replace(arch=arch, sf_layout=layout).smem.total <= ARCHS[arch].max_smem_per_block


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


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_all_variants(arch):
    out = quantize_variants(arch)
    base = {**SHIPPED, **SHIPPED_MX, **SIMT}
    for name, cfg in base.items():
        modes = ("value", "pointer") if cfg.sf_vec_size == 16 else ("value",)
        for layout in ("swizzled", "linear"):
            for mode in modes:
                v = out[f"{name}/{layout}/{mode}"]
                assert type(v) is type(cfg)
                assert (v.arch, v.sf_layout, v.tensor_sf_mode) == (arch, layout, mode)
                # everything else is the shipped config
                assert v.replace(arch="sm_90a", sf_layout="swizzled", tensor_sf_mode="value") == cfg
    assert set(out) - {n for n in out if n.startswith("tuned_")} == {
        f"{n}/{layout}/{mode}" for n, c in base.items() for layout in ("swizzled", "linear")
        for mode in (("value", "pointer") if c.sf_vec_size == 16 else ("value",))}
    assert len(set(out.values())) == len(out)


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_all_variants_cover_both_layouts_and_modes(arch):
    out = quantize_variants(arch)
    by_base = {}
    for name, cfg in out.items():
        base, layout, mode = name.split("/")
        by_base.setdefault(base, set()).add((cfg.sf_layout, cfg.tensor_sf_mode))
        assert cfg.sf_vec_size in (16, 32)
    nvfp4 = {("swizzled", "value"), ("swizzled", "pointer"), ("linear", "value"), ("linear", "pointer")}
    for base, combos in by_base.items():
        mx = base.startswith("mx_")
        assert combos == ({c for c in nvfp4 if c[1] == "value"} if mx else nvfp4), base


def test_all_variants_rejects_unknown_arch():
    with pytest.raises(ConfigError, match="arch must be one of"):
        all_variants("sm_80")
