"""scripts/bench/bench_training.py's contender plumbing without a GPU: the table's cells where a
contender does not apply or is missing, the statuses, the Triton tile choice and the exit status."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from scripts.bench import bench_training


def row(blocks, **contenders):
    r = dict(m=64, k=128, blocks=blocks, min_ctas=0, tensor_sf=1.0, one_pass_us=10.0, composition_us=None,
             copy_us=5.0, one_pass_over_copy=2.0, composition_over_one_pass=None)
    for name in bench_training.CONTENDERS:
        r[name] = contenders.get(name)
        result = r[name]
        r[f"{name}_over_one_pass"] = result["us"] / 10.0 if result and "us" in result else None
    return r


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip("|").split("|")]


def test_table_marks_what_does_not_apply_and_what_is_missing():
    rows = [row("1d", triton=dict(us=12.0, exact="yes", note="tile 64x64/vec2/2w"),
                torch_eager=dict(us=80.0, exact="no", note="q: 3 of 4096 bytes differ from fp4q"),
                torchao=dict(status="not installed")),
            row("2d")]
    lines = bench_training.table(rows).splitlines()
    head = cells(lines[0])
    first, second = (dict(zip(head, cells(line))) for line in lines[2:4])
    assert (first["triton us"], first["torch eager us"], first["torchao us"]) == ("12.0", "80.0 (not bit-exact)",
                                                                                   "not installed")
    assert (first["triton / one pass"], first["torch eager / one pass"], first["torchao / one pass"]) == (
        "1.20", "8.00", "n/a")
    assert all(second[f"{h} us"] == second[f"{h} / one pass"] == "n/a" for h in bench_training.CONTENDERS.values())
    assert len(head) == len(cells(lines[1])) == len(cells(lines[2]))
    assert "- 64x128 torch eager: q: 3 of 4096 bytes differ from fp4q" in lines


def test_a_status_keeps_the_table_columns():
    failure = bench_training.status(RuntimeError("a | b\nsecond line"))
    assert failure == "failed: RuntimeError: a | b"
    line = bench_training.table([row("1d", triton=dict(status=failure), torchao=dict(status="x\ny"))]).splitlines()[2]
    assert cells(line)[6:9] == ["failed: RuntimeError: a / b", "n/a", "x"]
    assert len(cells(line)) == 15


def test_without_torch_every_contender_says_so(monkeypatch):
    monkeypatch.setattr(bench_training, "import_torch", lambda: (None, "not installed"))
    results = bench_training.contenders(None, 1.0, None, reps=1)
    assert results == {name: dict(status="needs torch: not installed") for name in bench_training.CONTENDERS}


def test_torchao_missing_is_a_status(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchao", None)  # its import then raises ModuleNotFoundError
    assert bench_training.time_torchao(None, None, None, None, None, reps=1) == dict(status="not installed")


def test_triton_reports_the_fastest_bit_exact_tile_timed_again(monkeypatch):
    """A faster tile that is not bit-exact is never chosen, and makes the row's exactness "no"."""
    configs = ((64, 64, 2, 2), (128, 64, 2, 4), (64, 128, 4, 4))
    calls = []
    kernel = SimpleNamespace(triton=object(), CONFIGS=configs,
                             outputs=lambda torch, xt: tuple(SimpleNamespace(fill_=lambda v: None) for _ in range(4)),
                             quantize_training=lambda xt, tsf, q, sf, q_t, sf_t, config: calls.append(config))
    exactness = iter([("yes", ""), ("no", "q_t: 1 of 64 bytes differ from fp4q"), ("yes", "")])
    medians = iter([5.0, 3.0, 4.0, 4.4])  # each tile, then the chosen one (64x128) again

    def fake_time_fn(fn, **kwargs):
        fn()
        return SimpleNamespace(median_us=next(medians))

    monkeypatch.setattr(bench_training, "triton_training", kernel)
    monkeypatch.setattr(bench_training, "differing", lambda cp, pairs: next(exactness))
    monkeypatch.setattr(bench_training.timing, "time_fn", fake_time_fn)
    result = bench_training.time_triton(None, None, None, None, (None,) * 4, reps=3)
    assert (result["us"], result["exact"]) == (4.4, "no")
    assert calls[-1] == (64, 128, 4, 4)
    assert result["note"].startswith("tile 64x128/vec4/4w, the fastest bit-exact at 4.00 us")
    assert "128x64/vec2/4w: q_t: 1 of 64 bytes differ from fp4q" in result["note"]
    assert [t["tile"] for t in result["tiles"]] == ["64x64/vec2/2w", "128x64/vec2/4w", "64x128/vec4/4w"]


def test_triton_without_triton_is_a_status(monkeypatch):
    monkeypatch.setattr(bench_training, "triton_training", SimpleNamespace(triton=None, TRITON_STATUS="not installed"))
    assert bench_training.time_triton(None, None, None, None, None, reps=1) == dict(status="not installed")


@pytest.mark.parametrize("exact, code", [("yes", 0), ("no", 1)])
def test_exit_status_follows_the_triton_kernels_exactness(monkeypatch, tmp_path, capsys, exact, code):
    rows = [row("1d", triton=dict(us=12.0, exact=exact, note=""), torch_eager=dict(status="failed: x"),
                torchao=dict(status="not installed")), row("2d")]
    monkeypatch.setattr(bench_training, "run", lambda *args: rows)
    md = tmp_path / "out.md"
    assert bench_training.main(["--shapes", "64x128", "--md", str(md)]) == code
    assert "| n/a |" in md.read_text()
    assert ("not bit-exact at 64x128" in capsys.readouterr().err) == (code == 1)


def test_torch_eager_on_x_and_its_transpose_is_the_training_reference(monkeypatch):
    """The eager contender's comparison on the CPU, numpy standing in for CuPy: the spec's formula on x
    and x.T gives the reference's four outputs (linear scales) byte for byte, and a changed byte shows."""
    import numpy as np

    from fp4q.numerics import reference
    from test_bench_triton import adversarial

    torch = pytest.importorskip("torch", exc_type=ModuleNotFoundError)
    x = adversarial()[:160, :96]
    tsf = float(np.float32(0.3))
    ref = reference.quantize_nvfp4_training(x, tsf, sf_layout="linear")
    want = [ref.q, ref.sf, ref.q_t, ref.sf_t]
    monkeypatch.setattr(bench_training.timing, "time_fn", lambda fn, **kwargs: SimpleNamespace(median_us=1.0))
    xt = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    tsf_t = torch.tensor(tsf, dtype=torch.float32)
    with np.errstate(all="ignore"):
        result = bench_training.time_torch_eager(torch, np, xt, tsf_t, want, reps=1)
        assert (result["exact"], result["note"]) == ("yes", "linear scales; allocates its outputs")
        want[3] = want[3].copy()
        want[3][5, 2] ^= 1
        result = bench_training.time_torch_eager(torch, np, xt, tsf_t, want, reps=1)
    assert (result["exact"], result["note"]) == ("no", f"sf_t: 1 of {want[3].size} bytes differ from fp4q")
