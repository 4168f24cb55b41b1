"""QuantizeConfig / SimtConfig: every validation rule, the derived shapes and the defaults."""

import dataclasses
import itertools
import re

import pytest

from fp4q.jit import render as codegen
from fp4q.kernels.quantize import ALIGN_SLACK, QuantizeConfig, SimtConfig, default_config, default_mx_config
from fp4q.kernels.archs import ARCHS
from fp4q.kernels.rows import RowConfig, for_row
from fp4q.kernels.rules import ConfigError
from fp4q.kernels.spec import Swizzle

S = Swizzle


def raises_config(*fragments):
    """pytest.raises(ConfigError) whose message holds each fragment literally, in order."""
    return pytest.raises(ConfigError, match=".*".join(re.escape(f) for f in fragments))


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)
    with pytest.raises(ValueError):
        QuantizeConfig(arch="sm_80")


def test_default_config_is_valid_and_uses_documented_defaults():
    cfg = QuantizeConfig()
    assert (cfg.tile_m, cfg.tile_k, cfg.input_box_k, cfg.output_box_k) == (128, 128, 64, 64)
    assert cfg.input_swizzle is S.B128 and cfg.output_swizzle is S.B64
    assert cfg.threads == 128 + 2 * 128


# --- one test per rule: the message names the field, the value and the rule ----------------------------------


@pytest.mark.parametrize("arch", ["sm_86", "sm_90", "sm_100", "sm_100a", "SM_90A", "", None])
def test_unsupported_arch(arch):
    with raises_config("arch must be one of 'sm_80', 'sm_90a', 'sm_100f', 'sm_110f', 'sm_120f', 'sm_80_on_sm_90a', got", repr(arch)):
        QuantizeConfig(arch=arch)
    with raises_config("arch must be one of", repr(arch)):
        SimtConfig(arch=arch)


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_supported_archs(arch):
    assert SimtConfig(arch=arch).arch == arch
    small = QuantizeConfig(tile_k=64, output_box_k=32, output_swizzle=S.B32, num_stages=2, consumer_warpgroups=1)
    if ARCHS[arch].features.tma:
        assert small.replace(arch=arch).arch == arch
    else:
        with raises_config(f"arch={arch!r} has no TMA, so QuantizeConfig (a TMA kernel) cannot run there"):
            small.replace(arch=arch)


def test_the_default_tma_config_does_not_fit_sm_120f():
    # four stages of 128x128 bf16 tiles are 128 KiB: sm_120f has 99 KiB per block
    with raises_config("(num_stages=4, tile 128x128) exceeds the sm_120f limit of 101376 bytes per block"):
        QuantizeConfig(arch="sm_120f")
    with raises_config("min_ctas_per_sm=3 CTAs of", "do not fit in the 102400 bytes of one sm_120f SM"):
        QuantizeConfig(tile_k=64, output_box_k=32, output_swizzle=S.B32, num_stages=2, consumer_warpgroups=1,
                       min_ctas_per_sm=3, arch="sm_120f")


def test_threads_per_sm_of_sm_110f():
    # Thor has Hopper's shared memory but 1536 threads per SM: three CTAs of 544 threads fit only on Hopper
    from fp4q.kernels.dequantize import DequantizeConfig

    cfg = DequantizeConfig(consumer_warps=16, min_ctas_per_sm=3)
    assert cfg.threads == 544 and cfg.arch == "sm_90a"
    with raises_config("min_ctas_per_sm=3 CTAs of 544 threads exceed 1536 threads per sm_110f SM"):
        cfg.replace(arch="sm_110f")


# The format is one field, fmt; the group size (sf_vec_size) follows from it and is no field of its own.
@pytest.mark.parametrize("value", ["fp8", "NVFP4", "", None, 16, 32])
def test_fmt_must_be_nvfp4_or_mxfp4(value):
    with raises_config("fmt must be 'nvfp4' or 'mxfp4', got", repr(value)):
        QuantizeConfig(fmt=value)
    with raises_config("fmt must be 'nvfp4' or 'mxfp4', got", repr(value)):
        SimtConfig(fmt=value)


