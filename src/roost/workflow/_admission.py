"""At most ``START_LIMIT`` starts of plain callers in flight at once; the others wait first.

A start holds its run's transient state (the encoded start, the first activation's step,
its writes) from ``spawn`` until its commit. A burst of thousands of concurrent starts
otherwise holds all of it at the same time: that peak is freed after the commits, but
the allocator keeps most of its pages, interleaved with what the runs keep, so the
resident memory of each cached run stays about three times what it holds (measured in
benchmarks/RESULTS.md, "Issue 15 — round 4: recov"). A start beyond the limit waits
before it does anything, holding only its caller's task, and goes on as an earlier one
commits, in arrival order. A start within the limit does not wait (no scheduler round).
"""

from __future__ import annotations

from collections import deque
from typing import Final

import trio

__all__ = ["START_LIMIT", "StartGate"]

# As many starts as one executor pass takes: a full pass of eager starts commits together,
# and the transient state of this many starts is a few MB.
START_LIMIT: Final = 512


class StartGate:
    """Admission of starts: a slot per start in flight, handed on in arrival order.

    A waiting start costs a slot of a deque (its task): in a burst of thousands, what
    they hold while they wait is part of the burst's peak.
    """

    __slots__ = ("_busy", "_gone", "_limit", "_waiting")

    def __init__(self, limit: int = START_LIMIT) -> None:
        self._limit = limit
        self._busy = 0
        self._waiting: deque[trio.lowlevel.Task] = deque()
        self._gone: set[trio.lowlevel.Task] = set()  # waiters cancelled, still queued

    @property
    def in_flight(self) -> int:
        """Starts holding a slot."""
        return self._busy

    async def enter(self) -> None:
        """Take a slot; wait for one (in arrival order) when all are taken."""
        if self._busy < self._limit and not self._waiting:
            self._busy += 1
            return
        task = trio.lowlevel.current_task()
        self._waiting.append(task)

        def abort(_: object) -> trio.lowlevel.Abort:
            self._gone.add(task)  # skipped by ``leave``; it holds no slot
            return trio.lowlevel.Abort.SUCCEEDED

        # Woken by ``leave``, which hands its slot on.
        await trio.lowlevel.wait_task_rescheduled(abort)

    def leave(self) -> None:
        """Give the slot back: to the longest waiting start, if any."""
        waiting, gone = self._waiting, self._gone
        while waiting:
            task = waiting.popleft()
            if gone and task in gone:
                gone.discard(task)
                continue
            trio.lowlevel.reschedule(task)
            return
        self._busy -= 1
