import pytest

from fp4q.cuda.driver import gpu_status


def pytest_collection_modifyitems(config, items):
    available, reason = gpu_status()
    if available:
        return
    skip = pytest.mark.skip(reason=f"needs a GPU: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_report_header(config):
    return f"fp4q GPU probe: {gpu_status()[1]}"


def pytest_addoption(parser):
    parser.addoption("--fuzz-long", action="store_true", default=False,
                     help="run tests/test_fuzz.py with 20x the hypothesis examples")
