"""scripts/dev/compile_times.py: its table, and one real run (it needs no GPU: NVRTC and numpy only)."""

from __future__ import annotations

from scripts.dev import compile_times


def test_table_units():
    text = compile_times.table([("cold", 0.7091, "s", "< 1.5 s"), ("hit", 0.5234, "ms", "")], 3)
    assert "| cold | 0.709 s | < 1.5 s |" in text
    assert "| hit | 0.52 ms |  |" in text


def test_a_small_run_measures_every_row():
    rows = compile_times.measure(compile_times.parse_args(["--runs", "1", "--reference-shape", "16x64"]))
    assert [r[0].split()[0] for r in rows] == ["cold", "disk-cache", "disk-cache", "memory-cache", "numpy"]
    assert all(r[1] > 0 for r in rows)
