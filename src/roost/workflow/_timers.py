"""Durable timers: stored with their due time, armed in memory, fired into the run's inbox."""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING

import trio

from roost.workflow._records import TimerTask

if TYPE_CHECKING:
    from roost.workflow._manager import WorkflowManager

__all__ = ["DurableTimers"]


class DurableTimers:
    """A heap of stored timers; one task sleeps until the earliest falls due."""

    def __init__(self, manager: WorkflowManager) -> None:
        self.m = manager
        self._heap: list[tuple[float, str, int, TimerTask]] = []
        self._scope: trio.CancelScope | None = None

    def add(self, timer: TimerTask) -> None:
        """Arm ``timer`` (already stored); one that fell due while down fires at once."""
        delay = (timer.due - self.m.node.now()).total_seconds()
        deadline = trio.current_time() + max(0.0, delay)
        heapq.heappush(self._heap, (deadline, timer.run_id, timer.seq, timer))
        if self._scope is not None and deadline < self._scope.deadline:
            self._scope.deadline = deadline

    async def run(self) -> None:
        """Fire timers as they fall due, forever."""
        while True:
            deadline = self._heap[0][0] if self._heap else math.inf
            with trio.CancelScope(deadline=deadline) as scope:
                self._scope = scope
                await trio.sleep_forever()
            self._scope = None
            now = trio.current_time()
            while self._heap and self._heap[0][0] <= now:
                # Concurrently, so that timers falling due together share one commit.
                self.m.spawn_task(self._fire, heapq.heappop(self._heap)[3])
            await trio.lowlevel.checkpoint()

    async def _fire(self, timer: TimerTask) -> None:
        from roost.workflow._closing import fire_timer  # noqa: PLC0415 - cycle

        await fire_timer(self.m, timer)
