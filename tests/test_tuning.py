"""fp4q.tuning: shape classes, the shipped table, the small-input rule and
the crossover the sweep writes into the table."""

from __future__ import annotations

import json
import pathlib

import pytest

import fp4q
from fp4q.kernels import tuning
from fp4q.kernels.rules import ConfigError
from fp4q.kernels.quantize import QuantizeConfig, SimtConfig, default_config, default_mx_config
from fp4q.kernels.variants import GLOBAL_SCALE

from scripts.sweep import sweep


@pytest.fixture
def table_file(tmp_path, monkeypatch):
    """Point the sm_90a table at a temporary file; returns a writer."""
    path = tmp_path / "tuned_sm_90a.json"
    monkeypatch.setattr(tuning, "table_path", lambda arch: path)

    def write(content: dict) -> None:
        path.write_text(json.dumps(content))
        tuning._table_json.cache_clear()
        tuning.tuned_table.cache_clear()
        tuning.choose_config.cache_clear()

    yield write
    tuning._table_json.cache_clear()
    tuning.tuned_table.cache_clear()
    tuning.choose_config.cache_clear()


@pytest.mark.parametrize("m, k, cls", [(1, 16, "m<=16,k<=2048"), (16, 2048, "m<=16,k<=2048"),
                                       (17, 2049, "m<=128,k<=4096"), (4097, 8193, "m>4096,k>8192")])
def test_shape_class(m, k, cls):
    assert tuning.shape_class(m, k) == cls


def test_shipped_table_records_where_it_was_measured():
    table = json.loads(tuning.table_path("sm_90a").read_text())
    assert {"device", "driver", "date", "entries", "vector_max_elements"} <= set(table)
    assert all(isinstance(cfg, QuantizeConfig) for cfg in tuning.tuned_table("sm_90a").values())


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("m, k", [(1, 16), (16, 4096), (128, 8192), (1000, 2048), (1024, 4096), (128, 16384)])
def test_small_inputs_choose_the_vector_kernel(m, k, fmt):
    assert m * k < tuning.vector_max_elements("sm_90a", fmt)
    cfg = tuning.choose_config(m, k, "sm_90a", fmt)
    assert cfg == SimtConfig(threads=tuning.VECTOR_THREADS, vector=True, fmt=fmt,
                             vector_elements=tuning.vector_elements(m, k, fmt))


@pytest.mark.parametrize("m, k, fmt, elements", [
    (1, 16, "nvfp4", 8), (16, 4096, "nvfp4", 8), (1, 65552, "nvfp4", 16), (17, 4096, "nvfp4", 16),
    (4096, 7168, "nvfp4", 16), (1, 64, "mxfp4", 16), (1024, 4080, "mxfp4", 16), (1024, 4096, "mxfp4", 32),
    (8192, 16384, "mxfp4", 32),
])
def test_elements_per_thread_of_the_vector_kernel(m, k, fmt, elements):
    assert tuning.vector_elements(m, k, fmt) == elements
    # A target without TMA takes the vector kernel at every size, with the same units.
    assert tuning.choose_config(m, k, "sm_80", fmt).vector_elements == elements


@pytest.mark.parametrize("m, k", [(8192, 8192), (16384, 4096), (4096, 16384), (16384, 16384)])
def test_large_inputs_choose_the_table_or_default(m, k):
    assert m * k >= tuning.vector_max_elements("sm_90a")
    cfg = tuning.choose_config(m, k, "sm_90a")
    assert cfg == tuning.tuned_table("sm_90a").get(tuning.shape_class(m, k), default_config())


