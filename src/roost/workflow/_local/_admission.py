"""At most ``START_LIMIT`` starts of plain callers in flight at once; the others wait first.

A start holds its run's transient state (the encoded start, the first activation's step,
its writes) from ``spawn`` until its commit. A burst of thousands of concurrent starts
otherwise holds all of it at the same time: that peak is freed after the commits, but
the allocator keeps most of its pages, interleaved with what the runs keep, so the
resident memory of each cached run stays about three times what it holds (measured in
benchmarks/RESULTS.md, "Issue 15 — round 4: recov"). A start beyond the limit waits
before it does anything, holding only its caller's task, and goes on as an earlier one
commits, in arrival order. A start within the limit does not wait (no scheduler round).

Only callers' starts pass the gate: the runtime's own starts (children, retries, cron and
continue-as-new runs) are rows of an activation's plan, never calls to ``spawn``, so a
start waiting here never waits on a runtime task that itself waits for a slot.
"""

from __future__ import annotations

from collections import deque
from typing import Final

import outcome
import trio

from roost._errors import Error, ErrorKind

__all__ = ["START_LIMIT", "StartGate"]

# As many starts as one executor pass takes: a full pass of eager starts commits together,
# and the transient state of this many starts is a few MB.
START_LIMIT: Final = 512

# One wait at the gate: the waiting task, or None once that wait has ended (cancelled).
# A cell per wait, not the task: a task may wait, give up and wait again before any
# ``leave``, and only its live wait may be woken.
_Cell = list[trio.lowlevel.Task | None]


class StartGate:
    """Admission of starts: a slot per start in flight, handed on in arrival order.

    A waiting start costs a slot of a deque (a cell holding its task): in a burst of
    thousands, what they hold while they wait is part of the burst's peak.
    """

    __slots__ = ("_busy", "_closed", "_limit", "_waiting")

    def __init__(self, limit: int | None = None) -> None:
        self._limit = START_LIMIT if limit is None else limit  # read now: tests lower it
        self._busy = 0
        self._waiting: deque[_Cell] = deque()
        self._closed = False

    @property
    def in_flight(self) -> int:
        """Starts holding a slot."""
        return self._busy

    @property
    def waiting(self) -> int:
        """Starts waiting for a slot (cancelled waits not yet skipped included)."""
        return sum(1 for cell in self._waiting if cell[0] is not None)

    async def enter(self) -> None:
        """Take a slot; wait for one (in arrival order) when all are taken.

        Raises:
            roost.Error: Unavailable when the runtime stops (see ``close``).
        """
        if self._closed:
            raise _stopping()
        if self._busy < self._limit and not self._waiting:
            self._busy += 1
            return
        cell: _Cell = [trio.lowlevel.current_task()]
        self._waiting.append(cell)

        def abort(_: object) -> trio.lowlevel.Abort:
            cell[0] = None  # skipped by ``leave``; this wait holds no slot
            return trio.lowlevel.Abort.SUCCEEDED

        # Woken by ``leave``, which hands its slot on (or by ``close``, with an error).
        await trio.lowlevel.wait_task_rescheduled(abort)

    def leave(self) -> None:
        """Give the slot back: to the longest waiting start, if any."""
        waiting = self._waiting
        while waiting:
            cell = waiting.popleft()
            task = cell[0]
            if task is None:
                continue  # a wait that was cancelled
            cell[0] = None
            trio.lowlevel.reschedule(task)
            return
        self._busy -= 1

    def close(self) -> None:
        """The runtime stops: every waiting start ends with Unavailable, and so do new ones."""
        self._closed = True
        waiting = self._waiting
        while waiting:
            cell = waiting.popleft()
            task = cell[0]
            if task is not None:
                cell[0] = None
                trio.lowlevel.reschedule(task, outcome.Error(_stopping()))


def _stopping() -> Error:
    return Error(
        "the node is stopping: this workflow start was not admitted and nothing of it is "
        "stored; start it again once the node runs",
        kind=ErrorKind.UNAVAILABLE,
    )
