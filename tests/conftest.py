import os

import pytest

import fakes
from fp4q.cuda.driver import gpu_status
from fp4q.ops import plans


def pytest_collection_modifyitems(config, items):
    available, reason = gpu_status()
    if available:
        return
    # On a machine meant to run the GPU tests, a broken install or driver must fail the run, not skip them.
    if os.environ.get("FP4Q_REQUIRE_GPU") == "1":
        raise pytest.UsageError(f"FP4Q_REQUIRE_GPU=1, but the GPU tests cannot run: {reason}")
    skip = pytest.mark.skip(reason=f"needs a GPU: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_generate_tests(metafunc):
    # A test that takes `cp` runs twice: with CuPy on a GPU ("cupy", marked gpu) and with the
    # host-backed fake CuPy and the fake driver of tests/fakes.py ("fake", on any machine), which
    # serves whatever a test checks of the host side (rules, messages, launches); a test marked gpu
    # itself runs with CuPy only.
    if "cp" in metafunc.fixturenames:
        on_gpu = pytest.param("cupy", marks=pytest.mark.gpu)
        kinds = [on_gpu] if metafunc.definition.get_closest_marker("gpu") else [on_gpu, "fake"]
        metafunc.parametrize("cp", kinds, indirect=True)


@pytest.fixture
def cp(request, monkeypatch):
    """CuPy, or the fake CuPy (``fakes.active`` is then the fake driver, which records launches)."""
    if request.param == "cupy":
        yield pytest.importorskip("cupy")
        return
    fakes.active = fakes.install(monkeypatch, fakes.HostCupy())
    try:
        yield fakes.active.cupy
    finally:
        fakes.active = None
        plans.plans.clear()  # they hold fake kernels


def pytest_report_header(config):
    return f"fp4q GPU probe: {gpu_status()[1]}"


def pytest_addoption(parser):
    parser.addoption("--fuzz-long", action="store_true", default=False,
                     help="run tests/test_fuzz.py with 20x the hypothesis examples")


@pytest.fixture(scope="session")
def variants_cache(tmp_path_factory):
    """One on-disk cache holding every shipped variant of every target, compiled once per session by
    ``fp4q.precompile`` on all CPUs; the tests then read each variant's cubin and ptxas log from it.

    ``FP4Q_TEST_CACHE_DIR`` keeps it across sessions (a CI cache): keys cover the source, options,
    NVRTC and fp4q versions, so only what changed is compiled again.
    """
    from fp4q.jit.cache import BinaryCache
    from fp4q.jit.precompile import precompile

    directory = os.environ.get("FP4Q_TEST_CACHE_DIR") or tmp_path_factory.mktemp("fp4q-variants-cache")
    # Failures are not raised here: each variant's own test compiles it again and reports the error.
    precompile(jobs=os.cpu_count(), cache_dir=directory, progress=False)
    return BinaryCache(directory)
