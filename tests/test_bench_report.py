"""scripts/bench/bench.py, bench_report.py and scripts/sweep/sweep_ops.py without a GPU: the
shapes, the bytes each measured operation is charged with, and how the report
renders results."""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from scripts.bench import bench, bench_measure, bench_report, plot
from scripts.sweep import sweep_ops

META = dict(command="python3 scripts/bench/bench.py", date="2026-12-03 09:06 UTC", device="NVIDIA H200", arch="sm_90a",
            sm_count=132, driver="580", versions={"cupy": "14"}, commit="abc", reps=30, warmup=5,
            shapes=["16x4096"], corner_tsf=[1.0], quick=False)


@pytest.mark.parametrize("name, read, written", [
    ("nvfp4", 2 * 16 * 4096, 16 * 4096 // 2 + 16 * 4096 // 16),
    ("mxfp4", 2 * 16 * 4096, 16 * 4096 // 2 + 16 * 4096 // 32),
    ("dequantize", 16 * 4096 // 2 + 16 * 4096 // 16, 2 * 16 * 4096),
    ("dequantize_mx", 16 * 4096 // 2 + 16 * 4096 // 32, 2 * 16 * 4096),
    ("nvfp4_dynamic", 4 * 16 * 4096, 16 * 4096 // 2 + 16 * 4096 // 16),
    ("nvfp4_two_calls", 4 * 16 * 4096, 16 * 4096 // 2 + 16 * 4096 // 16),
])
def test_bytes_each_operation_moves(name, read, written):
    op = sweep_ops.make(name)
    assert op.name == name
    assert op.bytes(16, 4096) == (read, written)


def test_every_format_row_of_the_benchmark_is_an_operation():
    for name, _label in bench_measure.FORMAT_OPS:
        assert sweep_ops.make(name).name == name


def test_formats_table_renders_ratios_and_failures():
    shape = dict(shape="16x4096", m=16, k=4096, tensor_sf=1.0, moved=10**6, copy_us=4.0, rows=[],
                 formats=[dict(kernel="quantize_mxfp4 (rceil)", copy_us=4.0, median_us=5.0, min_us=4.5,
                               moved=2 * 10**5, exact="yes"),
                          dict(kernel="dequantize_nvfp4 -> bf16", status="failed: RuntimeError: boom")])
    text = bench_report.markdown(META, [shape], [], [], [], [], [], None)
    assert "| 16x4096 | quantize_mxfp4 (rceil) | 4.00 | 5.00 | 4.50 | 1.25 | 80.0 | 40 | yes |" in text
    assert "| 16x4096 | dequantize_nvfp4 -> bf16 | — | — | — | — | — | — | failed: RuntimeError: boom |" in text


def test_default_shapes():
    shapes = bench.parse_shapes(bench.DEFAULT_SHAPES)
    assert len(shapes) == len(set(shapes)) == 15
    assert {(1, 4096), (16, 4096), (128, 7168), (1024, 4096)} <= set(shapes)
    assert {(m, k) for m in (256, 512) for k in (2048, 5120, 7168, 8192)} <= set(shapes)
    assert {(4096, 7168), (8192, 8192), (16384, 16384)} <= set(shapes)
    args = bench.parse_args(["--md", "none", "--out", "none"])
    assert args.shapes == shapes and args.reps == 50


def test_parse_shapes_refuses_bad_k():
    with pytest.raises(Exception, match="multiple of 16"):
        bench.parse_shapes("16x100")


def test_progress_line_and_summary_cells():
    row = bench_report.Row("triton (bench_triton, best tile)", 8.0, 7.5, exact="yes")
    assert bench_report.progress_line(16, 4096, 4.0, row).split() == [
        "16x4096", "triton", "(bench_triton,", "best", "tile)", "8.00", "us", "2.00x", "copy", "50.0%", "copy",
        "BW", "bit-exact", "yes"]
    shape = dict(shape="16x4096", m=16, k=4096, tensor_sf=1.0, moved=10**6, copy_us=4.0,
                 rows=[dict(row.__dict__), dict(bench_report.Row("torchao NVFP4Tensor.to_nvfp4",
                                                                 status="not installed").__dict__)])
    text = bench_report.markdown(META, [shape], [], [], [], [], [], None)
    assert "| 16x4096 | 4.0 | — | — | 8.0 (2.00x) | not installed | — | — |" in text
    assert "| triton (bench_triton, best tile) | 8.00 | 7.50 | 2.00 | 50.0 | 125 | yes |  |" in text


# ------------------------------------------------------------------ the figure (scripts/bench/plot.py)
def _run_data() -> dict:
    """Two shapes as bench.py records them: fp4q and triton timed, torchao missing, torch skipped;
    one kernel of the formats table failed at the second shape."""
    def rows(fp4q_us, triton_us):
        return [dict(bench_report.Row("device copy (same bytes)", 4.0, 3.9).__dict__),
                dict(bench_report.Row("torch eager", status="skipped (--skip)").__dict__),
                dict(bench_report.Row("triton (bench_triton, best tile)", triton_us, triton_us).__dict__),
                dict(bench_report.Row("torchao", status="not installed").__dict__),
                dict(bench_report.Row("fp4q default, PDL on", fp4q_us, fp4q_us).__dict__),
                dict(bench_report.Row("fp4q default, PDL off", 9.9, 9.9).__dict__)]
    shapes = [dict(shape="16x4096", m=16, k=4096, tensor_sf=1.0, moved=10**6, copy_us=4.0, rows=rows(4.4, 6.0),
                   formats=[dict(kernel="quantize_mxfp4 (rceil)", copy_us=4.0, median_us=5.0, min_us=4.5,
                                 moved=10**6, exact="yes"),
                            dict(kernel="dequantize_nvfp4 -> bf16", copy_us=5.0, median_us=6.0, min_us=5.5,
                                 moved=10**6, exact="yes")]),
              dict(shape="8192x8192", m=8192, k=8192, tensor_sf=1.0, moved=10**8, copy_us=4.0, rows=rows(4.8, 8.0),
                   formats=[dict(kernel="quantize_mxfp4 (rceil)", status="failed: RuntimeError: boom"),
                            dict(kernel="dequantize_nvfp4 -> bf16", copy_us=40.0, median_us=50.0, min_us=49.0,
                                 moved=10**8, exact="yes")])]
    return dict(meta=dict(META, commit="abc1234 (modified)"), shapes=shapes)


def test_plot_series():
    data = _run_data()
    assert plot.quantizer_ratios(data) == {"fp4q": [1.1, 1.2], "Triton, bit-exact (tuned tile per shape)": [1.5, 2.0]}
    assert plot.kernel_ratios(data) == {"quantize_mxfp4": [1.25, None], "dequantize_nvfp4 -> bf16": [1.2, 1.25]}
    assert plot.title(data["meta"]).startswith("fp4q abc1234 on NVIDIA H200 (sm_90a), 2026-12-03 09:06 UTC")


def test_plot_draws_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "figure" / "bench.png"
    plot.draw(_run_data(), str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_checked_in_results_are_the_reports():
    """docs/data/benchmarks.json (the figure's data) and docs/benchmarks.md are of one run: the report's
    summary rows are the JSON's shapes, copy times and fp4q times."""
    data = json.loads(pathlib.Path(plot.DEFAULT_JSON).read_text())
    report = (pathlib.Path(plot.REPO) / "docs" / "benchmarks.md").read_text()
    summary = re.findall(r"^\| (\d+x\d+) \| ([\d.]+) \|.* \| ([\d.]+) \([\d.]+x\) \| [^|]+ \|$", report, re.M)
    fp4q = [next(r for r in s["rows"] if r["contender"] == "fp4q default, PDL on") for s in data["shapes"]]
    assert summary == [(s["shape"], f"{s['copy_us']:.1f}", f"{r['median_us']:.1f}") for s, r in zip(data["shapes"], fp4q)]
