"""tests/conftest.py: without a usable GPU the GPU tests are skipped, or, with
FP4Q_REQUIRE_GPU=1, the run fails naming the reason."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from fp4q.cuda.driver import gpu_status

TESTS = pathlib.Path(__file__).resolve().parent


def _run_gpu_tests(require: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "FP4Q_REQUIRE_GPU"}
    if require is not None:
        env["FP4Q_REQUIRE_GPU"] = require
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu",
                           str(TESTS / "test_walk.py"), str(TESTS / "test_tma.py")],
                          capture_output=True, text=True, env=env, cwd=TESTS.parent, timeout=300)


@pytest.mark.skipif(gpu_status()[0], reason="a GPU is usable here: nothing is skipped or refused")
def test_without_a_gpu_the_gpu_tests_skip_or_with_the_requirement_fail():
    skipped = _run_gpu_tests(None)
    assert skipped.returncode == 0 and "skipped" in skipped.stdout and "failed" not in skipped.stdout, skipped.stdout
    assert _run_gpu_tests("0").returncode == 0
    refused = _run_gpu_tests("1")
    assert refused.returncode == pytest.ExitCode.USAGE_ERROR, refused.stdout + refused.stderr
    assert "FP4Q_REQUIRE_GPU=1, but the GPU tests cannot run" in refused.stderr
