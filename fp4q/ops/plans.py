"""Launch plans: what one kind of call resolved, kept for the calls after it.

A call's kind is a tuple of primitives that fixes everything its input
rules depend on (the op, the input's shape, byte strides, dtype and device,
the layout and format arguments, the identity of the caller's config
object). Its plan holds what those rules derived (shapes, views) and, per
pointer alignment and tensor-scale mode, a ``KernelLaunch``: the resolved
config, the loaded kernel, its grid, the tensor maps of recently seen
pointers. One bounded cache holds the plans of every op; a repeated call
runs the same rule functions as the first one, minus the ones the key
already fixes.
"""

from __future__ import annotations

import threading

from ..cuda.launch import Launcher, put_bounded
from ..jit.loader import LoadedKernel
from ..kernels.archs import target

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
    config it was resolved from."""

    __slots__ = ("config", "kernel")

    def __init__(self, config, kernel: LoadedKernel, grid: int, arg_names: tuple[str, ...], dynamic: bool = False,
                 map_shapes=(), fixed=()) -> None:
        # A kernel built without griddepcontrol must not start before its predecessor ends.
        super().__init__(kernel.spec, kernel.function, kernel.device, grid, arg_names, dynamic, map_shapes,
                         target(kernel.spec.arch).features.pdl, fixed)
        self.config = config
        self.kernel = kernel
