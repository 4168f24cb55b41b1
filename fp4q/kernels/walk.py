"""The host half of the SIMT kernels' grid-stride walk (``pipeline/row_walk.cuh``):
the launch constants that make its divisions by the units per row a wide
multiply and a shift (``Divisor`` there)."""

from __future__ import annotations

from .spec import params

# The walk's divisor, as the kernels that take it declare it.
UNIT_DIVISOR_PARAMS = params(("unit_magic", "u32"), ("unit_shift", "u32"))
DIVIDEND_LIMIT = 1 << 31  # the walk divides thread indices and grid sizes, all below this


def unit_divisor(per_row: int) -> tuple[tuple[str, int], tuple[str, int]]:
    """``(("unit_magic", m), ("unit_shift", s))`` such that ``n * m >> s == n // per_row``
    for every ``0 <= n < 2**31``: ``s = 31 + ceil(log2(per_row))``, ``m = ceil(2**s / per_row)``,
    which is below ``2**32``."""
    if not isinstance(per_row, int) or not 1 <= per_row < DIVIDEND_LIMIT:
        raise ValueError(f"per_row must be an integer in [1, 2**31), got {per_row!r}")
    shift = 31 + (per_row - 1).bit_length()
    return ("unit_magic", -(-(1 << shift) // per_row)), ("unit_shift", shift)