@pytest.mark.parametrize("cls", [QuantizeConfig, SimtConfig])
def test_sf_vec_size_is_derived_from_fmt_and_read_only(cls):
    assert cls().sf_vec_size == 16 and cls(fmt="nvfp4").sf_vec_size == 16
    assert cls(fmt="mxfp4").sf_vec_size == 32 and cls().replace(fmt="mxfp4").sf_vec_size == 32
    for value in (16, 32):
        with pytest.raises(TypeError, match="sf_vec_size"):
            cls(sf_vec_size=value)
        with pytest.raises(TypeError, match="sf_vec_size"):
            cls().replace(sf_vec_size=value)
    with pytest.raises(AttributeError):
        cls().sf_vec_size = 32


def test_mxfp4_tile_k_must_cover_a_scale_block():
    with raises_config("tile_k must be a multiple of 128 for fmt='mxfp4'", "got 64"):
        QuantizeConfig(fmt="mxfp4", tile_k=64, output_box_k=32, output_swizzle=S.B32, consumer_warpgroups=1)
    cfg = QuantizeConfig(fmt="mxfp4")
    assert cfg.scales_box == (1, 1, 32, 16)


@pytest.mark.parametrize("value", ["RCEIL", "ceil", "", None])
def test_mx_mode(value):
    with raises_config("mx_mode must be 'rceil' or 'floor', got", repr(value)):
        QuantizeConfig(fmt="mxfp4", mx_mode=value)


@pytest.mark.parametrize("value", [64, 192, 512, 0, True])
def test_tile_m_must_be_128_or_256(value):
    with raises_config("tile_m must be 128 or 256, got", repr(value)):
        QuantizeConfig(tile_m=value)


@pytest.mark.parametrize("value", [96, 160, 200])
def test_tile_k_not_a_multiple_of_64(value):
    with raises_config("tile_k must be a multiple of 64", f"got {value}"):
        QuantizeConfig(tile_k=value, input_box_k=16, input_swizzle=S.NONE, output_box_k=16, output_swizzle=S.NONE)


@pytest.mark.parametrize("value", [0, 32, 1088, 128.0, "128", True])
def test_tile_k_out_of_range_or_not_an_int(value):
    with raises_config("tile_k must be an integer in [64, 1024], got", repr(value)):
        QuantizeConfig(tile_k=value)


def test_input_box_larger_than_swizzle_span():
    # 128 bf16 = 256 bytes in a 128-byte swizzle span.
    with raises_config("input_box_k must fill the input_swizzle span of 128 bytes, got 256 bytes"):
        QuantizeConfig(input_box_k=128, input_swizzle=S.B128)


def test_output_box_larger_than_swizzle_span():
    with raises_config("output_box_k must fill the output_swizzle span of 32 bytes, got 64 bytes"):
        QuantizeConfig(output_box_k=64, output_swizzle=S.B32)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(input_box_k=32, input_swizzle=S.B128), "input_box_k must fill the input_swizzle span of 128 bytes, got 64 bytes"),
        (dict(input_box_k=16, input_swizzle=S.B64), "input_box_k must fill the input_swizzle span of 64 bytes, got 32 bytes"),
        (dict(output_box_k=32, output_swizzle=S.B64), "output_box_k must fill the output_swizzle span of 64 bytes, got 32 bytes"),
        (dict(output_box_k=16, output_swizzle=S.B32), "output_box_k must fill the output_swizzle span of 32 bytes, got 16 bytes"),
    ],
)
def test_box_not_filling_swizzle_span(changes, message):
    with raises_config(message):
        QuantizeConfig(**changes)


