"""Fake CUDA tensors for the torch tests that run without a GPU: shapes, dtypes and traces, no memory.
Import it after ``pytest.importorskip("torch")``."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode


@pytest.fixture
def fake():
    """A fake-tensor mode for the test's body."""
    with FakeTensorMode() as mode:
        yield mode


def fake_cuda(shape, dtype=torch.bfloat16):
    """A tensor of ``shape`` on the device ``cuda`` (fake under ``fake``)."""
    return torch.empty(shape, dtype=dtype, device="cuda")
