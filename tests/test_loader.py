"""The loader (fp4q/jit/loader.py) without a GPU: the real render, compile and
locking, with the driver's module calls and the device faked."""

from __future__ import annotations

import contextlib
import threading
import types

import pytest
from cuda.bindings import driver as cu

from fp4q.jit import loader
from fp4q.kernels.archs import EMULATED_SM_80
from fp4q.kernels.quantize import QuantizeConfig, SimtConfig

SUCCESS = cu.CUresult.CUDA_SUCCESS


@pytest.fixture
def fake_device(monkeypatch, tmp_path):
    calls = []
    fake = types.SimpleNamespace(
        CUfunction_attribute=cu.CUfunction_attribute,
        cuModuleLoadData=lambda cubin: (calls.append("load") or SUCCESS, object()),
        cuModuleGetFunction=lambda module, name: (calls.append(name) or SUCCESS, object()),
        cuFuncSetAttribute=lambda function, attr, value: (SUCCESS,),
        cuOccupancyMaxActiveBlocksPerMultiprocessor=lambda function, threads, smem: (SUCCESS, 2),
    )
    device = types.SimpleNamespace(ordinal=0, name="Fake H200", arch="sm_90a", max_smem_optin=232448)
    monkeypatch.setattr(loader, "driver_api", lambda: fake)
    monkeypatch.setattr(loader, "device", lambda ordinal: device)
    monkeypatch.setattr(loader, "in_context", lambda dev: contextlib.nullcontext())
    monkeypatch.setattr(loader, "_loaded", {})
    monkeypatch.setattr(loader, "_compiled", {})
    monkeypatch.setenv("FP4Q_CACHE_DIR", str(tmp_path))
    return calls


def test_get_kernel_compiles_loads_once_and_returns_without_deadlock(fake_device):
    spec = SimtConfig().spec
    found = []
    worker = threading.Thread(target=lambda: found.append(loader.get_kernel(spec, 0)), daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "get_kernel did not return (a lock taken twice?)"
    kernel = found[0]
    assert kernel.spec is spec and kernel.ctas_per_sm == 2 and kernel.compiled.cubin[:4] == b"\x7fELF"
    assert loader.get_kernel(spec, 0) is kernel
    assert fake_device == ["load", spec.name.encode()]
    stats = loader.kernel_cache_stats()
    assert stats["compiled"] == 1 and stats["loaded"] == 1


def test_a_kernel_for_another_target_is_refused(fake_device):
    with pytest.raises(ValueError, match="built for 'sm_100f' but device 0 \\(Fake H200\\) needs 'sm_90a'"):
        loader.get_kernel(QuantizeConfig(arch="sm_100f").spec, 0)


def test_the_emulated_sm_80_build_loads_on_an_sm_90a_device(fake_device):
    # the loader compares compile targets, not names: sm_80's kernels compiled for sm_90a run there
    spec = SimtConfig(arch=EMULATED_SM_80).spec
    kernel = loader.get_kernel(spec, 0)
    assert kernel.spec is spec and kernel.compiled.cubin[:4] == b"\x7fELF"
    assert fake_device == ["load", spec.name.encode()]