@pytest.mark.parametrize(
    "changes, message",
    [
        # 48 bf16 = 96 bytes, tile row 128 bf16 = 256 bytes
        (dict(input_box_k=48, input_swizzle=S.NONE), "input_box_k (96 bytes) must divide the input tile row (256 bytes)"),
        # tile row 64 bytes of packed output
        (dict(output_box_k=48, output_swizzle=S.NONE), "output_box_k (48 bytes) must divide the output tile row (64 bytes)"),
        # a box wider than the whole tile row
        (dict(tile_k=64, output_box_k=64, output_swizzle=S.B64, consumer_warpgroups=1),
         "output_box_k (64 bytes) must divide the output tile row (32 bytes)"),
    ],
)
def test_box_not_dividing_tile(changes, message):
    with raises_config(message):
        QuantizeConfig(**changes)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(input_box_k=4, input_swizzle=S.NONE), "input_box_k must span a multiple of 16 bytes (TMA), got 8 bytes"),
        (dict(output_box_k=8, output_swizzle=S.NONE), "output_box_k must span a multiple of 16 bytes (TMA), got 8 bytes"),
    ],
)
def test_box_not_a_multiple_of_16_bytes(changes, message):
    with raises_config(message):
        QuantizeConfig(**changes)


@pytest.mark.parametrize("field", ["input_box_k", "output_box_k"])
@pytest.mark.parametrize("value", [257, 512, 0, -64])
def test_box_dimension_out_of_range(field, value):
    with raises_config(f"{field} must be an integer in [1, 256], got {value}"):
        QuantizeConfig(**{field: value}, tile_k=1024, input_swizzle=S.NONE, output_swizzle=S.NONE)


def test_box_of_256_elements_is_allowed():
    cfg = QuantizeConfig(tile_k=256, input_box_k=256, input_swizzle=S.NONE, output_box_k=128,
                         output_swizzle=S.NONE, num_stages=2)
    assert (cfg.input_box_k, cfg.output_box_k) == (256, 128)
    assert cfg.spec.maps[0].box[0] == 256


@pytest.mark.parametrize("field", ["input_swizzle", "output_swizzle"])
@pytest.mark.parametrize("value", [48, 16, 256, 1, -32, "128", None, True])
def test_swizzle_not_an_enum_value(field, value):
    with raises_config(f"{field} must be one of [0, 32, 64, 128] (bytes), got {value!r}"):
        QuantizeConfig(**{field: value})


def test_swizzle_accepts_ints():
    cfg = QuantizeConfig(input_swizzle=128, output_swizzle=64)
    assert cfg.input_swizzle is S.B128 and isinstance(cfg.input_swizzle, Swizzle)
    assert cfg.output_swizzle is S.B64
    assert cfg == QuantizeConfig() and hash(cfg) == hash(QuantizeConfig())
    assert repr(cfg) == repr(QuantizeConfig())
    none = QuantizeConfig(input_box_k=128, input_swizzle=0, output_box_k=64, output_swizzle=0)
    assert none.input_swizzle is S.NONE and none.output_swizzle is S.NONE
    assert QuantizeConfig(input_box_k=32, input_swizzle=64, output_box_k=32, output_swizzle=32).output_swizzle is S.B32


def test_shared_memory_over_the_arch_limit():
    # 8 stages of a 128x128 bf16 tile are 256 KiB of input alone.
    with raises_config("shared memory of", "bytes (num_stages=8, tile 128x128) exceeds the sm_90a limit of "
                       f"{ARCHS['sm_90a'].max_smem_per_block} bytes per block"):
        QuantizeConfig(num_stages=8)
    with raises_config("(num_stages=8, tile 128x128) exceeds the sm_100f limit"):
        QuantizeConfig(num_stages=8, arch="sm_100f")
    with raises_config("(num_stages=4, tile 256x128) exceeds the sm_90a limit"):
        QuantizeConfig(tile_m=256, num_stages=4)


def test_largest_stage_count_that_fits_is_accepted():
    fits = [n for n in range(1, 17) if _valid(num_stages=n)]
    assert fits == list(range(1, max(fits) + 1))
    cfg = QuantizeConfig(num_stages=max(fits))
    assert cfg.smem.total <= ARCHS["sm_90a"].max_smem_per_block
    assert QuantizeConfig(num_stages=6).smem.total <= ARCHS["sm_90a"].max_smem_per_block