@pytest.mark.parametrize("m, k, vector", [
    (2048, 4096, True), (4096, 7168, True), (8192, 8192, True), (8192, 16384, True), (16384, 16384, False),
])
def test_mxfp4_crosses_over_at_its_own_size(m, k, vector):
    # The table holds each format's crossover: MXFP4's vector kernel (a group per thread) serves larger inputs.
    assert tuning.vector_max_elements("sm_90a", "mxfp4") == 1 << 28
    cfg = tuning.choose_config(m, k, "sm_90a", "mxfp4")
    assert cfg == (SimtConfig(threads=tuning.VECTOR_THREADS, vector=True, fmt="mxfp4", vector_elements=32)
                   if vector else default_mx_config())
    nvfp4 = tuning.choose_config(m, k, "sm_90a")
    assert isinstance(nvfp4, SimtConfig) == (m * k < tuning.vector_max_elements("sm_90a"))


def test_arch_without_a_table_uses_the_default_rule():
    assert tuning.vector_max_elements("sm_100f") == tuning.VECTOR_MAX_ELEMENTS
    assert tuning.choose_config(16, 4096, "sm_100f").vector
    assert tuning.choose_config(8192, 8192, "sm_100f") == default_config("sm_100f")


@pytest.mark.parametrize("units, sm_count, threads", [
    (1, 132, 128),  # one unit: the smallest CTA
    (4096, 132, 128),  # 16x4096: 32 CTAs of 128, fewer than one per two SMs already
    (66 * 128, 132, 128),  # exactly one CTA per two SMs
    (66 * 256, 132, 256),  # 66 CTAs of 256
    (65 * 256, 132, 128),  # 65 CTAs of 256 would leave more than every second SM idle
    (57344, 132, 512),  # 128x7168
    (262144, 132, 1024),  # 1024x4096
    (262144, 1 << 20, 128),  # a device of more SMs than 128-thread CTAs
])
def test_the_one_launch_dynamic_block_size(units, sm_count, threads):
    assert tuning.fused_dynamic_threads(units, sm_count) == threads


@pytest.mark.parametrize("units, work_items, threads, one_cta", [
    (1, 128, 128, True),  # 1x16: one unit, the padding rows' 128 scale words
    (256, 8192, 1024, True),  # 1x4096 swizzled: 256 units, 8192 padding words, the largest block
    (200, 200, 256, True),  # linear layout: the smallest block with a thread per unit
    (512, 512, 512, True),
    (513, 8192, 128, False),  # one unit more: spread over SMs (fused_dynamic_threads)
    (57344, 57344, 512, False),
])
def test_the_one_launch_dynamic_grid(units, work_items, threads, one_cta):
    assert tuning.fused_dynamic_block(units, work_items, 132) == (threads, one_cta)
    if not one_cta:
        assert threads == tuning.fused_dynamic_threads(work_items, 132)


def test_every_dynamic_block_size_is_a_shipped_variant():
    shipped = {cfg.threads for name, cfg in GLOBAL_SCALE.items() if name.startswith("dynamic_")}
    assert shipped == set(tuning.FUSED_DYNAMIC_BLOCK_SIZES)


def test_the_one_launch_dynamic_limit_is_the_documented_one():
    """quantize_nvfp4's docstring and the usage guide state the limit as a power of two."""
    limit = tuning.FUSED_DYNAMIC_MAX_ELEMENTS
    assert limit & (limit - 1) == 0
    stated = f"2**{limit.bit_length() - 1}"
    usage = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "usage.md").read_text()
    assert f"``{stated}``" in fp4q.quantize_nvfp4.__doc__
    assert f"inputs of up to `{stated}` elements" in usage


def test_table_crossover_is_used(table_file):
    table_file({"vector_max_elements": 4096, "entries": {}})
    assert tuning.choose_config(1, 4080, "sm_90a").vector
    assert isinstance(tuning.choose_config(1, 4096, "sm_90a"), QuantizeConfig)


@pytest.mark.parametrize("value", [0, -5, "big", None, 1.5])
@pytest.mark.parametrize("key, fmt", [("vector_max_elements", "nvfp4"), ("mx_vector_max_elements", "mxfp4")])
def test_unusable_crossover_falls_back_to_the_default(table_file, value, key, fmt):
    table_file({key: value, "entries": {}})
    assert tuning.vector_max_elements("sm_90a", fmt) == tuning.VECTOR_MAX_ELEMENTS


