"""The cyclic collector's thresholds while a node's workflow runtime is open.

CPython collects its youngest generation every 700 net allocations of tracked objects
(lists, dicts, instances, frames of coroutines, ...). A busy workflow runtime allocates
far more than that per pass, and almost all of it either dies by reference counting or
lives until its run closes: the young collections find next to nothing to free, and every
tenth of them collects the middle generation too, promoting what it finds towards the
full collections that walk every open run. Measured (benchmarks/RESULTS.md, "Issue 15,
round 3: start"), the default thresholds cost 358 collections and about 15 % of the CPU of
2,000 concurrent workflows.

While at least one node's workflow runtime is open, the youngest generation's threshold is
at least ``BUSY_THRESHOLD``; the other two thresholds are kept. The cost: cyclic garbage
waits for up to ``BUSY_THRESHOLD`` net allocations instead of 700 before it is freed
(some MB at most), and a young collection, rarer, takes a few ms instead of some µs. The
runtime's own path leaves no cyclic garbage per workflow (test_workflow_collector.py
checks it), so on that path nothing waits. The policy leaves the application's choice
alone: a threshold already higher is kept, a disabled collector stays disabled (only the
threshold is set), and when the last runtime closes the previous thresholds come back,
unless the application changed them meanwhile.
"""

from __future__ import annotations

import gc
from typing import Final

__all__ = ["BUSY_THRESHOLD", "busy_collector", "idle_collector"]

# Net allocations of tracked objects between two young collections while a runtime is
# open: about 140 times CPython's default. Measured at N = 10,000 concurrent workflows the
# collector took 1.3 s with 700, 0.34-0.58 s with 50,000, 0.16-0.34 s with 100,000 and
# 0.14-0.23 s with 200,000; past 100,000 the gain is small and each young collection (a
# pause of a few ms) and the cyclic garbage waiting for it grow.
BUSY_THRESHOLD: Final = 100_000


class _Policy:
    """The open runtimes, the thresholds found by the first and the ones it set."""

    __slots__ = ("before", "busy", "open")

    def __init__(self) -> None:
        self.open = 0
        self.before: tuple[int, ...] = ()
        self.busy: tuple[int, ...] = ()


_policy = _Policy()


def busy_collector() -> None:
    """A workflow runtime opens: raise the young generation's threshold (first one only)."""
    _policy.open += 1
    if _policy.open > 1:
        return
    before = gc.get_threshold()
    # Threshold 0 is the application's "no automatic collection": it stays off.
    busy = before if before[0] == 0 else (max(before[0], BUSY_THRESHOLD), *before[1:])
    gc.set_threshold(*busy)
    _policy.before, _policy.busy = before, busy


def idle_collector() -> None:
    """A workflow runtime closes: the last one restores the thresholds it found."""
    if _policy.open == 0:
        return
    _policy.open -= 1
    if _policy.open:
        return
    if gc.get_threshold() == _policy.busy:
        gc.set_threshold(*_policy.before)
    _policy.before = _policy.busy = ()