def _valid(**changes):
    try:
        QuantizeConfig(**changes)
    except ConfigError:
        return False
    return True


@pytest.mark.parametrize("ctas", [2, 3, 4])
def test_min_ctas_per_sm_that_does_not_fit(ctas):
    total = QuantizeConfig().smem.total
    with raises_config(f"min_ctas_per_sm={ctas} CTAs of {total} bytes of shared memory do not fit in the "
                       f"{ARCHS['sm_90a'].smem_per_sm} bytes of one sm_90a SM"):
        QuantizeConfig(min_ctas_per_sm=ctas)


def test_min_ctas_per_sm_that_fits():
    cfg = QuantizeConfig(tile_k=64, output_box_k=32, output_swizzle=S.B32, consumer_warpgroups=1, min_ctas_per_sm=2)
    assert 2 * (cfg.smem.total + 1024) <= ARCHS["sm_90a"].smem_per_sm


@pytest.mark.parametrize("value", [0, 5, 2.0, True])
def test_min_ctas_per_sm_out_of_range(value):
    with raises_config(f"min_ctas_per_sm must be an integer in [1, 4], got {value!r}"):
        QuantizeConfig(min_ctas_per_sm=value)


@pytest.mark.parametrize(
    "changes, chunks, threads",
    [
        (dict(tile_k=64, output_box_k=32, output_swizzle=S.B32, consumer_warpgroups=2), 128, 256),
        (dict(consumer_warpgroups=3), 256, 384),
        (dict(tile_k=64, output_box_k=32, output_swizzle=S.B32, consumer_warpgroups=3), 128, 384),
    ],
)
def test_consumers_not_splitting_a_tile(changes, chunks, threads):
    with raises_config(f"tile_m * tile_k / 64 = {chunks} chunks must split evenly over "
                       f"consumer_warpgroups * 128 = {threads} threads"):
        QuantizeConfig(**changes)


@pytest.mark.parametrize(
    "field, value, lo, hi",
    [("num_stages", 0, 1, 16), ("num_stages", 17, 1, 16), ("consumer_warpgroups", 0, 1, 3),
     ("consumer_warpgroups", 4, 1, 3), ("out_buffers", 1, 2, 4), ("out_buffers", 5, 2, 4),
     ("num_stages", "4", 1, 16), ("out_buffers", None, 2, 4)],
)
def test_integer_ranges(field, value, lo, hi):
    with raises_config(f"{field} must be an integer in [{lo}, {hi}], got {value!r}"):
        QuantizeConfig(**{field: value})


@pytest.mark.parametrize(
    "field, value, rule",
    [
        ("tensor_sf_mode", "ptr", "must be one of 'value', 'pointer' for fmt='nvfp4'"),
        ("tensor_sf_mode", "Value", "must be one of 'value', 'pointer' for fmt='nvfp4'"),
        ("sf_layout", "128x4", "must be one of 'swizzled', 'linear', '8x4'"),
        ("sf_layout", None, "must be one of 'swizzled', 'linear', '8x4'"),
        ("input_dtype", "float32", "must be 'bfloat16' or 'float16'"),
        ("input_dtype", "bf16", "must be 'bfloat16' or 'float16'"),
    ],
)
def test_bad_string_choices(field, value, rule):
    with raises_config(f"{field} {rule}, got {value!r}"):
        QuantizeConfig(**{field: value})
    if field == "input_dtype":  # the plain SIMT kernel reads float32 x too
        rule = "must be one of 'bfloat16', 'float16', 'float32'"
        if value == "float32":
            return
    with raises_config(f"{field} {rule}, got {value!r}"):
        SimtConfig(**{field: value})