GOOD = {"tile_k": 64, "output_box_k": 32, "output_swizzle": 32, "num_stages": 2, "consumer_warpgroups": 1}


@pytest.mark.parametrize("cls, entry, reason", [
    ("m<=16,k<=2048", {"config": {"tile_k": 1000}}, "tile_k must be a multiple of 64"),
    ("m<=128,k<=2048", {"config": {"unknown_field": 1}}, "unexpected keyword argument 'unknown_field'"),
    ("m<=1024,k<=2048", {"config": {"input_swizzle": 3}}, "input_swizzle must be one of"),
    ("m<=1024,k<=2048", {"config": {**GOOD, "arch": "sm_100a"}}, "multiple values for keyword argument 'arch'"),
    ("m<=1024,k<=2048", {"pct_of_copy": 90.0}, 'no "config" object'),
    ("m<=2048,k<=8192", {"config": GOOD}, "not a shape class"),
])
def test_an_entry_that_does_not_build_names_file_entry_and_reason(table_file, tmp_path, cls, entry, reason):
    table_file({"entries": {"m>4096,k>8192": {"config": GOOD}, cls: entry}})
    with pytest.raises(ConfigError) as info:
        tuning.tuned_table("sm_90a")
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'tuned_sm_90a.json'}: entry {cls!r}: "), message
    assert reason in message


def test_a_table_of_good_entries_loads_them_all(table_file):
    table_file({"entries": {"m>4096,k>8192": {"config": GOOD}, "m<=16,k<=2048": {"config": {}}}})
    assert tuning.tuned_table("sm_90a") == {"m>4096,k>8192": QuantizeConfig(**GOOD), "m<=16,k<=2048": QuantizeConfig()}


SHIPPED_TABLES = sorted(pathlib.Path(tuning.__file__).parent.glob("tuned_*.json"))


def test_the_sm_90a_table_is_among_the_shipped_ones():
    assert tuning.table_path("sm_90a") in SHIPPED_TABLES


@pytest.mark.parametrize("path", SHIPPED_TABLES, ids=lambda path: path.name)
def test_every_shipped_entry_builds_the_config_its_json_names(path):
    arch = path.stem.removeprefix("tuned_")
    assert tuning.table_path(arch) == path
    table = json.loads(path.read_text())
    assert table.get("arch", arch) == arch
    configs = tuning.tuned_table(arch)
    assert set(configs) == set(table["entries"])
    for cls, entry in table["entries"].items():
        cfg = configs[cls]
        assert cfg.arch == arch
        assert {name: getattr(cfg, name) for name in entry["config"]} == entry["config"], cls
    if "vector_max_elements" in table:
        value = table["vector_max_elements"]
        assert type(value) is int and value > 0, value
        assert tuning.vector_max_elements(arch) == value


# --- the crossover the sweep writes -----------------------------------------------------------------------------
CONFIGS = {"tma": QuantizeConfig(), "vec": SimtConfig(vector=True)}


def _row(config, m, k, us, bit_exact=True, pdl=True, copy_us=1.0):
    return dict(config=config, m=m, k=k, median_us=us, bit_exact=bit_exact, pdl=pdl, copy_us=copy_us)


def test_crossover_is_the_smallest_shape_where_tma_won():
    rows = [_row("tma", 1, 4096, 6.0), _row("vec", 1, 4096, 5.0),
            _row("tma", 512, 4096, 8.0), _row("vec", 512, 4096, 9.0),
            _row("tma", 1024, 4096, 9.0), _row("vec", 1024, 4096, 12.0),
            _row("tma", 256, 4096, 8.0), _row("vec", 256, 4096, 7.0)]
    assert sweep.vector_crossover(rows, CONFIGS) == 512 * 4096


