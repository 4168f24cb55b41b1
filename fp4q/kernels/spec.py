"""What a kernel is to everything after its config: the kernel spec."""

from __future__ import annotations

import enum

MAX_BOX_DIM = 256  # TMA: elements per box dimension


class Swizzle(enum.IntEnum):
    """TMA shared-memory swizzle modes, valued by the span in bytes."""

    NONE = 0
    B32 = 32
    B64 = 64
    B128 = 128
