"""The checks every config shares: each failure is a ``ConfigError`` whose
message names the field, the value and the rule."""

from __future__ import annotations

from ..numerics.groups import require_choice


class ConfigError(ValueError):
    """A config field breaks a rule; the message names field, value and rule."""


def align_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def require(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


def check_choice(field: str, value, choices) -> None:
    """``numerics.groups.require_choice``, raising ``ConfigError``."""
    require_choice(value, field, choices, ConfigError)


def check_int(field: str, value, lo: int, hi: int) -> None:
    require(
        isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi,
        f"{field} must be an integer in [{lo}, {hi}], got {value!r}",
    )


def check_bool(field: str, value) -> None:
    require(isinstance(value, bool), f"{field} must be a bool, got {value!r}")


def check_even_split(items: int, items_expr: str, noun: str, threads: int, threads_expr: str) -> None:
    """A tile's ``items`` (``items_expr`` of them, each a ``noun``) split evenly over the consumer threads."""
    require(items % threads == 0,
            f"{items_expr} = {items} {noun} must split evenly over {threads_expr} = {threads} threads")
