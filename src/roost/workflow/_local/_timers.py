"""Durable timers: stored with their due time, armed in memory, fired into the run's inbox.

Each open run knows its armed timers (``Run.armed_timers``), so the transaction that closes
it deletes their rows too: the losing ``roost.after`` of a ``select`` must not stay stored
(and be reloaded at every restart) until it falls due. Their heap entries are dropped
lazily, and the heap is rebuilt once dropped entries make up half of it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

import trio

from roost.workflow._local._records import TimerTask, timer_key

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Awaitable, Callable

    from roost.workflow._local._run import Run
    from roost.workflow._local._runs import RunTable

# Dropped heap entries tolerated before a rebuild (and at least half the heap).
_REBUILD_AT = 64

__all__ = ["DurableTimers"]


class DurableTimers:
    """A heap of stored timers; one task sleeps until the earliest falls due."""

    def __init__(
        self,
        *,
        now: Callable[[], dt.datetime],
        runs: RunTable,
        spawn: Callable[..., None],
    ) -> None:
        """Build it from the few collaborators it uses.

        Args:
            now: the node's clock (a timer's due time is wall-clock time).
            runs: the run table (a timer's run, open or closing).
            spawn: starts a background task (timers falling due together fire at once).
        """
        self._now, self._runs, self._spawn = now, runs, spawn
        self._heap: list[tuple[float, str, int, TimerTask]] = []
        self._scope: trio.CancelScope | None = None
        self._dropped: set[tuple[str, int]] = set()  # (run id, seq) of closed runs' timers

    def add(self, timer: TimerTask) -> None:
        """Arm ``timer`` (already stored); one that fell due while down fires at once."""
        delay = (timer.due - self._now()).total_seconds()
        deadline = trio.current_time() + max(0.0, delay)
        heapq.heappush(self._heap, (deadline, timer.run_id, timer.seq, timer))
        run = self._owner(timer)
        if run is not None:
            run.timer_armed(timer)
        if self._scope is not None and deadline < self._scope.deadline:
            self._scope.deadline = deadline

    def add_all(self, timers: Iterable[TimerTask]) -> None:
        """Arm many stored timers at once (a node's open): one heapify, not a push each."""
        heap, now, clock = self._heap, self._now(), trio.current_time()
        for timer in timers:
            deadline = clock + max(0.0, (timer.due - now).total_seconds())
            heap.append((deadline, timer.run_id, timer.seq, timer))
            run = self._owner(timer)
            if run is not None:
                run.timer_armed(timer)
        heapq.heapify(heap)
        if self._scope is not None and heap and heap[0][0] < self._scope.deadline:
            self._scope.deadline = heap[0][0]

    def _owner(self, timer: TimerTask) -> Run | None:
        # A run whose close from outside waits for its activation in flight owns the timers
        # that activation arms: the close deletes their rows.
        run = self._runs.open_or_closing(timer.workflow_id)
        return run if run is not None and run.record.run_id == timer.run_id else None

    def arm(self, run: Run) -> None:
        """Arm the runtime timers stored with ``run``'s start (after that commit)."""
        for timer in run.take_start_timers():
            self.add(timer)

    @staticmethod
    def rows(run: Run) -> list[bytes]:
        """The stored rows of ``run``'s timers: armed ones and those armed at its commit."""
        return [timer_key(t.due, t.run_id, t.seq) for t in (*run.armed_timers, *run.timers)]

    def drop(self, run: Run) -> None:
        """``run`` closed, its timer rows deleted with it: its armed timers never fire."""
        armed = run.take_armed_timers()
        self._dropped.update((t.run_id, t.seq) for t in armed)
        dropped = len(self._dropped)
        if dropped >= _REBUILD_AT and 2 * dropped >= len(self._heap):
            gone = self._dropped
            self._heap = [e for e in self._heap if (e[1], e[2]) not in gone]
            heapq.heapify(self._heap)
            self._dropped = set()

    async def run(self, fire: Callable[[TimerTask], Awaitable[None]]) -> None:
        """Fire timers as they fall due (each with ``fire``), forever."""
        while True:
            deadline = self._heap[0][0] if self._heap else math.inf
            with trio.CancelScope(deadline=deadline) as scope:
                self._scope = scope
                await trio.sleep_forever()
            self._scope = None
            now = trio.current_time()
            while self._heap and self._heap[0][0] <= now:
                timer = heapq.heappop(self._heap)[3]
                if self._dropped and (timer.run_id, timer.seq) in self._dropped:
                    self._dropped.discard((timer.run_id, timer.seq))
                    continue
                run = self._owner(timer)
                if run is not None:
                    run.timer_fired(timer)
                # Concurrently, so that timers falling due together share one commit.
                self._spawn(fire, timer)
            if not self._heap:
                self._dropped.clear()
            await trio.lowlevel.checkpoint()