def test_float32_input_is_the_plain_simt_kernels():
    assert SimtConfig(input_dtype="float32", fmt="mxfp4").input_dtype == "float32"
    for changes in (dict(vector=True), dict(prologue="silu_mul")):
        with raises_config("input_dtype='float32' is read by the plain SIMT kernel alone (vector=False, "
                           "prologue='none'), got "):
            SimtConfig(input_dtype="float32", **changes)


@pytest.mark.parametrize("field", ["persistent", "setmaxnreg"])
@pytest.mark.parametrize("value", [1, 0, "yes", None, 1.0])
def test_bool_fields_given_non_bools(field, value):
    with raises_config(f"{field} must be a bool, got {value!r}"):
        QuantizeConfig(**{field: value})


@pytest.mark.parametrize("value", [32, 100, 2048, 0, True])
def test_simt_threads(value):
    with raises_config(f"threads must be one of 64, 128, 256, 512, 1024, got {value!r}"):
        SimtConfig(threads=value)


@pytest.mark.parametrize("threads", [64, 128, 256, 512, 1024])
def test_simt_threads_valid(threads):
    assert SimtConfig(threads=threads).threads == threads


@pytest.mark.parametrize("value", [1, "yes", None])
def test_simt_vector_must_be_bool(value):
    with raises_config(f"vector must be a bool, got {value!r}"):
        SimtConfig(vector=value)


@pytest.mark.parametrize(
    "make",
    [lambda: QuantizeConfig(tile_m=128.0), lambda: QuantizeConfig(fmt=16.0),
     lambda: SimtConfig(vector=True, vector_elements=16.0), lambda: SimtConfig(threads=256.0)],
    ids=["tile_m", "fmt_as_a_group_size", "vector_elements", "simt_threads"],
)
def test_float_values_of_integer_fields_are_rejected(make):
    with pytest.raises(ConfigError):
        make()


# --- immutability and replace -----------------------------------------------------------------------------------


def test_frozen():
    cfg = QuantizeConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.tile_k = 256
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.input_swizzle = S.NONE
    simt = SimtConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        simt.threads = 128
    assert cfg.tile_k == 128 and simt.threads == 256


def test_replace_revalidates():
    cfg = QuantizeConfig()
    with raises_config("num_stages=8"):
        cfg.replace(num_stages=8)
    with raises_config("input_swizzle must be one of [0, 32, 64, 128] (bytes), got 48"):
        cfg.replace(input_swizzle=48)
    with raises_config("arch must be one of"):
        SimtConfig().replace(arch="sm_89")
    new = cfg.replace(tile_k=256, output_box_k=128, output_swizzle=128, num_stages=2)
    assert new.output_swizzle is S.B128 and new.tile_k == 256
    assert cfg.tile_k == 128  # the original is untouched
    assert SimtConfig().replace(sf_layout="linear").sf_layout == "linear"


def test_configs_are_hashable_and_compare_by_value():
    a, b = QuantizeConfig(num_stages=2), QuantizeConfig(num_stages=2)
    assert a == b and hash(a) == hash(b)
    assert a != QuantizeConfig(num_stages=3)
    assert len({a, b, QuantizeConfig()}) == 2


# --- derived shapes ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes, scales",
    [
        (dict(), (1, 2, 32, 16)),
        (dict(tile_m=256, num_stages=2), (2, 2, 32, 16)),
        (dict(tile_k=256, output_box_k=128, output_swizzle=S.B128, num_stages=2), (1, 4, 32, 16)),
        (dict(input_box_k=16, input_swizzle=S.B32, output_box_k=16, output_swizzle=S.NONE), (1, 2, 32, 16)),
        (dict(tile_k=64, output_box_k=32, output_swizzle=S.B32, consumer_warpgroups=1), (1, 1, 32, 16)),
        (dict(fmt="mxfp4", tile_k=256, output_box_k=128, output_swizzle=S.B128, num_stages=2), (1, 2, 32, 16)),
    ],
)
def test_scales_box(changes, scales):
    cfg = QuantizeConfig(**changes)
    assert cfg.scales_box == scales
    # one scale byte per group of the tile
    n_blocks_m, n_blocks_k, a, b = cfg.scales_box
    assert n_blocks_m * n_blocks_k * a * b == cfg.tile_m * cfg.tile_k // cfg.sf_vec_size


