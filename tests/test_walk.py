"""The walk's division constants (fp4q/kernels/walk.py): exact for every dividend
the kernels divide, within 32 bits, and checked at the boundary."""

import random

import pytest

from fp4q.kernels.walk import DIVIDEND_LIMIT, UNIT_DIVISOR_PARAMS, unit_divisor


def quotient(n: int, per_row: int) -> int:
    """What the kernel's Divisor.quotient computes: a 64-bit product, shifted."""
    (_, magic), (_, shift) = unit_divisor(per_row)
    return (n * magic % 2**64) >> shift


def dividends(per_row: int, rng: random.Random) -> set[int]:
    """The dividends nearest each multiple where a wrong constant shows first, and the largest."""
    edges = {0, 1, per_row - 1, per_row, per_row + 1, DIVIDEND_LIMIT - 1, DIVIDEND_LIMIT - 2}
    top = (DIVIDEND_LIMIT - 1) // per_row * per_row
    edges |= {top, top - 1, top - per_row, top - per_row - 1}
    edges |= {rng.randrange(DIVIDEND_LIMIT) for _ in range(200)}
    return {n for n in edges if 0 <= n < DIVIDEND_LIMIT}


def divisors() -> list[int]:
    rng = random.Random(0)
    near_powers = {p + d for e in range(31) for d in (-1, 0, 1) for p in (2**e,) if 1 <= p + d < DIVIDEND_LIMIT}
    units = {g * t for g in (1, 2, 3, 4, 7, 128, 130, 448, 1024, 2**20) for t in (1, 2, 4)}  # groups x threads
    return sorted(set(range(1, 600)) | near_powers | units | {rng.randrange(1, DIVIDEND_LIMIT) for _ in range(300)})


def test_the_constants_fit_the_parameters():
    assert [(p.name, p.kind) for p in UNIT_DIVISOR_PARAMS] == [("unit_magic", "u32"), ("unit_shift", "u32")]
    for per_row in divisors():
        (_, magic), (_, shift) = unit_divisor(per_row)
        assert 0 < magic < 2**32 and 31 <= shift < 63, per_row


def test_the_quotient_is_exact_for_every_dividend_below_the_limit():
    rng = random.Random(1)
    for per_row in divisors():
        for n in dividends(per_row, rng):
            assert quotient(n, per_row) == n // per_row, (n, per_row)


def test_every_dividend_for_small_divisors():
    for per_row in (1, 3, 7, 448, 1000):
        for n in range(0, 1 << 16):
            assert quotient(n, per_row) == n // per_row, (n, per_row)


@pytest.mark.parametrize("per_row", [0, -3, DIVIDEND_LIMIT, 2.0, "4", None])
def test_a_divisor_outside_the_walk_is_refused(per_row):
    with pytest.raises(ValueError, match=r"per_row must be an integer in \[1, 2\*\*31\), got"):
        unit_divisor(per_row)
