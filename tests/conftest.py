import os

import pytest

from fp4q.cuda.driver import gpu_status


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