def test_threads():
    assert QuantizeConfig(consumer_warpgroups=1).threads == 256
    assert QuantizeConfig().consumer_threads == 256
    assert QuantizeConfig(tile_k=192, output_box_k=96, output_swizzle=S.NONE, consumer_warpgroups=3).threads == 512


def _valid_configs():
    """A broad grid of valid configs (both archs, both layouts)."""
    out = []
    for tm, tk, st, wg, ob, mc, layout, arch in itertools.product(
        (128, 256), (64, 128, 192, 256, 512), (1, 2, 3, 4, 6), (1, 2, 3), (2, 3), (1, 2, 4),
        ("swizzled", "linear"), ("sm_90a", "sm_100f"),
    ):
        try:
            out.append(QuantizeConfig(tile_m=tm, tile_k=tk, num_stages=st, consumer_warpgroups=wg, out_buffers=ob,
                                      min_ctas_per_sm=mc, sf_layout=layout, arch=arch, input_box_k=64,
                                      output_box_k=32, output_swizzle=S.B32))
        except ConfigError:
            pass
    assert len(out) > 100
    return out


VALID = _valid_configs()


def test_smem_layout_alignment_and_sizes():
    for cfg in VALID:
        sm = cfg.smem
        stage = cfg.tile_m * cfg.tile_k * 2
        q_tile = cfg.tile_m * cfg.tile_k // 2
        sf_tile = cfg.tile_m * cfg.tile_k // 16 if cfg.sf_layout == "swizzled" else 0
        assert sm.input == 0
        assert sm.q % 1024 == 0 and sm.q >= cfg.num_stages * stage, cfg
        assert sm.sf % 128 == 0 and sm.sf >= sm.q + cfg.out_buffers * q_tile, cfg
        assert sm.barriers % 8 == 0 and sm.barriers >= sm.sf + cfg.out_buffers * sf_tile, cfg
        # after the barriers, one int per stage naming its tile; then the slack for
        # aligning the dynamic shared memory to 1024 bytes
        assert sm.tiles == sm.barriers + 2 * cfg.num_stages * 8
        assert sm.total == sm.tiles + 4 * cfg.num_stages + ALIGN_SLACK == sm.barriers + 20 * cfg.num_stages + 1024
        assert sm.total <= ARCHS[cfg.arch].max_smem_per_block
        assert cfg.min_ctas_per_sm * (sm.total + 1024) <= ARCHS[cfg.arch].smem_per_sm


def test_smem_layout_of_the_default_config():
    sm = QuantizeConfig().smem
    # 4 stages x 32 KiB input, 2 x 8 KiB codes, 2 x 1 KiB scales, 8 barriers, 4 stage tiles, 1 KiB slack
    assert (sm.input, sm.q, sm.sf, sm.barriers, sm.tiles, sm.total) == (
        0, 131072, 147456, 149504, 149504 + 64, 149504 + 64 + 16 + 1024)
    linear = QuantizeConfig(sf_layout="linear").smem
    assert linear.barriers == linear.sf == 147456  # no scale buffers in shared memory


