"""The store of plans, and the launch of one kernel for one kind of call.

A call's kind is a tuple of primitives that fixes everything its input
rules depend on (``engine.plan_of``). Its plan (``engine.Plan``) holds what
those rules derived and, per tensor-scale mode and the pointers' low bits, a
launch: a ``KernelLaunch`` (the resolved config, the loaded kernel, its grid,
the tensor maps of recently seen pointers) or a few of them in sequence. One
bounded cache holds the plans of every op; a repeated call runs the same
rule functions as the first one, minus the ones the key already fixes.
"""

from __future__ import annotations

import threading
from typing import Mapping, Sequence

from ..cuda.launch import Launcher, put_bounded
from ..jit.loader import LoadedKernel
from ..kernels.archs import target
from ..kernels.spec import Extent

PLAN_CAPACITY = 1024


class PlanCache:
    """The bounded, thread-safe store of plans, by kind of call."""

    def __init__(self, capacity: int = PLAN_CAPACITY) -> None:
        self.capacity = capacity
        self._plans: dict = {}
        self._lock = threading.Lock()
        self.get = self._plans.get  # the plan stored under a key, or None: a lookup without a Python frame

    def put(self, key, plan):
        """Store ``plan`` (or return the one another thread stored first)."""
        with self._lock:
            found = self._plans.get(key)
            if found is not None:
                return found
            put_bounded(self._plans, key, plan, self.capacity)
            return plan

    def clear(self) -> None:
        with self._lock:
            self._plans.clear()

    def __len__(self) -> int:
        return len(self._plans)


plans = PlanCache()


class KernelLaunch(Launcher):
    """The launches of one loaded kernel for one kind of call (``Launcher``), with the
    config it was resolved from; ``workspace``: the float32 scratch elements it needs
    after a scalar output (none)."""

    __slots__ = ("config", "kernel")
    workspace = 0

    def __init__(self, config, kernel: LoadedKernel, grid: int, slots: Sequence[tuple[str, str]],
                 fixed: Mapping[str, object] | None = None, dynamic: bool = False,
                 extents: Mapping[str, Extent] | None = None) -> None:
        # A kernel built without griddepcontrol must not start before its predecessor ends.
        super().__init__(kernel.spec, kernel.function, kernel.device, grid, slots, fixed, dynamic, extents,
                         target(kernel.spec.arch).features.pdl)
        self.config = config
        self.kernel = kernel


class NoLaunch:
    """The launch of a call with nothing to compute (an empty input)."""

    config = None
    workspace = 0

    def __call__(self, stream: int, pdl: bool, values, tickets: None = None) -> None:
        """Nothing is launched."""


NO_LAUNCH = NoLaunch()
