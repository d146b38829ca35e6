"""One timer task per node: ``after`` and ``ticker`` channels without a task per timer."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Any

import trio

from roost.mailbox._channel import Channel

__all__ = ["Timers"]


class Timers:
    """A heap of (deadline, seq, channel, period); one task sleeps until the earliest.

    Firing sends the clock's "now" into the channel without blocking (buffer of one); a
    ticker whose previous tick is unread skips that tick, as Go's does.
    """

    def __init__(self, now: Callable[[], Any]) -> None:
        self._heap: list[tuple[float, int, Channel[Any], float, Callable[[], bool]]] = []
        self._seq = 0
        self._now = now
        self._scope: trio.CancelScope | None = None

    def add(
        self,
        delay: float,
        *,
        period: float = 0.0,
        alive: Callable[[], bool] = lambda: True,
    ) -> Channel[Any]:
        """Return a channel that receives the time after ``delay`` (then every ``period``)."""
        chan: Channel[Any] = Channel(1)
        deadline = trio.current_time() + delay
        self._seq += 1
        heapq.heappush(self._heap, (deadline, self._seq, chan, period, alive))
        scope = self._scope
        if scope is not None and deadline < scope.deadline:
            scope.deadline = deadline
        return chan

    def __len__(self) -> int:
        return len(self._heap)

    async def run(self) -> None:
        """Fire timers as they fall due, forever (cancelled with the node)."""
        while True:
            deadline = self._heap[0][0] if self._heap else math.inf
            with trio.CancelScope(deadline=deadline) as scope:
                self._scope = scope
                await trio.sleep_forever()
            self._scope = None
            self._fire_due(trio.current_time())

    def _fire_due(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now:
            deadline, seq, chan, period, alive = heapq.heappop(heap)
            if chan.closed or not alive():
                continue
            if not len(chan):
                chan._try_send(self._now())
            if period:
                # Re-arm from the due time, not from now, so ticks do not drift.
                nxt = deadline + period
                if nxt <= now:
                    nxt = now + period
                heapq.heappush(heap, (nxt, seq, chan, period, alive))
