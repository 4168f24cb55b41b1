"""``python -m fp4q``: the command line's own options (``precompile`` is tested in test_precompile.py)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

import fp4q
from fp4q.__main__ import main


def test_version_in_a_new_process():
    out = subprocess.run([sys.executable, "-m", "fp4q", "--version"], capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stdout, out.stderr) == (0, f"fp4q {fp4q.__version__}\n", "")


def test_version_is_the_installed_distributions():
    assert fp4q.__version__ == importlib.metadata.version("fp4q")


def test_version_needs_no_command(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"fp4q {fp4q.__version__}\n"


def test_no_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2
    assert "precompile" in capsys.readouterr().err
