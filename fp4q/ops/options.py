"""The keyword options an op may declare, each with its rule and what it sets: a
kernel config field (part of the kind of call, in the plan key) or a launch
parameter of its name (``LAUNCHED``, and ``PerCall`` values, which change
call by call and stay out of the plan key)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..numerics.groups import require_choice, require_padded_k
from ..numerics.philox import require_u64


@dataclass(frozen=True)
class Choice:
    """A keyword option that takes one of ``choices``; ``field`` is the kernel config's
    field it sets (``kernels.call.CallFields``), if any."""

    name: str
    choices: tuple[str, ...]
    default: str
    field: str | None = None
    doc: str = ""

    def check(self, value) -> None:
        require_choice(value, self.name, self.choices)

    def call_value(self, value) -> str:
        return value


@dataclass(frozen=True)
class PerCall:
    """A keyword argument passed to the kernels as a 64-bit unsigned launch parameter of its
    name, call by call: not part of the kind of call (stochastic rounding's ``seed`` and
    ``offset``, which change every step)."""

    name: str
    default: int = 0
    doc: str = ""

    def launch_value(self, value) -> int:
        """``value`` after its rule: an int in ``[0, 2**64)``."""
        return require_u64(value, self.name)


@dataclass(frozen=True)
class Number:
    """A keyword option that takes a real number, passed to the kernels by value as the
    float32 launch parameter of its name; ``rule`` says which float32 values it may round
    to (``"finite, >= 0"``)."""

    name: str
    default: float
    doc: str = ""

    @property
    def field(self) -> None:
        """No kernel config field: the value is a launch parameter."""
        return None

    def check(self, value) -> None:
        self.launch_value(value)

    def launch_value(self, value) -> float:
        """``value`` rounded to float32 (the kernel parameter's value), after its rules."""
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"{self.name} must be a real number, got {value!r} ({type(value).__name__})")
        with np.errstate(over="ignore"):
            rounded = np.float32(value) if abs(value) < 2.0**129 else np.float32(np.inf)
        if not (np.isfinite(rounded) and rounded >= 0):
            raise ValueError(f"{self.name} must be finite and >= 0 once rounded to float32, got {value!r}")
        return float(rounded)


@dataclass(frozen=True)
class Width:
    """A keyword option: the row width of the outputs in values, None (K) or an int ``>= K``
    and a multiple of the format's group (vLLM's ``padded_n``); the codes and scales past K
    are zeros. The kernels take it as the launch parameter ``out_cols``."""

    name: str = "padded_k"
    default: None = None
    doc: str = ""

    @property
    def field(self) -> None:
        """No kernel config field: the width is a launch parameter."""
        return None

    def check(self, value) -> None:
        require_padded_k(value)


@dataclass(frozen=True)
class Flag:
    """A keyword option that takes a bool, setting the kernel config's ``field`` (a
    compile-time flag of the kernel)."""

    name: str
    field: str
    default: bool = False
    doc: str = ""

    def check(self, value) -> None:
        if type(value) is not bool:
            raise TypeError(f"{self.name} must be a bool (True or False), got {value!r} ({type(value).__name__})")

    def call_value(self, value) -> bool:
        return value


@dataclass(frozen=True)
class Integer:
    """A keyword option that takes an int in ``[0, 2**bits)``, part of the kind of call,
    passed to the kernels as the ``u32`` launch parameter of its name (``bits <= 32``; the
    Hadamard transform's sign mask). ``optional``: ``None`` (the default) is allowed too,
    leaves the launch value 0 and sets the config's ``field`` False (True for an int)."""

    name: str
    bits: int
    default: int | None = 0
    optional: bool = False
    field: str | None = None
    doc: str = ""

    def check(self, value) -> None:
        if value is None and self.optional:
            return
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            none = " or None" if self.optional else ""
            raise TypeError(f"{self.name} must be an int{none}, got {value!r} ({type(value).__name__})")
        if not 0 <= int(value) < 1 << self.bits:
            raise ValueError(f"{self.name} must satisfy 0 <= {self.name} < 2**{self.bits}, got {value}")

    def call_value(self, value) -> bool:
        return value is not None

    def launch_value(self, value) -> int:
        return 0 if value is None else int(value)


Option = Choice | Number | Width | Flag | Integer
# Options passed to the kernels as launch parameters of their names.
LAUNCHED = (Number, Integer)
