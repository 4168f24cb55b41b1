"""scripts/bench/bench_contenders.py without a GPU: the spec's formula in PyTorch (the torch eager and
torch.compile contenders) on the CPU, bit for bit against the numpy reference on the corner-case data."""

from __future__ import annotations

import numpy as np
import pytest

from fp4q.numerics import reference
from scripts.bench import bench_contenders

torch = pytest.importorskip("torch", exc_type=ModuleNotFoundError)


def test_corner_input_has_the_cases_it_promises():
    x = bench_contenders.corner_input()
    assert x.shape == (512, 256) and x.dtype == np.uint16
    for bits in (0x0000, 0x8000, 0x7FC0, 0xFF80, 0x0001):
        assert (x == bits).any()


@pytest.mark.parametrize("tsf", [1.0, float(np.float32(0.3)), 1024.0, 2.0**-15])
def test_torch_formula_matches_the_reference(tsf):
    x = bench_contenders.corner_input()
    formula = bench_contenders.make_torch_formula(torch, "cpu")
    xt = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    q, sf = formula(xt, torch.tensor(tsf, dtype=torch.float32))
    q_ref, sf_ref = reference.quantize_nvfp4(x, tsf, sf_layout="linear")
    np.testing.assert_array_equal(sf.numpy(), sf_ref)
    np.testing.assert_array_equal(q.numpy(), q_ref)


def test_e2m1_thresholds_give_the_spec_ties():
    bounds = torch.tensor(bench_contenders.E2M1_THRESHOLDS)
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.5])
    assert torch.bucketize(ties, bounds, right=False).tolist() == [0, 2, 2, 4, 4, 6, 6, 7]


def test_torch_host_rows_call_what_they_name(monkeypatch):
    """On the CPU the rows can be built and the dispatcher-floor row runs; the fp4q rows
    reach fp4q's torch op and the CuPy API, whose rules refuse a host tensor: without a
    GPU, first of all by saying that there is none; with one (the fake driver of
    tests/fakes.py here), by naming the host tensor."""
    import re
    import types

    import fakes
    import fp4q
    from fp4q.cuda.driver import gpu_status

    env = types.SimpleNamespace(torch=torch, fp4q=fp4q)
    xt = torch.zeros(bench_contenders.HOST_SHAPE, dtype=torch.bfloat16)
    runs = bench_contenders.torch_host_runs(env, xt, 1.0)
    assert [name for name, _, _ in runs] == [
        "torch.ops.fp4q.quantize_nvfp4 (eager, allocating from torch)",
        "torch.ops.fp4q.quantize_nvfp4.default (the overload named)",
        "fp4q.quantize_nvfp4 on torch tensors, out= given",
        "torch.add(a, b, out=c) (torch's dispatcher floor)",
    ]
    available, reason = gpu_status()
    for _, call, _ in runs[:3]:
        if available:
            with pytest.raises(TypeError, match="^x must be a CUDA array, got a torch Tensor on cpu$"):
                call()
        else:
            with pytest.raises(fp4q.NoGpuError, match=f"^fp4q needs an NVIDIA GPU and driver: {re.escape(reason)}$"):
                call()
    fakes.install(monkeypatch)
    for _, call, _ in runs[:3]:
        with pytest.raises(TypeError, match="^x must be a CUDA array, got a torch Tensor on cpu$"):
            call()
    runs[3][1]()


def test_triton_row_reports_a_second_timing_of_the_chosen_tile(monkeypatch):
    """The tile is chosen on one measurement per tile and reported from another (the least
    of several noisy medians is biased low)."""
    from types import SimpleNamespace

    calls = []
    kernel = SimpleNamespace(triton=object(), TRITON_STATUS="ok", TUNED={},
                             tiles_for=lambda m, k: ((1, 64, 4), (2, 64, 4)),
                             outputs=lambda torch_module, xt: (SimpleNamespace(fill_=lambda v: None),) * 2,
                             quantize=lambda xt, tsf, q, sf, tile: calls.append(tile))
    medians = iter([5.0, 4.0, 4.6])  # tile (1, 64, 4), tile (2, 64, 4), then the chosen one again

    def fake_time_fn(fn, **kwargs):
        fn()
        median = next(medians)
        return SimpleNamespace(median_us=median, min_us=median - 0.5)

    monkeypatch.setattr(bench_contenders, "triton_kernel", kernel)
    monkeypatch.setattr(bench_contenders, "compare", lambda env, case, q, sf, layout: ("yes", ""))
    monkeypatch.setattr(bench_contenders.timing, "time_fn", fake_time_fn)
    env = SimpleNamespace(torch=torch, torch_status="ok", args=SimpleNamespace(warmup=1, reps=3), best_tile={},
                          findings=[], fail=lambda what, exc: f"failed: {exc}")
    case = SimpleNamespace(m=1, k=64, xt=None, tsf_t=None)
    row = bench_contenders.bench_triton(env, case)
    assert (row.median_us, row.min_us, row.exact) == (4.6, 4.1, "yes")
    assert env.best_tile[(1, 64)] == (2, 64, 4)
    assert calls[-1] == (2, 64, 4)
    assert "chosen at 4.00 us and timed again" in row.note


def test_the_config_notes_name_attributes_of_each_config_kind():
    from fp4q.kernels import quantize

    assert set(bench_contenders.CONFIG_FIELDS) == {"QuantizeConfig", "SimtConfig"}
    for kind, fields in bench_contenders.CONFIG_FIELDS.items():
        cfg = getattr(quantize, kind)()
        assert all(hasattr(cfg, field) for field in fields), kind