def test_register_split():
    for cfg in VALID:
        producer, consumer = cfg.register_split
        entry = min(255, 65536 // (cfg.threads * cfg.min_ctas_per_sm)) // 8 * 8
        for regs in (producer, consumer):
            assert regs % 8 == 0 and 24 <= regs <= 256, (cfg, producer, consumer)
        per_cta = producer * 128 + consumer * cfg.consumer_threads
        assert per_cta * cfg.min_ctas_per_sm <= ARCHS[cfg.arch].regs_per_sm, cfg
        assert per_cta <= entry * cfg.threads, cfg  # fits in what the CTA holds at entry
        # setmaxnreg.dec may only lower and .inc only raise the count at entry
        assert producer <= entry <= consumer, (cfg, producer, consumer, entry)


@pytest.mark.parametrize(
    "changes, split",
    [
        (dict(), (40, 232)),  # 384 threads: 168 at entry, 40*128 + 232*256 = 168*384
        (dict(consumer_warpgroups=1), (40, 256)),
        (dict(tile_k=192, output_box_k=96, output_swizzle=S.NONE, consumer_warpgroups=3), (40, 152)),
        (dict(tile_k=64, output_box_k=32, output_swizzle=S.B32, consumer_warpgroups=1, min_ctas_per_sm=2), (40, 216)),
    ],
)
def test_register_split_values(changes, split):
    assert QuantizeConfig(**changes).register_split == split


# --- default_config ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", sorted(a for a in ARCHS if ARCHS[a].features.tma))
def test_default_config(arch):
    cfg = default_config(arch)
    assert isinstance(cfg, QuantizeConfig) and cfg.arch == arch
    # The measured all-round best on the H200: 128x64 tiles, two stages, one
    # consumer warpgroup, three CTAs per SM; two where three do not fit (sm_120f).
    ctas = 2 if arch == "sm_120f" else 3
    assert (cfg.tile_m, cfg.tile_k, cfg.num_stages, cfg.consumer_warpgroups, cfg.min_ctas_per_sm) == (128, 64, 2, 1, ctas)
    assert cfg.tile_m * cfg.tile_k // 64 % cfg.consumer_threads == 0
    # valid: rebuilding it from its fields passes validation
    assert QuantizeConfig(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}) == cfg
    assert codegen.render(cfg.spec).arch == arch


@pytest.mark.parametrize("arch", sorted(a for a in ARCHS if ARCHS[a].features.tma))
def test_default_mx_config(arch):
    cfg = default_mx_config(arch)
    assert (cfg.sf_vec_size, cfg.tile_k, cfg.num_stages, cfg.consumer_warpgroups) == (32, 128, 2, 1)
    assert cfg.min_ctas_per_sm == (1 if arch == "sm_120f" else 2)


def test_no_default_tma_config_without_tma():
    with raises_config("arch='sm_80' has no TMA"):
        default_config("sm_80")
    with raises_config("arch='sm_80' has no TMA"):
        default_mx_config("sm_80")


def test_default_config_arch_default_and_check():
    assert default_config().arch == "sm_90a"
    with raises_config("arch must be one of 'sm_80', 'sm_90a', 'sm_100f', 'sm_110f', 'sm_120f', 'sm_80_on_sm_90a', got 'sm_89'"):
        default_config("sm_89")
    with raises_config("arch must be one of", "got 'sm_100'"):
        default_config("sm_100")


def test_row_kernel_shapes():
    # The smallest CTA that holds the row: 128 threads of one unit up to 128 groups, unless a
    # row reduction fixes the CTA at 256 threads; then 256 threads of the fewest units.
    shape = lambda cfg: (cfg.threads, cfg.row_units)  # noqa: E731
    assert shape(for_row(2048, tensor_sf_mode="per_row")) == (128, 1)
    assert shape(for_row(4096, tensor_sf_mode="per_row")) == (256, 1)
    assert shape(for_row(4096, fmt="mxfp4")) == (128, 1)
    assert shape(for_row(2048, prologue="rms_norm")) == (256, 1)
    assert shape(for_row(2048, segments="experts", tensor_sf_mode="per_expert")) == (128, 1)
    assert shape(for_row(4112, segments="experts", tensor_sf_mode="per_expert")) == (256, 2)


@pytest.mark.parametrize("units, prologue", [(2, "none"), (1, "rms_norm"), (1, "add_rms_norm")])
def test_short_row_ctas_only_for_one_unit_without_reduction(units, prologue):
    with raises_config(f"threads=128 takes row_units=1 and no row reduction (the tree of RMSNorm's sum spans 256 "
                       f"threads), got row_units={units} and prologue={prologue!r}"):
        RowConfig(threads=128, row_units=units, prologue=prologue)