def test_crossover_ignores_inexact_and_pdl_off_results():
    rows = [_row("tma", 16, 4096, 1.0, bit_exact=False), _row("tma", 16, 4096, 1.0, pdl=False),
            _row("tma", 16, 4096, 9.0), _row("vec", 16, 4096, 5.0)]
    assert sweep.vector_crossover(rows, CONFIGS) == 16 * 4096 + 1


def test_no_crossover_without_both_kinds():
    assert sweep.vector_crossover([_row("tma", 16, 4096, 1.0)], CONFIGS) is None


# --- the class entries the sweep writes ---------------------------------------------------------------------------
CLASS_CONFIGS = {"a": QuantizeConfig(), "b": QuantizeConfig(num_stages=2), "vec": SimtConfig(vector=True)}


def test_class_winner_is_best_over_all_its_shapes_not_one():
    # "b" wins 16384x16384 by a little and loses 8192x16384 by a lot: "a" serves the class better.
    rows = [_row("a", 8192, 16384, 10.0, copy_us=9.0), _row("b", 8192, 16384, 12.0, copy_us=9.0),
            _row("a", 16384, 16384, 20.0, copy_us=19.0), _row("b", 16384, 16384, 19.5, copy_us=19.0),
            _row("vec", 8192, 16384, 1.0, copy_us=9.0)]
    best = sweep.best_per_class(rows, CLASS_CONFIGS)
    assert set(best) == {"m>4096,k>8192"}
    entry = best["m>4096,k>8192"]
    assert entry["config"] == "a"
    assert entry["measured_on"] == "8192x16384,16384x16384"
    assert entry["pct_of_copy"] == round(100 / ((10 / 9 * 20 / 19) ** 0.5), 1)


def test_class_winner_must_be_exact_with_pdl_on_every_shape_of_the_class():
    rows = [_row("a", 8192, 16384, 1.0), _row("a", 16384, 16384, 1.0, bit_exact=False),
            _row("b", 8192, 16384, 5.0), _row("b", 16384, 16384, 5.0),
            _row("a", 8192, 4096, 1.0, pdl=False), _row("b", 8192, 4096, 3.0, pdl=False)]
    best = sweep.best_per_class(rows, CLASS_CONFIGS)
    assert {cls: b["config"] for cls, b in best.items()} == {"m>4096,k>8192": "b"}


def test_merged_table_keeps_classes_not_swept_and_dates_each_entry():
    old = {"date": "2026-12-02", "space": "small", "vector_max_elements": 2097152, "vector_measured": "cmd",
           "entries": {"m<=16,k<=4096": {"config": {"tile_k": 64}, "pct_of_copy": 73.4},
                       "m>4096,k>8192": {"config": {"tile_k": 64}, "pct_of_copy": 93.0}}}
    meta = {"device": "NVIDIA H200", "date": "2026-12-03", "space": "small", "reps": 25}
    best = {"m>4096,k>8192": dict(config="b", measured_on="16384x16384", pct_of_copy=95.0)}
    table = sweep.merged_table(old, best, CLASS_CONFIGS, meta, crossover=None)
    assert table["date"] == "2026-12-03" and table["vector_max_elements"] == 2097152
    assert table["vector_measured"] == "cmd"
    assert table["entries"]["m<=16,k<=4096"] == {"config": {"tile_k": 64}, "pct_of_copy": 73.4, "date": "2026-12-02"}
    swept = table["entries"]["m>4096,k>8192"]
    assert swept["date"] == "2026-12-03" and swept["pct_of_copy"] == 95.0
    assert QuantizeConfig(**swept["config"]) == CLASS_CONFIGS["b"]


def test_merged_table_takes_a_new_crossover_and_drops_the_old_note():
    old = {"vector_max_elements": 1, "vector_measured": "cmd", "entries": {}}
    table = sweep.merged_table(old, {}, CLASS_CONFIGS, {"date": "2026-12-03"}, crossover=4096)
    assert table["vector_max_elements"] == 4096 and "vector_measured" not in table
